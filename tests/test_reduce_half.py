"""Half-precision reductions against onnxruntime: its CPU kernels compute a float16 reduction in
float32 (the elementwise square, abs or exp too) and round the result to float16 once. Summing
in float16 instead drifts by several float16 ulps over a few hundred terms (issue 40: 8e-4 to
1.4e-3 on single nodes; a Swin V2 fp16 file ended 2.9% of its logits' scale away).

Tolerance: one float16 ulp of the result (rtol 2^-10), for a float32 sum taken in another
order rounding to the neighbouring half value."""

import numpy as np
import pytest

from tests.contrib_graphs import BACKENDS, check, single_node

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
