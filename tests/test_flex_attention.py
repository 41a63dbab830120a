"""FlexAttention (ai.onnx.preview) beyond the conformance cases: an explicit softmax_precision
(DOUBLE on float32 inputs), which sets the element type the score_mod subgraph sees, against the
spec's reference implementation (onnx.reference); and the error for inputs that are not rank 4."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import transmuter


def flex_model(q_shape, kv_shape, **attrs):
    inputs = [helper.make_tensor_value_info("Q", TP.FLOAT, q_shape)] + [
        helper.make_tensor_value_info(n, TP.FLOAT, kv_shape) for n in "KV"]
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            **attrs)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("Y", TP.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                   helper.make_opsetid("ai.onnx.preview", 1)])


def soft_cap_graph(elem):
    """score_mod: 5 * tanh(scores / 5), with its constants in ``elem``."""
    nodes = [helper.make_node("Div", ["s", "c"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
             helper.make_node("Mul", ["t", "c"], ["o"])]
    return helper.make_graph(nodes, "cap", [helper.make_tensor_value_info("s", elem, None)],
                             [helper.make_tensor_value_info("o", elem, None)],
                             [helper.make_tensor("c", elem, [], [5.0])])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_softmax_precision_double_with_score_mod(backend):
    model = flex_model([1, 4, 3, 8], [1, 2, 5, 8], score_mod=soft_cap_graph(TP.DOUBLE),
                       softmax_precision=TP.DOUBLE)
    rng = np.random.default_rng(0)
    feed = {"Q": rng.standard_normal((1, 4, 3, 8), np.float32) * 3,
            "K": rng.standard_normal((1, 2, 5, 8), np.float32),
            "V": rng.standard_normal((1, 2, 5, 8), np.float32)}
    want = ReferenceEvaluator(model).run(None, feed)[0]
    got = np.asarray(transmuter.run(transmuter.load(model, backend=backend), feed)["Y"])
    assert got.dtype == np.float32
    # Scores and softmax in float64 on both sides; Q @ K^T is a float32 matmul (other summation
    # order than NumPy's): a few float32 ulps.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rank3_inputs_are_refused():
    model = flex_model([1, 3, 8], [1, 5, 8])
    feed = {n: np.zeros(s, np.float32) for n, s in (("Q", (1, 3, 8)), ("K", (1, 5, 8)),
                                                    ("V", (1, 5, 8)))}
    with pytest.raises(transmuter.errors.TransmuterError, match="rank-4"):
        transmuter.run(transmuter.load(model), feed)
