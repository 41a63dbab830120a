"""com.microsoft quantized ops that ONNX Runtime's QDQ optimizer writes for its CPU kernels (and
its quantizer with ``use_qdq_contrib_ops``): QuantizeLinear and DequantizeLinear (the standard
ops under the contrib domain, which took 16-bit and 4-bit types before opset 21), QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearConcat, QLinearWhere, QLinearSoftmax, QGemm (exact int32 products, as MatMulInteger),
QLinearConv and NhwcMaxPool (the channels-last forms ORT's NHWC transformer writes).

Each dequantizes its inputs to float32, applies the float op, and quantizes the result with the
output's scale and zero point (round half to even, saturated): the value ORT's kernels aim at.
Its kernels get there by other roads (lookup tables, fixed-point multipliers), which can land
one step apart where the float result sits near a rounding tie."""

import numpy as np

from ..nn import normalized_axis
from ..pool import average_pool, max_pool
from ..qlinear import matmul_integer, qlinear_conv as qlinear_conv_10
from ..quantize import dequantize, int_range, quantize
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


@op("QLinearAveragePool", 1, domain=MS)
def qlinear_average_pool(xp, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         kernel_shape, auto_pad="NOTSET", ceil_mode=0, channels_last=0,
                         count_include_pad=0, pads=None, strides=None):
    v = _real(xp, x, x_scale, x_zero_point)
    v = _channels_first(xp, v) if channels_last else v
    y = average_pool(xp, v, kernel_shape=kernel_shape, auto_pad=auto_pad, ceil_mode=ceil_mode,
                     count_include_pad=count_include_pad, pads=pads, strides=strides)
    y = _channels_last(xp, y) if channels_last else y
    return _quantized(xp, y, y_scale, y_zero_point, x)


def _channels_first(xp, x):
    return xp.transpose(x, (0, x.ndim - 1) + tuple(range(1, x.ndim - 1)))


def _channels_last(xp, x):
    return xp.transpose(x, (0,) + tuple(range(2, x.ndim)) + (1,))


@op("QLinearConv", 1, domain=MS)
def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 b=None, *, auto_pad="NOTSET", channels_last=0, dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """The standard QLinearConv, on channels-last X and Y when ``channels_last``."""
    y = qlinear_conv_10(xp, _channels_first(xp, x) if channels_last else x, x_scale,
                        x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b,
                        auto_pad=auto_pad, dilations=dilations, group=group,
                        kernel_shape=kernel_shape, pads=pads, strides=strides)
    return _channels_last(xp, y) if channels_last else y


@op("NhwcMaxPool", 1, domain=MS)
def nhwc_max_pool(xp, x, *, kernel_shape, auto_pad="NOTSET", ceil_mode=0, dilations=None,
                  pads=None, strides=None):
    """MaxPool of 8-bit channels-last X."""
    return _channels_last(xp, max_pool(xp, _channels_first(xp, x), kernel_shape=kernel_shape,
                                       auto_pad=auto_pad, ceil_mode=ceil_mode,
                                       dilations=dilations, pads=pads, strides=strides))


@op("QLinearWhere", 1, domain=MS)
def qlinear_where(xp, condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale,
                  z_zero_point):
    """Each side requantized to Z's scale and zero point, then chosen (ORT's lookup tables)."""
    return xp.where(condition, _quantized(xp, _real(xp, x, x_scale, x_zero_point), z_scale,
                                          z_zero_point, x),
                    _quantized(xp, _real(xp, y, y_scale, y_zero_point), z_scale, z_zero_point, y))


@op("QLinearSoftmax", 1, domain=MS)
def qlinear_softmax(xp, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                    opset, axis=-1):
    """As ONNX Runtime's CPU kernel (qlinear_softmax.cc): exp((x - max) * x_scale) over the axes
    from ``axis`` on (opset < 13) or over ``axis`` (the schema's default -1 at any opset), each term
    times floor(1 / y_scale) (its multiplier, not 1 / y_scale) over their f32 sum, rounded, plus
    the zero point; saturated to the type (ORT's int8 path wraps past 127)."""
    axis = normalized_axis(axis, x)
    axes = tuple(range(axis, x.ndim)) if opset < 13 else (axis,)
    v = xp.astype(x, _F32)
    scale = xp.reshape(xp.astype(x_scale, _F32), ())
    e = xp.exp((v - xp.max(v, axis=axes, keepdims=True)) * scale)
    multiplier = xp.floor(1 / xp.reshape(xp.astype(y_scale, _F32), ()))
    q = xp.round(e * multiplier / xp.sum(e, axis=axes, keepdims=True))
    if y_zero_point is not None:
        q = q + xp.astype(y_zero_point, _F32)
    lo, hi = int_range(xp.dtype_of(x))
    return xp.astype(xp.clip(q, lo, hi), xp.dtype_of(x))


@op("QGemm", 1, domain=MS)
def qgemm(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
          y_zero_point=None, *, alpha=1.0, transA=0, transB=0):
    """ONNX Runtime's CPU kernel (quant_gemm.cc): (A - a_zp) @ (B - b_zp) in int32 plus C
    (int32), times alpha * a_scale * b_scale (b's per column when it is [N]); with a y zero point
    that over y_scale, rounded and saturated to its type, else float32."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"A {list(a.shape)} and B {list(b.shape)} must be matrices")
    a = xp.swapaxes(a, 0, 1) if transA else a
    b = xp.swapaxes(b, 0, 1) if transB else b
    n = b.shape[1]
    for name, v in (("b_scale", b_scale), ("b_zero_point", b_zero_point)):
        if v.ndim > 1 or v.size not in (1, n):
            raise ValueError(f"{name} of shape {list(v.shape)} must be a scalar or [1] or "
                             f"[{n}] (B's columns)")
    acc = matmul_integer(xp, a, b, xp.reshape(a_zero_point, ()), b_zero_point)
    if c is not None:
        acc = acc + c
    # the arrays first: a NumPy scalar first would pull an MLX array to the host
    scale = xp.reshape(xp.astype(a_scale, _F32), ()) * np.float32(alpha) * xp.astype(b_scale, _F32)
    if y_scale is not None:
        scale = scale / xp.reshape(xp.astype(y_scale, _F32), ())
    y = xp.astype(acc, _F32) * scale
    if y_zero_point is None:
        return y
    q = xp.round(y) + xp.astype(xp.reshape(y_zero_point, ()), _F32)
    lo, hi = int_range(xp.dtype_of(y_zero_point))
    return xp.astype(xp.clip(q, lo, hi), xp.dtype_of(y_zero_point))
