"""LinearAttention (ai.onnx 27) beyond the conformance cases (T <= 4): a 16-token gated_delta
prefill with GQA, per-key-dim decay and a past state, compiled, against the spec's reference
(onnx.reference); and the error for a rule missing its input."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import transmuter

B, T, HQ, HKV, DK, DV = 2, 16, 4, 2, 8, 6


def linear_model(inputs, **attrs):
    node = helper.make_node("LinearAttention", [n for n, _ in inputs], ["y", "state"],
                            q_num_heads=HQ, kv_num_heads=HKV, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TP.FLOAT, s) for n, s in inputs if n],
        [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("y", "state")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_gated_delta_prefill_matches_reference(backend):
    shapes = [("q", (B, T, HQ * DK)), ("k", (B, T, HKV * DK)), ("v", (B, T, HKV * DV)),
              ("past", (B, HKV, DK, DV)), ("decay", (B, T, HKV * DK)), ("beta", (B, T, HKV))]
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal(s).astype(np.float32) * 0.3 for n, s in shapes}
    feed["decay"] = -np.abs(feed["decay"])  # log-space decay: exp(g) <= 1
    feed["beta"] = 1 / (1 + np.exp(-feed["beta"]))
    model = linear_model(shapes)
    want = ReferenceEvaluator(model).run(None, feed)
    m = transmuter.load(model, backend=backend)
    got = transmuter.compile(m, feed)(feed)
    for name, expected in zip(("y", "state"), want):
        # Both sides recur in float32, in another summation order: a few ulps after 16 steps.
        np.testing.assert_allclose(np.asarray(got[name]), expected, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_gated_rule_without_decay_is_refused():
    shapes = [("q", (1, 2, HQ * DK)), ("k", (1, 2, HKV * DK)), ("v", (1, 2, HKV * DV))]
    feed = {n: np.zeros(s, np.float32) for n, s in shapes}
    model = linear_model(shapes, update_rule="gated")
    # refused at load by onnx's own inference ("requires decay input"), or when the node runs
    with pytest.raises(transmuter.errors.TransmuterError, match="(needs the|requires) decay input"):
        transmuter.run(transmuter.load(model), feed)
