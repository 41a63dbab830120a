"""Which compiled graphs give their products to the CPU library (compiled.library_dots): those
that dequantize weights, and those that multiply by a large weight transposed (an lm_head tied to
the embedding), whose [N, K] layout XLA's own emitter runs ~10x slower for 2-16 rows. The choice
changes only how XLA compiles, so each graph's output is also compared with onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import transmuter
from transmuter.engine.compiled import LARGE_WEIGHT, library_dots

from .test_engine import info, make_model, reference

HIDDEN = 256
BIG = LARGE_WEIGHT // HIDDEN  # rows of a weight just large enough
SMALL = 1000  # a classifier head


def product(kind, rows):
    """x [4, HIDDEN] times a weight of ``rows`` x HIDDEN, as ``kind`` multiplies by it."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((rows, HIDDEN)).astype(np.float32) / 16
    if kind == "transposed MatMul":  # MatMul(x, Transpose(W)), as exports tie an lm_head
        nodes = [helper.make_node("Transpose", ["w"], ["wt"]),
                 helper.make_node("MatMul", ["x", "wt"], ["y"])]
    elif kind == "Gemm transB":
        nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)]
    else:  # "MatMul": the weight stored [K, N] already
        w = np.ascontiguousarray(w.T)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [info("x", TensorProto.FLOAT, [4, HIDDEN])],
                       [info("y", TensorProto.FLOAT, [4, rows])], {"w": w})
    return model, {"x": rng.standard_normal((4, HIDDEN)).astype(np.float32)}


@pytest.mark.parametrize("kind, rows, expected", [
    ("transposed MatMul", BIG, True), ("Gemm transB", BIG, True),
    ("transposed MatMul", SMALL, False), ("Gemm transB", SMALL, False), ("MatMul", BIG, False)])
def test_large_transposed_weights_take_library_dots(kind, rows, expected):
    proto, feed = product(kind, rows)
    model = transmuter.load(proto, backend="jax")
    assert library_dots(model) is expected
    got = np.asarray(transmuter.compile(model, feed)(feed)["y"])
    # float32 sums of 256 products in another order: a few ulps of the largest output
    np.testing.assert_allclose(got, reference(proto, feed)["y"], rtol=1e-5, atol=1e-5)
