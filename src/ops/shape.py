"""Shapes and layout: Shape, Reshape, Transpose, Concat, Split, Slice, Gather, Expand, Pad, ..."""

import math

import numpy as np

from .bounds import Along, Leading, check_allocation
from .registry import op


def _ints(v):
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


@op("Shape", 1)
def shape(xp, x, *, start=0, end=None):
    dims = tuple(x.shape)
    return np.array(dims[slice(start, end)], dtype=np.int64)


@op("Size", 1)
def size(xp, x):
    return np.array(int(np.prod(x.shape)), dtype=np.int64)


@op("Constant", 1)
def constant(xp, *, value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return value
    if sparse_value is not None:
        return sparse_value
    if value_float is not None:
        return np.array(value_float, np.float32)
    if value_floats is not None:
        return np.array(value_floats, np.float32)
    if value_int is not None:
        return np.array(value_int, np.int64)
    if value_ints is not None:
        return np.array(value_ints, np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    return np.array(value_strings, dtype=object)


def reshape_target(in_shape, target, allowzero=0):
    target = _ints(target)
    if not allowzero:
        target = [in_shape[i] if d == 0 else d for i, d in enumerate(target)]
    return tuple(target)


@op("Reshape", 5, static=(1,))
def reshape(xp, x, shape, *, allowzero=0):
    return xp.reshape(x, reshape_target(x.shape, shape, allowzero))


@op("Reshape", 1)
def reshape_v1(xp, x, *, shape):
    return xp.reshape(x, reshape_target(x.shape, shape))


@op("Flatten", 1)
def flatten(xp, x, *, axis=1):
    axis = _axis(axis, x.ndim)
    lead = int(np.prod(x.shape[:axis]))
    return xp.reshape(x, (lead, -1) if lead else (0, int(np.prod(x.shape[axis:]))))


@op("Squeeze", 1)
def squeeze_v1(xp, x, *, axes=None):
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return xp.squeeze(x, axis=tuple(_axis(a, x.ndim) for a in axes))


@op("Squeeze", 13, static=(1,))
def squeeze(xp, x, axes=None):
    return squeeze_v1(xp, x, axes=None if axes is None else _ints(axes))


@op("Unsqueeze", 1)
def unsqueeze_v1(xp, x, *, axes):
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return xp.reshape(x, tuple(shape))


@op("Unsqueeze", 13, static=(1,))
def unsqueeze(xp, x, axes):
    return unsqueeze_v1(xp, x, axes=_ints(axes))


@op("Transpose", 1)
def transpose(xp, x, *, perm=None):
    return xp.transpose(x, None if perm is None else tuple(perm))


@op("Concat", 1)
def concat(xp, *xs, axis=0):
    return xp.concatenate(list(xs), axis=axis)


def _split(xp, x, axis, sizes, n_outputs):
    axis = _axis(axis, x.ndim)
    dim = x.shape[axis]
    if sizes is None:
        chunk = -(-dim // n_outputs)
        sizes = [min(chunk, dim - i * chunk) for i in range(n_outputs)]
    bounds = np.cumsum([0] + list(sizes))
    index = [slice(None)] * x.ndim
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(lo), int(hi))
        parts.append(x[tuple(index)])
    return tuple(parts)


@op("Split", 1, context=True)
def split_v1(xp, x, *, axis=0, split=None, ctx):
    return _split(xp, x, axis, split, ctx.n_outputs)


@op("Split", 13, static=(1,), context=True)
def split(xp, x, sizes=None, *, axis=0, ctx):
    return _split(xp, x, axis, None if sizes is None else _ints(sizes), ctx.n_outputs)


@op("Split", 18, static=(1,), context=True)
def split_v18(xp, x, sizes=None, *, axis=0, num_outputs=None, ctx):
    return _split(xp, x, axis, None if sizes is None else _ints(sizes), num_outputs or ctx.n_outputs)


def _slice(xp, x, starts, ends, axes=None, steps=None):
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else [_axis(a, x.ndim) for a in _ints(axes)]
    steps = [1] * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        dim = x.shape[axis]
        # Clamp as ONNX does (INT_MAX / INT_MIN ends, negative starts) via Python's slice.indices.
        lo, hi, st = slice(start, end, step).indices(dim)
        index[axis] = slice(lo, hi if hi >= 0 else None, st)
    return x[tuple(index)]


@op("Slice", 1)
def slice_v1(xp, x, *, starts, ends, axes=None):
    return _slice(xp, x, starts, ends, axes)


def _check_slice_inputs(**inputs):
    """ONNX Runtime's checks of Slice's starts/ends/axes/steps (slice.h): each 1-D, all one
    length. Without them a 0-d ends (one flipped byte in a Constant's dims) slices as [n]."""
    n = np.size(inputs["starts"])
    for name, v in inputs.items():
        if v is None:
            continue
        if np.ndim(v) != 1:
            raise ValueError(f"{name} must be a 1-D array, got shape {list(np.shape(v))}")
        if np.size(v) != n:
            raise ValueError(f"{name} has {np.size(v)} entries and starts {n}: Slice takes "
                             "one of each per sliced axis")


@op("Slice", 10, static=(1, 2, 3, 4))
def slice_(xp, x, starts, ends, axes=None, steps=None):
    _check_slice_inputs(starts=starts, ends=ends, axes=axes, steps=steps)
    return _slice(xp, x, starts, ends, axes, steps)


@op("Gather", 1, indices={1: Along()})
def gather(xp, x, indices, *, axis=0):
    axis = _axis(axis, x.ndim)
    dim = x.shape[axis]
    indices = xp.where(indices < 0, indices + dim, indices)
    return xp.take(x, indices, axis=axis)


@op("GatherElements", 11, indices={1: Along()})
def gather_elements(xp, x, indices, *, axis=0):
    axis = _axis(axis, x.ndim)
    indices = xp.where(indices < 0, indices + x.shape[axis], indices)
    return xp.take_along_axis(x, indices, axis=axis)


@op("GatherND", 11, indices={1: Leading(batch="batch_dims")})
def gather_nd(xp, x, indices, *, batch_dims=0):
    b = batch_dims
    k = indices.shape[-1]
    batch_shape = tuple(x.shape[:b])
    nb = int(np.prod(batch_shape)) if b else 1
    data = xp.reshape(x, (nb,) + tuple(x.shape[b:]))
    idx = xp.reshape(indices, (nb, -1, k))
    dims = np.array(x.shape[b:b + k])
    idx = xp.where(idx < 0, idx + xp.asarray(dims, np.int64), idx)
    batch = xp.reshape(xp.arange(nb, dtype=np.int64), (nb, 1))
    picked = data[(batch,) + tuple(idx[..., i] for i in range(k))]
    return xp.reshape(picked, batch_shape + tuple(indices.shape[b:-1]) + tuple(x.shape[b + k:]))


@op("Expand", 8, static=(1,))
def expand(xp, x, shape):
    target = tuple(int(d) for d in np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))
    check_allocation(target, x.dtype)
    return xp.broadcast_to(x, target)


@op("Tile", 6, static=(1,))
def tile(xp, x, repeats):
    repeats = tuple(_ints(repeats))
    check_allocation([d * r for d, r in zip(x.shape, repeats)], x.dtype)
    return xp.tile(x, repeats)


@op("ConstantOfShape", 9, static=(0,))
def constant_of_shape(xp, shape, *, value=None):
    value = np.zeros(1, np.float32) if value is None else value
    shape = tuple(_ints(shape))
    check_allocation(shape, value.dtype)
    return np.full(shape, value.reshape(-1)[0], dtype=value.dtype)


@op("Range", 11, static="all")
def range_(xp, start, limit, delta):
    # Scalars by the spec; one-element tensors (as some exported functions give) accepted too.
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if delta != 0:  # the spec's count: max(ceil((limit - start) / delta), 0)
        check_allocation([max(math.ceil((float(limit) - float(start)) / float(delta)), 0)],
                         start.dtype)
    return np.arange(start, limit, delta, dtype=start.dtype)


def _pad(xp, x, pads, mode, value, axes=None):
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
    n = len(axes)
    width = [(0, 0)] * rank
    for i, a in enumerate(axes):
        width[a] = (pads[i], pads[i + n])
    # Negative pads crop.
    crop = tuple(slice(max(-lo, 0), x.shape[a] - max(-hi, 0)) for a, (lo, hi) in enumerate(width))
    x = x[crop]
    width = [(max(lo, 0), max(hi, 0)) for lo, hi in width]
    check_allocation([d + lo + hi for d, (lo, hi) in zip(x.shape, width)], x.dtype)
    if mode == "constant":
        return xp.pad(x, width, mode="constant", constant_values=value)
    return xp.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


@op("Pad", 2)
def pad_v2(xp, x, *, pads, mode="constant", value=0.0):
    return _pad(xp, x, list(pads), mode, value)


@op("Pad", 11, static=(1, 2, 3))
def pad(xp, x, pads, constant_value=None, axes=None, *, mode="constant"):
    value = 0 if constant_value is None else np.asarray(constant_value).reshape(-1)[0]
    if value is not None and x.dtype != object and not isinstance(value, str):
        value = np.asarray(value).astype(xp.dtype_of(x) if hasattr(xp, "dtype_of") else x.dtype)
    return _pad(xp, x, _ints(pads), mode, value, None if axes is None else _ints(axes))


@op("Trilu", 14, static=(1,))
def trilu(xp, x, k=None, *, upper=1):
    k = 0 if k is None else int(np.asarray(k))
    return xp.triu(x, k) if upper else xp.tril(x, k)


@op("NonZero", 9, host=True)
def non_zero(xp, x):
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@op("OneHot", 11, static=(1,))
def one_hot(xp, indices, depth, values, *, axis=-1):
    depth = int(np.asarray(depth).reshape(-1)[0])
    check_allocation([*indices.shape, depth], values.dtype)
    indices = xp.where(indices < 0, indices + depth, indices)
    rank = indices.ndim + 1
    axis = _axis(axis, rank)
    classes = xp.reshape(xp.arange(depth, dtype=np.int64),
                         tuple(depth if i == axis else 1 for i in range(rank)))
    hot = xp.expand_dims(indices, axis) == classes
    return xp.where(hot, values[1], values[0])


@op("CumSum", 11, static=(1,))
def cumsum(xp, x, axis, *, exclusive=0, reverse=0):
    axis = _axis(int(np.asarray(axis)), x.ndim)
    dt = xp.dtype_of(x)
    if xp.is_half(x):  # ONNX Runtime sums half values in f32, rounding each output once
        x = xp.astype(x, np.float32)
    if reverse:
        x = xp.flip(x, axis=axis)
    out = xp.cumsum(x, axis=axis, dtype=xp.dtype_of(x))
    if exclusive:
        out = out - x
    return xp.astype(xp.flip(out, axis=axis) if reverse else out, dt)


def _scatter_index(xp, indices, shape, axis):
    """Index tuple placing ``indices`` (along ``axis``) of an update tensor of the same shape."""
    grids = list(xp.meshgrid(*[xp.arange(d, dtype=np.int64) for d in indices.shape],
                             indexing="ij"))
    grids[axis] = xp.where(indices < 0, indices + shape[axis], indices)
    return tuple(grids)


_REDUCTIONS = {"none": "set", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@op("ScatterElements", 11, indices={1: Along()})
def scatter_elements(xp, x, indices, updates, *, axis=0, reduction="none"):
    axis = _axis(axis, x.ndim)
    return xp.index_update(x, _scatter_index(xp, indices, x.shape, axis), updates,
                           _REDUCTIONS[reduction])


@op("Scatter", 9, indices={1: Along()})
def scatter(xp, x, indices, updates, *, axis=0):
    return scatter_elements(xp, x, indices, updates, axis=axis)


@op("ScatterND", 11, indices={1: Leading()})
def scatter_nd(xp, x, indices, updates, *, reduction="none"):
    k = indices.shape[-1]
    idx = tuple(xp.where(indices[..., i] < 0, indices[..., i] + x.shape[i], indices[..., i])
                for i in range(k))
    return xp.index_update(x, idx, updates, _REDUCTIONS[reduction])


@op("DepthToSpace", 1)
def depth_to_space(xp, x, *, blocksize, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = xp.reshape(x, (n, b, b, c // (b * b), h, w))
        y = xp.transpose(y, (0, 3, 4, 1, 5, 2))
    else:
        y = xp.reshape(x, (n, c // (b * b), b, b, h, w))
        y = xp.transpose(y, (0, 1, 4, 2, 5, 3))
    return xp.reshape(y, (n, c // (b * b), h * b, w * b))


@op("SpaceToDepth", 1)
def space_to_depth(xp, x, *, blocksize, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    y = xp.reshape(x, (n, c, h // b, b, w // b, b))
    y = xp.transpose(y, (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return xp.reshape(y, (n, c * b * b, h // b, w // b))
