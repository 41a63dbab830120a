"""Transmuter on a GPU against onnxruntime-gpu on the same files: one short run over the four
workloads users ask about, with ratios and, for decoding, the fraction of the GPU's memory
bandwidth the step uses.

    bash bench/gpu.sh                # sets up what is missing, then runs this
    python bench/gpu.py [--workloads embedding,vision,whisper,decoder] [--precision int4,fp16]
                        [--shape smollm2] [--repeat 20] [--peak-gbs GB/s] [--allow-cpu]

Each workload is one compiled call of one graph, fed the same arrays on both systems, outputs
compared before any timing (the same file on two runtimes: they must agree):

- ``embedding``: all-MiniLM-L6-v2 fp32 (``tests/support/setup_real_models.sh``), 32 x 128 tokens.
- ``vision``: a ViT-B/16-sized classifier (bench/_vision_models.py), 16 images of 224 x 224.
- ``whisper``: whisper-tiny's encoder (bench/_asr_models.py), one 30 s window (80 x 3000).
- ``decoder``: one decode step of a SmolLM2-135M-shaped decoder (bench/_decoder.py, built by
  onnxruntime-genai's builder) at batch 1 with 256 cache rows, for each ``--precision``. Its
  bandwidth column is weight bytes / step time / the GPU's peak (a table by device name, or
  ``--peak-gbs``): decoding one token reads every weight once, so 1.0 is the memory-bound limit.

Transmuter: ``transmuter.compile(transmuter.load(file))`` on JAX's default device (the GPU), inputs
put on the device first, timed to ``block_until_ready``; the decode step is the text-generation
loop's own stepper (generation.steppers.FixedCache: its cache stays on the device). onnxruntime:
``CUDAExecutionProvider`` with its inputs as device OrtValues made once (``run_with_ort_values``;
the decode step is the same step at the same position every call, over a cache of 256 rows with
101 in use, as on our side), so neither side copies inputs through host memory.
Without onnxruntime-gpu installed its column is left out. Every call runs once untimed (compiles,
warms), then ``--repeat`` timed calls alternate between the systems; the median counts.

``--allow-cpu`` runs the same on the CPU (onnxruntime's CPU provider): a check of this script,
not a GPU figure. PyTorch CUDA is not run here: bench/text.py, vision.py, asr.py and
generation.py time transformers on PyTorch (their CPU figures), and their ``--device cuda``
counterpart is future work.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax
import numpy as np
import onnxruntime as ort

import transmuter

BENCH = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

# Peak memory bandwidth by device name (vendor data sheets), GB/s; --peak-gbs overrides.
PEAK_GBS = {"H200": 4800, "H100 80GB HBM3": 3350, "H100 PCIe": 2000, "H100": 3350,
            "A100-SXM4-80GB": 2039, "A100-SXM4-40GB": 1555, "A100": 1555, "L40S": 864,
            "L4": 300, "A10G": 600, "A10": 600, "T4": 320, "RTX 4090": 1008, "RTX 3090": 936}


def peak_gbs(device, override):
    if override:
        return override
    kind = getattr(device, "device_kind", "")
    return next((gbs for name, gbs in PEAK_GBS.items() if name in kind), None)


def ort_session(path, gpu):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = ["CUDAExecutionProvider"] if gpu else ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), options, providers=providers)


def on_ort_device(feed, gpu):
    where = ("cuda", 0) if gpu else ("cpu", 0)
    return {k: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v), *where)
            for k, v in feed.items()}


def median_rounds(calls, repeat):
    """{name: median seconds}; the systems alternate call by call."""
    times = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def graph_pair(path, feed, gpu):
    """(ours, theirs or None, largest |difference| of the first output / its scale)."""
    fn = transmuter.compile(transmuter.load(path))
    device_feed = {k: jax.device_put(v) for k, v in feed.items()}

    def ours():
        return jax.block_until_ready(fn(device_feed))

    first = np.asarray(next(iter(ours().values())))
    if gpu and "CUDAExecutionProvider" not in ort.get_available_providers():
        return ours, None, None
    session = ort_session(path, gpu)
    ort_feed = on_ort_device(feed, gpu)
    names = [o.name for o in session.get_outputs()]

    def theirs():
        return session.run_with_ort_values(names, ort_feed)

    want = theirs()[0].numpy()
    diff = float(np.abs(first - want).max() / max(np.abs(want).max(), 1e-6))
    return ours, theirs, diff


def embedding_case():
    from text import default_folder
    folder = default_folder()
    if not (folder / "onnx" / "model.onnx").exists():
        raise SystemExit(f"{folder} is missing: run `bash tests/support/setup_real_models.sh`")
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (32, 128)).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids":
            np.zeros_like(ids)}
    return folder / "onnx" / "model.onnx", feed


def vision_case():
    from _vision_models import model_folder
    pixels = np.random.default_rng(0).standard_normal((16, 3, 224, 224)).astype(np.float32)
    return model_folder("vit", 12) / "onnx" / "model.onnx", {"pixel_values": pixels}


def whisper_case():
    from _asr_models import model_folder
    features = np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)
    return model_folder("whisper-tiny") / "onnx" / "encoder_model.onnx", {
        "input_features": features}


def decoder_rows(shape, precisions, gpu, repeat, peak):
    """One decode step per precision: (name, ours s, theirs s or None, agreement, bandwidth)."""
    from _decoder import kv_names, model_folder, shape_config, shape_layers, weight_bytes
    from transmuter.generation.loop import Generator
    from transmuter.generation.steppers import FixedCache

    folder, config = model_folder(shape=shape, precisions=precisions), shape_config(shape)
    layers, cap, length = shape_layers(shape), 256, 100
    kv_heads, head_dim = config["num_key_value_heads"], config["head_dim"]
    prompt = np.random.default_rng(0).integers(3, config["vocab_size"], (1, 64))
    tokens = np.full(1, 5, np.int64)
    rows = []
    for precision in precisions:
        path = folder / precision / "model.onnx"
        model = transmuter.load(path)
        stepper = FixedCache(Generator(model, json.loads((folder / "hf" / "config.json")
                                                         .read_text())),
                             prompt.tolist(), cap - prompt.shape[1])
        stepper.start()

        def ours():
            stepper.steps = length - prompt.shape[1]  # one position: the same work each call
            return stepper.step(tokens)

        calls = {"transmuter": ours}
        if not gpu or "CUDAExecutionProvider" in ort.get_available_providers():
            session = ort_session(path, gpu)
            float_type = np.float16 if precision == "fp16" else np.float32
            mask = (np.arange(cap) <= length).astype(np.int64)[None]
            feed = on_ort_device({"input_ids": tokens[:, None], "attention_mask": mask,
                                  **{k: np.zeros((1, kv_heads, cap, head_dim), float_type)
                                     for k in kv_names(layers)}}, gpu)
            names = [o.name for o in session.get_outputs()]

            def theirs():
                out = dict(zip(names, session.run_with_ort_values(names, feed)))
                return out["logits"]

            calls["onnxruntime"] = theirs
        for call in calls.values():
            call()
        best = median_rounds(calls, repeat)
        gbs = weight_bytes(model) / best["transmuter"] / 1e9
        rows.append((f"decoder {shape} {precision} (1 token)", best["transmuter"],
                     best.get("onnxruntime"), "-", gbs / peak if peak else None))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="embedding,vision,whisper,decoder")
    parser.add_argument("--precision", default="int4,fp16")
    parser.add_argument("--shape", default="smollm2")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--peak-gbs", type=float, default=None)
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    device = jax.devices()[0]
    gpu = device.platform == "gpu"
    if not gpu and not args.allow_cpu:
        raise SystemExit(f"JAX sees no GPU ({jax.devices()}): install jax[cuda12] (docs/gpu.md),"
                         " or pass --allow-cpu to check this script on the CPU")
    peak = peak_gbs(device, args.peak_gbs)
    print(f"device: {getattr(device, 'device_kind', device)}; onnxruntime "
          f"{ort.__version__} {ort.get_available_providers()}; peak {peak} GB/s")
    cases = {"embedding": embedding_case, "vision": vision_case, "whisper": whisper_case}
    rows = []
    for name in args.workloads.split(","):
        if name == "decoder":
            rows += decoder_rows(args.shape, args.precision.split(","), gpu, args.repeat, peak)
            continue
        path, feed = cases[name]()
        ours, theirs, diff = graph_pair(path, feed, gpu)
        calls = {"transmuter": ours, **({"onnxruntime": theirs} if theirs else {})}
        best = median_rounds(calls, args.repeat)
        rows.append((name, best["transmuter"], best.get("onnxruntime"),
                     "-" if diff is None else f"{diff:.1e}", None))
    print(f"{'workload':32} {'transmuter ms':>13} {'onnxruntime ms':>14} {'speed ratio':>11} "
          f"{'rel. diff':>9} {'of peak BW':>10}")
    for name, ours, theirs, diff, bw in rows:
        ratio = f"{theirs / ours:.2f}x" if theirs else "-"
        print(f"{name:32} {ours * 1e3:13.2f} {theirs * 1e3 if theirs else float('nan'):14.2f} "
              f"{ratio:>11} {diff:>9} {f'{bw:.0%}' if bw else '-':>10}")
    print("speed ratio: onnxruntime's time / Transmuter's (above 1: Transmuter is faster)")


if __name__ == "__main__":
    main()
