"""What a compile costs in padded tokens: the numbers behind buckets.COMPILE_COST_NODE_WEIGHT_TOKENS.

    python bench/pad_or_compile.py [MODEL.onnx ...]

For each model (default: the real all-MiniLM-L6-v2 of tests/support/setup_real_models.sh and
two tiny fixtures), in this process with the persistent compile cache off: the first call of a
shape (trace + lower + XLA compile + one run) less a later call of it is the compile; the slope
of later calls' times over their padded tokens (rows x length) is a token's cost. Their ratio is
the tokens a new length bucket must save before compiling it beats padding to a compiled one;
printed with the graph's nodes and weights, from which buckets.compile_tokens estimates it.
"""

import pathlib
import statistics
import sys
import time

import numpy as np

import transmuter

HOME = pathlib.Path.home() / ".cache" / "transmuter-tests"
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures"
MODELS = [HOME / "all-MiniLM-L6-v2" / "onnx" / "model.onnx",
          FIXTURES / "bert-sentence-transformers" / "onnx" / "model.onnx",
          FIXTURES / "distilbert-sequence-classification" / "onnx" / "model.onnx"]
SHAPES = [(8, 32), (8, 64), (8, 128), (1, 24), (1, 96)]


def feed(model, rows, length):
    names = {v.name for v in model.inputs}
    full = {"input_ids": np.full((rows, length), 7, np.int64),
            "attention_mask": np.ones((rows, length), np.int64),
            "token_type_ids": np.zeros((rows, length), np.int64)}
    return {k: v for k, v in full.items() if k in names}


def timed(fn, x):
    start = time.perf_counter()
    out = fn(x)
    for v in out.values():
        np.asarray(v)
    return time.perf_counter() - start


def measure(path):
    model = transmuter.load(path, compile_cache=False, compile_ahead=False)
    fn = transmuter.compile(model)
    compiles, runs = [], []
    for rows, length in SHAPES:
        x = feed(model, rows, length)
        first = timed(fn, x)
        run = statistics.median(timed(fn, x) for _ in range(5))
        compiles.append(first - run)
        runs.append((rows * length, run))
    tokens = np.array([t for t, _ in runs], float)
    secs = np.array([s for _, s in runs])
    per_token = np.polyfit(tokens, secs, 1)[0]
    nodes = len(model.graph.nodes)
    weights = sum(int(np.prod(v.shape)) for v in model.params.values())
    compile_s = statistics.median(compiles)
    print(f"{path.parent.parent.name}: {nodes} nodes, {weights:,} weights; compile "
          f"{compile_s:.3f} s (median of {', '.join(f'{c:.2f}' for c in compiles)}); "
          f"{per_token * 1e6:.2f} us a padded token; a compile = "
          f"{compile_s / per_token:,.0f} tokens; x weights / nodes = "
          f"{compile_s / per_token * weights / nodes:.3g}")


if __name__ == "__main__":
    for p in sys.argv[1:] or MODELS:
        measure(pathlib.Path(p))
