"""Matrices: Det, EyeLike."""

import numpy as np

from .. import dtypes
from .registry import op


@op("Det", 11)
def det(xp, x):
    """Determinant of the last two axes (batched); half precision computes in f32."""
    dt = xp.dtype_of(x)
    return xp.astype(xp.linalg.det(xp.astype(x, np.float32) if xp.is_half(x) else x), dt)


@op("EyeLike", 9)
def eye_like(xp, x, *, dtype=None, k=0):
    """Ones on diagonal ``k`` of a matrix shaped like the 2-D input; only its shape is read, so the
    result is a host constant."""
    if x.ndim != 2:
        raise ValueError(f"EyeLike takes a 2-D input, got shape {list(x.shape)}")
    out = dtypes.to_numpy(dtype) if dtype is not None else xp.dtype_of(x)
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=out)
