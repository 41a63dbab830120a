"""Tokens/s of a tiny-but-not-toy GroupQueryAttention decoder, fp32 vs int4, on Transmuter (JAX or
MLX) vs onnxruntime, driven by the same greedy loop.

    python bench/quantized.py [--backend jax|mlx] [--prompt 64] [--new 32] [--layers 12]

The model (random LlamaConfig: 12 layers, hidden 512, 8 heads / 4 KV heads, MLP 1408, vocab
16384) is built on first run by onnxruntime-genai's model builder (fp32 and int4, CPU), in the
genai environment ($TRANSMUTER_GENAI_PYTHON, default /work/venvs/genai/bin/python: transformers 5,
torch CPU, no network), into $TRANSMUTER_BENCH_CACHE (default ~/.cache/transmuter-bench). The int4
graph is used as built (MatMulNBits accuracy_level 4: both onnxruntime and Transmuter quantize
activations to int8 per block).

The loop: a prompt step (batch 1, cache empty), then --new one-token steps. The KV cache is a fixed
buffer of prompt + new positions (GroupQueryAttention reads attention_mask only through its row
sum and width, and writes each step's keys/values at the row's length), so every decode step has
the same shapes: one compile for the prompt, one for decoding. onnxruntime runs the same feeds with
ORT_ENABLE_ALL and as many threads as cores. Tokens/s counts decode steps only; the prompt step is
timed apart (prompt tokens/s). Both runs must produce the same greedy tokens (fp32) or say so.
Memory: the weights resident on the device after load (params, packed 4-bit weights at their
packed size, plus host constants), fp32 vs int4, split into packed integers and floats."""

import argparse
import os
import sys
import time

import numpy as np

import transmuter
from _decoder import (CONFIG, file_mb, kv_names, model_path, ort_step, weight_breakdown,
                      weight_bytes)


def greedy(step, prompt, n_new, kv_names, kv_heads, head_dim, total=None):
    """Prompt step, then ``n_new`` one-token steps on a cache of ``total`` positions (default:
    just enough). ``step(feeds)`` returns (logits, presents). Returns tokens, prompt seconds,
    decode seconds."""
    total = total or len(prompt) + n_new
    feeds = {"input_ids": np.array([prompt], np.int64),
             "attention_mask": np.ones((1, len(prompt)), np.int64)}
    feeds.update({k: np.zeros((1, kv_heads, 0, head_dim), np.float32) for k in kv_names})
    start = time.perf_counter()
    logits, presents = step(feeds)
    token = int(np.argmax(logits[0, -1]))
    prompt_s = time.perf_counter() - start
    # The prompt's keys/values at the front of a buffer of ``total`` positions.
    pad = [(0, 0), (0, 0), (0, total - len(prompt)), (0, 0)]
    cache = {k: np.pad(np.asarray(v), pad) for k, v in presents.items()}
    tokens, length = [token], len(prompt)
    start = time.perf_counter()
    for _ in range(n_new - 1):
        length += 1
        mask = (np.arange(total) < length).astype(np.int64)[None]
        feeds = {"input_ids": np.array([[token]], np.int64), "attention_mask": mask, **cache}
        logits, cache = step(feeds)
        token = int(np.argmax(logits[0, -1]))
        tokens.append(token)
    return tokens, prompt_s, time.perf_counter() - start


def compile_or_eager(model, feeds):
    """transmuter.compile; on MLX, where mx.compile fails on this graph (an IndexError
    "_Map_base::at" from inside mx.compile once a compiled segment holds three or more of the
    decoder's layers; two-layer segments and eager runs work), say so and run eagerly."""
    try:
        return transmuter.compile(model, feeds)
    except IndexError as e:
        if model.backend.name != "mlx":
            raise
        print(f"  mx.compile failed ({e}): this step runs eagerly (transmuter.run)", flush=True)
        return lambda f: transmuter.run(model, f)


def transmuter_step(path, backend):
    model = transmuter.load(path, backend=backend)
    fns = {}

    def step(feeds):
        key = feeds["input_ids"].shape[1] > 1
        if key not in fns:
            fns[key] = compile_or_eager(model, feeds)
        out = fns[key](feeds)
        model.backend.block(out)
        # Keep presents on the device: fed back as they are on the next step.
        return np.asarray(out["logits"]), {k.replace("present.", "past_key_values."): v
                                           for k, v in out.items() if k.startswith("present.")}

    return model, step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    paths = model_path(args.layers)
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, CONFIG["vocab_size"],
                                                                 args.prompt)]
    names = kv_names(args.layers)
    shape = (CONFIG["num_key_value_heads"], CONFIG["head_dim"])
    print(f"decoder: {args.layers} layers, hidden {CONFIG['hidden_size']}, vocab "
          f"{CONFIG['vocab_size']}; prompt {args.prompt}, {args.new} new tokens, batch 1, "
          f"{os.cpu_count()} cores, backend {args.backend}")
    print(f"{'':6} {'file MB':>8} {'weights MB':>10} {'compile s':>9} {'prompt tok/s':>22} "
          f"{'decode tok/s':>22} {'same tokens':>11}")
    results, memory = {}, {}
    for precision, path in paths.items():
        ref_tokens, ort_prompt, ort_decode = greedy(ort_step(path), prompt, args.new, names,
                                                    *shape)
        model, step = transmuter_step(path, args.backend)
        start = time.perf_counter()
        # compiles the prompt step and the decode step (same cache size as the timed run)
        greedy(step, prompt, 2, names, *shape, total=args.prompt + args.new)
        compile_s = time.perf_counter() - start
        tokens, our_prompt, our_decode = greedy(step, prompt, args.new, names, *shape)
        n = args.new - 1
        ours, theirs = n / our_decode, n / ort_decode
        same = sum(a == b for a, b in zip(tokens, ref_tokens))
        results[precision] = ours, theirs
        memory[precision] = weight_bytes(model) / 1e6, weight_breakdown(model)
        print(f"{precision:6} {file_mb(path):>8.1f} {weight_bytes(model) / 1e6:>10.1f} "
              f"{compile_s:>9.1f} {args.prompt / our_prompt:>8.0f} vs ort "
              f"{args.prompt / ort_prompt:>6.0f} {ours:>8.1f} vs ort {theirs:>6.1f} "
              f"{same:>5}/{len(tokens)}")
    for precision, (ours, theirs) in results.items():
        print(f"{precision}: {args.backend}/ort decode = {ours / theirs:.2f}x")
    for precision, (total, kinds) in memory.items():
        print(f"{precision}: weights resident on the {args.backend} device {total:.1f} MB (packed "
              f"integers {kinds['packed']:.1f} MB, floats {kinds['float']:.1f} MB)")
    print(f"int4/fp32 weight memory: {memory['int4'][0] / memory['fp32'][0]:.2f}x")
    (fp_o, fp_t), (q_o, q_t) = results["fp32"], results["int4"]
    print(f"int4/fp32 decode speed-up: {args.backend} {q_o / fp_o:.2f}x, ort {q_t / fp_t:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
