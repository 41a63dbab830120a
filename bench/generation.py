"""Text-generation tokens/s: Transmuter's Generator vs an onnxruntime KV loop on the same file vs
transformers' generate on PyTorch, on a GQA decoder of bench/_decoder.py (--shape: the 12-layer
hidden-512 toy, or SmolLM2-135M's or Qwen3-0.6B's shape, random weights).

    python bench/generation.py [--shape toy|smollm2|qwen3] [--prompt 64] [--new 128]
                               [--batch 1,8] [--precision fp32,int4,int4-level0]
                               [--backend jax|mlx]
                               [--layers N] [--repeat 3] [--no-torch]
                               [--device-loop]

Each run: a prompt of --prompt random tokens per row (all rows the same length), then --new
greedy tokens (no eos stop: every row makes all of them). tokens/s = rows * new tokens / seconds
for the whole generate call, prompt included; each peer runs once untimed first (compiles, warms
caches), then --repeat times, alternating with the other, and its best run counts.

- Transmuter: ``Generator(model, config).generate(prompts, GenerationConfig(...))`` (the
  text-generation pipeline's loop: GroupQueryAttention cache buffer, host-side token choice).
- ``--device-loop``: the same generate call with ``device_loop=True`` (the whole decode loop as
  one compiled while_loop, generation/device_loop.py) timed beside it: its tokens/s, its ratio to
  the host loop's, and how many of its tokens equal the host loop's.
- onnxruntime: the same .onnx file, ORT_ENABLE_ALL, as many threads as cores, a plain greedy loop on
  a fixed KV buffer (the loop of bench/quantized.py, batched). The int4 file is run as built
  (MatMulNBits accuracy_level 4: both quantize activations to int8 per block), so int4 tokens
  should match ORT's as fp32 ones must (on these random weights one int8 rounding that differs
  flips a near-tied token early, and the rest follow it). ``int4-level0``: the same file with
  its nodes at accuracy_level 0, as the Hub's q4 files are (``_decoder.level0_file``).
- transformers: the PyTorch model the files were built from, ``generate(do_sample=False,
  min_new_tokens=new)``, torch threads = cores, in the genai environment (transformers 5) as a
  subprocess whose numbers are read back. PyTorch has no MatMulNBits kernel: its fp32 figure is
  the reference for the int4 rows too (marked).
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

import transmuter
from _decoder import CONFIG, GENAI_PYTHON, kv_names, level0_file, model_folder, ort_step, \
    shape_config, shape_layers
from transmuter.generation.config import GenerationConfig
from transmuter.generation.loop import Generator

TORCH = textwrap.dedent("""
    import json, os, sys, time
    import torch, transformers
    hf, new, prompts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    torch.set_num_threads(os.cpu_count())
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    out = {}
    for batch, rows in prompts.items():
        ids = torch.tensor(rows)
        kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                  attention_mask=torch.ones_like(ids))
        with torch.inference_mode():
            model.generate(ids, **kw)  # warm-up
            start = time.perf_counter()
            seq = model.generate(ids, **kw)
            seconds = time.perf_counter() - start
        out[batch] = {"seconds": seconds, "tokens": seq[:, ids.shape[1]:].tolist()}
    print(json.dumps(out))
""")


def ort_generate(step, prompts, new, names, config=CONFIG):
    """Greedy on onnxruntime: prompt step, then new - 1 one-token steps on a fixed buffer."""
    rows, n = prompts.shape
    total = n + new
    shape = (rows, config["num_key_value_heads"], 0, config["head_dim"])
    feeds = {"input_ids": prompts, "attention_mask": np.ones((rows, n), np.int64)}
    feeds.update({k: np.zeros(shape, np.float32) for k in names})
    logits, presents = step(feeds)
    tokens = [np.argmax(logits[:, -1], axis=-1)]
    pad = [(0, 0), (0, 0), (0, total - n), (0, 0)]
    cache = {k: np.pad(v, pad) for k, v in presents.items()}
    for length in range(n + 1, total):
        mask = np.broadcast_to((np.arange(total) < length).astype(np.int64), (rows, total))
        feeds = {"input_ids": tokens[-1][:, None].astype(np.int64), "attention_mask": mask,
                 **cache}
        logits, cache = step(feeds)
        tokens.append(np.argmax(logits[:, -1], axis=-1))
    return np.stack(tokens, axis=1)


def timed(fns, repeat):
    """Every peer warmed up, then ``repeat`` timed runs each, alternating (a shared machine's
    slow spells hit all); the best run of each counts. Returns (out, seconds) per peer."""
    results = [[np.asarray(fn()), float("inf")] for fn in fns]  # compiles / warms up
    for _ in range(repeat):
        for result, fn in zip(results, fns):
            start = time.perf_counter()
            fn()
            result[1] = min(result[1], time.perf_counter() - start)
    return results


def torch_peer(hf, new, prompts):
    arg = json.dumps({str(b): p.tolist() for b, p in prompts.items()})
    run = subprocess.run([GENAI_PYTHON, "-c", TORCH, str(hf), str(new), arg], check=True,
                         capture_output=True, text=True)
    return {int(b): v for b, v in json.loads(run.stdout.strip().splitlines()[-1]).items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--precision", default="fp32,int4")
    parser.add_argument("--shape", default="toy", choices=["toy", "smollm2", "qwen3"])
    parser.add_argument("--layers", type=int, default=None, help="default: the shape's own")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--device-loop", action="store_true")
    args = parser.parse_args()
    cfg, layers = shape_config(args.shape), shape_layers(args.shape, args.layers)
    folder = model_folder(layers, args.shape)
    batches = [int(b) for b in args.batch.split(",")]
    rng = np.random.default_rng(0)
    prompts = {b: rng.integers(3, cfg["vocab_size"], (b, args.prompt)).astype(np.int64)
               for b in batches}
    names = kv_names(layers)
    config = GenerationConfig(max_new_tokens=args.new, eos_token_id=[], pad_token_id=0)
    print(f"decoder: {args.shape}, {layers} layers, hidden {cfg['hidden_size']}, vocab "
          f"{cfg['vocab_size']}; load {os.getloadavg()[0]:.1f}; prompt {args.prompt} + {args.new} "
          f"new tokens, greedy; "
          f"{os.cpu_count()} cores; backend {args.backend}", flush=True)
    theirs = {} if args.no_torch else torch_peer(folder / "hf", args.new, prompts)
    model_config = json.loads((folder / "hf" / "config.json").read_text())
    print(f"{'':11} {'batch':>5} {'transmuter tok/s':>16} {'ort tok/s':>10} {'torch tok/s':>12} "
          f"{'vs ort':>7} {'vs torch':>8} {'same as ort':>11}"
          + (f" {'device tok/s':>12} {'dev/host':>8} {'dev same':>9}" if args.device_loop else ""))
    for precision in args.precision.split(","):
        path = level0_file(folder) if precision == "int4-level0" else \
            folder / precision / "model.onnx"
        model = transmuter.load(path, backend=args.backend)
        gen = Generator(model, model_config)
        step = ort_step(path)
        for b in batches:
            rows = prompts[b]
            peers = [lambda: gen.generate(rows.tolist(), config),
                     lambda: ort_generate(step, rows, args.new, names, cfg)]
            if args.device_loop:
                peers.append(lambda: gen.generate(rows.tolist(), config, device_loop=True))
            (ours, our_s), (ref, ort_s), *device = timed(peers, args.repeat)
            tokens = b * args.new
            ours_tps, ort_tps = tokens / our_s, tokens / ort_s
            same = f"{int((ours == ref).sum())}/{ref.size}"
            torch_col, vs_torch = "", ""
            if b in theirs:
                torch_tps = tokens / theirs[b]["seconds"]
                mark = "*" if precision != "fp32" else " "
                torch_col, vs_torch = f"{torch_tps:>11.1f}{mark}", f"{ours_tps / torch_tps:>7.2f}x"
            device_col = ""
            if device:
                (dev, dev_s), = device
                device_col = (f" {tokens / dev_s:>12.1f} {our_s / dev_s:>7.2f}x "
                              f"{int((dev == ours).sum()):>4}/{ours.size}")
            print(f"{precision:11} {b:>5} {ours_tps:>16.1f} {ort_tps:>10.1f} {torch_col:>12} "
                  f"{ours_tps / ort_tps:>6.2f}x {vs_torch:>8} {same:>11}{device_col}", flush=True)
    if theirs:
        print("* PyTorch runs the fp32 model (it has no MatMulNBits kernel)")


if __name__ == "__main__":
    sys.exit(main())
