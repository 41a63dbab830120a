"""Standard-domain transformer pieces besides Attention: RotaryEmbedding (23), SwiGLU (28),
TensorScatter (24). ``rotate`` is shared with the com.microsoft rotary ops."""

import numpy as np

from .attention import f32
from .registry import op


def rotate(xp, x, cos, sin, interleaved):
    """Rotate the last axis of ``x`` (length 2 * cos.shape[-1]) by the angles in cos/sin, which
    broadcast against x[..., :half]. Halves: (x1, x2) = split; interleaved: even/odd lanes."""
    half = cos.shape[-1]
    if interleaved:
        pairs = xp.reshape(x, x.shape[:-1] + (half, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
    else:
        x1, x2 = x[..., :half], x[..., half:2 * half]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        return xp.reshape(xp.stack([real, imag], axis=-1), x.shape)
    return xp.concatenate([real, imag], axis=-1)


def rotate_partial(xp, x, cos, sin, interleaved, rotary_dim):
    """Rotate the first ``rotary_dim`` lanes of the last axis, pass the rest through."""
    if rotary_dim >= x.shape[-1]:
        return rotate(xp, x, cos, sin, interleaved)
    turned = rotate(xp, x[..., :rotary_dim], cos, sin, interleaved)
    return xp.concatenate([turned, x[..., rotary_dim:]], axis=-1)


@op("RotaryEmbedding", 23)
def rotary_embedding(xp, x, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                     num_heads=0, rotary_embedding_dim=0):
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        x = xp.transpose(x, (0, 2, 1, 3))
    else:  # (B, S, H*D)
        x = xp.reshape(x, shape[:2] + (num_heads, shape[2] // num_heads))
    rot = rotary_embedding_dim or x.shape[-1]
    if position_ids is not None:
        cos_cache = xp.take(cos_cache, position_ids, axis=0)
        sin_cache = xp.take(sin_cache, position_ids, axis=0)
    # caches: (B, S, rot/2) after the gather, or (S, rot/2) / (B, S, rot/2) given directly.
    cos, sin = xp.expand_dims(cos_cache, -2), xp.expand_dims(sin_cache, -2)
    y = rotate_partial(xp, x, cos, sin, interleaved, rot)
    if len(shape) == 4:
        return xp.transpose(y, (0, 2, 1, 3))
    return xp.reshape(y, shape)


@op("SwiGLU", 28)
def swiglu(xp, a, b, *, alpha=1.0):
    af = f32(xp, a)
    gate = af / (1 + xp.exp(-np.float32(alpha) * af))
    return xp.astype(gate * f32(xp, b), xp.dtype_of(a))


@op("TensorScatter", 24)
def tensor_scatter(xp, past_cache, update, write_indices=None, *, mode="linear", axis=-2):
    """Written as a gather: cache slot p of batch b takes update[p - w[b]] where that is in range
    (modulo the cache length in circular mode), else keeps its past value."""
    axis = axis % past_cache.ndim
    length, seq = past_cache.shape[axis], update.shape[axis]
    grid = [1] * past_cache.ndim
    grid[axis] = length
    slots = xp.reshape(xp.arange(length, dtype=np.int64), tuple(grid))
    if write_indices is None:
        src = slots
    else:
        start = xp.reshape(xp.astype(write_indices, np.int64), (-1,) + (1,) * (past_cache.ndim - 1))
        src = slots - start
    if mode == "circular":
        src = src % length
    valid = (src >= 0) & (src < seq)
    index_shape = past_cache.shape[:axis] + (length,) + past_cache.shape[axis + 1:]
    index = xp.broadcast_to(xp.clip(src, 0, max(seq - 1, 0)), index_shape)
    taken = xp.take_along_axis(update, index, axis=axis)
    return xp.where(xp.broadcast_to(valid, index_shape), taken, past_cache)
