"""Sampling at computed coordinates: GridSample, AffineGrid, RoiAlign, and the interpolating gather
they (and DeformConv) share.

Coordinates live on the device (they come from data); each interpolation tap is a flat index into
the spatial axes plus a weight, gathered with ``take_along_axis``."""

import itertools

import numpy as np

from .registry import NeedsStatic, op
from .values import is_static


def _float(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) or not xp.is_float(x) else x


def cubic_weights(xp, t, a=-0.75):
    """Keys' cubic convolution weights for the taps at floor-1 .. floor+2, ``t`` = x - floor(x)."""
    s, u = t + 1, 1 - t
    v = u + 1
    return [((a * s - 5 * a) * s + 8 * a) * s - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * u - (a + 3)) * u * u + 1,
            ((a * v - 5 * a) * v + 8 * a) * v - 4 * a]


def reflect(xp, x, lo, hi):
    """Reflect ``x`` by the borders [lo, hi] until it lies within them (PyTorch's grid_sample)."""
    span = hi - lo
    if span <= 0:
        return xp.zeros_like(x) + lo
    below, above = lo - x, x - hi
    dist = xp.where(x < lo, below, xp.where(x > hi, above, xp.zeros_like(x)))
    flips = xp.floor(dist / span)
    rest = dist - flips * span
    even = xp.mod(flips, 2) == 0
    from_below = xp.where(even, lo + rest, hi - rest)
    from_above = xp.where(even, hi - rest, lo + rest)
    return xp.where(x < lo, from_below, xp.where(x > hi, from_above, x))


def interpolate(xp, x, coords, *, mode="linear", padding_mode="zeros", borders=None,
                cubic_a=-0.75):
    """Sample ``x`` (B, C, *S) at pixel coordinates ``coords`` (one (B, *P) array per spatial
    axis, in the axes' order) and return (B, C, *P).

    ``mode``: nearest (coordinates already rounded), linear or cubic. ``padding_mode`` says what a
    tap outside the input reads: zeros, border (the edge) or reflection (mirrored by ``borders``,
    one (lo, hi) per axis)."""
    b, c = x.shape[:2]
    spatial = x.shape[2:]
    points = coords[0].shape[1:]
    n_points = int(np.prod(points))
    flat = xp.reshape(x, (b, c, -1))
    per_axis = []
    for axis, coord in enumerate(coords):
        size = spatial[axis]
        if mode == "nearest":
            taps = [(coord, None)]
        else:
            low = xp.floor(coord)
            t = coord - low
            if mode == "linear":
                taps = [(low, 1 - t), (low + 1, t)]
            else:
                taps = list(zip([low - 1, low, low + 1, low + 2], cubic_weights(xp, t, cubic_a)))
        fixed = []
        for idx, w in taps:
            if padding_mode == "zeros":
                inside = (idx >= 0) & (idx <= size - 1)
                w = xp.where(inside, w, xp.zeros_like(w)) if w is not None else xp.astype(
                    inside, xp.dtype_of(coord))
            elif padding_mode == "reflection":
                idx = reflect(xp, idx, *borders[axis])
            idx = xp.clip(xp.astype(idx, np.int64), 0, size - 1)
            fixed.append((idx, w))
        per_axis.append(fixed)
    steps = [int(np.prod(spatial[i + 1:])) for i in range(len(spatial))]
    out = None
    for combo in itertools.product(*per_axis):
        index = combo[0][0] * steps[0]
        for (idx, _), step in zip(combo[1:], steps[1:]):
            index = index + idx * step
        index = xp.broadcast_to(xp.reshape(index, (b, 1, n_points)), (b, c, n_points))
        values = xp.take_along_axis(flat, index, axis=2)
        weight = None
        for _, w in combo:
            if w is not None:
                weight = w if weight is None else weight * w
        if weight is not None:
            values = values * xp.reshape(weight, (b, 1, n_points))
        out = values if out is None else out + values
    return xp.reshape(out, (b, c) + tuple(points))


def _grid_sample(xp, x, grid, mode, padding_mode, align_corners):
    """ONNX/PyTorch grid_sample over any number of spatial axes; ``grid`` (N, *P, nd) holds
    normalized coordinates in [-1, 1], the last spatial axis first."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    xf = _float(xp, x)
    g = xp.astype(grid, xp.dtype_of(xf))
    spatial = x.shape[2:]
    nd = len(spatial)
    coords, borders = [], []
    for axis in range(nd):
        size = spatial[axis]
        n = g[..., nd - 1 - axis]
        if align_corners:
            coord, lo, hi = (n + 1) / 2 * (size - 1), 0.0, size - 1.0
        else:
            coord, lo, hi = ((n + 1) * size - 1) / 2, -0.5, size - 0.5
        if mode == "nearest":
            coord = xp.round(coord)  # half to even, as PyTorch
        # Linear and nearest pad the coordinate; cubic pads each tap instead (as PyTorch).
        if mode == "cubic":
            pass
        elif padding_mode == "border":
            outside = (coord < lo) | (coord > hi)
            coord = xp.where(outside, xp.clip(coord, 0, size - 1), coord)
        elif padding_mode == "reflection":
            coord = reflect(xp, coord, lo, hi)
        if mode == "nearest":
            coord = xp.trunc(coord)
        coords.append(coord)
        borders.append((lo, hi))
    y = interpolate(xp, xf, coords, mode=mode, padding_mode=padding_mode, borders=borders)
    return xp.astype(y, xp.dtype_of(x))


@op("GridSample", 16)
def grid_sample_v16(xp, x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    return _grid_sample(xp, x, grid, mode, padding_mode, align_corners)


@op("GridSample", 20)
def grid_sample(xp, x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return _grid_sample(xp, x, grid, mode, padding_mode, align_corners)


@op("AffineGrid", 20, static=(1,))
def affine_grid(xp, theta, size, *, align_corners=0):
    spatial = [int(s) for s in np.asarray(size).reshape(-1)[2:]]
    axes = []
    for d in spatial:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.full(d, -1.0))
        else:
            axes.append((np.arange(d) * 2 + 1) / d - 1)
    mesh = list(np.meshgrid(*axes, indexing="ij"))
    # Homogeneous base points (x, y[, z], 1): the last spatial axis first.
    base = np.stack(mesh[::-1] + [np.ones(tuple(spatial))], axis=-1).reshape(-1, len(spatial) + 1)
    dt = xp.dtype_of(theta)
    grid = xp.matmul(xp.asarray(base.astype(dt)), xp.swapaxes(theta, -1, -2))  # (N, P, nd)
    return xp.reshape(grid, (theta.shape[0], *spatial, len(spatial)))


def _roi_align(xp, x, rois, batch_indices, mode, output_height, output_width, sampling_ratio,
               spatial_scale, half_pixel):
    if sampling_ratio <= 0 and not is_static(rois):
        raise NeedsStatic(1)  # the adaptive sample count depends on the boxes
    xf = _float(xp, x)
    dt = xp.dtype_of(xf)
    n_rois = rois.shape[0]
    _, c, h, w = x.shape
    oh, ow = output_height, output_width
    r = xp.astype(rois, dt) * spatial_scale - (0.5 if half_pixel else 0.0)
    start_w, start_h, end_w, end_h = r[:, 0], r[:, 1], r[:, 2], r[:, 3]
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not half_pixel:  # force malformed boxes to 1x1
        roi_w, roi_h = xp.maximum(roi_w, 1.0), xp.maximum(roi_h, 1.0)
    bin_h, bin_w = roi_h / oh, roi_w / ow
    if sampling_ratio > 0:
        grid_h = grid_w = np.full(n_rois, sampling_ratio)
    else:  # static boxes: the per-box counts, computed on the host
        host = np.asarray(rois) * np.asarray(spatial_scale, np.asarray(rois).dtype)
        size_w, size_h = host[:, 2] - host[:, 0], host[:, 3] - host[:, 1]
        if not half_pixel:
            size_w, size_h = np.maximum(size_w, 1.0), np.maximum(size_h, 1.0)
        grid_h = np.ceil(size_h / oh).astype(np.int64)
        grid_w = np.ceil(size_w / ow).astype(np.int64)
    gh_max, gw_max = max(int(np.max(grid_h, initial=1)), 1), max(int(np.max(grid_w, initial=1)), 1)
    gh = xp.asarray(np.maximum(grid_h, 1).astype(dt))
    gw = xp.asarray(np.maximum(grid_w, 1).astype(dt))
    # Sample coordinates: (R, oh, gh_max) and (R, ow, gw_max).
    iy = xp.asarray(np.arange(gh_max, dtype=dt) + 0.5)
    ix = xp.asarray(np.arange(gw_max, dtype=dt) + 0.5)
    ph = xp.asarray(np.arange(oh, dtype=dt)[:, None])
    pw = xp.asarray(np.arange(ow, dtype=dt)[:, None])
    y = (start_h[:, None, None] + ph * bin_h[:, None, None]
         + iy * (bin_h / gh)[:, None, None])
    xs = (start_w[:, None, None] + pw * bin_w[:, None, None]
          + ix * (bin_w / gw)[:, None, None])
    valid_y = xp.asarray(np.arange(gh_max)[None, :] < np.asarray(grid_h)[:, None])  # (R, gh)
    valid_x = xp.asarray(np.arange(gw_max)[None, :] < np.asarray(grid_w)[:, None])

    def taps(coord, size):
        outside = (coord < -1.0) | (coord > size)
        coord = xp.maximum(coord, 0.0)
        low = xp.floor(coord)
        edge = low >= size - 1
        low = xp.where(edge, size - 1.0, low)
        coord = xp.where(edge, low, coord)
        high = xp.where(edge, low, low + 1)
        frac = coord - low
        return outside, xp.astype(low, np.int64), xp.astype(high, np.int64), frac

    out_y, y_lo, y_hi, ly = taps(y, h)  # (R, oh, gh)
    out_x, x_lo, x_hi, lx = taps(xs, w)  # (R, ow, gw)
    # Broadcast to (R, oh, ow, gh, gw).
    def yy(a):
        return a[:, :, None, :, None]

    def xx(a):
        return a[:, None, :, None, :]

    outside = yy(out_y) | xx(out_x)
    zero = xp.zeros_like(yy(ly) * xx(lx))
    corners = [(y_lo, x_lo, (1 - ly), (1 - lx)), (y_lo, x_hi, (1 - ly), lx),
               (y_hi, x_lo, ly, (1 - lx)), (y_hi, x_hi, ly, lx)]
    feats = xp.reshape(xp.take(xf, xp.astype(batch_indices, np.int64), axis=0), (n_rois, c, h * w))
    shape = (n_rois, oh, ow, gh_max, gw_max)
    n_points = int(np.prod(shape[1:]))
    vals = []
    for yi, xi, wy, wx in corners:
        index = xp.broadcast_to(yy(yi) * w + xx(xi), shape)
        index = xp.broadcast_to(xp.reshape(index, (n_rois, 1, n_points)), (n_rois, c, n_points))
        weight = xp.where(outside, zero, yy(wy) * xx(wx))
        v = xp.take_along_axis(feats, index, axis=2) * xp.reshape(weight, (n_rois, 1, n_points))
        vals.append(xp.reshape(v, (n_rois, c) + shape[1:]))
    valid = xp.reshape(valid_y[:, None, None, :, None] & valid_x[:, None, None, None, :],
                       (n_rois, 1, 1, 1, gh_max, gw_max))
    if mode == "max":
        best = xp.maximum(xp.maximum(vals[0], vals[1]), xp.maximum(vals[2], vals[3]))
        low = xp.full(best.shape, -np.inf, dtype=dt)
        y_out = xp.max(xp.where(valid, best, low), axis=(4, 5))
    else:
        total = vals[0] + vals[1] + vals[2] + vals[3]
        total = xp.where(valid, total, xp.zeros_like(total))
        count = xp.reshape(xp.maximum(gh * gw, 1.0), (n_rois, 1, 1, 1))
        y_out = xp.sum(total, axis=(4, 5)) / count
    return xp.astype(y_out, xp.dtype_of(x))


@op("RoiAlign", 10)
def roi_align_v10(xp, x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1,
                  sampling_ratio=0, spatial_scale=1.0):
    return _roi_align(xp, x, rois, batch_indices, mode, output_height, output_width,
                      sampling_ratio, spatial_scale, half_pixel=False)


@op("RoiAlign", 16)
def roi_align(xp, x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel",
              mode="avg", output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    return _roi_align(xp, x, rois, batch_indices, mode, output_height, output_width,
                      sampling_ratio, spatial_scale,
                      half_pixel=coordinate_transformation_mode == "half_pixel")
