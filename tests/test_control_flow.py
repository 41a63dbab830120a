"""Control flow under a trace: If on a traced condition becomes one compiled cond, Loop and Scan
become compiled loops (no graph break) when shapes are loop-invariant, and otherwise break and
still agree with eager runs and onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
BACKENDS = ["jax", "mlx"]


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, value):
    tensor = numpy_helper.from_array(np.asarray(value))
    return helper.make_node("Constant", [], [name], value=tensor)


def make_model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference(model, feed):
    session = ort.InferenceSession(model.SerializeToString())
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def check(proto, feeds, *, segments, backend="jax"):
    """Every feed: compiled == eager == onnxruntime; ``segments`` compiled segments per signature
    (1: no break)."""
    model = transmuter.load(proto, backend=backend)
    fn = transmuter.compile(model, feeds[0])
    assert fn.cache_info().misses == segments
    for feed in feeds:
        eager = transmuter.run(model, feed)
        got = fn(feed)
        want = reference(proto, feed)
        for name, value in want.items():
            np.testing.assert_allclose(np.asarray(eager[name]), value, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(got[name]), value, rtol=1e-6, atol=1e-6)
            assert np.asarray(got[name]).dtype == value.dtype
    return fn


def if_model(else_shape=(3,)):
    """y = (x * 2 if sum(x) > 0 else x - 1) + 1; the else branch gives ``else_shape``."""
    then = helper.make_graph([const("two", np.float32(2)),
                              helper.make_node("Mul", ["x", "two"], ["t"])],
                             "then", [], [info("t", F, [3])])
    else_nodes = [const("one", np.float32(1)), helper.make_node("Sub", ["x", "one"], ["e"])]
    if else_shape != (3,):
        else_nodes += [const("shape", np.array(else_shape, np.int64)),
                       helper.make_node("Reshape", ["e", "shape"], ["e2"])]
    out = "e2" if else_shape != (3,) else "e"
    other = helper.make_graph(else_nodes, "else", [], [info(out, F, list(else_shape))])
    return make_model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         const("zero", np.float32(0)),
         helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
         const("one_", np.float32(1)),
         helper.make_node("Add", ["r", "one_"], ["y"])],
        [info("x", F, [3])], [info("y", F, None)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_traced_condition_is_one_compiled_cond(backend):
    pos, neg = np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32)
    fn = check(if_model(), [{"x": pos}, {"x": neg}], segments=1, backend=backend)
    assert fn.cache_info().misses == 1 and fn.cache_info().hits == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_with_branches_of_different_shapes_breaks(backend):
    pos, neg = np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32)
    check(if_model(else_shape=(1, 3)), [{"x": pos}, {"x": neg}], segments=2, backend=backend)


def counting_loop(with_scan):
    """Doubles x until its sum passes ``limit`` (a data-dependent trip count), at most n times;
    with_scan also stacks every step's value (which needs a host trip count)."""
    body_outputs = [info("c_out", B, []), info("v_out", F, [2])]
    nodes = [const("two", np.float32(2)),
             helper.make_node("Mul", ["v_in", "two"], ["v_out"]),
             helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
             helper.make_node("Less", ["s", "limit"], ["c_out"])]
    if with_scan:
        nodes.append(helper.make_node("Identity", ["v_out"], ["step"]))
        body_outputs.append(info("step", F, [2]))
    body = helper.make_graph(nodes, "body", [info("i", I64, []), info("c_in", B, []),
                                             info("v_in", F, [2])], body_outputs)
    outputs = ["v"] + (["steps"] if with_scan else [])
    return make_model(
        [helper.make_node("Neg", ["x"], ["nx"]), helper.make_node("Neg", ["nx"], ["x0"]),
         helper.make_node("Loop", ["n", "", "x0"], outputs, body=body),
         helper.make_node("Identity", ["v"], ["y"])]
        + ([helper.make_node("Identity", ["steps"], ["z"])] if with_scan else []),
        [info("n", I64, []), info("x", F, [2]), info("limit", F, [])],
        [info("y", F, [2])] + ([info("z", F, None)] if with_scan else []))


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_with_data_dependent_trip_count_is_a_compiled_while_loop(backend):
    x = np.array([1, 2], np.float32)
    feeds = [{"n": np.array(10, np.int64), "x": x, "limit": np.array(50, np.float32)},
             {"n": np.array(3, np.int64), "x": x, "limit": np.array(1000, np.float32)},
             {"n": np.array(10, np.int64), "x": x, "limit": np.array(0, np.float32)}]
    # MLX compiles no while loops: there the Loop is a break between two compiled segments.
    segments = 1 if backend == "jax" else 2
    fn = check(counting_loop(with_scan=False), feeds, segments=segments, backend=backend)
    assert fn.cache_info().misses == segments and fn.cache_info().hits == 3 * segments


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_with_scan_outputs_and_traced_trip_count_breaks(backend):
    x = np.array([1, 2], np.float32)
    feeds = [{"n": np.array(4, np.int64), "x": x, "limit": np.array(50, np.float32)},
             {"n": np.array(2, np.int64), "x": x, "limit": np.array(5, np.float32)}]
    check(counting_loop(with_scan=True), feeds, segments=2, backend=backend)


def accumulate_loop():
    """Adds x to an accumulator n times and stacks the partial sums (a for-loop with scan
    outputs)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["partial"])],
        "body", [info("i", I64, []), info("c_in", B, []), info("acc_in", F, [3])],
        [info("c_out", B, []), info("acc_out", F, [3]), info("partial", F, [3])])
    return make_model(
        [helper.make_node("Abs", ["x"], ["zero_like"]),
         helper.make_node("Sub", ["zero_like", "zero_like"], ["acc0"]),
         helper.make_node("Loop", ["n", "", "acc0"], ["acc", "partials"], body=body),
         helper.make_node("Identity", ["partials"], ["z"])],
        [info("x", F, [3]), info("n", I64, [])], [info("acc", F, [3]), info("z", F, None)])


@pytest.mark.parametrize("n", [4, 0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_with_host_trip_count_is_a_compiled_scan(backend, n):
    proto = accumulate_loop()
    model = transmuter.load(proto, backend=backend)
    feed = {"x": np.array([1, 2, 3], np.float32)}
    fn = transmuter.compile(model, feed, static_inputs={"n": np.array(n, np.int64)})
    assert fn.cache_info().misses == 1
    got = fn({"x": np.array([4, 5, 6], np.float32)})
    want = reference(proto, {"x": np.array([4, 5, 6], np.float32), "n": np.array(n, np.int64)})
    assert fn.cache_info().hits == 1
    for name in want:
        assert np.asarray(got[name]).shape == want[name].shape
        np.testing.assert_allclose(np.asarray(got[name]), want[name])


def scan_model():
    """Running sum and running max of the rows of x (Scan-9, reversed output direction)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "row"], ["sum_out"]),
         helper.make_node("Max", ["max_in", "row"], ["max_out"]),
         helper.make_node("Identity", ["sum_out"], ["partial"])],
        "body", [info("sum_in", F, [2]), info("max_in", F, [2]), info("row", F, [2])],
        [info("sum_out", F, [2]), info("max_out", F, [2]), info("partial", F, [2])])
    return make_model(
        [helper.make_node("Relu", ["x"], ["rx"]),
         helper.make_node("Scan", ["s0", "m0", "rx"], ["s", "m", "p"], body=body,
                          num_scan_inputs=1, scan_output_directions=[1]),
         helper.make_node("Neg", ["p"], ["z"])],
        [info("s0", F, [2]), info("m0", F, [2]), info("x", F, ["t", 2])],
        [info("s", F, [2]), info("m", F, [2]), info("z", F, ["t", 2])])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_is_a_compiled_scan(backend):
    rng = np.random.default_rng(0)
    feeds = [{"s0": np.zeros(2, np.float32), "m0": np.full(2, -1, np.float32),
              "x": rng.standard_normal((t, 2)).astype(np.float32)} for t in (5, 5, 3)]
    fn = check(scan_model(), feeds, segments=1, backend=backend)
    assert fn.cache_info().misses == 2  # a new length is a new signature, still no break


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_carrying_a_sequence_matches_eager(backend):
    """A Loop whose carried value is a sequence that grows (not loop-invariant): unrolled."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Unsqueeze", ["i", "axes"], ["i1"]),
         helper.make_node("Cast", ["i1"], ["fi"], to=F),
         helper.make_node("Add", ["fi", "x"], ["item"]),
         helper.make_node("SequenceInsert", ["seq_in", "item"], ["seq_out"])],
        "body", [info("i", I64, []), info("c_in", B, []),
                 helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [info("c_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)])
    proto = make_model(
        [const("axes", np.array([0], np.int64)),
         helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
         helper.make_node("Loop", ["n", "", "empty"], ["seq"], body=body),
         helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
        [info("n", I64, []), info("x", F, [1])], [info("y", F, None)])
    check(proto, [{"n": np.array(3, np.int64), "x": np.array([0.5], np.float32)}], segments=2,
          backend=backend)
