"""com.microsoft fused activations and small fusions: FastGelu, Gelu, BiasGelu, QuickGelu,
BiasAdd, BiasSplitGelu, FusedMatMul, Trilu, GemmFastGelu, BiasSoftmax. Half inputs compute in f32
and round once."""

import numpy as np

from ..attention import f32
from ..registry import op

MS = "com.microsoft"
_SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def _erf_gelu(xp, x):
    return x * np.float32(0.5) * (1 + xp.erf(x * np.float32(0.7071067811865476)))


def _tanh_gelu(xp, x):
    inner = _SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)
    return x * np.float32(0.5) * (1 + xp.tanh(inner))


def _act(xp, fn, x, bias=None):
    xf = f32(xp, x)
    if bias is not None:
        xf = xf + f32(xp, bias)
    return xp.astype(fn(xp, xf), xp.dtype_of(x))


# MLAS's tanh (mlas/lib/tanh.cpp, Eigen's coefficients): x clamped to [-9, 9], then
# x * P(x^2) / Q(x^2), each Horner step one fused multiply-add in its AVX kernels.
_TANH_P = [np.float32(v) for v in (-2.76076847742355e-16, 2.00018790482477e-13,
                                   -8.60467152213735e-11, 5.12229709037114e-08,
                                   1.48572235717979e-05, 6.37261928875436e-04,
                                   4.89352455891786e-03)]
_TANH_Q = [np.float32(v) for v in (1.19825839466702e-06, 1.18534705686654e-04,
                                   2.26843463243900e-03, 4.89352518554385e-03)]


def _fma(xp, a, b, c):
    """a * b + c rounded once to f32: the f64 product of two f32 values is exact."""
    f64 = np.float64
    return xp.astype(xp.astype(a, f64) * xp.astype(b, f64) + xp.astype(c, f64), np.float32)


def _mlas_tanh(xp, v):
    v = xp.clip(v, np.float32(-9), np.float32(9))
    v2 = v * v
    p = _fma(xp, v2, _TANH_P[0], _TANH_P[1])
    for a in _TANH_P[2:]:
        p = _fma(xp, p, v2, a)
    q = _fma(xp, v2, _TANH_Q[0], _TANH_Q[1])
    for b in _TANH_Q[2:]:
        q = _fma(xp, q, v2, b)
    return p * v / q


@op("FastGelu", 1, domain=MS)
def fast_gelu(xp, x, bias=None):
    """As ONNX Runtime's CPU kernel computes it, operation for operation (bert/bias_gelu.cc):
    (x / 2) * (1 + tanh(x * (C x x + B))) with MLAS's tanh. Its outputs feed dynamically
    quantized matmuls in int8 exports (Kokoro's ALBERT), where an ulp's difference can move a
    value across a rounding step; this gives ORT's values bit for bit."""
    if xp.dtype_of(x) == np.float64:
        return _act(xp, _tanh_gelu, x, bias)
    v = f32(xp, x) if bias is None else f32(xp, x) + f32(xp, bias)
    # ORT's (C * v) * v, written with the array first (a NumPy scalar first would pull an MLX
    # array to the host); a product's operands commute exactly
    inner = v * (v * np.float32(0.035677408136300125) * v + _SQRT_2_OVER_PI)
    y = (v * np.float32(0.5)) * (_mlas_tanh(xp, inner) + np.float32(1))
    return xp.astype(y, xp.dtype_of(x))


@op("GemmFastGelu", 1, domain=MS)
def gemm_fast_gelu(xp, x, w, bias=None):
    """FastGelu(MatMul(X, W) + bias): ONNX Runtime's ROCm / CUDA fusion of the two ops."""
    return fast_gelu(xp, xp.matmul(x, w), bias)


@op("BiasSoftmax", 1, domain=MS)
def bias_softmax(xp, x, bias, *, is_inner_broadcast, axis=1):
    """Softmax of X + bias over the axes from ``axis`` on (Softmax-1's flattening), as ONNX
    Runtime's CUDA kernel reads it: X is (batch, elements) at ``axis`` and bias k rows of those
    elements; is_inner_broadcast=1 gives batch row i bias row i // (batch / k) (a [B, 1, S, S]
    mask on [B, H, S, S] scores), 0 gives it row i % k (a [1, H, S, S] bias)."""
    axis = axis + x.ndim if axis < 0 else axis
    batch, elements = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))
    k = int(np.prod(bias.shape)) // elements if elements else 0
    if not elements or k == 0 or k * elements != int(np.prod(bias.shape)) or batch % k:
        raise ValueError(f"bias of shape {list(bias.shape)} does not broadcast to input "
                         f"{list(x.shape)} at axis {axis}: it must hold k rows of "
                         f"{elements} elements, k dividing {batch}")
    rows = xp.reshape(f32(xp, bias), (k, 1, elements) if is_inner_broadcast else (1, k, elements))
    scores = xp.reshape(f32(xp, x), (k, batch // k, elements) if is_inner_broadcast
                        else (batch // k, k, elements))
    return xp.astype(xp.reshape(xp.softmax(scores + rows, axis=-1), x.shape), xp.dtype_of(x))


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
    """left * Gelu(right) of X + bias: the sum in X's type (a half add in ORT's CUDA kernel), the
    rest in f32, rounded once."""
    y = f32(xp, x + bias)
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
