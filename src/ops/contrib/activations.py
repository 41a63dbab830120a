"""com.microsoft fused activations and small fusions: FastGelu, Gelu, BiasGelu, QuickGelu,
BiasAdd, BiasSplitGelu, FusedMatMul, Trilu. Half inputs compute in f32 and round once."""

import numpy as np

from ..attention import f32
from ..registry import op

MS = "com.microsoft"
_SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def _erf_gelu(xp, x):
    return x * np.float32(0.5) * (1 + xp.erf(x * np.float32(0.7071067811865476)))


def _tanh_gelu(xp, x):
    return x * np.float32(0.5) * (1 + xp.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))


def _act(xp, fn, x, bias=None):
    xf = f32(xp, x)
    if bias is not None:
        xf = xf + f32(xp, bias)
    return xp.astype(fn(xp, xf), xp.dtype_of(x))


@op("FastGelu", 1, domain=MS)
def fast_gelu(xp, x, bias=None):
    return _act(xp, _tanh_gelu, x, bias)


@op("Gelu", 1, domain=MS)
def gelu(xp, x):
    return _act(xp, _erf_gelu, x)


@op("BiasGelu", 1, domain=MS)
def bias_gelu(xp, a, b):
    return _act(xp, _erf_gelu, a, b)


@op("QuickGelu", 1, domain=MS)
def quick_gelu(xp, x, *, alpha=1.702):
    return _act(xp, lambda xp, v: v / (1 + xp.exp(-np.float32(alpha) * v)), x)


@op("BiasAdd", 1, domain=MS)
def bias_add(xp, x, bias, skip):
    return x + bias + skip


@op("BiasSplitGelu", 1, domain=MS)
def bias_split_gelu(xp, x, bias):
    y = f32(xp, x) + f32(xp, bias)
    half = y.shape[-1] // 2
    return xp.astype(y[..., :half] * _erf_gelu(xp, y[..., half:]), xp.dtype_of(x))


@op("FusedMatMul", 1, domain=MS)
def fused_matmul(xp, a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    a = _arrange(xp, a, transA, transBatchA)
    b = _arrange(xp, b, transB, transBatchB)
    y = xp.matmul(a, b)
    return y * xp.asarray(alpha, xp.dtype_of(y)) if alpha != 1.0 else y


def _arrange(xp, x, trans, trans_batch):
    """ORT's FusedMatMul: transBatch moves the leading batch axes between the matrix axes
    ((B..., M, K) -> (M, B..., K) read as a batch of the last two), trans swaps the last two."""
    if trans_batch and x.ndim > 2:
        # (b0..bn, M, K) -> (M, b0..bn, K) is what ORT's transBatch means for the matrix view:
        # the batched operand becomes (b1..bn, b0?...). ORT: perm = [1..n-2, 0, n-1] style.
        perm = list(range(1, x.ndim - 1)) + [0, x.ndim - 1]
        x = xp.transpose(x, perm)
    if trans:
        x = xp.swapaxes(x, -1, -2)
    return x


@op("Trilu", 1, domain=MS, static=(1,))
def trilu(xp, x, k=None, *, upper=1):
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    n, m = x.shape[-2:]
    i = xp.reshape(xp.arange(n, dtype=np.int64), (n, 1))
    j = xp.reshape(xp.arange(m, dtype=np.int64), (1, m))
    keep = (j - i >= k) if upper else (j - i <= k)
    return xp.where(keep, x, xp.zeros((), xp.dtype_of(x)))
