"""Pooling: AveragePool, MaxPool (with Indices), LpPool, their Global forms, MaxUnpool,
MaxRoiPool, LRN.

Window sums and maxima use the backend's ``reduce_window`` primitive; the divisor of an average
(how many real or padded elements each window covers) is host arithmetic on the geometry.
Half-precision inputs accumulate in f32."""

import itertools

import numpy as np

from . import window
from .registry import op


def _f32(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) else x


def _lowest(dtype):
    dtype = np.dtype(dtype)
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _window(x, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode):
    return window.resolve(x.shape[2:], kernel_shape, strides=strides, pads=pads,
                          dilations=dilations, auto_pad=auto_pad, ceil_mode=ceil_mode)


def _reduce(xp, x, win, op_name, init):
    return xp.reduce_window(x, init, op_name, window=(1, 1) + win.kernel,
                            strides=(1, 1) + win.strides,
                            padding=[(0, 0), (0, 0)] + win.padding,
                            dilation=(1, 1) + win.dilations)


def _counts(in_shape, win, include_pad):
    """How many elements each output window averages over, as an array of the output's spatial
    shape: real elements, plus the explicit pads when ``include_pad`` (never ceil_mode's extra)."""
    total = np.ones((), np.float64)
    for i, size in enumerate(in_shape):
        lo = -win.begin[i] if include_pad else 0
        hi = size + win.given_end[i] if include_pad else size
        starts = np.arange(win.out[i]) * win.strides[i] - win.begin[i]
        taps = starts[:, None] + np.arange(win.kernel[i]) * win.dilations[i]
        n = ((taps >= lo) & (taps < hi)).sum(axis=1)
        total = np.multiply.outer(total, n)
    return total


def _average(xp, x, win, count_include_pad):
    xf = _f32(xp, x)
    total = _reduce(xp, xf, win, "add", 0)
    counts = _counts(x.shape[2:], win, count_include_pad)
    return xp.astype(total / xp.asarray(counts.astype(xp.dtype_of(xf))), xp.dtype_of(x))


@op("AveragePool", 1)
def average_pool(xp, x, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape, pads=None, strides=None):
    win = _window(x, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    return _average(xp, x, win, count_include_pad)


def _max_with_indices(xp, x, win, storage_order):
    """Maxima and their flat indices (first maximum in window order wins), by walking the kernel
    taps over strided views of the padded input."""
    spatial = x.shape[2:]
    nd = len(spatial)
    low = _lowest(xp.dtype_of(x))
    padded = xp.pad(x, [(0, 0), (0, 0)] + win.padding, constant_values=low)
    # Flat spatial strides: row-major, or column-major for storage_order=1.
    order = range(nd - 1, -1, -1) if storage_order else range(nd)
    steps = [0] * nd
    step = 1
    for i in reversed(list(order)):
        steps[i] = step
        step *= spatial[i]
    best = best_index = None
    for tap in itertools.product(*[range(k) for k in win.kernel]):
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                      for t, d, o, s in zip(tap, win.dilations, win.out, win.strides))
        values = padded[(slice(None), slice(None)) + index]
        flat = np.zeros(win.out, np.int64)
        for i in range(nd):
            pos = np.arange(win.out[i]) * win.strides[i] - win.begin[i] + tap[i] * win.dilations[i]
            flat = flat + (pos * steps[i]).reshape((-1,) + (1,) * (nd - 1 - i))
        flat = xp.asarray(flat)
        if best is None:
            best, best_index = values, xp.broadcast_to(flat, values.shape)
        else:
            better = values > best
            best = xp.where(better, values, best)
            best_index = xp.where(better, flat, best_index)
    n, c = x.shape[:2]
    plane = int(np.prod(spatial))
    base = xp.asarray((np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * nd))
    return best, best_index + base


@op("MaxPool", 1, context=True)
def max_pool(xp, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None,
             storage_order=0, strides=None, ctx=None):
    win = _window(x, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    if ctx is not None and ctx.n_outputs > 1:
        return _max_with_indices(xp, x, win, storage_order)
    return _reduce(xp, x, win, "max", _lowest(xp.dtype_of(x)))


def _lp(xp, x, win, p):
    xf = _f32(xp, x)
    y = _reduce(xp, xp.abs(xf) ** p if p != 2 else xf * xf, win, "add", 0)
    return xp.astype(xp.sqrt(y) if p == 2 else y ** (1.0 / p), xp.dtype_of(x))


@op("LpPool", 1)
def lp_pool(xp, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, p=2,
            pads=None, strides=None):
    win = _window(x, kernel_shape, strides, pads, dilations, auto_pad, ceil_mode)
    return _lp(xp, x, win, p)


def _spatial(x):
    return tuple(range(2, x.ndim))


@op("GlobalAveragePool", 1)
def global_average_pool(xp, x):
    return xp.astype(xp.mean(_f32(xp, x), axis=_spatial(x), keepdims=True), xp.dtype_of(x))


@op("GlobalMaxPool", 1)
def global_max_pool(xp, x):
    return xp.max(x, axis=_spatial(x), keepdims=True)


@op("GlobalLpPool", 1)
def global_lp_pool(xp, x, *, p=2):
    xf = _f32(xp, x)
    y = xp.sum(xp.abs(xf) ** p, axis=_spatial(x), keepdims=True)
    return xp.astype(y ** (1.0 / p), xp.dtype_of(x))


@op("MaxUnpool", 9, static=(2,))
def max_unpool(xp, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    """Scatter ``x`` to the flat positions ``indices`` (MaxPool's) of a zero tensor."""
    nd = x.ndim - 2
    strides = list(strides) if strides else [1] * nd
    pads = list(pads) if pads else [0] * (2 * nd)
    inferred = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i]
                                    + kernel_shape[i] for i in range(nd)]
    flat = xp.zeros((int(np.prod(inferred)),), dtype=xp.dtype_of(x))
    flat = xp.index_update(flat, (xp.reshape(xp.astype(indices, np.int64), (-1,)),),
                           xp.reshape(x, (-1,)), "set")
    y = xp.reshape(flat, tuple(inferred))
    if output_shape is None:
        return y
    target = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    return xp.pad(y, [(0, t - s) for t, s in zip(target, inferred)])


@op("MaxRoiPool", 1, static=(1,))
def max_roi_pool(xp, x, rois, *, pooled_shape, spatial_scale=1.0):
    """Max over each box's bins; boxes (batch, x1, y1, x2, y2) are read on the host."""
    _, c, h, w = x.shape
    ph, pw = pooled_shape
    outs = []
    for roi in np.asarray(rois, np.float64):
        batch = int(roi[0])
        x1, y1, x2, y2 = (int(np.floor(v * spatial_scale + 0.5)) for v in roi[1:])
        roi_h, roi_w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)

        def bins(count, start, length, size):
            mask = np.zeros((count, size), bool)
            for i in range(count):
                lo = min(max(int(np.floor(i * length / count)) + start, 0), size)
                hi = min(max(int(np.ceil((i + 1) * length / count)) + start, 0), size)
                mask[i, lo:hi] = True
            return mask

        mask_h, mask_w = bins(ph, y1, roi_h, h), bins(pw, x1, roi_w, w)
        low = xp.asarray(np.array(_lowest(xp.dtype_of(x)), xp.dtype_of(x)))
        feat = x[batch]  # (C, H, W)
        cols = xp.max(xp.where(xp.asarray(mask_w)[None, None], feat[:, :, None, :], low), axis=3)
        y = xp.max(xp.where(xp.asarray(mask_h)[None, :, :, None], cols[:, None, :, :], low), axis=2)
        empty = ~(mask_h.any(1)[:, None] & mask_w.any(1)[None, :])
        outs.append(xp.where(xp.asarray(empty), xp.zeros_like(y), y))
    return xp.stack(outs) if outs else xp.zeros((0, c, ph, pw), dtype=xp.dtype_of(x))


@op("LRN", 1)
def lrn(xp, x, *, alpha=1e-4, beta=0.75, bias=1.0, size):
    """x / (bias + alpha/size * sum of squares over the ``size`` neighbouring channels)^beta."""
    xf = _f32(xp, x)
    before = (size - 1) // 2
    after = size - 1 - before
    nd = x.ndim - 2
    sq = xp.reduce_window(xf * xf, 0, "add", window=(1, size) + (1,) * nd,
                          strides=(1,) * x.ndim,
                          padding=[(0, 0), (before, after)] + [(0, 0)] * nd)
    y = xf / (bias + (alpha / size) * sq) ** beta
    return xp.astype(y, xp.dtype_of(x))

