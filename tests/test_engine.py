"""The engine's contract: eager and compiled runs agree with onnxruntime, breaks compile per
signature, static_inputs remove breaks, errors name what is wrong."""

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter

BACKENDS = ["jax", "mlx"]


def make_model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in dict(initializers).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def reference(model, feed):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def nonzero_reshape_model():
    """y = x[mask] reshaped to (-1, 2) via NonZero -> Transpose -> GatherND: value-dependent shape."""
    return make_model(
        [helper.make_node("Greater", ["x", "zero"], ["mask"]),
         helper.make_node("NonZero", ["mask"], ["nz"]),
         helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
         helper.make_node("GatherND", ["x", "idx"], ["picked"]),
         helper.make_node("Reshape", ["picked", "shape"], ["r"]),
         helper.make_node("Mul", ["r", "two"], ["y"])],
        [info("x", TensorProto.FLOAT, ["n", "m"])], [info("y", TensorProto.FLOAT, None)],
        {"zero": np.array(0, np.float32), "shape": np.array([-1, 2], np.int64),
         "two": np.array(2, np.float32)})


def computed_reshape_model():
    """Reshape x to a target computed from data (ReduceMax of an int input): a break."""
    return make_model(
        [helper.make_node("ReduceMax", ["k"], ["kmax"], keepdims=1),
         helper.make_node("Concat", ["kmax", "minus1"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["r"]),
         helper.make_node("Sigmoid", ["r"], ["y"])],
        [info("x", TensorProto.FLOAT, [4, 6]), info("k", TensorProto.INT64, [1])],
        [info("y", TensorProto.FLOAT, None)], {"minus1": np.array([-1], np.int64)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_nonzero_reshape_compiled_matches_eager_and_ort(backend):
    proto = nonzero_reshape_model()
    model = transmuter.load(proto, backend=backend)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[0, 0] = abs(x[0, 0]) + 1
    x[0, 1] = abs(x[0, 1]) + 1
    x = np.where(np.arange(24).reshape(4, 6) % 5 < 2, np.abs(x) + 0.1, -np.abs(x))
    x = x.astype(np.float32)
    want = reference(proto, {"x": x})["y"]
    eager = np.asarray(transmuter.run(model, {"x": x})["y"])
    fn = transmuter.compile(model, {"x": x})
    compiled = np.asarray(fn({"x": x})["y"])
    np.testing.assert_array_equal(eager, want)  # gathers and a multiply by 2 are exact
    np.testing.assert_array_equal(compiled, want)
    before = fn.cache_info()
    fn({"x": x})
    after = fn.cache_info()
    assert after.misses == before.misses, "same shapes and values must compile nothing"
    assert after.hits > before.hits


@pytest.mark.parametrize("backend", BACKENDS)
def test_computed_reshape_target_breaks_and_caches(backend):
    proto = computed_reshape_model()
    model = transmuter.load(proto, backend=backend)
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    feed = {"x": x, "k": np.array([3], np.int64)}
    fn = transmuter.compile(model, feed)
    got = np.asarray(fn(feed)["y"])
    want = reference(proto, feed)["y"]
    assert got.shape == (3, 8)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # sigmoid: f32 rounding only
    misses = fn.cache_info().misses
    fn(feed)
    assert fn.cache_info().misses == misses
    feed2 = {"x": x, "k": np.array([2], np.int64)}  # a new target: the tail compiles anew
    np.testing.assert_allclose(np.asarray(fn(feed2)["y"]), reference(proto, feed2)["y"],
                               rtol=1e-6, atol=1e-7)
    assert fn.cache_info().misses > misses


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_input_values_reuse_the_compiled_code(backend):
    """Host inputs are arguments of the compiled call (JAX takes them as they are), never
    constants of its trace: new values run the same code and give their own results."""
    proto = make_model([helper.make_node("Mul", ["x", "x"], ["y"])],
                       [info("x", TensorProto.FLOAT, ["n"])], [info("y", TensorProto.FLOAT, None)])
    x = np.arange(5, dtype=np.float32)
    fn = transmuter.compile(transmuter.load(proto, backend=backend), {"x": x})
    for scale in (2, 3):
        got = np.asarray(fn({"x": x * scale})["y"])
        np.testing.assert_array_equal(got, (x * scale) ** 2)  # small integers: exact in f32
    assert fn.cache_info().misses == 1 and fn.cache_info().hits == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_inputs_remove_the_break(backend):
    proto = computed_reshape_model()
    model = transmuter.load(proto, backend=backend)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    fn = transmuter.compile(model, {"x": x}, static_inputs={"k": np.array([3], np.int64)})
    assert fn.cache_info().misses == 1 and fn.cache_info().currsize == 1  # one segment: no break
    fn({"x": x})
    assert fn.cache_info().misses == 1
    fn({"x": x, "k": np.array([3], np.int64)})  # given again unchanged: accepted
    assert fn.cache_info().misses == 1
    with pytest.raises(transmuter.InputError, match="static_inputs"):
        fn({"x": x, "k": np.array([2], np.int64)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_shape_chain_stays_static_under_compile(backend):
    """Shape -> Gather -> Concat -> Reshape folds on the host: one segment, no break."""
    proto = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
         helper.make_node("Concat", ["b", "minus1"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [info("x", TensorProto.FLOAT, ["b", 3, 4])], [info("y", TensorProto.FLOAT, None)],
        {"zero": np.array([0], np.int64), "minus1": np.array([-1], np.int64)})
    model = transmuter.load(proto, backend=backend)
    x = np.ones((2, 3, 4), np.float32)
    fn = transmuter.compile(model, {"x": x})
    assert fn.cache_info().currsize == 1
    assert np.asarray(fn({"x": x})["y"]).shape == (2, 12)
    assert np.asarray(fn({"x": np.ones((5, 3, 4), np.float32)})["y"]).shape == (5, 12)
    assert fn.cache_info().misses == 2  # one compile per batch size, nothing more


def test_lru_keeps_cache_size_signatures():
    proto = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [info("x", TensorProto.FLOAT, ["n"])], [info("y", TensorProto.FLOAT, None)])
    fn = transmuter.compile(transmuter.load(proto), {"x": np.ones(1, np.float32)}, cache_size=2)
    for n in (2, 3, 1):
        fn({"x": np.ones(n, np.float32)})
    # n=1 (from compile) was evicted by n=3, so coming back to it compiles again.
    assert fn.cache_info().currsize == 2 and fn.cache_info().misses == 4


def test_weights_are_arguments_and_grad_flows():
    import jax

    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    proto = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [info("x", TensorProto.FLOAT, [2, 16])],
                       [info("y", TensorProto.FLOAT, [2, 16])], {"w": w})
    model = transmuter.load(proto)
    assert "w" in model.params
    x = np.ones((2, 16), np.float32)
    fn = transmuter.compile(model, {"x": x})
    grads = jax.grad(lambda p: fn({"x": x}, params=p)["y"].sum())(model.params)
    np.testing.assert_allclose(np.asarray(grads["w"]), np.full((16, 16), 2.0), rtol=0)


def test_unsupported_ops_are_listed_together():
    proto = make_model([helper.make_node("Frobnicate", ["x"], ["t"]),
                        helper.make_node("Blend", ["t"], ["y"], domain="com.example")],
                       [info("x", TensorProto.FLOAT, [2])], [info("y", TensorProto.FLOAT, [2])])
    proto.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(transmuter.UnsupportedOperatorError) as e:
        transmuter.load(proto)
    assert "Frobnicate" in str(e.value) and "com.example::Blend" in str(e.value)


def test_bad_inputs_name_the_input():
    proto = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [info("x", TensorProto.FLOAT, ["n", 3])], [info("y", TensorProto.FLOAT, None)])
    model = transmuter.load(proto)
    with pytest.raises(transmuter.InputError, match="Unknown input 'z'"):
        transmuter.run(model, {"x": np.ones((2, 3), np.float32), "z": np.ones(1)})
    with pytest.raises(transmuter.InputError, match="'x' has dtype float64.*float32"):
        transmuter.run(model, {"x": np.ones((2, 3))})
    with pytest.raises(transmuter.InputError, match="'x' has rank 1"):
        transmuter.run(model, {"x": np.ones(3, np.float32)})
    with pytest.raises(transmuter.InputError, match="shape \\[2, 4\\]"):
        transmuter.run(model, {"x": np.ones((2, 4), np.float32)})
    with pytest.raises(transmuter.InputError, match="Missing input 'x'"):
        transmuter.run(model, {})


def test_op_failure_names_node_and_inputs():
    # w's shape undeclared: a declared [4, 5] is refused at load already (engine/checks/validate.py)
    proto = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
                       [info("x", TensorProto.FLOAT, [2, 3]), info("w", TensorProto.FLOAT, None)],
                       [info("y", TensorProto.FLOAT, None)])
    with pytest.raises(transmuter.OpError, match="MatMul node 'proj'.*\n.*x: float32\\[2, 3\\]"):
        transmuter.run(transmuter.load(proto), {"x": np.ones((2, 3), np.float32),
                                                "w": np.ones((4, 5), np.float32)})


def test_broken_file_is_a_load_error(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not a protobuf at all")
    with pytest.raises(transmuter.ModelLoadError, match="broken.onnx"):
        transmuter.load(str(path))
    with pytest.raises(transmuter.ModelLoadError, match="No ONNX file"):
        transmuter.load(str(tmp_path / "missing.onnx"))


def test_model_call_drops_unknown_keywords_and_reads_attributes():
    proto = make_model([helper.make_node("Relu", ["x"], ["last_hidden_state"])],
                       [info("x", TensorProto.FLOAT, [2])],
                       [info("last_hidden_state", TensorProto.FLOAT, [2])])
    model = transmuter.load(proto)
    out = model(x=np.array([-1.0, 1.0], np.float32), token_type_ids=np.zeros(2))
    np.testing.assert_array_equal(np.asarray(out.last_hidden_state), [0.0, 1.0])


def test_inputs_and_outputs_metadata():
    proto = make_model([helper.make_node("Relu", ["input_ids"], ["y"])],
                       [info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                       [info("y", TensorProto.INT64, ["batch", "seq"])])
    model = transmuter.load(proto)
    (inp,) = model.inputs
    assert inp.name == "input_ids" and inp.dtype == np.int64 and inp.shape == ("batch", "seq")


def float8_roundtrip_model():
    """x * 3 through float8 e4m3fn and back, plus y: a float8 Cast in the middle of the graph, and
    the float8 value itself as an output."""
    return make_model(
        [helper.make_node("Mul", ["x", "three"], ["x3"]),
         helper.make_node("Cast", ["x3"], ["q"], to=TensorProto.FLOAT8E4M3FN),
         helper.make_node("Cast", ["q"], ["back"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["back", "y"], ["z"])],
        [info("x", TensorProto.FLOAT, [2, 5]), info("y", TensorProto.FLOAT, [2, 5])],
        [info("z", TensorProto.FLOAT, None), info("q", TensorProto.FLOAT8E4M3FN, None)],
        {"three": np.array(3, np.float32)}, opset=19)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float8_cast_inside_a_compiled_graph(backend):
    # MLX has no float8 arrays: the Casts run on the host (breaks under compile); JAX has them.
    proto = float8_roundtrip_model()
    model = transmuter.load(proto, backend=backend)
    rng = np.random.default_rng(0)
    fn = misses = None
    for _ in range(3):
        feed = {"x": rng.normal(size=(2, 5)).astype(np.float32) * 50,
                "y": rng.normal(size=(2, 5)).astype(np.float32)}
        ref = reference(proto, feed)
        if fn is None:
            fn = transmuter.compile(model, feed)
            misses = fn.cache_info().misses
        for out in (transmuter.run(model, feed), fn(feed)):
            q = np.asarray(out["q"])
            assert q.dtype == ml_dtypes.float8_e4m3fn  # the declared type, as NumPy (ml_dtypes)
            # float8 rounding is deterministic (round to nearest even, saturating): exact.
            np.testing.assert_array_equal(q.view(np.uint8), ref["q"].view(np.uint8))
            # z adds y (f32) to the same float8 values: f32 addition, exact as well.
            np.testing.assert_array_equal(np.asarray(out["z"]), ref["z"])
    # New values of x compile nothing new: the float8 value is keyed by its shape, not its bytes.
    assert fn.cache_info().misses == misses


def int4_weights_model(w, scale):
    """y = x @ DequantizeLinear(w int4, per-column scale): a QDQ int4 weight (opset 21)."""
    return make_model(
        [helper.make_node("DequantizeLinear", ["w", "scale"], ["wf"], axis=1),
         helper.make_node("MatMul", ["x", "wf"], ["y"])],
        [info("x", TensorProto.FLOAT, ["n", w.shape[0]])], [info("y", TensorProto.FLOAT, None)],
        {"w": w, "scale": scale}, opset=21)


@pytest.mark.parametrize("backend", BACKENDS)
def test_int4_weights_stay_compiled(backend):
    rng = np.random.default_rng(1)
    # Both above 64 values: params (the weight stays on the host on MLX, the scale is a device
    # array), so DequantizeLinear mixes them inside the compiled segment.
    w = rng.integers(-8, 8, size=(16, 72)).astype(ml_dtypes.int4)
    scale = rng.uniform(0.01, 0.1, size=(72,)).astype(np.float32)
    proto = int4_weights_model(w, scale)
    model = transmuter.load(proto, backend=backend)
    x = rng.normal(size=(3, 16)).astype(np.float32)
    fn = transmuter.compile(model, {"x": x})
    x2 = rng.normal(size=(3, 16)).astype(np.float32)
    out = fn({"x": x2})
    # One segment, compiled once: the host int4 weight folds into the trace, no break.
    assert fn.cache_info().misses == 1 and fn.cache_info().hits == 1
    # ORT sums the 16 products in another order: f32 rounding, values below ~5.
    np.testing.assert_allclose(np.asarray(out["y"]), reference(proto, {"x": x2})["y"],
                               rtol=0, atol=1e-5)


def unsorted_model():
    """x -> Cast(f16) -> Mul(2) -> Cast(f32) -> y, with the Casts stored last (as the float16
    converters that keep float32 inputs append them)."""
    nodes = [helper.make_node("Mul", ["x16", "two"], ["y16"], name="mul"),
             helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT, name="cast_out"),
             helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="cast_in")]
    return make_model(nodes, [info("x", TensorProto.FLOAT, [2, 3])],
                      [info("y", TensorProto.FLOAT, [2, 3])], {"two": np.array(2, np.float16)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_nodes_out_of_order_run_as_onnxruntime_runs_them(backend):
    model = unsorted_model()
    feed = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) / 8}  # exact in float16
    want = reference(model, feed)
    loaded = transmuter.load(model.SerializeToString(), backend=backend)
    assert [n.name for n in loaded.graph.nodes] == ["cast_in", "mul", "cast_out"]
    for got in (transmuter.run(loaded, feed), transmuter.compile(loaded, feed)(feed)):
        np.testing.assert_array_equal(np.asarray(got["y"]), want["y"])


def test_a_cycle_is_a_load_error():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Identity", ["x"], ["y"], name="out")]
    model = make_model(nodes, [info("x", TensorProto.FLOAT, [1])],
                       [info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(transmuter.errors.ModelLoadError, match="cycle.*first.*second"):
        transmuter.load(model.SerializeToString())


@pytest.mark.parametrize("size", [0, -1, 1.5, "8", True])
def test_cache_size_must_be_a_positive_int(size):
    model = transmuter.load(unsorted_model().SerializeToString())
    with pytest.raises(transmuter.errors.InputError, match="cache_size must be a positive int"):
        transmuter.compile(model, {"x": np.zeros((2, 3), np.float32)}, cache_size=size)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["ReduceSum", "ArgMax"])
def test_flags_other_than_one_read_as_onnxruntime_reads_them(backend, op):
    """keepdims=2 drops the reduced axis, as ORT's `keepdims == 1` reads it (fuzz 20261206:1202:
    kept, it broadcast where ORT refused). No shapes are declared, so neither reads it from there."""
    attrs = {"keepdims": 2} if op == "ArgMax" else {"keepdims": 2, "noop_with_empty_axes": 2}
    inputs = ["x"] if op == "ArgMax" else ["x", "axes"]
    model = make_model([helper.make_node(op, inputs, ["y"], **attrs)],
                       [info("x", TensorProto.FLOAT, None)],
                       [info("y", TensorProto.INT64 if op == "ArgMax" else TensorProto.FLOAT, None)],
                       {"axes": np.array([0], np.int64)} if op != "ArgMax" else {})
    feed = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    want = reference(model, feed)["y"]
    got = np.asarray(transmuter.run(transmuter.load(model.SerializeToString(), backend=backend),
                                    feed)["y"])
    assert got.shape == want.shape == (3,)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,shapes", [
    ("ScatterND", ([2, 3], [0, 2], [0])),
    ("ScatterND", ([1, 1, 0, 2], [1, 1, 0, 1, 4], [1, 1, 0, 1])),  # SAM 2's
    ("ScatterElements", ([2, 3], [2, 0], [2, 0])),
    ("ScatterElements", ([1, 1, 0, 2], [1, 1, 0, 2], [1, 1, 0, 2])),
])
def test_an_empty_scatter_changes_nothing(backend, op, shapes):
    """SAM 2's prompt encoder scatters into the coordinates of zero points (a boxes-only prompt):
    onnxruntime returns the data unchanged; MLX's scatter refused an empty update into empty
    data."""
    data_shape, index_shape, update_shape = shapes
    model = make_model([helper.make_node(op, ["x", "i", "u"], ["y"])],
                       [info("x", TensorProto.FLOAT, data_shape),
                        info("i", TensorProto.INT64, index_shape),
                        info("u", TensorProto.FLOAT, update_shape)],
                       [info("y", TensorProto.FLOAT, data_shape)])
    feed = {"x": np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape),
            "i": np.zeros(index_shape, np.int64), "u": np.zeros(update_shape, np.float32)}
    want = reference(model, feed)["y"]
    loaded = transmuter.load(model.SerializeToString(), backend=backend)
    for got in (transmuter.run(loaded, feed), transmuter.compile(loaded, feed)(feed)):
        np.testing.assert_array_equal(np.asarray(got["y"]), want)
