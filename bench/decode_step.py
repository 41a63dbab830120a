"""Where one decode step's time goes: Transmuter's compiled step vs the same step written by hand
in JAX vs onnxruntime, plus the matrix-vector products alone, on the fp32 decoder of
bench/_decoder.py (12 layers, hidden 512, GroupQueryAttention).

    python bench/decode_step.py [--batch 1] [--capacity 256] [--steps 40] [--repeat 5]

- transmuter: the text-generation loop's stepper (FixedCache.step: host inputs, the compiled
  graph, logits back to the host).
- jax by hand: a Llama decode step written directly in jax.numpy over the same weights (fused QKV,
  rotary from the graph's cos/sin caches, GQA over the cache buffer written with
  dynamic_update_slice, the cache donated), jitted with the same XLA options. Its logits are
  checked against onnxruntime's first: it must be the same computation.
- onnxruntime: session.run on the same .onnx file, ORT_ENABLE_ALL, a cache of --capacity rows.
- matvecs only: the step's 61 weight products chained in one jitted function (XLA's floor for
  the weights' memory traffic).

Each peer runs --steps steps per round, rounds alternate between peers (a shared machine's slow
spells hit all), and the median step of the best round counts. If the hand-written step is as
slow as Transmuter's, the graph's lowering is not what separates Transmuter from onnxruntime."""

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import transmuter
from _decoder import CONFIG, kv_names, model_folder, ort_step
from transmuter.backends.jax import _compiler_options
from transmuter.generation.loop import Generator
from transmuter.generation.steppers import FixedCache

HEADS, KV_HEADS, HEAD_DIM = (CONFIG[k] for k in ("num_attention_heads", "num_key_value_heads",
                                                 "head_dim"))
EPS = CONFIG["rms_norm_eps"]


def rms_norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * w


def rotate(x, cos, sin):
    """Half-split rotary on [B, heads, D] with cos/sin [B, D/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None], sin[:, None]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def hand_step(layers, final_norm):
    """step(params, tokens [B], positions [B], caches, valid [B, T]) -> (logits [B, V], caches);
    ``final_norm``: the name of the norm weight after the last layer."""
    q_size, kv_size = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def step(p, tokens, pos, caches, valid):
        b = tokens.shape[0]
        x = p["model.embed_tokens.weight"][tokens]
        cos, sin = p["cos_cache"][pos], p["sin_cache"][pos]
        rows = jnp.arange(b)
        out = []
        for i in range(layers):
            pre = f"model.layers.{i}."
            qkv = rms_norm(x, p[pre + "input_layernorm.weight"]) @ \
                p[pre + "attn.qkv_proj.MatMul.weight"]
            q = rotate(qkv[:, :q_size].reshape(b, HEADS, HEAD_DIM), cos, sin)
            k = rotate(qkv[:, q_size:q_size + kv_size].reshape(b, KV_HEADS, HEAD_DIM), cos, sin)
            v = qkv[:, q_size + kv_size:].reshape(b, KV_HEADS, HEAD_DIM)
            keys = caches[2 * i].at[rows, :, pos].set(k)
            values = caches[2 * i + 1].at[rows, :, pos].set(v)
            out += [keys, values]
            q = q.reshape(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
            scores = jnp.einsum("bhgd,bhtd->bhgt", q, keys) / np.float32(np.sqrt(HEAD_DIM))
            scores = jnp.where(valid[:, None, None], scores, -jnp.inf)
            att = jnp.einsum("bhgt,bhtd->bhgd", jax.nn.softmax(scores, -1), values)
            x = x + att.reshape(b, q_size) @ p[pre + "attn.o_proj.MatMul.weight"]
            h = rms_norm(x, p[pre + "post_attention_layernorm.weight"])
            gate = h @ p[pre + "mlp.gate_proj.MatMul.weight"]
            up = h @ p[pre + "mlp.up_proj.MatMul.weight"]
            x = x + (jax.nn.silu(gate) * up) @ p[pre + "mlp.down_proj.MatMul.weight"]
        x = rms_norm(x, p[final_norm])
        return x @ p["lm_head.MatMul.weight"], out

    return step


def matvecs(weights):
    """The step's weight products alone, each input derived from the last output."""
    def run(ws, x):
        outs = []
        for w in ws:
            y = jnp.resize(x, (x.shape[0], w.shape[0])) @ w
            outs.append(y)
            x = x + y[:, :x.shape[1]] * np.float32(1e-3)
        return outs

    return run


def timed_rounds(peers, steps, repeat):
    """{name: median seconds of a step in its best round}; rounds alternate between peers."""
    best = {name: float("inf") for name in peers}
    for _ in range(repeat):
        for name, fn in peers.items():
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            best[name] = min(best[name], float(np.median(times)))
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--capacity", type=int, default=256)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    b, cap, layers = args.batch, args.capacity, args.layers
    folder = model_folder(layers)
    path = folder / "fp32" / "model.onnx"
    model = transmuter.load(path)
    params = dict(model.params)
    final_norm = f"model.layers.{layers}.final_norm_layernorm.weight"  # the builder's name
    prompt = np.random.default_rng(0).integers(3, CONFIG["vocab_size"], (b, 64))
    length = 100  # cache rows in use during the timed steps

    # Transmuter: the generation loop's stepper, a prompt of `length` tokens so far
    gen = Generator(model, json.loads((folder / "hf" / "config.json").read_text()))
    stepper = FixedCache(gen, prompt.tolist(), cap - prompt.shape[1])
    stepper.start()
    tokens = np.full(b, 5, np.int64)

    def ours():
        stepper.steps = length - prompt.shape[1]  # stay at one position: same work every call
        stepper.step(tokens)

    # onnxruntime on the same file, cache of `cap` rows
    ort = ort_step(path)
    names = kv_names(layers)
    ort_cache = {k: np.zeros((b, KV_HEADS, cap, HEAD_DIM), np.float32) for k in names}
    mask = np.broadcast_to((np.arange(cap) <= length).astype(np.int64), (b, cap)).copy()
    ort_feed = {"input_ids": tokens[:, None], "attention_mask": mask, **ort_cache}

    def theirs():
        ort(ort_feed)

    # by hand: same weights, same options, donated cache
    options = _compiler_options()
    step = jax.jit(hand_step(layers, final_norm), donate_argnums=(3,), compiler_options=options)
    rng = np.random.default_rng(1)
    cache_values = [rng.standard_normal((b, KV_HEADS, cap, HEAD_DIM)).astype(np.float32)
                    for _ in names]
    pos = jnp.full((b,), length, jnp.int32)
    valid = jnp.asarray(np.arange(cap)[None] <= length).repeat(b, 0)
    with jax.enable_x64(False):
        logits, _ = step(params, jnp.asarray(tokens, jnp.int32), pos,
                         [jnp.asarray(c) for c in cache_values], valid)
    check = dict(ort_feed, **dict(zip(names, cache_values)))
    want = ort(check)[0][:, -1]
    err, scale = float(np.abs(np.asarray(logits) - want).max()), float(np.abs(want).max())
    print(f"jax by hand vs onnxruntime logits: max |diff| {err:.1e} (scale {scale:.1e})")
    if err > 1e-4 * max(scale, 1.0):  # f32 sums in another order: ~1e-6 of the scale
        sys.exit("the hand-written step does not compute what the graph does; no timing")
    state = {"caches": [jnp.asarray(c) for c in cache_values]}
    ids = jnp.asarray(tokens, jnp.int32)

    def by_hand():
        with jax.enable_x64(False):
            out, state["caches"] = step(params, ids, pos, state["caches"], valid)
            np.asarray(out)

    weights = [params[f"model.layers.{i}.{n}.MatMul.weight"] for i in range(layers)
               for n in ("attn.qkv_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                         "mlp.down_proj")] + [params["lm_head.MatMul.weight"]]
    products = jax.jit(matvecs(weights), compiler_options=options)
    x = jnp.ones((b, CONFIG["hidden_size"]), jnp.float32)

    def weights_only():
        jax.block_until_ready(products(weights, x))

    peers = {"transmuter": ours, "jax by hand": by_hand, "onnxruntime": theirs,
             "matvecs only (XLA)": weights_only}
    for fn in peers.values():
        fn()  # compile, warm caches
    best = timed_rounds(peers, args.steps, args.repeat)
    mb = sum(w.size for w in weights) * 4 / 1e6
    print(f"decode step, batch {b}, cache {cap} rows ({length} in use), {layers} layers, "
          f"{mb:.0f} MB of weight products; {os.cpu_count()} cores")
    for name, seconds in best.items():
        print(f"  {name:20} {seconds * 1e3:7.2f} ms  {best['onnxruntime'] / seconds:5.2f}x "
              f"onnxruntime")


if __name__ == "__main__":
    sys.exit(main())
