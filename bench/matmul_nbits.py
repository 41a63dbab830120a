"""One MatMulNBits product at decoders' real shapes: Transmuter's compiled op (the native kernel on
CPU, backends/jax_kernels.py), its pure-XLA path, and onnxruntime's kernel, at the same
accuracy_level, in alternating rounds; ratios onnxruntime / ours (above 1: ours is faster).

    python bench/matmul_nbits.py [--models smollm2,qwen3] [--rows 1,4,16] [--level 4]
                                 [--bits 4] [--block 32] [--rounds 5]

Shapes are SmolLM2-135M's and Qwen3-0.6B's as onnxruntime-genai's builder writes them (q/k/v
fused, gate and up, down, o_proj, the lm_head; block 32, zero points). Each candidate is first
compared with onnxruntime at the same level and the script stops if one disagrees. Times are the
best of ``--rounds`` rounds of 20 calls, in microseconds."""

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from transmuter.backends.jax import JaxNamespace
from transmuter.ops.contrib.quantized_matmul import as_float_zero_points, as_words, matmul_nbits
from transmuter.ops.contrib.quantized_matmul import xla_nbits

MODELS = {  # (N, K) of each product of a layer, then the lm_head
    "smollm2": [(960, 576), (576, 576), (1536, 576), (576, 1536), (49152, 576)],
    "qwen3": [(4096, 1024), (1024, 2048), (3072, 1024), (1024, 3072), (151936, 1024)],
}


def graph(b, scales, zp, *, n, k, bits, block, level):
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=level)
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["rows", k])
    g = helper.make_graph(
        [node], "g", [a], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales"),
         numpy_helper.from_array(zp, "zp")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.microsoft", 1)])


class Node:  # what the load-time weight transforms read
    def __init__(self, attrs):
        self.attrs, self.inputs, self.label = attrs, ["A", "B", "scales", "zp"], "MatMulNBits"


def best_us(fn, rounds, calls=20):
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def one_shape(n, k, rows, args, sessions_options):
    bits, block, level = args.bits, args.block, args.level
    rng = np.random.default_rng(0)
    n_blocks = -(-k // block)
    b = rng.integers(0, 256, (n, n_blocks, block * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, n_blocks)) * 0.02 + 0.001).astype(np.float32)
    zp = rng.integers(0, 256, (n, -(-n_blocks * bits // 8)), dtype=np.uint8)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    model = graph(b, scales, zp, n=n, k=k, bits=bits, block=block, level=level)
    session = ort.InferenceSession(model.SerializeToString(), sessions_options,
                                   providers=["CPUExecutionProvider"])
    ref = session.run(None, {"A": a})[0]
    attrs = dict(K=k, N=n, bits=bits, block_size=block)
    node = Node(attrs)
    words, zpf = jnp.asarray(as_words(b, node)), jnp.asarray(as_float_zero_points(zp, node))
    xp, s = JaxNamespace(), jnp.asarray(scales)
    ours = jax.jit(lambda x: matmul_nbits(xp, x, words, s, zpf, accuracy_level=level, **attrs))
    xla = jax.jit(lambda x: xla_nbits(xp, x, words, s, zpf, g_idx=None, k=k, n=n, bits=bits,
                                      block_size=block))
    calls = {"ort": lambda: session.run(None, {"A": a})[0], "ours": lambda: ours(a),
             "xla": lambda: xla(a)}
    # ours equals onnxruntime at the same level up to f32 sums (~1e-6 of the largest output);
    # the XLA path computes level 0 (A not quantized), 1e-2 from level 4's int8 rounding
    for name, tol in (("ours", 1e-5), ("xla", 1e-5 if level != 4 else 3e-2)):
        err = float(np.abs(np.asarray(calls[name]()) - ref).max() / np.abs(ref).max())
        if err > tol:
            raise SystemExit(f"{name} at {n}x{k}, {rows} rows: {err:.1e} from onnxruntime "
                             f"level {level}; not timing")
    times = dict.fromkeys(calls, float("inf"))
    for _ in range(args.rounds):  # peers alternate: the machine's speed drifts between rounds
        for name, call in calls.items():
            times[name] = min(times[name], best_us(call, 1))
    cells = "  ".join(f"{name} {t:8.0f}" for name, t in times.items())
    print(f"N={n:>6} K={k:>4} rows={rows:>2}  {cells}   ort/ours {times['ort'] / times['ours']:.2f}"
          f"  xla/ours {times['xla'] / times['ours']:.2f}", flush=True)
    return times["ort"] / times["ours"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="smollm2,qwen3")
    parser.add_argument("--shapes", default="", help="NxK,... instead of the models' shapes")
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument("--level", type=int, default=4)
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count()
    from transmuter import kernels
    print(f"microseconds per product, best of {args.rounds} rounds; {os.cpu_count()} cores; "
          f"kernels: {kernels.instruction_set() or 'off (' + kernels.why_off() + ')'}; "
          f"bits {args.bits}, block {args.block}, accuracy_level {args.level}")
    shapes = ([tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
              if args.shapes else [s for m in args.models.split(",") for s in MODELS[m]])
    ratios = [one_shape(n, k, rows, args, options) for n, k in shapes
              for rows in (int(r) for r in args.rows.split(","))]
    print(f"ort/ours: min {min(ratios):.2f}, geometric mean "
          f"{float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
