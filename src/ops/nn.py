"""Neural-network math: MatMul, Gemm, Softmax, normalizations, Dropout, Einsum.

Half-precision inputs keep sums, normalizations and softmax in f32 inside the op."""

import numpy as np

from .random import draw
from .registry import op


def _f32(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) else x


def _back(xp, y, like):
    return xp.astype(y, xp.dtype_of(like))


@op("MatMul", 1)
def matmul(xp, a, b):
    return xp.matmul(a, b)


@op("Gemm", 1)
def gemm(xp, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    a = xp.swapaxes(a, -1, -2) if transA else a
    b = xp.swapaxes(b, -1, -2) if transB else b
    dt = xp.dtype_of(a)
    y = xp.matmul(a, b)
    if alpha != 1.0:
        y = y * xp.asarray(alpha, dt)
    if c is not None:
        y = y + (c * xp.asarray(beta, dt) if beta != 1.0 else c)
    return y


def normalized_axis(axis, x):
    """``axis`` in [0, rank): ONNX allows [-rank, rank - 1]; past it the axis ranges below ran
    over nothing (a LayerNormalization of axis 7 normalized no axis, garbage out)."""
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an input of rank {x.ndim}: it must "
                         f"be in [{-x.ndim}, {x.ndim - 1}]")
    return axis % x.ndim


def _softmax_v1(xp, x, axis, fn):
    """Opset < 13: coerce to 2-D at ``axis``, normalize each row."""
    axis = normalized_axis(axis, x)
    shape = x.shape
    flat = xp.reshape(x, (int(np.prod(shape[:axis])), -1))
    return xp.reshape(fn(flat, axis=1), shape)


@op("Softmax", 1)
def softmax_v1(xp, x, *, axis=1):
    return _back(xp, _softmax_v1(xp, _f32(xp, x), axis, xp.softmax), x)


@op("Softmax", 13)
def softmax(xp, x, *, axis=-1):
    return _back(xp, xp.softmax(_f32(xp, x), axis=axis), x)


@op("LogSoftmax", 1)
def log_softmax_v1(xp, x, *, axis=1):
    return _back(xp, _softmax_v1(xp, _f32(xp, x), axis, xp.log_softmax), x)


@op("LogSoftmax", 13)
def log_softmax(xp, x, *, axis=-1):
    return _back(xp, xp.log_softmax(_f32(xp, x), axis=axis), x)


def _hardmax(xp, x, axis):
    idx = xp.argmax(x, axis=axis)
    classes = xp.arange(x.shape[axis], dtype=np.int64)
    shape = [1] * x.ndim
    shape[axis] = -1
    return xp.astype(xp.expand_dims(idx, axis) == xp.reshape(classes, tuple(shape)), xp.dtype_of(x))


@op("Hardmax", 1)
def hardmax_v1(xp, x, *, axis=1):
    return _softmax_v1(xp, x, axis, lambda y, axis: _hardmax(xp, y, axis))


@op("Hardmax", 13)
def hardmax(xp, x, *, axis=-1):
    return _hardmax(xp, x, normalized_axis(axis, x))


def normalize(xp, x, axes, epsilon):
    """(x - mean) / sqrt(var + eps) over ``axes``, in f32 for half inputs; also mean and 1/std."""
    xf = _f32(xp, x)
    mean = xp.mean(xf, axis=axes, keepdims=True)
    centered = xf - mean
    var = xp.mean(centered * centered, axis=axes, keepdims=True)
    inv_std = 1 / xp.sqrt(var + xp.asarray(epsilon, xp.dtype_of(xf)))
    return centered * inv_std, mean, inv_std


@op("LayerNormalization", 17)
def layer_normalization(xp, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = normalized_axis(axis, x)
    axes = tuple(range(axis, x.ndim))
    y, mean, inv_std = normalize(xp, x, axes, epsilon)
    y = y * _f32(xp, scale)
    if bias is not None:
        y = y + _f32(xp, bias)
    return _back(xp, y, x), mean, inv_std


@op("RMSNormalization", 23)
def rms_normalization(xp, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = normalized_axis(axis, x)
    xf = _f32(xp, x)
    ms = xp.mean(xf * xf, axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = xf / xp.sqrt(ms + xp.asarray(epsilon, xp.dtype_of(xf)))
    return _back(xp, y * _f32(xp, scale), x)


@op("GroupNormalization", 18)
def group_normalization(xp, x, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    n, c = x.shape[:2]
    grouped = xp.reshape(x, (n, num_groups, -1))
    y, _, _ = normalize(xp, grouped, (2,), epsilon)
    y = xp.reshape(y, x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if scale.shape[0] != c:  # opset 18 form: scale/bias per group
        scale = xp.repeat(scale, c // num_groups)
        bias = xp.repeat(bias, c // num_groups)
    return _back(xp, y * xp.reshape(_f32(xp, scale), shape) + xp.reshape(_f32(xp, bias), shape), x)


@op("InstanceNormalization", 1)
def instance_normalization(xp, x, scale, bias, *, epsilon=1e-5):
    y, _, _ = normalize(xp, x, tuple(range(2, x.ndim)), epsilon)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return _back(xp, y * xp.reshape(_f32(xp, scale), shape) + xp.reshape(_f32(xp, bias), shape), x)


@op("BatchNormalization", 1)
def batch_normalization(xp, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9,
                        spatial=1, is_test=0, training_mode=0, consumed_inputs=None):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training_mode:
        axes = (0,) + tuple(range(2, x.ndim))
        batch_mean = xp.mean(x, axis=axes)
        batch_var = xp.var(x, axis=axes)
        y = (x - xp.reshape(batch_mean, shape)) / xp.sqrt(
            xp.reshape(batch_var, shape) + epsilon) * xp.reshape(scale, shape) + xp.reshape(
            bias, shape)
        running_mean = mean * momentum + batch_mean * (1 - momentum)
        running_var = var * momentum + batch_var * (1 - momentum)
        return _back(xp, y, x), _back(xp, running_mean, mean), _back(xp, running_var, var)
    # As ONNX Runtime's kernel: x * s + (bias - mean * s), s = scale / sqrt(var + eps), in f32
    # for half inputs (rounded once).
    xf, (scale, bias, mean, var) = _f32(xp, x), (_f32(xp, v) for v in (scale, bias, mean, var))
    s = xp.reshape(scale, shape) / xp.sqrt(xp.reshape(var, shape) + xp.asarray(
        epsilon, xp.dtype_of(var)))
    return _back(xp, xf * s + (xp.reshape(bias, shape) - xp.reshape(mean, shape) * s), x)


@op("LpNormalization", 1)
def lp_normalization(xp, x, *, axis=-1, p=2):
    # half inputs in f32, rounded once: ORT's kernel takes float and double only, and runs a
    # half graph's between casts (summing in half put 39% of values an ulp off, issue 40)
    xf = _f32(xp, x)
    norm = (xp.sqrt(xp.sum(xf * xf, axis=axis, keepdims=True)) if p == 2
            else xp.sum(xp.abs(xf), axis=axis, keepdims=True))
    y = xp.where(norm == 0, xp.zeros_like(xf), xf / xp.where(norm == 0, xp.ones_like(norm), norm))
    return _back(xp, y, x)


@op("MeanVarianceNormalization", 9)
def mean_variance_normalization(xp, x, *, axes=(0, 2, 3)):
    y, _, _ = normalize(xp, x, tuple(axes), 1e-9)
    return _back(xp, y, x)


@op("Dropout", 1, context=True)
def dropout(xp, x, *, ratio=0.5, is_test=0, ctx=None):
    # Before opset 12 Dropout is the identity at inference (ONNX Runtime runs it so whatever
    # is_test says), with an all-true mask when asked for.
    return _identity_dropout(xp, x, ctx)


@op("Dropout", 12, static=(1, 2), context=True, random=True)
def dropout_12(xp, x, ratio=None, training_mode=None, *, seed=None, ctx=None):
    """Training mode zeroes each element with probability ``ratio`` and scales the rest by
    1 / (1 - ratio); the mask says which were kept."""
    ratio = 0.5 if ratio is None else float(np.asarray(ratio))
    if training_mode is None or not bool(np.asarray(training_mode)) or ratio == 0:
        return _identity_dropout(xp, x, ctx)
    if not 0 <= ratio < 1:
        raise ValueError(f"Dropout ratio must be in [0, 1) in training mode, got {ratio}")
    wide = np.float64 if xp.dtype_of(x) == np.float64 else np.float32
    u = draw(xp, "uniform", x.shape, wide, seed, ctx)
    mask = u >= ratio
    y = xp.astype(xp.where(mask, xp.astype(x, wide) / (1 - ratio), 0), xp.dtype_of(x))
    return (y, mask) if ctx is not None and ctx.n_outputs > 1 else y


def _identity_dropout(xp, x, ctx):
    if ctx is not None and ctx.n_outputs > 1:
        return x, xp.ones(x.shape, dtype=bool)
    return x


@op("Einsum", 12)
def einsum(xp, *xs, equation):
    return xp.einsum(equation.replace(" ", ""), *xs)
