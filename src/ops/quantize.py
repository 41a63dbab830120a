"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scales and zero points are per tensor (a scalar), per axis (1-D along ``axis``) or blocked (the
rank of x, each value covering ``block_size`` elements along ``axis``). Integer targets round half
to even and clamp to their range; float8 targets follow Cast's ``saturate``."""

import ml_dtypes
import numpy as np

from .. import dtypes
from .cast import FLOAT8, SUBBYTE_INT, cast_to
from .registry import op

_F32 = np.dtype(np.float32)
FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn) if hasattr(ml_dtypes, "float4_e2m1fn") else None


def int_range(dtype):
    """(min, max) of an integer dtype, sub-byte ones included."""
    dtype = np.dtype(dtype)
    if dtype in SUBBYTE_INT:
        bits, signed = SUBBYTE_INT[dtype]
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def is_int(dtype):
    dtype = np.dtype(dtype)
    return dtype in SUBBYTE_INT or np.issubdtype(dtype, np.integer)


def along(xp, v, shape, axis, block_size=0):
    """A scale or zero point shaped to broadcast against an x of ``shape``."""
    if v.ndim == 0:
        return v
    if not block_size:
        if v.size == 1:
            return xp.reshape(v, ())
        dims = [1] * len(shape)
        dims[axis] = v.shape[0]
        return xp.reshape(v, tuple(dims))
    if v.ndim != len(shape):
        raise ValueError(f"blocked quantization needs a scale of rank {len(shape)}, "
                         f"got shape {list(v.shape)}")
    v = xp.repeat(v, block_size, axis=axis)
    index = [slice(None)] * len(shape)
    index[axis] = slice(0, shape[axis])
    return v[tuple(index)]


def as_f32(xp, v):
    """``v`` in float32. A host value converts on the host: a device may have no arrays of its
    type (MLX has no int4 or float8), and a quantized weight stays compiled this way."""
    if isinstance(v, np.ndarray):
        return xp.asarray(v.astype(_F32))
    return xp.astype(v, _F32)


def exact_divisor(xp, s, shape):
    """``s`` broadcast to ``shape`` before dividing by it: XLA rewrites a division by a broadcast
    value into a multiplication by its reciprocal, whose rounding can flip a round-half-even tie
    of the quotient (and with it a quantized value)."""
    return xp.broadcast_to(s, shape)


def quantize(xp, x, scale, zero_point, *, axis=1, saturate=1, block_size=0, output_dtype=0,
             precision=0):
    if zero_point is not None:
        target = xp.dtype_of(zero_point)
        if output_dtype and dtypes.to_numpy(output_dtype) != target:
            raise ValueError(f"output_dtype {dtypes.name(dtypes.to_numpy(output_dtype))} differs "
                             f"from the zero point's {dtypes.name(target)}")
    else:
        target = dtypes.to_numpy(output_dtype) if output_dtype else np.dtype(np.uint8)
    axis = axis + x.ndim if axis < 0 else axis
    s = along(xp, scale, x.shape, axis, block_size)
    if precision:
        x, s = xp.astype(x, dtypes.to_numpy(precision)), xp.astype(s, dtypes.to_numpy(precision))
    q = x / exact_divisor(xp, s, x.shape)
    if is_int(target):
        q = xp.round(xp.astype(q, np.float64 if xp.dtype_of(q) == np.float64 else _F32))
        if zero_point is not None:
            q = q + xp.astype(along(xp, zero_point, x.shape, axis, block_size), xp.dtype_of(q))
        lo, hi = int_range(target)
        return xp.astype(xp.astype(xp.clip(q, lo, hi), np.int32), target)
    if target in FLOAT8:
        return cast_to(xp, q, target, saturate)  # a float8 zero point is zero
    if target == FLOAT4:  # no Inf/NaN: its conversion saturates by itself
        if zero_point is not None:
            q = q + xp.astype(along(xp, zero_point, x.shape, axis, block_size), xp.dtype_of(q))
        return xp.astype(q, target)
    raise ValueError(f"QuantizeLinear cannot produce {dtypes.name(target)}")


def dequantize(xp, x, scale, zero_point, *, axis=1, block_size=0, output_dtype=0):
    out = dtypes.to_numpy(output_dtype) if output_dtype else xp.dtype_of(scale)
    axis = axis + x.ndim if axis < 0 else axis
    dx = as_f32(xp, x)
    src = xp.dtype_of(x)
    if zero_point is not None and is_int(src):  # float zero points must be zero: ignored
        dx = dx - along(xp, as_f32(xp, zero_point), x.shape, axis, block_size)
    return xp.astype(dx * along(xp, scale, x.shape, axis, block_size), out)


@op("QuantizeLinear", 10)
def quantize_linear_v10(xp, x, scale, zero_point=None):
    return quantize(xp, x, scale, zero_point)


@op("QuantizeLinear", 13)
def quantize_linear_v13(xp, x, scale, zero_point=None, *, axis=1):
    return quantize(xp, x, scale, zero_point, axis=axis)


@op("QuantizeLinear", 19)
def quantize_linear_v19(xp, x, scale, zero_point=None, *, axis=1, saturate=1):
    return quantize(xp, x, scale, zero_point, axis=axis, saturate=saturate)


@op("QuantizeLinear", 21)
def quantize_linear_v21(xp, x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                        saturate=1):
    return quantize(xp, x, scale, zero_point, axis=axis, saturate=saturate,
                    block_size=block_size, output_dtype=output_dtype)


@op("QuantizeLinear", 23)
def quantize_linear(xp, x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                    precision=0, saturate=1):
    return quantize(xp, x, scale, zero_point, axis=axis, saturate=saturate,
                    block_size=block_size, output_dtype=output_dtype, precision=precision)


@op("DequantizeLinear", 10)
def dequantize_linear_v10(xp, x, scale, zero_point=None):
    return dequantize(xp, x, scale, zero_point)


@op("DequantizeLinear", 13)
def dequantize_linear_v13(xp, x, scale, zero_point=None, *, axis=1):
    return dequantize(xp, x, scale, zero_point, axis=axis)


@op("DequantizeLinear", 21)
def dequantize_linear_v21(xp, x, scale, zero_point=None, *, axis=1, block_size=0):
    return dequantize(xp, x, scale, zero_point, axis=axis, block_size=block_size)


@op("DequantizeLinear", 23)
def dequantize_linear(xp, x, scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    return dequantize(xp, x, scale, zero_point, axis=axis, block_size=block_size,
                      output_dtype=output_dtype)


@op("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(xp, x):
    """uint8 quantization of x with a scale and zero point covering [min(x, 0), max(x, 0)]."""
    xf = xp.astype(x, _F32)
    hi = xp.maximum(xp.max(xf), 0.0)
    lo = xp.minimum(xp.min(xf), 0.0)
    scale = xp.where(hi == lo, xp.asarray(1.0, _F32), hi - lo) / xp.asarray(255.0, _F32)
    zero = xp.round(xp.clip(-lo / scale, 0.0, 255.0))
    y = xp.clip(xp.round(xf / exact_divisor(xp, scale, xf.shape)) + zero, 0.0, 255.0)
    return (xp.astype(y, np.uint8), xp.astype(scale, xp.dtype_of(x)),
            xp.astype(zero, np.uint8))
