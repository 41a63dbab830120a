"""com.microsoft ops that ONNX Runtime runs only on CUDA / ROCm (GroupNorm, SkipGroupNorm,
BiasSoftmax, GemmFastGelu; onnxruntime.transformers writes them for GPU targets): each is checked
against a graph of standard ops (and CPU contrib ops) that computes the same math, run by
onnxruntime on CPU, on JAX and MLX. The math is the schema's and the CUDA kernel's: half inputs
compute in float32 inside and round once (the reference graph casts to f32 and back).

Tolerances: f32 outputs differ only in summation order and in exp (GroupNorm's variance is
E[x^2] - mean^2 as the CUDA kernel takes it, the standard op's is E[(x - mean)^2]): atol 2e-5 with
rtol 1e-5 on values of size ~1-5. Half outputs: one float16 ulp (rtol 2^-10, atol 2^-14 near 0)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.contrib_graphs import BACKENDS, run_ort, run_ours, single_node

RNG = np.random.default_rng(40)
F16, F32 = np.float16, np.float32


def tol(dtype):
    return dict(atol=2e-5, rtol=1e-5) if dtype == F32 else dict(atol=2 ** -14, rtol=2 ** -10)


def compare(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol(dtype))


def reference_model(nodes, inputs, outputs, opset=21):
    """A standard-op model over ``inputs`` (name -> array) giving ``outputs`` (name -> dtype)."""
    code = {np.dtype(F16): TensorProto.FLOAT16, np.dtype(F32): TensorProto.FLOAT}
    graph = helper.make_graph(
        nodes, "reference",
        [helper.make_tensor_value_info(k, code.get(np.asarray(v).dtype, TensorProto.INT64),
                                       list(np.shape(v))) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, code[np.dtype(t)], None) for k, t in outputs.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def group_norm_nodes(x, out, *, groups, epsilon, activation, channels_last, dtype):
    """x (T) -> out (T): cast to f32, GroupNormalization-21 on NCHW, SiLU, cast back."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Cast", [x], ["xf"], to=f),
             helper.make_node("Cast", ["gamma"], ["gf"], to=f),
             helper.make_node("Cast", ["beta"], ["bf"], to=f)]
    nchw = "xf"
    if channels_last:
        nodes.append(helper.make_node("Transpose", ["xf"], ["nchw"], perm=[0, 3, 1, 2]))
        nchw = "nchw"
    nodes.append(helper.make_node("GroupNormalization", [nchw, "gf", "bf"], ["g"],
                                  num_groups=groups, epsilon=epsilon))
    last = "g"
    if activation:
        nodes += [helper.make_node("Sigmoid", ["g"], ["sig"]),
                  helper.make_node("Mul", ["g", "sig"], ["silu"])]
        last = "silu"
    if channels_last:
        nodes.append(helper.make_node("Transpose", [last], ["nhwc"], perm=[0, 2, 3, 1]))
        last = "nhwc"
    to = TensorProto.FLOAT16 if dtype == F16 else f
    return nodes + [helper.make_node("Cast", [last], [out], to=to)]


def image(n, h, w, c, dtype, channels_last, offset=0.0):
    x = RNG.standard_normal((n, h, w, c)) * 2 + offset
    return (x if channels_last else x.transpose(0, 3, 1, 2)).astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("channels_last,activation,groups,hwc", [
    (1, 1, 4, (5, 6, 16)), (1, 0, 2, (3, 1, 6)), (0, 1, 3, (4, 4, 12))])
def test_group_norm(backend, dtype, channels_last, activation, groups, hwc):
    x = image(2, *hwc, dtype, channels_last, offset=3.0)
    # edge values: one group of a constant (var 0: rsqrt(eps)) and one of zeros
    c = hwc[2]
    per = c // groups
    if channels_last:
        x[0, ..., :per], x[1, ..., per:2 * per] = 0.5, 0
    else:
        x[0, :per], x[1, per:2 * per] = 0.5, 0
    inputs = {"X": x, "gamma": RNG.standard_normal(c).astype(F32),
              "beta": RNG.standard_normal(c).astype(F32)}
    model = single_node("GroupNorm", inputs, {"Y": dtype}, groups=groups, activation=activation,
                        channels_last=channels_last, epsilon=1e-5)
    ref = reference_model(group_norm_nodes("X", "Y", groups=groups, epsilon=1e-5,
                                           activation=activation, channels_last=channels_last,
                                           dtype=dtype), inputs, {"Y": dtype})
    compare(run_ours(model, inputs, backend)["Y"], run_ort(ref, inputs)["Y"], dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("skip_shape,with_bias", [("full", True), ("pixel", False),
                                                  ("nc", True)])
def test_skip_group_norm(backend, dtype, skip_shape, with_bias):
    n, h, w, c, groups = 2, 4, 3, 8, 2
    x = image(n, h, w, c, dtype, True)
    skip = {"full": x.shape, "pixel": (n, 1, 1, c), "nc": (n, c)}[skip_shape]
    # half gamma and beta: the schema's other M (CUDA's kernel takes float ones only)
    inputs = {"X": x, "gamma": RNG.standard_normal(c).astype(F16 if dtype == F16 else F32),
              "beta": RNG.standard_normal(c).astype(F16 if dtype == F16 else F32),
              "skip": RNG.standard_normal(skip).astype(dtype),
              "bias": RNG.standard_normal(c).astype(dtype) if with_bias else None}
    model = single_node("SkipGroupNorm", inputs, {"Y": dtype, "S": dtype}, groups=groups,
                        activation=1, epsilon=1e-5)
    # S as the CUDA kernel adds: (X + bias) + skip, each sum rounded to X's type (NumPy's half
    # adds are IEEE's; ORT CPU would fuse a chain of half Adds into one f32 sum)
    skip = inputs["skip"].reshape(n, 1, 1, c) if skip_shape == "nc" else inputs["skip"]
    total = (x + inputs["bias"] if with_bias else x) + skip
    ref_inputs = {"S": total, "gamma": inputs["gamma"], "beta": inputs["beta"]}
    ref = reference_model(group_norm_nodes("S", "Y", groups=groups, epsilon=1e-5, activation=1,
                                           channels_last=1, dtype=dtype),
                          ref_inputs, {"Y": dtype})
    got, want = run_ours(model, inputs, backend), run_ort(ref, ref_inputs)
    np.testing.assert_array_equal(got["S"], total)
    compare(got["Y"], want["Y"], dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_type,inputs,attrs,match", [
    ("GroupNorm", {"X": np.zeros((2, 3, 6), F32)}, {"groups": 2}, "must have rank 4"),
    ("GroupNorm", {"X": np.zeros((1, 2, 2, 6), F32)}, {"groups": 4}, "groups 4 must divide"),
    ("GroupNorm", {"X": np.zeros((1, 2, 2, 6), F32)}, {"groups": 2, "activation": 2},
     "activation 2"),
    ("SkipGroupNorm", {"X": np.zeros((1, 2, 2, 6), F32), "skip": np.zeros((1, 2, 6), F32)},
     {"groups": 2}, r"skip of shape \[1, 2, 6\] must be"),
])
def test_group_norm_refuses_what_onnxruntime_refuses(backend, op_type, inputs, attrs, match):
    from transmuter.errors import OpError
    x = inputs["X"]
    c = x.shape[-1]
    full = {"X": x, "gamma": np.ones(c, F32), "beta": np.zeros(c, F32), **inputs}
    outputs = {"Y": F32} if op_type == "GroupNorm" else {"Y": F32, "S": F32}
    model = single_node(op_type, full, outputs, **{"activation": 0, **attrs})
    with pytest.raises(OpError, match=match):
        run_ours(model, full, backend)


def cast_node(src, dst, dtype):
    return helper.make_node("Cast", [src], [dst],
                            to=TensorProto.FLOAT16 if dtype == F16 else TensorProto.FLOAT)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,axis,inner,bias_shape", [
    (F32, 3, 1, (2, 1, 1, 5)), (F16, 2, 1, (2, 1, 4, 5)), (F32, -1, 0, (1, 3, 4, 5)),
    (F16, 2, 0, (3, 4, 5))])
def test_bias_softmax(backend, dtype, axis, inner, bias_shape):
    # the shapes ORT's fusion gives it: X's leading axes, then 1s up to ``axis`` (inner), or the
    # axes before ``axis`` that it keeps with the leading ones dropped (outer)
    x = (RNG.standard_normal((2, 3, 4, 5)) * 3).astype(dtype)
    bias = RNG.standard_normal(bias_shape) * 2
    bias[..., -1, :2] = -10000  # a masked position, as an additive attention mask holds it
    inputs = {"data": x, "bias": bias.astype(dtype)}
    model = single_node("BiasSoftmax", inputs, {"output": dtype}, axis=axis,
                        is_inner_broadcast=inner)
    # Softmax-11 flattens from ``axis`` on, as BiasSoftmax does; the add and softmax in f32
    ref = reference_model([helper.make_node("Cast", ["data"], ["xf"], to=TensorProto.FLOAT),
                           helper.make_node("Cast", ["bias"], ["bf"], to=TensorProto.FLOAT),
                           helper.make_node("Add", ["xf", "bf"], ["s"]),
                           helper.make_node("Softmax", ["s"], ["p"], axis=axis),
                           cast_node("p", "output", dtype)], inputs, {"output": dtype}, opset=11)
    compare(run_ours(model, inputs, backend)["output"], run_ort(ref, inputs)["output"], dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_softmax_refuses_a_bias_that_does_not_fit(backend):
    from transmuter.errors import OpError
    inputs = {"data": np.zeros((2, 3, 4), F32), "bias": np.zeros((5, 4), F32)}
    model = single_node("BiasSoftmax", inputs, {"output": F32}, axis=2, is_inner_broadcast=0)
    with pytest.raises(OpError, match=r"bias of shape \[5, 4\] does not broadcast"):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("with_bias", [True, False])
def test_gemm_fast_gelu(backend, dtype, with_bias):
    # the reference: MatMul, then ORT's CPU FastGelu with the bias (the two ops it fuses)
    inputs = {"X": (RNG.standard_normal((2, 5, 16))).astype(dtype),
              "W": (RNG.standard_normal((16, 24)) / 4).astype(dtype),
              "bias": RNG.standard_normal(24).astype(dtype) if with_bias else None}
    model = single_node("GemmFastGelu", inputs, {"Y": dtype})
    given = {k: v for k, v in inputs.items() if v is not None}
    ref = reference_model([helper.make_node("MatMul", ["X", "W"], ["xw"]),
                           helper.make_node("FastGelu", ["xw"] + (["bias"] if with_bias else []),
                                            ["Y"], domain="com.microsoft")],
                          given, {"Y": dtype})
    got, want = run_ours(model, given, backend)["Y"], run_ort(ref, given)["Y"]
    if dtype == F32:
        return compare(got, want, dtype)
    # half: ROCm's tuning picks a fused kernel (FastGelu on the f32 product) or MatMul then
    # FastGelu (the product rounded to half first); either may differ from ORT CPU's by the
    # product's rounding step, which FastGelu (slope <= 1.13) carries over
    product = np.abs(inputs["X"].astype(F32) @ inputs["W"].astype(F32)).max()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=2 ** -10,
                               atol=1.13 * product * 2 ** -11)


def t5_bias_nodes(length, n_buckets, max_distance, bidirectional):
    """The standard-op graph of Hugging Face T5's compute_bias (what ORT's T5 optimizer fuses),
    from the (buckets, heads) table "table" to (1, heads, L, L) "bias"."""
    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.asarray(value), name))

    buckets = n_buckets // 2 if bidirectional else n_buckets
    exact = buckets // 2
    nodes = [const("zero", np.int64(0)), const("len", np.int64(length)),
             const("one", np.int64(1)), const("ax0", np.array([0], np.int64)),
             const("ax1", np.array([1], np.int64)),
             helper.make_node("Range", ["zero", "len", "one"], ["pos"]),
             helper.make_node("Unsqueeze", ["pos", "ax0"], ["mem"]),
             helper.make_node("Unsqueeze", ["pos", "ax1"], ["ctx"]),
             helper.make_node("Sub", ["mem", "ctx"], ["rel"])]
    if bidirectional:
        nodes += [const("zero_i", np.int64(0)), const("half", np.int64(buckets)),
                  helper.make_node("Greater", ["rel", "zero_i"], ["after"]),
                  helper.make_node("Where", ["after", "half", "zero_i"], ["offset"]),
                  helper.make_node("Abs", ["rel"], ["dist"])]
    else:
        nodes += [const("zero_i", np.int64(0)), const("offset", np.int64(0)),
                  helper.make_node("Min", ["rel", "zero_i"], ["past"]),
                  helper.make_node("Neg", ["past"], ["dist"])]
    nodes += [const("exact", np.int64(exact)), const("exact_f", np.float32(exact)),
              const("log_range", np.float32(np.log(np.float32(max_distance) / np.float32(exact)))),
              const("span", np.float32(buckets - exact)), const("cap", np.int64(buckets - 1)),
              helper.make_node("Less", ["dist", "exact"], ["small"]),
              helper.make_node("Cast", ["dist"], ["dist_f"], to=TensorProto.FLOAT),
              helper.make_node("Div", ["dist_f", "exact_f"], ["ratio"]),
              helper.make_node("Log", ["ratio"], ["log"]),
              helper.make_node("Div", ["log", "log_range"], ["scaled"]),
              helper.make_node("Mul", ["scaled", "span"], ["steps"]),
              helper.make_node("Where", ["small", "exact_f", "steps"], ["steps_ok"]),
              helper.make_node("Cast", ["steps_ok"], ["steps_i"], to=TensorProto.INT64),
              helper.make_node("Add", ["steps_i", "exact"], ["large_raw"]),
              helper.make_node("Min", ["large_raw", "cap"], ["large"]),
              helper.make_node("Where", ["small", "dist", "large"], ["in_half"]),
              helper.make_node("Add", ["in_half", "offset"], ["bucket"]),
              helper.make_node("Gather", ["table", "bucket"], ["values"]),
              helper.make_node("Transpose", ["values"], ["heads"], perm=[2, 0, 1]),
              helper.make_node("Unsqueeze", ["heads", "ax0"], ["bias"])]
    return nodes


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,bidirectional,length", [(F32, 1, 7), (F16, 1, 150), (F32, 0, 5),
                                                       (F32, 0, 140)])
def test_relative_position_bias(backend, dtype, bidirectional, length):
    # T5's 32 buckets over max_distance 128: lengths past 128 reach the capped last bucket
    n_buckets, heads, max_distance = 32, 3, 128
    table = RNG.standard_normal((n_buckets, heads)).astype(dtype)
    # ORT's optimizer stores the transposed weight's bytes under the (buckets, heads) shape
    inputs = {"bias_table": np.ascontiguousarray(table.T).reshape(n_buckets, heads),
              "query_length": np.array(length, np.int64),
              "key_length": np.array(length, np.int64)}
    model = single_node("RelativePositionBias", inputs, {"output": dtype},
                        constants={"query_length", "key_length"}, max_distance=max_distance,
                        is_bidirectional=bidirectional)
    ref = reference_model(t5_bias_nodes(length, n_buckets, max_distance, bidirectional),
                          {"table": table}, {"bias": dtype}, opset=18)
    want = run_ort(ref, {"table": table})["bias"]
    got = run_ours(model, inputs, backend)["output"]
    np.testing.assert_array_equal(got, want)  # a gather: the same bucket gives the same value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_bias_split_gelu(backend, dtype):
    # ORT's CUDA kernel: X + bias in X's type (NumPy's IEEE half add here), then
    # left * right * (1 + erf(right / sqrt 2)) / 2 in f32, rounded once (the graph's casts)
    x, bias = RNG.standard_normal((2, 5, 24)).astype(dtype), RNG.standard_normal(24).astype(dtype)
    inputs = {"X": x, "bias": bias}
    model = single_node("BiasSplitGelu", inputs, {"Y": dtype})
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Cast", ["S"], ["s"], to=f),
             helper.make_node("Split", ["s"], ["left", "right"], axis=-1, num_outputs=2),
             helper.make_node("Gelu", ["right"], ["g"]),
             helper.make_node("Mul", ["left", "g"], ["y"]), cast_node("y", "Y", dtype)]
    ref = reference_model(nodes, {"S": x + bias}, {"Y": dtype}, opset=20)
    compare(run_ours(model, inputs, backend)["Y"], run_ort(ref, {"S": x + bias})["Y"], dtype)
