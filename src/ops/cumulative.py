"""Cumulative products: CumProd (CumSum lives with the shape ops)."""

import numpy as np

from .registry import op


@op("CumProd", 26, static=(1,))
def cumprod(xp, x, axis, *, exclusive=0, reverse=0):
    axis = int(np.asarray(axis))
    axis = axis + x.ndim if axis < 0 else axis
    dt = xp.dtype_of(x)
    if reverse:
        x = xp.flip(x, axis=axis)
    if exclusive:  # shift right by one along axis, a one first
        head = [slice(None)] * x.ndim
        head[axis] = slice(0, x.shape[axis] - 1)
        ones_shape = list(x.shape)
        ones_shape[axis] = 1
        x = xp.concatenate([xp.ones(tuple(ones_shape), dt), x[tuple(head)]], axis=axis)
    out = xp.astype(xp.cumprod(x, axis=axis), dt)
    return xp.flip(out, axis=axis) if reverse else out
