"""ai.onnx.ml TreeEnsemble on random forests, against onnxruntime: every comparison mode (set
membership included), NaN features with missing_value_tracks_true, the four aggregates and the
five post transforms, eager and compiled, on both backends."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx import TensorProto as TP

import transmuter

BACKENDS = ["jax", "mlx"]
N_FEATURES, N_TARGETS = 4, 3


def random_forest(rng, n_trees=5, max_depth=4, dtype=np.float32):
    nodes = {k: [] for k in ("featureids", "modes", "splits", "truenodeids", "falsenodeids",
                             "trueleafs", "falseleafs", "missing")}
    leaves = {"targetids": [], "weights": []}
    members = []

    def build(depth):
        """Returns (index, is_leaf) of a new subtree."""
        if depth == max_depth or (depth > 1 and rng.random() < 0.3):
            leaves["targetids"].append(int(rng.integers(N_TARGETS)))
            leaves["weights"].append(float(rng.uniform(-2, 2)))
            return len(leaves["weights"]) - 1, 1
        i = len(nodes["modes"])
        mode = int(rng.integers(7))
        for k in nodes:
            nodes[k].append(0)
        nodes["featureids"][i] = int(rng.integers(N_FEATURES))
        nodes["modes"][i] = mode
        # Splits on the whole-number grid the features are drawn from, so EQ/NEQ/MEMBER fire.
        nodes["splits"][i] = np.nan if mode == 6 else float(rng.integers(-3, 4))
        nodes["missing"][i] = int(rng.integers(2))
        if mode == 6:  # ORT takes whole-number members only
            members.extend(sorted(set(rng.integers(-2, 3, size=3).tolist())) + [np.nan])
        nodes["truenodeids"][i], nodes["trueleafs"][i] = build(depth + 1)
        nodes["falsenodeids"][i], nodes["falseleafs"][i] = build(depth + 1)
        return i, 0

    roots = [build(0)[0] for _ in range(n_trees)]
    return nodes, leaves, members, roots


CASES = [  # (aggregate_function, post_transform, dtype): every aggregate and every transform
    (1, 0, np.float32), (0, 2, np.float32), (2, 0, np.float64), (3, 1, np.float32),
    (1, 3, np.float32), (0, 4, np.float64)]


def tree_node(forest, output, *, aggregate_function, post_transform, dtype):
    nodes, leaves, members, roots = forest
    attrs = dict(
        nodes_featureids=nodes["featureids"],
        nodes_modes=numpy_helper.from_array(np.array(nodes["modes"], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array(nodes["splits"], dtype)),
        nodes_truenodeids=nodes["truenodeids"], nodes_falsenodeids=nodes["falsenodeids"],
        nodes_trueleafs=nodes["trueleafs"], nodes_falseleafs=nodes["falseleafs"],
        nodes_missing_value_tracks_true=nodes["missing"],
        leaf_targetids=leaves["targetids"],
        leaf_weights=numpy_helper.from_array(np.array(leaves["weights"], dtype)),
        tree_roots=roots, n_targets=N_TARGETS, aggregate_function=aggregate_function,
        post_transform=post_transform)
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, dtype))
    x = "X64" if dtype == np.float64 else "X32"
    return helper.make_node("TreeEnsemble", [x], [output], domain="ai.onnx.ml", **attrs)


def forests_model(forests, *, ort_codes=False):
    """One graph, one TreeEnsemble node per case (outputs Y0, Y1, ...), fed X32 and X64.

    ONNX Runtime reads post_transform in its own enum order (NONE, LOGISTIC, SOFTMAX, ...), 1 and
    2 swapped against the spec's 'SOFTMAX' (1), 'LOGISTIC' (2) (microsoft/onnxruntime#26596):
    with ``ort_codes`` ORT gets the code of the transform the spec names."""
    nodes = []
    for i, (forest, (agg, post, dtype)) in enumerate(zip(forests, CASES)):
        if ort_codes:
            post = {1: 2, 2: 1}.get(post, post)
        nodes.append(tree_node(forest, f"Y{i}", aggregate_function=agg, post_transform=post,
                               dtype=dtype))
    elem = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X32", TP.FLOAT, None),
                     helper.make_tensor_value_info("X64", TP.DOUBLE, None)],
        [helper.make_tensor_value_info(f"Y{i}", elem[c[2]], None) for i, c in enumerate(CASES)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                   helper.make_opsetid("ai.onnx.ml", 5)],
                             ir_version=10)


def features(rng, dtype):
    # Whole numbers only: ORT truncates a feature to an integer before a set-membership test
    # (1.5 is "in" {1}), where the spec tests the value itself.
    x = rng.integers(-3, 4, size=(64, N_FEATURES)).astype(dtype)
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


def run_ort(model, feed):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def make_forests():
    rng = np.random.default_rng(0)
    forests = [random_forest(rng, dtype=dtype) for _, _, dtype in CASES]
    for forest, (_, post, _) in zip(forests, CASES):
        if post == 4:  # PROBIT maps (0, 1): keep the averaged scores inside it
            forest[1]["weights"] = [abs(w) / 4 + 0.05 for w in forest[1]["weights"]]
    x = features(rng, np.float64)
    return forests, {"X32": x.astype(np.float32), "X64": x}


@pytest.mark.parametrize("backend", BACKENDS)
def test_tree_ensemble_matches_onnxruntime(backend):
    forests, feed = make_forests()
    want = run_ort(forests_model(forests, ort_codes=True), feed)
    m = transmuter.load(forests_model(forests), backend=backend)
    runs = [transmuter.compile(m, feed)(feed)]
    if backend == "mlx":  # eager JAX compiles each op's kernels (seconds); the conformance
        runs.append(transmuter.run(m, feed))  # cases run TreeEnsemble eagerly on JAX
    for got in runs:
        for name, expected in want.items():
            y = np.asarray(got[name])
            assert y.dtype == expected.dtype, name
            # Leaf weights are summed in another order than ORT's, and SOFTMAX/LOGISTIC/PROBIT
            # go through exp/log/sqrt of another libm: a few float32 ulps.
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_tree_ensemble_rejects_bad_targets():
    forests, feed = make_forests()
    forests[0][1]["targetids"][0] = N_TARGETS
    with pytest.raises(transmuter.errors.TransmuterError, match="leaf_targetids"):
        transmuter.run(transmuter.load(forests_model(forests)), feed)
