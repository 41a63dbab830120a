"""Half-precision reductions, CumSum and BatchNormalization against onnxruntime: its CPU kernels
compute them in float32 (a reduction's elementwise square, abs or exp too) and round the result
to float16 once. Summing
in float16 instead drifts by several float16 ulps over a few hundred terms (issue 40: 8e-4 to
1.4e-3 on single nodes; a Swin V2 fp16 file ended 2.9% of its logits' scale away).

Tolerance: one float16 ulp of the result (rtol 2^-10), for a float32 sum taken in another
order rounding to the neighbouring half value."""

import numpy as np
import pytest

from tests.contrib_graphs import BACKENDS, check, run_ours, single_node

RNG = np.random.default_rng(40)
OPS = ["ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
       "ReduceLogSumExp", "ReduceProd", "ReduceMax", "ReduceMin"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_type", OPS)
@pytest.mark.parametrize("axes", [[-1], [0, 2]])
def test_half_reduction_accumulates_in_float32(backend, op_type, axes):
    x = RNG.standard_normal((6, 3, 300)) * 3
    if op_type == "ReduceLogSum":
        x = np.abs(x)
    if op_type == "ReduceProd":  # a product of hundreds of terms leaves float16's range
        x = 1 + x[..., :12] / 30
    inputs = {"X": x.astype(np.float16), "axes": np.array(axes, np.int64)}
    model = single_node(op_type, inputs, {"Y": np.float16}, constants={"axes"}, domain="",
                        opset=18, keepdims=0)
    check(model, inputs, backend, atol=0, rtol=2 ** -10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_half_cumsum_accumulates_in_float32(backend, exclusive, reverse):
    inputs = {"x": (RNG.standard_normal((4, 200)) * 3 + 1).astype(np.float16),
              "axis": np.array(1, np.int64)}
    model = single_node("CumSum", inputs, {"y": np.float16}, constants={"axis"}, domain="",
                        opset=14, exclusive=exclusive, reverse=reverse)
    check(model, inputs, backend, atol=0, rtol=2 ** -10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_batch_normalization_as_onnxruntime_computes_it(backend, dtype):
    # ORT: x * s + (bias - mean * s), s = scale / sqrt(var + eps), in f32 for half inputs.
    c = 8
    inputs = {"X": (RNG.standard_normal((2, c, 5, 16)) * 3 + 1).astype(dtype),
              "scale": RNG.standard_normal(c).astype(dtype),
              "B": RNG.standard_normal(c).astype(dtype),
              "mean": RNG.standard_normal(c).astype(dtype),
              "var": (RNG.random(c) + 0.5).astype(dtype)}
    model = single_node("BatchNormalization", inputs, {"Y": dtype}, domain="", opset=15,
                        constants={"scale", "B", "mean", "var"})
    # f32: the same operations in the same order, up to XLA's fused multiply-add (1e-6 on ~10).
    check(model, inputs, backend, atol=0 if dtype == np.float16 else 2e-6,
          rtol=2 ** -10 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axes", [[0, 2, 3], [2, 3]])
def test_half_mean_variance_normalization_loads_and_computes_in_float32(backend, axes):
    # onnx's function body of MVN adds a float Epsilon to X's type: onnx's inference refused every
    # fp16 MVN at load. ORT runs its float kernel between casts at opsets 17 and 19-22 (it refuses
    # 13 and 18 on that body): the f32 result rounded once; the op means the same at every opset.
    inputs = {"X": (RNG.standard_normal((2, 3, 8, 9)) * 2 + 3).astype(np.float16)}
    for opset in (17, 22):
        model = single_node("MeanVarianceNormalization", inputs, {"Y": np.float16}, domain="",
                            opset=opset, axes=axes)
        _, want = check(model, inputs, backend, atol=0, rtol=2 ** -10)
    for opset in (13, 18):
        model = single_node("MeanVarianceNormalization", inputs, {"Y": np.float16}, domain="",
                            opset=opset, axes=axes)
        got = run_ours(model, inputs, backend)["Y"]
        np.testing.assert_allclose(got.astype(np.float32), want["Y"].astype(np.float32), atol=0,
                                   rtol=2 ** -10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p,axis", [(2, -1), (1, 1)])
def test_half_lp_normalization_computes_in_float32(backend, p, axis):
    # ORT's LpNormalization kernel takes float and double: a half graph's runs between casts;
    # summing the norm in float16 put 35-39% of the values an ulp off
    inputs = {"input": (RNG.standard_normal((2, 6, 9, 40)) * 2 + 3).astype(np.float16)}
    model = single_node("LpNormalization", inputs, {"Y": np.float16}, domain="", opset=17, p=p,
                        axis=axis)
    check(model, inputs, backend, atol=0, rtol=2 ** -10)
