"""Type conversions: Cast, CastLike, BitCast.

ONNX rules beyond a plain ``astype``:
- float8 targets with ``saturate`` (the default) clamp to the largest finite value (Inf too); without
  it, out-of-range values become NaN (Inf for E5M2), which is what the plain conversion does.
- float8e8m0 is a power of two: the f32 exponent, rounded by ``round_mode`` ("up", "down",
  "nearest"); with ``saturate`` rounding never overflows into NaN.
- int4/uint4/int2/uint2 targets wrap around (keep the low bits), as the reference does.
- strings parse and format on the host.
"""

import ml_dtypes
import numpy as np
from onnx import TensorProto

from .. import dtypes
from .registry import NeedsStatic, op

FLOAT8 = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                         ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
# Sub-byte integers: (bits, signed).
SUBBYTE_INT = {np.dtype(ml_dtypes.int4): (4, True), np.dtype(ml_dtypes.uint4): (4, False)}
if hasattr(ml_dtypes, "int2"):
    SUBBYTE_INT.update({np.dtype(ml_dtypes.int2): (2, True), np.dtype(ml_dtypes.uint2): (2, False)})
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu) if hasattr(ml_dtypes, "float8_e8m0fnu") else None


def is_string(dtype) -> bool:
    return np.dtype(dtype).kind in "OUS"


def finite_max(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max)


def cast_to(xp, x, dtype, saturate=1, round_mode="up"):
    """``x`` as ``dtype`` (a NumPy dtype) under ONNX's Cast rules."""
    dtype = np.dtype(dtype)
    src = xp.dtype_of(x)
    if is_string(dtype) or is_string(src):
        if not isinstance(x, np.ndarray):
            raise NeedsStatic(0)  # strings live on the host
        if is_string(dtype):
            return x if is_string(src) else _to_strings(x)
        return cast_to(xp, _parse(x, dtype), dtype, saturate, round_mode)
    if src == dtype:
        return x
    if dtype in FLOAT8 and saturate and src != np.bool_:
        limit = finite_max(dtype)
        wide = src if dtypes.is_float(src) else np.dtype(np.float32)
        x = xp.clip(xp.astype(x, wide), -limit, limit)  # NaN stays NaN
    elif dtype == E8M0:
        return _to_e8m0(xp, x, saturate, round_mode)
    elif dtype in SUBBYTE_INT and src not in SUBBYTE_INT and src != np.bool_:
        x = _wrap(xp, x, *SUBBYTE_INT[dtype])
    return xp.astype(x, dtype)


def _wrap(xp, x, bits, signed):
    """Integers (or floats, truncated) reduced modulo 2**bits into the signed or unsigned range."""
    v = xp.bitwise_and(xp.astype(x, np.int64), (1 << bits) - 1)
    if signed:
        v = xp.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v


def _to_e8m0(xp, x, saturate, round_mode):
    """The f32 exponent byte of ``x``, rounded as ``round_mode`` says (onnx.numpy_helper's rule)."""
    u32 = np.dtype(np.uint32)
    bits = xp.bitcast(xp.astype(x, np.float32), u32)
    exponent = xp.bitwise_and(xp.right_shift(bits, xp.asarray(23, u32)), xp.asarray(0xFF, u32))
    special = exponent == 0xFF  # NaN and Inf keep the all-ones exponent (NaN in e8m0)
    if round_mode == "up":
        round_up = xp.bitwise_and(bits, xp.asarray(0x7FFFFF, u32)) > 0
    elif round_mode == "nearest":
        guard = xp.bitwise_and(bits, xp.asarray(0x400000, u32)) > 0
        rest = xp.bitwise_and(bits, xp.asarray(0x3FFFFF, u32)) > 0
        round_up = xp.logical_and(guard, xp.logical_or(rest, exponent > 0))
    elif round_mode == "down":
        round_up = xp.zeros(x.shape, bool)
    else:
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', not {round_mode!r}")
    if saturate:
        round_up = xp.logical_and(round_up, exponent != 0xFE)
    exponent = xp.where(special, exponent, exponent + xp.astype(round_up, u32))
    return xp.bitcast(xp.astype(exponent, np.uint8), E8M0)


def _parse(x, dtype):
    """Strings -> numbers on the host ("NaN", "INF", "-INF", "1e-7", "+3" ...)."""
    flat = [s.decode() if isinstance(s, bytes) else str(s) for s in np.asarray(x).flat]
    if dtype == np.bool_:
        values = [s.strip().lower() not in ("0", "false", "") for s in flat]
        return np.array(values, dtype=np.bool_).reshape(np.shape(x))
    if dtypes.is_float(dtype):
        return np.array([float(s) for s in flat], dtype=np.float64).reshape(np.shape(x))
    return np.array([int(float(s)) if not s.strip().lstrip("+-").isdigit() else int(s)
                     for s in flat], dtype=np.int64).reshape(np.shape(x))


def _to_strings(x):
    def fmt(v):
        if isinstance(v, (float, np.floating)) or dtypes.is_float(x.dtype):
            v = float(v) if not isinstance(v, np.floating) else v
            if np.isnan(v):
                return "NaN"
            if np.isinf(v):
                return "INF" if v > 0 else "-INF"
            if x.dtype == np.float32:
                return np.format_float_positional(np.float32(v), unique=True, trim="-")
            return str(v)
        return str(v)

    return np.array([fmt(v) for v in x.flat], dtype=object).reshape(x.shape)


def _to_dtype(to):
    """Cast's ``to``: a TensorProto enum (opset 6+) or its name (opset 1, e.g. "FLOAT")."""
    if isinstance(to, (bytes, str)):
        to = getattr(TensorProto, (to.decode() if isinstance(to, bytes) else to).upper())
    return dtypes.to_numpy(int(to))


@op("Cast", 1)
def cast_v1(xp, x, *, to):
    return cast_to(xp, x, _to_dtype(to))


@op("Cast", 19)
def cast_v19(xp, x, *, to, saturate=1):
    return cast_to(xp, x, _to_dtype(to), saturate)


@op("Cast", 24)
def cast(xp, x, *, to, saturate=1, round_mode="up"):
    return cast_to(xp, x, _to_dtype(to), saturate, round_mode)


def _like(xp, target):
    return target.dtype if isinstance(target, np.ndarray) else xp.dtype_of(target)


@op("CastLike", 15)
def cast_like_v15(xp, x, target):
    return cast_to(xp, x, _like(xp, target))


@op("CastLike", 19)
def cast_like_v19(xp, x, target, *, saturate=1):
    return cast_to(xp, x, _like(xp, target), saturate)


@op("CastLike", 24)
def cast_like(xp, x, target, *, saturate=1, round_mode="up"):
    return cast_to(xp, x, _like(xp, target), saturate, round_mode)


@op("BitCast", 26)
def bit_cast(xp, x, *, to):
    dtype, src = dtypes.to_numpy(to), xp.dtype_of(x)
    if is_string(dtype) or is_string(src):
        raise ValueError("BitCast does not apply to strings")
    if dtype.itemsize != src.itemsize:
        raise ValueError(f"BitCast needs types of one width: {dtypes.name(src)} is "
                         f"{8 * src.itemsize} bits, {dtypes.name(dtype)} {8 * dtype.itemsize}")
    if src == np.bool_ or dtype == np.bool_:
        return xp.astype(x, dtype)  # a bool's byte is 0 or 1: its bits are its value
    return xp.bitcast(x, dtype)
