"""MLX backend (Apple silicon; ``mlx[cpu]`` on Linux): mlx.core behind NumPy's names.

MLX's API is close to NumPy's; this module bridges the differences (dtypes are NumPy dtypes at the
namespace boundary, ``dtype=`` arguments of reductions, names such as ``bitwise_not``) so that ops
are written once. float64 exists only on the CPU stream in MLX.

Types MLX lacks (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0, int4/uint4, int2/uint2, float4e2m1)
live on the host: ``BACKEND.asarray`` leaves such a NumPy (ml_dtypes) array where it is, and a node
that reads or makes one runs on NumPy (the runner retries it there when MLX raises
``MissingDtype`` or fails on such an input), the way static values fold. Under ``compile`` that
node is a graph break: the segment before it runs compiled, the node runs on the host, and what
follows compiles again. This was chosen over emulating the types in uint8 storage with bit
arithmetic: every op (Cast, QuantizeLinear, Reshape, Concat, ...) is then right by construction,
with ml_dtypes' rounding, and outputs of those types come back as the NumPy arrays the graph
declares. The cost is host work (and a device round trip) at each node touching such a value
computed from data; engine/compiled.py keys those values by shape, so new values do not recompile.
Quantized weights are host constants, so DequantizeLinear (quantize.py converts a host int4 or
float8 weight to float32 on the host first), MatMulNBits and GatherBlockQuantized stay compiled."""

import contextlib

import ml_dtypes
import mlx.core as mx
import numpy as np

from . import NotConcrete, common
from ..errors import InputError

_NP_TO_MX = {
    np.dtype(np.float32): mx.float32, np.dtype(np.float16): mx.float16,
    np.dtype(np.float64): mx.float64, np.dtype(ml_dtypes.bfloat16): mx.bfloat16,
    np.dtype(np.int8): mx.int8, np.dtype(np.int16): mx.int16, np.dtype(np.int32): mx.int32,
    np.dtype(np.int64): mx.int64, np.dtype(np.uint8): mx.uint8, np.dtype(np.uint16): mx.uint16,
    np.dtype(np.uint32): mx.uint32, np.dtype(np.uint64): mx.uint64, np.dtype(np.bool_): mx.bool_,
    np.dtype(np.complex64): mx.complex64,
}
_MX_TO_NP = {v: k for k, v in _NP_TO_MX.items()}


def mx_dtype(dtype):
    if isinstance(dtype, mx.Dtype):
        return dtype
    if dtype is None:
        return None
    if dtype is bool or dtype is int or dtype is float:
        dtype = {bool: np.bool_, int: np.int64, float: np.float32}[dtype]
    try:
        return _NP_TO_MX[np.dtype(dtype)]
    except KeyError:
        raise common.MissingDtype(f"MLX has no {np.dtype(dtype).name} arrays: values of this type "
                                  "stay NumPy (ml_dtypes) arrays on the host") from None


def holds(dtype) -> bool:
    """Whether MLX has arrays of ``dtype`` (not float8, int4/uint4, int2/uint2 nor float4)."""
    return np.dtype(dtype) in _NP_TO_MX


def to_mx(value, dtype=None):
    if isinstance(value, mx.array):
        return value if dtype is None else value.astype(mx_dtype(dtype))
    a = np.asarray(value)
    if any(d >= 2**31 for d in a.shape):
        raise InputError(f"An array of shape {list(a.shape)} has an axis of 2^31 or more, "
                         "which MLX arrays cannot hold (their shapes are 32-bit): split it, or "
                         "use backend='jax'")
    if not a.flags.c_contiguous:  # MLX cannot take NumPy views with negative strides
        a = a.copy()
    target = mx_dtype(dtype if dtype is not None else a.dtype)
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return mx.array(a.astype(np.float32)).astype(target)
    if dtype is not None and np.dtype(dtype) != a.dtype:
        return mx.array(a).astype(target)
    return mx.array(a, dtype=target)


class MlxNamespace(common.Namespace):
    module = mx
    name = "mlx"

    def asarray(self, x, dtype=None):
        return to_mx(x, dtype)

    def stop_gradient(self, x):
        return mx.stop_gradient(x)

    def astype(self, x, dtype):
        return to_mx(x).astype(mx_dtype(dtype))

    def dtype_of(self, x):
        return _MX_TO_NP[x.dtype] if isinstance(x, mx.array) else np.asarray(x).dtype

    # Constructors take NumPy dtypes.
    def zeros(self, shape, dtype=np.float32):
        return mx.zeros(tuple(shape), dtype=mx_dtype(dtype))

    def ones(self, shape, dtype=np.float32):
        return mx.ones(tuple(shape), dtype=mx_dtype(dtype))

    def full(self, shape, value, dtype=None):
        return mx.full(tuple(shape), to_mx(value, dtype))

    def zeros_like(self, x):
        return mx.zeros_like(x)

    def arange(self, *args, dtype=None):
        return mx.arange(*args, dtype=mx_dtype(dtype or np.int64))

    # Reductions: MLX has no dtype= argument; cast first.
    def sum(self, x, axis=None, keepdims=False, dtype=None):
        x = to_mx(x, dtype)
        return mx.sum(x, axis=_axes(axis), keepdims=keepdims)

    def prod(self, x, axis=None, keepdims=False, dtype=None):
        return mx.prod(to_mx(x, dtype), axis=_axes(axis), keepdims=keepdims)

    def mean(self, x, axis=None, keepdims=False):
        return mx.mean(x, axis=_axes(axis), keepdims=keepdims)

    def var(self, x, axis=None, keepdims=False):
        return mx.var(x, axis=_axes(axis), keepdims=keepdims)

    def max(self, x, axis=None, keepdims=False):
        return mx.max(x, axis=_axes(axis), keepdims=keepdims)

    def min(self, x, axis=None, keepdims=False):
        return mx.min(x, axis=_axes(axis), keepdims=keepdims)

    def cumsum(self, x, axis=None, dtype=None):
        return mx.cumsum(to_mx(x, dtype), axis=axis)

    def squeeze(self, x, axis=None):
        return mx.squeeze(x, axis=_axes(axis))

    def transpose(self, x, axes=None):
        return mx.transpose(x, axes)

    def reshape(self, x, shape):
        return mx.reshape(x, tuple(int(d) for d in shape))

    def broadcast_to(self, x, shape):
        return mx.broadcast_to(x, tuple(shape))

    def concatenate(self, xs, axis=0):
        return mx.concatenate([to_mx(x) for x in xs], axis=axis)

    def stack(self, xs, axis=0):
        return mx.stack([to_mx(x) for x in xs], axis=axis)

    def take(self, x, indices, axis=None):
        indices = to_mx(indices)
        if indices.ndim == 0 and axis is not None:  # MLX keeps the axis for a 0-d index
            return mx.squeeze(mx.take(x, indices.reshape(1), axis=axis), axis=axis)
        return mx.take(x, indices, axis=axis)

    def where(self, cond, x, y):
        return mx.where(to_mx(cond), to_mx(x) if isinstance(x, np.ndarray) else x,
                        to_mx(y) if isinstance(y, np.ndarray) else y)

    def clip(self, x, lo, hi):
        return mx.clip(x, lo, hi)

    # Names that differ from NumPy's.
    def bitwise_not(self, x):
        return mx.bitwise_invert(x)

    def mod(self, a, b):
        return mx.remainder(a, b)

    def fmod(self, a, b):
        if self.is_float(a):
            return a - b * mx.trunc(a / b) if hasattr(mx, "trunc") else a - b * (a / b).astype(
                mx.int64).astype(a.dtype)
        r = mx.remainder(a, b)
        return mx.where((r != 0) & ((a < 0) != (b < 0)), r - b, r)

    def matmul(self, a, b):
        if self.is_float(a):
            return mx.matmul(a, b)
        # MLX multiplies floating point only; integer products are exact in float64.
        return mx.matmul(a.astype(mx.float64), b.astype(mx.float64)).astype(a.dtype)

    def pad(self, x, width, mode="constant", constant_values=0):
        width = [(int(lo), int(hi)) for lo, hi in width]
        if mode in ("constant", "edge"):
            return mx.pad(x, width, mode=mode, constant_values=to_mx(constant_values)
                          if mode == "constant" else 0)
        for axis, (lo, hi) in enumerate(width):
            if lo or hi:
                x = _pad_axis(x, axis, lo, hi, mode)
        return x

    def swapaxes(self, x, a, b):
        return mx.swapaxes(x, a, b)

    def index_update(self, x, index, updates, mode="set"):
        if 0 in tuple(getattr(updates, "shape", ())):
            return x  # MLX rejects an empty update ("too large for array"); it changes nothing
        index = tuple(to_mx(i) if isinstance(i, np.ndarray) else i for i in index)
        if mode == "set":
            out = mx.array(x)
            out[index] = updates
            return out
        ref = x.at[index]
        return {"add": ref.add, "mul": ref.multiply, "max": ref.maximum,
                "min": ref.minimum}[mode](updates)

    def erf(self, x):
        return mx.erf(x)

    def softmax(self, x, axis=-1):
        return mx.softmax(x, axis=axis, precise=True)

    def log_softmax(self, x, axis=-1):
        return x - mx.logsumexp(x, axis=axis, keepdims=True)

    def logaddexp(self, a, b):
        return mx.logaddexp(to_mx(a), to_mx(b))

    def cond(self, pred, true_fn, false_fn):
        # MLX has no lazy conditional: both branches run, and where() picks (shapes must agree).
        t, f = true_fn(), false_fn()
        for a, b in zip(t, f):  # as lax.cond: the branches must give the same types
            if not (hasattr(a, "shape") and hasattr(b, "shape")) or tuple(a.shape) != tuple(
                    b.shape) or self.dtype_of(a) != self.dtype_of(b):
                raise TypeError("cond branches give different types")
        p = mx.reshape(to_mx(pred), ()).astype(mx.bool_)
        return [mx.where(p, a, b) for a, b in zip(t, f)]

    def bitcast(self, x, dtype):
        """The same bits read as ``dtype`` (of the same width)."""
        return mx.view(to_mx(x), mx_dtype(dtype))

    def random(self, kind, shape, dtype, *, seed, key=None):
        """Draws of ``kind`` ("uniform" in [0, 1), "normal") from the key of ``seed`` (a uint32),
        or from ``key`` (a key threaded through the run) mixed with ``seed``."""
        k = mx.random.key(seed)
        if key is not None:
            k = mx.bitwise_xor(k, key)
        draw = {"uniform": mx.random.uniform, "normal": mx.random.normal}[kind]
        if np.dtype(dtype) == np.float64:  # MLX draws up to float32
            return draw(shape=tuple(shape), dtype=mx.float32, key=k).astype(mx.float64)
        return draw(shape=tuple(shape), dtype=mx_dtype(dtype), key=k)

    def is_concrete(self, x):
        if not isinstance(x, mx.array):
            return True
        try:
            mx.eval(x)
            return True
        except ValueError as e:
            if "eval" in str(e):  # inside mx.compile
                return False
            raise

    def fft(self, x, *, n, axis, kind="fft"):
        """``kind`` ("fft", "ifft", "rfft", "irfft") along ``axis`` at length ``n`` (complex64)."""
        return getattr(mx.fft, kind)(to_mx(x), n=n, axis=axis)

    def topk(self, x, k, *, axis=-1, largest=True):
        """Top k along ``axis`` by a stable argsort: ties go to the lower index, as ONNX asks."""
        x = to_mx(x)
        key = x
        if largest:  # order reversed, ties kept in index order (~x for integers: no overflow)
            key = -x if self.is_float(x) else mx.logical_not(x) if x.dtype == mx.bool_ else ~x
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, k)
        indices = mx.argsort(key, axis=axis)[tuple(index)]
        return mx.take_along_axis(x, indices, axis=axis), indices.astype(mx.int64)

    def conv(self, x, w, *, strides, pads, dilations, groups, lhs_dilation=None):
        """N-d convolution in ONNX layout (N, C, *spatial), weights (M, C/groups, *kernel); MLX
        convolves channels-last. Negative ``pads`` crop (the input, or the output when the
        convolution has unit strides)."""
        if not self.is_float(x):  # MLX convolves floating point only; exact in float64
            y = self.conv(to_mx(x).astype(mx.float64), to_mx(w).astype(mx.float64),
                          strides=strides, pads=pads, dilations=dilations, groups=groups,
                          lhs_dilation=lhs_dilation)
            return y.astype(to_mx(x).dtype)
        nd = x.ndim - 2
        lo, hi = list(pads[:nd]), list(pads[nd:])
        unit = all(int(s) == 1 for s in strides)
        crop_in = [slice(None)] * x.ndim
        if not unit:
            for i in range(nd):
                crop_in[2 + i] = slice(max(-lo[i], 0), x.shape[2 + i] - max(-hi[i], 0))
        x = to_mx(x)[tuple(crop_in)]
        y = mx.conv_general(
            mx.moveaxis(x, 1, -1), mx.moveaxis(to_mx(w), 1, -1), stride=[int(s) for s in strides],
            padding=([max(int(p), 0) for p in lo], [max(int(p), 0) for p in hi]),
            kernel_dilation=[int(d) for d in dilations],
            input_dilation=[int(d) for d in lhs_dilation] if lhs_dilation is not None else 1,
            groups=int(groups))
        y = mx.moveaxis(y, -1, 1)
        if unit and any(p < 0 for p in lo + hi):
            y = y[(slice(None), slice(None)) + tuple(
                slice(max(-a, 0), y.shape[2 + i] - max(-b, 0)) for i, (a, b) in
                enumerate(zip(lo, hi)))]
        return y

    def reduce_window(self, x, init, op, *, window, strides, padding, dilation=None):
        """Windowed max/min/add: pad with ``init``, view the windows with as_strided, reduce."""
        x = to_mx(x)
        dilation = dilation or (1,) * x.ndim
        if any(lo or hi for lo, hi in padding):
            x = mx.pad(x, [(int(lo), int(hi)) for lo, hi in padding],
                       constant_values=mx.array(init, dtype=x.dtype))
        x = mx.contiguous(x) if hasattr(mx, "contiguous") else x + mx.zeros((), dtype=x.dtype)
        elem = [int(np.prod(x.shape[i + 1:])) for i in range(x.ndim)]
        out = [(n - (k - 1) * d - 1) // s + 1
               for n, k, d, s in zip(x.shape, window, dilation, strides)]
        view = mx.as_strided(x, out + list(window),
                             [e * s for e, s in zip(elem, strides)]
                             + [e * d for e, d in zip(elem, dilation)])
        axes = list(range(x.ndim, 2 * x.ndim))
        return {"max": mx.max, "min": mx.min, "add": mx.sum}[op](view, axis=axes)


def _axes(axis):
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return [int(a) for a in axis]
    return int(axis)


def _pad_axis(x, axis, lo, hi, mode):
    n = x.shape[axis]

    def take(idx):
        return mx.take(x, mx.array(np.asarray(idx, np.int64)), axis=axis)

    if mode == "reflect":
        before, after = take(np.arange(lo, 0, -1)), take(np.arange(n - 2, n - 2 - hi, -1))
    else:  # wrap
        before, after = take(np.arange(n - lo, n) % n), take(np.arange(0, hi) % n)
    return mx.concatenate([before, x, after], axis=axis)


class MlxBackend:
    name = "mlx"
    xp = MlxNamespace()

    def scope(self):
        return contextlib.nullcontext()

    def asarray(self, value):
        """A device array; a NumPy array of a type MLX lacks stays on the host (see lacks)."""
        if isinstance(value, np.ndarray) and self.lacks(value.dtype):
            return value
        return to_mx(value)

    def put_weight(self, value):
        """A weight handed over at load, as a device array (as asarray)."""
        return self.asarray(value)

    def lacks(self, dtype) -> bool:
        """True for the ONNX types MLX has no arrays of (float8, int4/uint4, int2/uint2, float4):
        their values live on the host as NumPy (ml_dtypes) arrays, and nodes that read or make
        them run there (runner.Runner.run_node)."""
        dtype = np.dtype(dtype)
        return dtype.kind not in "OUS" and not holds(dtype)

    def is_array(self, x):
        return isinstance(x, mx.array)

    def random_key(self, seed):
        return mx.random.key(seed & 0xFFFFFFFF)

    def to_host(self, x):
        try:
            if x.dtype == mx.bfloat16:
                return np.array(x.astype(mx.float32)).astype(ml_dtypes.bfloat16)
            return np.array(x)
        except ValueError as e:
            if "eval" in str(e):  # reading a value inside mx.compile
                raise NotConcrete() from None
            raise

    def compile(self, fn, donate_argnums=(), library_dots=False):
        return mx.compile(fn)  # MLX reuses buffers it holds the only reference to by itself

    def block(self, tree):
        mx.eval(tree)
        return tree

    def persistent_cache(self, option=None):
        """MLX has no persistent compilation cache: mx.compile compiles in every process."""
        return contextlib.nullcontext()


BACKEND = MlxBackend()
