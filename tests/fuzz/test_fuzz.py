"""The fuzzer (tests/fuzz): a bounded run with a fixed seed must find no failure that
tests/fuzz/known.py does not list, and its parts judge as they say."""

import numpy as np
import onnx
import pytest

import transmuter
from tests import fixtures
from tests.fuzz import judge, known, structural
from tests.fuzz.__main__ import Tally
from tests.fuzz.cases import BACKENDS, CLASS_WEIGHTS, GRAPHS, make_case
from tests.fuzz.pool import run_cases

# CI's run: every class and both backends come up in this many cases of this seed; about a
# minute on 2 busy cores (two worker processes). Long runs: `python -m tests.fuzz --seconds T`.
SEED, COUNT = 14, 100


@pytest.mark.fuzz
def test_bounded_run(tmp_path):
    tally = Tally(quiet=True, verbose=False)
    # A generous time limit: under a busy suite, a first eager JAX run of a graph compiles every
    # op (30 s alone on this machine); hangs still show.
    run_cases((make_case(SEED, i) for i in range(COUNT)), tally, workers=2, timeout=300,
              run_folder=str(tmp_path))
    assert {cls for cls, _ in tally.counts} == set(CLASS_WEIGHTS)
    assert {backend for _, backend in tally.counts} == {"jax", "mlx"}
    assert sum(sum(c.values()) for c in tally.counts.values()) == COUNT
    assert not tally.failures, "\n".join(tally.failures)


def test_a_case_replays_the_same():
    case = make_case(SEED, 7)
    assert make_case(SEED, 7) == case
    data = (fixtures.ROOT / "bert" / "onnx" / "model.onnx").read_bytes()
    made = []
    for _ in range(2):
        model = onnx.ModelProto.FromString(data)
        detail = structural.MUTATIONS["rename-node-input"](case.rng(), model)
        made.append((detail, model.SerializeToString()))
    assert made[0] == made[1] and made[0][1] != data


def test_judge_compares_with_onnxruntime():
    want = {"y": np.array([1.0, 2.0], np.float32)}
    assert judge.compare({"y": want["y"] + 5e-5}, want, {}, False) is None
    assert "differ" in judge.compare({"y": want["y"] + 1e-2}, want, {}, False)
    assert "float64" in judge.compare({"y": want["y"].astype(np.float64)}, want, {}, False)
    assert "outputs" in judge.compare({}, want, {}, False)


def test_verdicts():
    assert judge.verdict("k", ("own", transmuter.InputError("x")), None, None, None)["status"] \
        == "pass"
    bad = judge.verdict("k", ("foreign", KeyError("x")), None, None, None)
    assert bad["status"] == "fail" and bad["outcome"] == "foreign KeyError"
    accepted = judge.verdict("k", ("ok", {}), None, None, None)
    assert accepted["status"] == "fail"


def test_known_entries_match_by_key():
    case = make_case(SEED, 0)
    key = known.key_of(case, {"outcome": "foreign KeyError"})
    assert key.startswith(f"{case.cls}/{case.kind} {case.backend} ")
    assert key.endswith("| foreign KeyError")


def test_a_long_run_draws_every_graph_on_both_backends():
    # issue 14's bar: >= 8 fixture graphs on both backends in one long run (the draw alone)
    drawn = {(c.fixture, c.graph, c.backend) for c in (make_case(SEED, i) for i in range(3000))}
    assert {(f, g, b) for f, g in GRAPHS for b in BACKENDS} <= drawn
    assert len(GRAPHS) >= 8


def _range_of_a_cast_constant(path):
    """Range's limit a Cast of a [1] constant (it takes a scalar): onnxruntime's kernels run it,
    but after constant folding its optimizer's shape inference refuses it (20261205:3428)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))

    nodes = [const("limit1", np.array([5], np.int64)), const("start", np.array(0, np.int64)),
             const("delta", np.array(1, np.int64)),
             helper.make_node("Cast", ["limit1"], ["limit"], to=T.INT64),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.INT64, [5])],
                              [helper.make_tensor_value_info("y", T.INT64, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_onnxruntime_without_its_optimizer_is_the_reference_where_it_alone_runs(tmp_path):
    path = _range_of_a_cast_constant(str(tmp_path / "model.onnx"))
    feed = {"x": np.arange(5, dtype=np.int64)}
    assert isinstance(judge.ort_run(path, feed), Exception)
    right = {"y": np.arange(5, dtype=np.int64) * 2}
    same = judge.verdict("k", ("ok", right), path, feed, feed)
    assert same == judge.passed("same as onnxruntime without its optimizer")
    wrong = judge.verdict("k", ("ok", {"y": right["y"] + 1}), path, feed, feed)
    # only the optimizer refused: the answer of its plain kernels is the one to meet
    assert wrong["status"] == "fail" and wrong["outcome"] == "different answer"
