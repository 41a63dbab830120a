"""Integer and quantized matmul/conv: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Operands minus their zero points are int32 and accumulate exactly in int32; the QLinear ops then
requantize: y = round(acc * (scale_a * scale_b / scale_y)) + zero_y, clamped to y's range."""

import numpy as np

from . import window
from .quantize import int_range
from .registry import op

_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)


def _centered(xp, v, zero_point, axis):
    """v as int32 minus its zero point; a 1-D zero point runs along ``axis`` of v."""
    v = xp.astype(v, _I32)
    if zero_point is None:
        return v
    return v - _along(xp, xp.astype(zero_point, _I32), v.ndim, axis)


def _along(xp, p, ndim, axis):
    """A scalar or 1-D quantization parameter, shaped to broadcast along ``axis`` of a rank-ndim
    value (a 1-element vector is a scalar)."""
    if p.ndim == 0 or p.size == 1:
        return xp.reshape(p, ())
    dims = [1] * ndim
    dims[axis] = p.shape[0]
    return xp.reshape(p, tuple(dims))


def _requantize(xp, acc, multiplier, zero_point, dtype):
    y = xp.round(xp.astype(acc, _F32) * multiplier)
    if zero_point is not None:
        y = y + xp.astype(zero_point, _F32)
    lo, hi = int_range(dtype)
    return xp.astype(xp.clip(y, lo, hi), dtype)


def _scale(xp, s, ndim, axis):
    return _along(xp, xp.astype(s, _F32), ndim, axis)


@op("MatMulInteger", 10)
def matmul_integer(xp, a, b, a_zero_point=None, b_zero_point=None):
    # A's zero point is per row (axis -2), B's per column (axis -1).
    a = _centered(xp, a, a_zero_point, max(a.ndim - 2, 0))
    kernel = getattr(xp, "int8_kernel", None)  # few rows of A: a native kernel reads B as stored
    if kernel is not None:
        y = kernel(a, b, b_zero_point, lambda a, b, zb: int_matmul(xp, a, xp.astype(b, _I32) - zb))
        if y is not None:
            return y
    return int_matmul(xp, a, _centered(xp, b, b_zero_point, b.ndim - 1))


def int_matmul(xp, a, b):
    """a @ b in int32 for 8-bit values less their zero points (int32, |values| <= 255): the
    product of MatMulInteger and of every contrib op that quantizes to 8 bits."""
    if a.ndim == 1:  # a vector: one row, dropped again
        return _exact(xp, xp.reshape(a, (1, -1)), b, a.shape[0], xp.matmul, axis=-2)[..., 0, :]
    return _exact(xp, a, b, a.shape[-1], xp.matmul, axis=-2)


def _qmatmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    acc = matmul_integer(xp, a, b, a_zero_point, b_zero_point)
    multiplier = (_scale(xp, a_scale, acc.ndim, acc.ndim - 2)
                  * _scale(xp, b_scale, acc.ndim, acc.ndim - 1)
                  / _scale(xp, y_scale, acc.ndim, acc.ndim - 1))
    dtype = xp.dtype_of(y_zero_point) if y_zero_point is not None else xp.dtype_of(a)
    return _requantize(xp, acc, multiplier, y_zero_point, dtype)


@op("QLinearMatMul", 10)
def qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                   y_zero_point):
    return _qmatmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                    y_zero_point)


def _conv_int(xp, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group, kernel_shape,
              pads, strides):
    # x's zero point is one scalar; w's is per output channel (axis 0).
    x = _centered(xp, x, x_zero_point, 1)
    w = _centered(xp, w, w_zero_point, 0)
    win = window.resolve(x.shape[2:], kernel_shape or w.shape[2:], strides=strides, pads=pads,
                         dilations=dilations, auto_pad=auto_pad)
    return _exact(xp, x, w, int(np.prod(w.shape[1:])),
                  lambda x, w: xp.conv(x, w, strides=win.strides, pads=win.pads,
                                       dilations=win.dilations, groups=group), axis=0)


def _exact(xp, x, w, k, product, axis):
    """``product(x, w)`` (a matmul or a convolution summing ``k`` products per output) of 8-bit
    values less their zero points (|x|, |w| <= 255) as int32, computed exactly in float32: a
    float32 sum of integers is exact while every partial sum stays under 2^24. X is split into
    digits of ``bits`` bits (low digits in [0, 2^bits), the top one signed), so that
    k * 2^bits * 255 stays under it; the digits, stacked along X's ``axis`` (rows, or the batch),
    go through one product, which reads the weights once, and recombine in int32. (Digits and
    weights are integers under 2^9, exact in TF32 and bfloat16 inputs too, which GPUs may use for
    float32 products.)
    Why: MLX multiplies and convolves only floats (float64 on its CPU, not at all for grouped
    convolutions), and XLA's CPU backend has no fast integer product: 64 x 384 @ 384 x 1536
    took 11.9 ms in int32, 4.0 ms as two float32 digits (2 cores, loaded)."""
    bits = int(np.floor(np.log2(2 ** 24 / (255 * k)))) if k else 9
    if bits < 1:  # K past 2^24 / 510: no split is exact in float32
        return product(x, w)
    pieces = -(-9 // bits) if bits < 9 else 1  # |x| <= 255 takes 9 signed bits
    digits, rest = [], x
    for i in range(pieces):
        last = i == pieces - 1
        digits.append(xp.astype(rest if last else
                                xp.bitwise_and(rest, np.int32((1 << bits) - 1)), _F32))
        if not last:
            rest = xp.right_shift(rest, np.int32(bits))
    y = xp.astype(product(xp.concatenate(digits, axis=axis), xp.astype(w, _F32)), _I32)
    size, axis = x.shape[axis], axis % y.ndim
    acc = None
    for i in range(pieces):
        part = y[(slice(None),) * axis + (slice(i * size, (i + 1) * size),)]
        part = part if i == 0 else part * np.int32(1 << (bits * i))
        acc = part if acc is None else acc + part
    return acc


@op("ConvInteger", 10)
def conv_integer(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET",
                 dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    return _conv_int(xp, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group,
                     kernel_shape, pads, strides)


@op("QLinearConv", 10)
def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 pads=None, strides=None):
    acc = _conv_int(xp, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group,
                    kernel_shape, pads, strides)
    if b is not None:
        acc = acc + xp.reshape(xp.astype(b, _I32), (1, -1) + (1,) * (acc.ndim - 2))
    multiplier = (_scale(xp, x_scale, acc.ndim, 1) * _scale(xp, w_scale, acc.ndim, 1)
                  / _scale(xp, y_scale, acc.ndim, 1))
    dtype = xp.dtype_of(y_zero_point) if y_zero_point is not None else xp.dtype_of(x)
    return _requantize(xp, acc, multiplier, y_zero_point, dtype)
