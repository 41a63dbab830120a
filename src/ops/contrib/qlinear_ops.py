"""com.microsoft quantized ops that ONNX Runtime's QDQ optimizer writes for its CPU kernels (and
its quantizer with ``use_qdq_contrib_ops``): QuantizeLinear and DequantizeLinear (the standard
ops under the contrib domain, which took 16-bit and 4-bit types before opset 21), QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool and QLinearConcat.

Each dequantizes its inputs to float32, applies the float op, and quantizes the result with the
output's scale and zero point (round half to even, saturated): the value ORT's kernels aim at.
Its kernels get there by other roads (lookup tables, fixed-point multipliers), which can land
one step apart where the float result sits near a rounding tie."""

import numpy as np

from ..quantize import dequantize, quantize
from ..registry import op

MS = "com.microsoft"
_F32 = np.dtype(np.float32)


@op("QuantizeLinear", 1, domain=MS)
def quantize_linear(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return quantize(xp, x, y_scale, y_zero_point, axis=axis)


@op("DequantizeLinear", 1, domain=MS)
def dequantize_linear(xp, x, x_scale, x_zero_point=None, *, axis=1):
    return dequantize(xp, x, x_scale, x_zero_point, axis=axis)


def _real(xp, q, scale, zero_point):
    return dequantize(xp, q, xp.astype(scale, _F32), zero_point)


def _quantized(xp, y, scale, zero_point, like):
    """y quantized to the zero point's type (or ``like``'s, the inputs', when it is absent)."""
    if zero_point is None:
        zero_point = xp.zeros((), xp.dtype_of(like))
    return quantize(xp, y, xp.astype(scale, _F32), zero_point)


@op("QLinearAdd", 1, domain=MS)
def qlinear_add(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                c_zero_point=None):
    y = _real(xp, a, a_scale, a_zero_point) + _real(xp, b, b_scale, b_zero_point)
    return _quantized(xp, y, c_scale, c_zero_point, a)


@op("QLinearMul", 1, domain=MS)
def qlinear_mul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                c_zero_point=None):
    y = _real(xp, a, a_scale, a_zero_point) * _real(xp, b, b_scale, b_zero_point)
    return _quantized(xp, y, c_scale, c_zero_point, a)


@op("QLinearSigmoid", 1, domain=MS)
def qlinear_sigmoid(xp, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
    v = _real(xp, x, x_scale, x_zero_point)
    return _quantized(xp, 1 / (1 + xp.exp(-v)), y_scale, y_zero_point, x)


@op("QLinearLeakyRelu", 1, domain=MS)
def qlinear_leaky_relu(xp, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                       alpha=0.01):
    v = _real(xp, x, x_scale, x_zero_point)
    return _quantized(xp, xp.where(v >= 0, v, v * np.float32(alpha)), y_scale, y_zero_point, x)


@op("QLinearGlobalAveragePool", 1, domain=MS)
def qlinear_global_average_pool(xp, x, x_scale, x_zero_point, y_scale, y_zero_point, *,
                                channels_last=0):
    spatial = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    v = xp.mean(_real(xp, x, x_scale, x_zero_point), axis=spatial, keepdims=True)
    return _quantized(xp, v, y_scale, y_zero_point, x)


@op("QLinearConcat", 1, domain=MS)
def qlinear_concat(xp, y_scale, y_zero_point, *inputs, axis):
    """``inputs`` are (value, scale, zero point) triples."""
    if len(inputs) % 3:
        raise ValueError(f"QLinearConcat takes (value, scale, zero point) triples after "
                         f"Y_scale and Y_zero_point; got {len(inputs)} inputs there")
    parts = [_real(xp, inputs[i], inputs[i + 1], inputs[i + 2])
             for i in range(0, len(inputs), 3)]
    return _quantized(xp, xp.concatenate(parts, axis=axis), y_scale, y_zero_point, inputs[0])
