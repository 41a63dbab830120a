"""Resize (every mode, coordinate transformation, antialias, keep_aspect_ratio_policy, axes) and
the older Upsample.

Sizes, scales and roi are static, so the whole sampling plan is host arithmetic: resizing is
separable, and along each resized axis the output gathers the taps of each output position and
sums them with weights (linear, cubic, antialiased) computed here with NumPy."""

import math

import numpy as np

from .bounds import check_allocation
from .registry import op


def _source_coords(mode, out_size, in_size, scale, roi):
    """Where output positions 0..out_size-1 map in the input; also which fall outside the crop
    (tf_crop_and_resize) and take the extrapolation value."""
    y = np.arange(out_size, dtype=np.float64)
    out_width = scale * in_size
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_size) if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        if out_width == 1:
            x = np.full(out_size, (hi - lo) * (in_size - 1) / 2)
        else:
            x = y * (hi - lo) * (in_size - 1) / (out_width - 1)
        x = x + lo * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _nearest_index(x, nearest_mode, in_size, downsampling):
    if nearest_mode == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    elif nearest_mode == "round_prefer_ceil":
        idx = np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    elif nearest_mode == "floor":
        idx = np.floor(x)
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    elif nearest_mode == "simple":  # opset 10 and Upsample
        idx = np.ceil(x) if downsampling else np.floor(x)
    else:
        raise ValueError(f"Resize: unknown nearest_mode {nearest_mode!r}")
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


def _cubic(a):
    def coeffs(t):
        t = np.abs(t)
        return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                        np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
    return coeffs, 2


def _linear(t):
    return np.clip(1 - np.abs(t), 0, None)


def _taps(x, in_size, mode, scale, antialias, cubic_coeff_a, exclude_outside):
    """Input indices and weights, each (out, n), interpolating at source coordinates ``x``;
    indices past the edges are clamped to it (edge padding)."""
    kernel, support = (_linear, 1) if mode == "linear" else _cubic(cubic_coeff_a)
    # antialias widens the kernel by 1/scale when downsampling.
    stretch = min(scale, 1.0) if antialias else 1.0
    reach = support / stretch
    base = np.floor(x)
    offsets = np.arange(-math.ceil(reach) + 1, math.ceil(reach) + 1)
    taps = base[:, None] + offsets[None, :]  # (out, n)
    weights = kernel((taps - x[:, None]) * stretch)
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    if exclude_outside:
        weights = np.where((taps < 0) | (taps > in_size - 1), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, in_size - 1).astype(np.int64), weights


def _resize_axis(xp, x, axis, out_size, scale, roi, *, mode, coordinate_transformation_mode,
                 nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value, antialias):
    in_size = x.shape[axis]
    coords, outside = _source_coords(coordinate_transformation_mode, out_size, in_size, scale, roi)
    if mode == "nearest":
        idx = _nearest_index(coords, nearest_mode, in_size, scale < 1)
        y = xp.take(x, xp.asarray(idx), axis=axis)
    else:
        idx, weights = _taps(coords, in_size, mode, scale, antialias, cubic_coeff_a,
                             exclude_outside)
        gathered = xp.take(x, xp.asarray(idx.reshape(-1)), axis=axis)
        gathered = xp.reshape(gathered, x.shape[:axis] + idx.shape + x.shape[axis + 1:])
        shape = (1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1)
        weights = xp.asarray(weights.reshape(shape).astype(xp.dtype_of(x)))
        y = xp.sum(gathered * weights, axis=axis + 1)
    if outside is not None and outside.any():
        shape = [1] * x.ndim
        shape[axis] = out_size
        fill = xp.asarray(np.array(extrapolation_value, xp.dtype_of(y)))
        y = xp.where(xp.asarray(outside.reshape(shape)), fill, y)
    return y


def _floats(v):
    return None if v is None or np.asarray(v).size == 0 else [float(f) for f in
                                                             np.asarray(v).reshape(-1)]


def _resize(xp, x, roi, scales, sizes, *, mode="nearest", axes=None, antialias=0,
            coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
            extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
            nearest_mode="round_prefer_floor"):
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    scales, roi = _floats(scales), _floats(roi)
    sizes = None if sizes is None or np.asarray(sizes).size == 0 else [
        int(s) for s in np.asarray(sizes).reshape(-1)]
    in_shape = [x.shape[a] for a in axes]
    if sizes is not None:
        scales = [s / i for s, i in zip(sizes, in_shape)]
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            scale = pick(scales)
            scales = [scale] * len(axes)
            sizes = [int(scale * i + 0.5) for i in in_shape]
    else:
        sizes = [int(math.floor(s * i)) for s, i in zip(scales, in_shape)]
    if roi is not None and len(roi) == 2 * rank and len(axes) < rank:
        roi = [roi[a] for a in axes] + [roi[rank + a] for a in axes]
    n = len(axes)
    out_shape = list(x.shape)
    for axis, size in zip(axes, sizes):
        out_shape[axis] = size
    check_allocation(out_shape, np.float32)  # the float32 intermediate it resizes in
    xf = xp.astype(x, np.float32) if mode != "nearest" and (
        xp.is_half(x) or not xp.is_float(x)) else x
    y = xf
    for j, axis in enumerate(axes):
        axis_roi = (roi[j], roi[n + j]) if roi is not None else (0.0, 1.0)
        if (sizes[j] == x.shape[axis] and math.isclose(scales[j], 1.0)
                and axis_roi == (0.0, 1.0)):
            continue
        y = _resize_axis(xp, y, axis, sizes[j], scales[j], axis_roi, mode=mode,
                         coordinate_transformation_mode=coordinate_transformation_mode,
                         nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a,
                         exclude_outside=exclude_outside,
                         extrapolation_value=extrapolation_value, antialias=antialias)
    dt = xp.dtype_of(x)
    if dt.kind in "iu" and mode != "nearest":
        info = np.iinfo(dt)
        y = xp.clip(xp.round(y), info.min, info.max)
    return xp.astype(y, dt)


@op("Resize", 10, static=(1,))
def resize_v10(xp, x, scales, *, mode="nearest"):
    return _resize(xp, x, None, scales, None, mode=mode,
                   coordinate_transformation_mode="asymmetric", nearest_mode="simple")


@op("Resize", 11, static=(1, 2, 3))
def resize(xp, x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    return _resize(xp, x, roi, scales, sizes, mode=mode, axes=axes, antialias=antialias,
                   coordinate_transformation_mode=coordinate_transformation_mode,
                   cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value,
                   keep_aspect_ratio_policy=keep_aspect_ratio_policy, nearest_mode=nearest_mode)


def _upsample(xp, x, scales, mode):
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return _resize(xp, x, None, scales, None, mode=mode,
                   coordinate_transformation_mode="asymmetric", nearest_mode="simple")


@op("Upsample", 1)
def upsample_v7(xp, x, *, mode="nearest", scales=None, width_scale=None, height_scale=None):
    if scales is None:  # opset 1: height/width scales of an NCHW input
        scales = [1.0, 1.0, height_scale, width_scale]
    return _upsample(xp, x, scales, mode)


@op("Upsample", 9, static=(1,))
def upsample(xp, x, scales, *, mode="nearest"):
    return _upsample(xp, x, scales, mode)
