"""com.microsoft normalizations and fused activations against onnxruntime (optimizations off).

Tolerances: f32 graphs differ from ORT only in summation order and in erf/tanh/exp
implementations (a few f32 ulps on values of size ~1-10): atol 2e-5 with rtol 1e-5. fp16
outputs are rounded once from f32 on both sides; 1 fp16 ulp (~1e-3 relative) may differ."""

import math

import numpy as np
import pytest

from tests.contrib_graphs import BACKENDS, check, run_ort, run_ours, single_node

RNG = np.random.default_rng(0)
F32 = np.float32


def x(*shape, dtype=F32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def tol(dtype):
    return dict(atol=2e-5, rtol=1e-5) if dtype == F32 else dict(atol=4e-3, rtol=2e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16])
def test_simplified_layer_normalization(backend, dtype):
    inputs = {"X": x(2, 3, 16, dtype=dtype), "scale": x(16, dtype=dtype)}
    model = single_node("SimplifiedLayerNormalization", inputs, {"Y": dtype}, domain="",
                        epsilon=1e-6)
    check(model, inputs, backend, **tol(dtype))
    # ORT's CPU provider has no com.microsoft form (its CUDA one has); same op, same result.
    contrib = single_node("SimplifiedLayerNormalization", inputs, {"Y": dtype}, epsilon=1e-6)
    np.testing.assert_array_equal(run_ours(contrib, inputs, backend)["Y"],
                                  run_ours(model, inputs, backend)["Y"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis", [1, -2])
def test_simplified_layer_normalization_over_the_last_two_axes(backend, axis):
    inputs = {"X": x(2, 3, 16), "scale": x(3, 16)}
    model = single_node("SimplifiedLayerNormalization", inputs, {"Y": F32}, domain="",
                        axis=axis, epsilon=1e-6)
    check(model, inputs, backend, **tol(F32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis", [3, 7, -4, 2**31 - 1, 2**40])
def test_simplified_layer_normalization_refuses_an_axis_past_the_rank(backend, axis):
    # issue 14 (fuzz 20261203:3282, :9780, :11782: axis 7, 2^40, 2^31 - 1 on llama's rank-3
    # hidden states normalized no axis); onnxruntime's shape inference refuses it at load
    from transmuter.errors import OpError
    inputs = {"X": x(2, 3, 16), "scale": x(16)}
    model = single_node("SimplifiedLayerNormalization", inputs, {"Y": F32}, domain="",
                        axis=axis)
    with pytest.raises(Exception, match="is not in valid range"):
        run_ort(model, inputs)
    with pytest.raises(OpError, match=rf"axis {axis} is out of range for an input of rank 3: "
                                      r"it must be in \[-3, 2\]"):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_simplified_layer_normalization(backend, dtype, with_bias):
    inputs = {"input": x(2, 3, 16, dtype=dtype), "skip": x(2, 3, 16, dtype=dtype),
              "gamma": x(16, dtype=dtype), "bias": x(16, dtype=dtype) if with_bias else None}
    model = single_node("SkipSimplifiedLayerNormalization", inputs,
                        {"output": dtype, "mean": None, "inv_std_var": None,
                         "input_skip_bias_sum": dtype}, epsilon=1e-6)
    check(model, inputs, backend, **tol(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16])
def test_skip_layer_normalization(backend, dtype):
    inputs = {"input": x(2, 3, 16, dtype=dtype), "skip": x(2, 3, 16, dtype=dtype),
              "gamma": x(16, dtype=dtype), "beta": x(16, dtype=dtype), "bias": x(16, dtype=dtype)}
    model = single_node("SkipLayerNormalization", inputs,
                        {"output": dtype, "mean": None, "inv_std_var": None,
                         "input_skip_bias_sum": dtype}, epsilon=1e-5)
    check(model, inputs, backend, **tol(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_normalization_contrib(backend):
    # ONNX Runtime's own LayerNormalization for graphs below opset 17 (default domain, opset 13).
    inputs = {"X": x(2, 3, 16), "scale": x(16), "B": x(16)}
    model = single_node("LayerNormalization", inputs, {"Y": F32}, domain="", opset=13,
                        epsilon=1e-5)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_mask", [False, True])
def test_embed_layer_normalization(backend, with_mask):
    b, s, hidden = 2, 5, 16
    inputs = {"input_ids": RNG.integers(0, 30, (b, s)).astype(np.int32),
              "segment_ids": RNG.integers(0, 2, (b, s)).astype(np.int32),
              "word_embedding": x(30, hidden), "position_embedding": x(8, hidden),
              "segment_embedding": x(2, hidden), "gamma": x(hidden), "beta": x(hidden),
              "mask": np.array([[1] * 5, [1] * 3 + [0] * 2], np.int32) if with_mask else None}
    outputs = {"output": F32, "mask_index": np.int32 if with_mask else None}
    model = single_node("EmbedLayerNormalization", inputs, outputs, epsilon=1e-12)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [F32, np.float16])
@pytest.mark.parametrize("op_type,extra", [
    ("FastGelu", {}), ("FastGelu", {"bias": True}), ("Gelu", {}), ("BiasGelu", {"B": True}),
    ("QuickGelu", {}), ("QuickGelu", {"alpha": 1.5})])
def test_activations(backend, dtype, op_type, extra):
    width = 32
    inputs = {"X": x(2, 3, width, dtype=dtype, scale=2.0)}
    attrs = {}
    for name, value in extra.items():
        if value is True:
            inputs[name] = x(width, dtype=dtype)
        else:
            attrs[name] = value
    model = single_node(op_type, inputs, {"Y": dtype}, **attrs)
    check(model, inputs, backend, **tol(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_add_and_split_gelu(backend):
    # CUDA-only in ORT (no CPU kernel): checked against the formulas of ORT's op docs.
    inputs = {"X": x(2, 3, 8), "bias": x(8), "skip": x(2, 3, 8)}
    got = run_ours(single_node("BiasAdd", inputs, {"Y": F32}), inputs, backend)["Y"]
    np.testing.assert_allclose(got, inputs["X"] + inputs["bias"] + inputs["skip"], atol=1e-6)
    inputs = {"X": x(2, 3, 16), "bias": x(16)}
    got = run_ours(single_node("BiasSplitGelu", inputs, {"Y": F32}), inputs, backend)["Y"]
    y = inputs["X"] + inputs["bias"]
    right = y[..., 8:].astype(np.float64)
    want = y[..., :8] * right * 0.5 * (1 + np.vectorize(math.erf)(right / math.sqrt(2)))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attrs,a_shape,b_shape", [
    ({}, (2, 3, 4), (4, 5)), ({"alpha": 0.5, "transA": 1}, (2, 4, 3), (4, 5)),
    ({"transB": 1}, (2, 3, 4), (2, 5, 4)), ({"transA": 1, "transB": 1}, (4, 3), (5, 4))])
def test_fused_matmul(backend, attrs, a_shape, b_shape):
    inputs = {"A": x(*a_shape), "B": x(*b_shape)}
    check(single_node("FusedMatMul", inputs, {"Y": F32}, **attrs), inputs, backend, atol=2e-5,
          rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("upper,k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu(backend, upper, k):
    inputs = {"X": x(2, 4, 5), "k": np.array(k, np.int64)}
    model = single_node("Trilu", inputs, {"Y": F32}, constants={"k"}, upper=upper)
    check(model, inputs, backend, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("activation,params,with_z", [
    (None, None, False), ("Relu", None, True), ("Tanh", None, False), ("Sigmoid", None, True),
    ("LeakyRelu", [0.2], False), ("Clip", [-0.5, 0.7], True), ("HardSigmoid", [0.3, 0.4], False)])
def test_fused_conv(backend, activation, params, with_z):
    # What ORT's ConvActivationFusion writes: activation(Conv(X, W) + B + Z).
    inputs = {"X": x(2, 4, 7, 6), "W": x(6, 2, 3, 3, scale=0.3), "B": x(6),
              "Z": x(2, 6, 4, 3) if with_z else None}
    attrs = {"activation": activation} if activation else {}
    if params:
        attrs["activation_params"] = params
    model = single_node("FusedConv", inputs, {"Y": F32}, constants={"W", "B"}, group=2,
                        pads=[1, 0, 1, 1], strides=[2, 2], **attrs)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("activation,attrs", [
    ("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.1}), ("Sigmoid", {}), ("Tanh", {}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.6}),
    ("Elu", {"activation_alpha": 0.8}), ("Softplus", {}), ("Softsign", {}),
    ("ThresholdedRelu", {"activation_alpha": 0.5}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1})])  # ORT requires Elu's, Selu's
def test_fused_gemm(backend, activation, attrs):
    inputs = {"A": x(4, 3), "B": x(5, 4), "C": x(5)}
    model = single_node("FusedGemm", inputs, {"Y": F32}, activation=activation, transA=1,
                        transB=1, alpha=0.7, beta=1.5, **attrs)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nhwc_conv_is_conv_in_channels_last(backend):
    # ORT has NhwcConv only on CUDA: the reference is ORT's Conv on the same data moved to
    # channels-first, its output moved back.
    inputs = {"X": x(2, 7, 6, 4), "W": x(6, 2, 3, 3, scale=0.3), "B": x(6)}
    attrs = {"group": 2, "pads": [1, 0, 1, 1], "strides": [2, 1]}
    nchw = {**inputs, "X": inputs["X"].transpose(0, 3, 1, 2)}
    want = run_ort(single_node("Conv", nchw, {"Y": F32}, domain="", **attrs), nchw)["Y"]
    got = run_ours(single_node("NhwcConv", inputs, {"Y": F32}, **attrs), inputs, backend)["Y"]
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transpose_matmul(backend):
    # FusedMatMul's name before ORT 1.4, still in files its optimizer saved then.
    inputs = {"A": x(2, 4, 3), "B": x(2, 5, 4)}
    check(single_node("TransposeMatMul", inputs, {"Y": F32}, transA=1, transB=1, alpha=0.5),
          inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_domains_that_no_node_uses_are_ignored(backend):
    # Files onnxruntime's optimizer saved (Kokoro's int8 export) import its layout, ATen and
    # training domains although no node uses them; onnxruntime loads them.
    from onnx import helper
    inputs = {"X": x(2, 5)}
    model = single_node("FastGelu", inputs, {"Y": F32})
    model.opset_import.extend(helper.make_opsetid(d, 1) for d in (
        "com.microsoft.nchwc", "org.pytorch.aten", "ai.onnx.training", "ai.onnx.preview.training",
        "com.microsoft.experimental"))
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu_is_onnxruntimes_bit_for_bit(backend, with_bias):
    # Its output feeds DynamicQuantizeLinear in int8 exports (Kokoro's ALBERT): one ulp moves a
    # value across a rounding step now and then, and the flip grows through the layers.
    inputs = {"X": x(4, 50000, scale=3.0), "bias": x(50000) if with_bias else None}
    check(single_node("FastGelu", inputs, {"Y": F32}), inputs, backend, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fast_gelu_compiled(backend):
    # Compiled too (MLX refused a NumPy scalar times a traced array). Not bit for bit there:
    # XLA rewrites the float64 round trips and products that emulate MLAS's fused
    # multiply-adds (3% of values one or two f32 ulps away, up to 1e-6 on values near 5).
    import transmuter
    inputs = {"X": x(3, 4000, scale=3.0), "bias": x(4000)}
    model = single_node("FastGelu", inputs, {"Y": F32})
    fn = transmuter.compile(transmuter.load(model, backend=backend))
    got = np.asarray(fn(inputs)["Y"])
    np.testing.assert_allclose(got, run_ort(model, inputs)["Y"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("with_segment_and_mask", [False, True])
def test_qembed_layer_normalization(backend, dtype, with_segment_and_mask):
    # the tables dequantize exactly (integers times an f32 scale); what differs is the f32
    # layer norm's summation order: the f32 tolerance
    b, s, hidden = 2, 5, 16
    info = np.iinfo(dtype)

    def q(*shape):
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)

    def scale(v):
        return np.array(v, F32)

    def zp(v):
        return np.array(v, dtype)

    inputs = {"input_ids": RNG.integers(0, 30, (b, s)).astype(np.int32),
              "segment_ids": None, "word_embedding": q(30, hidden),
              "position_embedding": q(8, hidden), "segment_embedding": None,
              "gamma": q(hidden), "beta": q(hidden), "mask": None,
              "word_scale": scale(0.01), "position_scale": scale(0.02), "segment_scale": None,
              "gamma_scale": scale(0.008), "beta_scale": scale(0.003),
              "word_zero_point": zp(3), "position_zero_point": zp(-2 if dtype == np.int8 else 9),
              "segment_zero_point": None, "gamma_zero_point": zp(1), "beta_zero_point": zp(0)}
    if with_segment_and_mask:
        inputs.update(segment_ids=RNG.integers(0, 2, (b, s)).astype(np.int32),
                      segment_embedding=q(2, hidden), segment_scale=scale(0.05),
                      segment_zero_point=zp(4),
                      mask=np.array([[1] * 5, [1] * 3 + [0] * 2], np.int32))
    model = single_node("QEmbedLayerNormalization", inputs,
                        {"layernorm_out": F32, "mask_index_out": np.int32}, epsilon=1e-12,
                        constants={k for k in inputs if k not in ("input_ids", "segment_ids",
                                                                  "mask")})
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attrs", [{}, {"mode": "nearest", "padding_mode": "border",
                                        "align_corners": 1},
                                   {"mode": "bicubic", "padding_mode": "reflection"}])
def test_contrib_grid_sample(backend, attrs):
    # torch's export before opset 16; the grid reaches past [-1, 1] to exercise the padding
    inputs = {"X": x(2, 3, 5, 6), "Grid": x(2, 4, 7, 2, scale=0.8)}
    check(single_node("GridSample", inputs, {"Y": F32}, **attrs), inputs, backend, atol=2e-5,
          rtol=1e-5)
