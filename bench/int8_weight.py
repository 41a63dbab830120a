"""One MatMul by a weight-only int8 weight (Cast(q) * scale per column, the form of the int8
all-MiniLM-L6-v2 the README's quickstart runs) through Transmuter's compiled graph with the
native kernel (kernels/matmul_int8_weight.c), with XLA's path (the weight dequantized in the
graph), and through onnxruntime on the same file, in alternating rounds; ratios onnxruntime /
ours (above 1: ours is faster). Where the two Transmuter columns cross is W8_MAX_ROWS
(backends/jax_kernels.py).

    python bench/int8_weight.py [--shapes 384x384,384x1536,1536x384] [--rows 1,16,64,128]
                                [--rounds 5]

Times are the best of ``--rounds`` alternating rounds of 20 calls (matmul_nbits.best_us), in
microseconds."""

import argparse
import os
import tempfile

import jax
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import transmuter
from matmul_nbits import best_us
from transmuter.backends import jax_kernels


def model_file(folder, k, n, rng):
    q = rng.integers(-127, 128, (k, n), dtype=np.int8)
    scale = (rng.random((1, n)) * 0.02).astype(np.float32)
    nodes = [helper.make_node("Cast", ["Q"], ["Qf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["Qf", "S"], ["W"]),
             helper.make_node("MatMul", ["A", "W"], ["Y"])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(q, "Q"), numpy_helper.from_array(scale, "S")])
    path = os.path.join(folder, f"w8_{k}x{n}.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                .SerializeToString())
    return path


def compiled(path, a, kernel):
    """The compiled graph with the kernel, or with W8_MAX_ROWS at 0 (XLA's path), traced now."""
    saved = jax_kernels.W8_MAX_ROWS
    jax_kernels.W8_MAX_ROWS = saved if kernel else 0
    try:
        fn = transmuter.compile(transmuter.load(path), {"A": a})
        jax.block_until_ready(fn({"A": a})["Y"])
    finally:
        jax_kernels.W8_MAX_ROWS = saved
    return lambda: fn({"A": a})["Y"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="384x384,384x1536,1536x384", help="KxN list")
    parser.add_argument("--rows", default="1,16,64,128")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'K x N':>11} {'rows':>5} {'kernel us':>10} {'XLA us':>9} {'ort us':>9} "
          f"{'ort/kernel':>11} {'ort/XLA':>8}")
    with tempfile.TemporaryDirectory() as folder:
        for shape in args.shapes.split(","):
            k, n = map(int, shape.split("x"))
            path = model_file(folder, k, n, rng)
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            for rows in map(int, args.rows.split(",")):
                a = rng.standard_normal((rows, k)).astype(np.float32)
                want = session.run(None, {"A": a})[0]
                candidates = {"kernel": compiled(path, a, True), "xla": compiled(path, a, False),
                              "ort": lambda: session.run(None, {"A": a})}
                got = np.asarray(transmuter.compile(transmuter.load(path), {"A": a})({"A": a})["Y"])
                assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), "differs"
                t = dict.fromkeys(candidates, float("inf"))
                for _ in range(args.rounds):  # alternating rounds: a busy spell hits every one
                    for name, fn in candidates.items():
                        t[name] = min(t[name], best_us(fn, 1))
                print(f"{shape:>11} {rows:>5} {t['kernel']:>10.1f} {t['xla']:>9.1f} "
                      f"{t['ort']:>9.1f} {t['ort'] / t['kernel']:>10.2f}x "
                      f"{t['ort'] / t['xla']:>7.2f}x")


if __name__ == "__main__":
    main()
