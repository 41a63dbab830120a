"""Reductions (ReduceSum, ReduceMean, ...) and ArgMax/ArgMin.

Until opset 18 (13 for ReduceSum) axes are an attribute; from then on an optional input, with
``noop_with_empty_axes`` saying what an empty list means."""

import numpy as np

from ..backends.numpy import XP as NP
from .registry import op


def _reduce(fn, xp, x, axes, keepdims, noop_with_empty_axes=0):
    # Flags are 1 or not, as ONNX's shape inference and ONNX Runtime read them: keepdims=2 drops
    # the axes (ORT's reduction_kernel_base.h, `keepdims == 1`).
    keepdims = keepdims == 1
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes == 1:
            return x
        axes = None
    else:
        axes = tuple(int(a) + x.ndim if int(a) < 0 else int(a) for a in np.asarray(axes).reshape(-1))
    if 0 in x.shape:
        # A reduction over nothing is the reducer's identity, known from shapes alone: computed on
        # the host (MLX can stall evaluating reductions of empty arrays).
        host = fn(NP, np.zeros(x.shape, xp.dtype_of(x)), axes, keepdims)
        return host if xp is NP else xp.asarray(host)
    if xp.is_half(x):
        # ONNX Runtime computes a half reduction in f32 (the square, abs or exp of each element
        # too) and rounds once; summed in half it drifts by ulps per hundred terms.
        return xp.astype(fn(xp, xp.astype(x, np.float32), axes, keepdims), xp.dtype_of(x))
    return fn(xp, x, axes, keepdims)


def _sum(xp, x, axes, keep):
    return xp.sum(x, axis=axes, keepdims=keep, dtype=xp.dtype_of(x))


def _mean(xp, x, axes, keep):
    return xp.astype(xp.mean(x, axis=axes, keepdims=keep), xp.dtype_of(x))


def _max(xp, x, axes, keep):
    if 0 in x.shape:  # an empty reduction gives the identity, -inf (or the dtype's minimum)
        return _empty_reduce(xp, x, axes, keep, "min")
    return xp.max(x, axis=axes, keepdims=keep)


def _min(xp, x, axes, keep):
    if 0 in x.shape:
        return _empty_reduce(xp, x, axes, keep, "max")
    return xp.min(x, axis=axes, keepdims=keep)


def _empty_reduce(xp, x, axes, keep, bound):
    dt = xp.dtype_of(x)
    if dt == np.bool_:  # max of nothing is False, min of nothing is True
        value = bound == "max"
    elif dt.kind == "f":
        value = -np.inf if bound == "min" else np.inf
    else:
        value = getattr(np.iinfo(dt), bound)
    shape = np.sum(np.zeros(x.shape), axis=axes, keepdims=keep).shape
    return xp.full(shape, value, dtype=dt)


def _prod(xp, x, axes, keep):
    return xp.prod(x, axis=axes, keepdims=keep, dtype=xp.dtype_of(x))


def _l1(xp, x, axes, keep):
    return _sum(xp, xp.abs(x), axes, keep)


def _l2(xp, x, axes, keep):
    return xp.astype(xp.sqrt(_sum(xp, x * x, axes, keep)), xp.dtype_of(x))


def _sum_square(xp, x, axes, keep):
    return _sum(xp, x * x, axes, keep)


def _log_sum(xp, x, axes, keep):
    return xp.log(_sum(xp, x, axes, keep))


def _log_sum_exp(xp, x, axes, keep):
    if 0 in x.shape:
        return xp.log(_sum(xp, x, axes, keep))
    m = xp.max(x, axis=axes, keepdims=True)
    m = xp.where(xp.isinf(m), xp.zeros_like(m), m)
    out = xp.log(_sum(xp, xp.exp(x - m), axes, True)) + m
    return out if keep else xp.squeeze(out, axis=axes if axes is not None else None)


_REDUCERS = {
    "ReduceSum": (_sum, 13), "ReduceMean": (_mean, 18), "ReduceMax": (_max, 18),
    "ReduceMin": (_min, 18), "ReduceProd": (_prod, 18), "ReduceL1": (_l1, 18),
    "ReduceL2": (_l2, 18), "ReduceSumSquare": (_sum_square, 18), "ReduceLogSum": (_log_sum, 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
}


def _register(name, fn, input_since):
    @op(name, 1)
    def attribute_form(xp, x, *, axes=None, keepdims=1):
        return _reduce(fn, xp, x, axes, keepdims)

    @op(name, input_since, static=(1,))
    def input_form(xp, x, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return _reduce(fn, xp, x, axes, keepdims, noop_with_empty_axes)


for _name, (_fn, _since) in _REDUCERS.items():
    _register(_name, _fn, _since)


def _arg(fn, xp, x, axis, keepdims, select_last_index):
    axis = axis + x.ndim if axis < 0 else axis
    if select_last_index:
        flipped = xp.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        idx = fn(x, axis=axis)
    idx = xp.astype(idx, np.int64)
    return xp.expand_dims(idx, axis) if keepdims == 1 else idx


@op("ArgMax", 1)
def arg_max(xp, x, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(xp.argmax, xp, x, axis, keepdims, select_last_index)


@op("ArgMin", 1)
def arg_min(xp, x, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(xp.argmin, xp, x, axis, keepdims, select_last_index)
