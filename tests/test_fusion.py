"""The load-time fusions (engine/passes/fusion.py). Attention in blocks of query rows: which chains fuse, that
the blocks give onnxruntime's answer (padded rows, a mask that varies by row, a fully masked row,
Cast between Softmax and MatMul), that gradients pass through them, and that a broken chain fails
naming its own node, as it would unfused. Transposed products: onnxruntime's answer on every
path (in place, a Transpose that moves batch axes, the nodes as they are), and weights left
alone."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import TensorProto, helper

import transmuter
from transmuter.engine.passes import fusion
from transmuter.errors import OpError

from .test_engine import info, make_model, reference

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
HEADS, DIM = 16, 32
ROWS = 300  # 3 blocks of 100 rows (ceil(300 / 128) = 3): no padding
ODD = 333  # 3 blocks of 111
PADDED = 259  # 3 blocks of 87: two padded rows


def attention_model(rows, keys, *, mask_rows=True, output_probs=False):
    """x [1, rows, HEADS*DIM] projected to q, and k/v from y [1, keys, ...]: exported attention,
    MatMul(q, Transpose(k)) -> Mul(scale) -> Add(mask) -> Softmax -> Cast -> MatMul(v)."""
    rng = np.random.default_rng(0)
    width = HEADS * DIM
    weights = {name: (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
               for name in ("wq", "wk", "wv")}
    weights["scale"] = np.float32(DIM ** -0.5)
    weights["heads"] = np.array([1, -1, HEADS, DIM], np.int64)
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q2"]),
             helper.make_node("Reshape", ["q2", "heads"], ["q3"]),
             helper.make_node("Transpose", ["q3"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["y", "wk"], ["k2"]),
             helper.make_node("Reshape", ["k2", "heads"], ["k3"]),
             helper.make_node("Transpose", ["k3"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["y", "wv"], ["v2"]),
             helper.make_node("Reshape", ["v2", "heads"], ["v3"]),
             helper.make_node("Transpose", ["v3"], ["v"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
             helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
             helper.make_node("Cast", ["probs"], ["probs32"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["probs32", "v"], ["out"], name="pv")]
    mask_shape = [1, 1, rows if mask_rows else 1, keys]
    outputs = [info("out", TensorProto.FLOAT, None)]
    if output_probs:
        outputs.append(info("probs", TensorProto.FLOAT, None))
    # inputs of any shape, so that a test can feed a wrong one
    proto = make_model(nodes, [info(name, TensorProto.FLOAT, None) for name in ("x", "y", "mask")],
                       outputs, weights)
    mask = np.where(rng.random(mask_shape) < 0.2, -np.inf, 0).astype(np.float32)
    if mask_rows:  # one query row every key is masked from: NaN, as ONNX defines it
        mask[..., 0, :] = -np.inf
    else:
        mask[...] = 0
    feed = {"x": rng.standard_normal((1, rows, width)).astype(np.float32),
            "y": rng.standard_normal((1, keys, width)).astype(np.float32), "mask": mask}
    return proto, feed


def fused_nodes(model):
    return [n for n in model.graph.nodes if n.op_type == "FusedAttention"]


def planned_rows(model, feed):
    """The rows per block that the fused node chooses for ``feed`` (None: one block)."""
    (node,) = fused_nodes(model)
    shapes = {"q": (1, HEADS, feed["x"].shape[1], DIM), "k3": (1, feed["y"].shape[1], HEADS, DIM),
              "v3": (1, feed["y"].shape[1], HEADS, DIM), "scale": (), "mask": feed["mask"].shape}
    inputs = [np.zeros(shapes[name], np.float32) for name in node.inputs]
    plan = fusion._plan(inputs, node.attrs["members"])
    return None if plan is None else plan[0]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("rows, keys, mask_rows, expected_rows", [
    (ROWS, 1024, True, 100), (ODD, 1024, True, 111), (PADDED, 1024, False, 87),
    (64, 1024, True, None)])  # too few rows to block
def test_blocks_equal_onnxruntime(backend, rows, keys, mask_rows, expected_rows):
    proto, feed = attention_model(rows, keys, mask_rows=mask_rows)
    model = transmuter.load(proto, backend=backend)
    assert len(fused_nodes(model)) == 1
    assert planned_rows(model, feed) == expected_rows
    got = np.asarray(transmuter.compile(model, feed)(feed)["out"])
    # the same float32 products and sums per row as unblocked, in the dot kernels' own order:
    # a few ulps of outputs of order 1
    np.testing.assert_allclose(got, reference(proto, feed)["out"], rtol=1e-5, atol=2e-6)
    assert np.isnan(got[0, :, 0]).all() == mask_rows


def test_chains_whose_scores_are_read_elsewhere_stay_as_they_are():
    proto, _ = attention_model(ROWS, 1024, output_probs=True)
    model = transmuter.load(proto)
    assert not fused_nodes(model)
    assert [n.op_type for n in model.graph.nodes].count("Softmax") == 1


def test_real_exports_fuse_their_attention():
    """One chain per attention layer of each fixture's config."""
    for fixture in ("vit", "bert", "clip", "llama-opset14"):
        config = json.loads((FIXTURES / fixture / "config.json").read_text())
        layers = sum(c["num_hidden_layers"] for c in (config.get("text_config"),
                                                      config.get("vision_config"), config) if c
                     and "num_hidden_layers" in c)
        model = transmuter.load(FIXTURES / fixture / "onnx/model.onnx")
        assert len(fused_nodes(model)) == layers, fixture


def test_gradients_through_blocks_equal_unblocked(monkeypatch):
    proto, feed = attention_model(ROWS, 1024, mask_rows=False)
    feed["mask"] = np.zeros_like(feed["mask"])  # finite everywhere: every gradient is defined
    grads = []
    for scores in (float("inf"), fusion._SCORES):  # one block, then blocks of 100 rows
        monkeypatch.setattr(fusion, "_SCORES", scores)
        model = transmuter.load(proto, trainable=["wq", "wv"])

        def loss(params):
            return jnp.sum(model.apply(params, **feed)["out"] ** 2)

        grads.append(jax.grad(loss)(model.trainable_params))
    for name in ("wq", "wv"):
        # float32 sums of 1024 keys x 300 rows per weight entry, in another order
        np.testing.assert_allclose(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5)


def test_a_broken_chain_names_its_own_node():
    proto, feed = attention_model(ROWS, 1024)
    model = transmuter.load(proto)
    feed["y"] = feed["y"][:, :1000]  # 1000 keys, but the mask has 1024 columns
    with pytest.raises(OpError, match="Add node"):
        transmuter.compile(model, feed)(feed)


def transposed_product(x_shape, perm, scale):
    """MatMul(a, Transpose(x, perm) * scale), as transformers' SDPA exports scale kᵀ."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape).astype(np.float32)
    bt = np.transpose(x, perm)
    a = rng.standard_normal(bt.shape[:-2] + (5, bt.shape[-2])).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=perm),
             helper.make_node("Mul", ["xt", "scale"], ["scaled"]),
             helper.make_node("MatMul", ["a", "scaled"], ["y"])]
    proto = make_model(nodes, [info("a", TensorProto.FLOAT, None), info("x", TensorProto.FLOAT, None)],
                       [info("y", TensorProto.FLOAT, None)], {"scale": np.asarray(scale, np.float32)})
    return proto, {"a": a, "x": x}


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("x_shape, perm, scale, contraction", [
    ((2, 3, 40, 8), [0, 1, 3, 2], 0.35, "...ij,...kj->...ik"),  # k [B, H, T, D] -> kᵀ
    ((2, 40, 3, 8), [0, 2, 3, 1], 0.35, "abij,akbj->abik"),  # k [B, T, H, D] -> kᵀ at once
    ((2, 3, 40, 8), [0, 1, 3, 2], np.full((1, 1, 8, 40), 0.5), None),  # not a scalar: as is
    ((40, 8), [1, 0], 0.35, None)])  # 2-D: XLA folds it itself; the nodes run as they are
def test_transposed_products_equal_onnxruntime(backend, x_shape, perm, scale, contraction):
    proto, feed = transposed_product(x_shape, perm, scale)
    model = transmuter.load(proto, backend=backend)
    assert [n.op_type for n in model.graph.nodes] == ["TransposedMatMul"]
    if contraction or np.ndim(scale) == 0:
        assert fusion._contraction(feed["a"], feed["x"], perm) == contraction
    got = np.asarray(transmuter.compile(model, feed)(feed)["y"])
    # float32 sums of 8 or 40 products in another order, scaled after the sum (as onnxruntime's
    # FusedMatMul scales) rather than before: a few ulps
    np.testing.assert_allclose(got, reference(proto, feed)["y"], rtol=1e-5, atol=1e-6)


def test_transposed_weights_keep_their_transpose():
    """A weight's Transpose stays (XLA folds 2-D ones; compiled.library_dots looks for it)."""
    w = np.ones((8, 4), np.float32)
    proto = make_model([helper.make_node("Transpose", ["w"], ["wt"]),
                        helper.make_node("MatMul", ["a", "wt"], ["y"])],
                       [info("a", TensorProto.FLOAT, [2, 4])], [info("y", TensorProto.FLOAT, None)],
                       {"w": w})
    model = transmuter.load(proto)
    assert [n.op_type for n in model.graph.nodes] == ["Transpose", "MatMul"]


def test_attention_over_a_weight_keeps_its_matmul():
    """Keys that are a weight (a learned probe) stay a MatMul that training/lora.py can adapt."""
    keys = np.ones((4, 6), np.float32)
    proto = make_model([helper.make_node("MatMul", ["q", "keys"], ["s"]),
                        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                        helper.make_node("MatMul", ["p", "v"], ["y"])],
                       [info("q", TensorProto.FLOAT, [3, 4]), info("v", TensorProto.FLOAT, [6, 2])],
                       [info("y", TensorProto.FLOAT, None)], {"keys": keys})
    assert [n.op_type for n in transmuter.load(proto).graph.nodes] == ["MatMul", "Softmax",
                                                                      "MatMul"]
