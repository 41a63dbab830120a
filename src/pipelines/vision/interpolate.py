"""torch.nn.functional.interpolate (align_corners=False, no antialias) in NumPy, for the
post-processing transformers runs on model outputs (depth maps, segmentation logits)."""

import numpy as np


# Maps resized together in bilinear: about 2 MB of float64 per temporary, so the steps stay in
# cache. Whole, Mask2Former's 150 class maps to a 512x683 photo took 1.6 s (temporaries of
# 200-400 MB each); the arithmetic per pixel is the same either way.
CHUNK_PIXELS = 1 << 18


def bilinear(x, size):
    """``interpolate(x[None], size, mode="bilinear")`` of ``x`` [..., H, W]. Each output pixel
    blends two source pixels per axis: gathered, not a dense weight matrix (SAM's masks, 256 ->
    1024 -> the image, took minutes as matmuls)."""
    x = np.asarray(x)
    size = tuple(int(n) for n in size)
    taps = [_linear_taps(n_in, n_out) for n_in, n_out in zip(x.shape[-2:], size)]
    maps = x.reshape((-1,) + x.shape[-2:])
    out = np.empty((len(maps),) + size, np.float32)
    step = max(1, CHUNK_PIXELS // max(1, maps.shape[1] * maps.shape[2], size[0] * size[1]))
    for start in range(0, len(maps), step):
        out[start:start + step] = _bilinear_maps(maps[start:start + step], taps)
    return out.reshape(x.shape[:-2] + size)


def _bilinear_maps(maps, taps):
    x = maps.astype(np.float64)
    for axis, (left, right, t) in zip((-2, -1), taps):
        t = t.reshape((-1, 1) if axis == -2 else (-1,))
        x = np.take(x, left, axis=axis) * (1 - t) + np.take(x, right, axis=axis) * t
    return x


def bicubic(x, size):
    """``interpolate(x[None], size, mode="bicubic")`` of ``x`` [..., H, W] (A = -0.75, edges
    clamped, as upsample_bicubic2d)."""
    return _separable(x, size, _cubic_weights)


def nearest(x, size):
    """``interpolate(x[None], size, mode="nearest")`` of ``x`` [..., H, W] (any dtype): the source
    index as upsample_nearest2d computes it, in float32 (``floorf(dst * (float)in / out)``)."""
    x = np.asarray(x)
    for axis, (n_in, n_out) in zip((-2, -1), zip(x.shape[-2:], size)):
        x = np.take(x, _nearest_source(n_in, int(n_out)), axis=axis)
    return x


def _nearest_source(n_in, n_out):
    if n_out == n_in:
        return np.arange(n_out)
    if n_out == 2 * n_in:
        return np.arange(n_out) >> 1
    scale = np.float32(n_in) / np.float32(n_out)
    index = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(index, n_in - 1)


def _separable(x, size, weights):
    x = np.asarray(x, np.float32)
    for axis, (n_in, n_out) in zip((-2, -1), zip(x.shape[-2:], size)):
        x = np.moveaxis(np.tensordot(x, weights(n_in, int(n_out)), axes=([axis], [1])), -1, axis)
    return x.astype(np.float32)


def _source(n_in, n_out):
    # area_pixel_compute_source_index: the output pixel centre in input coordinates
    return (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5


def _linear_taps(n_in, n_out):
    """Per output index: the two source indices and the weight of the right one."""
    src = np.maximum(_source(n_in, n_out), 0.0)  # linear modes clamp negative sources to 0
    left = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    right = np.minimum(left + 1, n_in - 1)
    return left, right, src - left


def _cubic_weights(n_in, n_out, a=-0.75):
    src = _source(n_in, n_out)  # cubic does not clamp: taps past the edges read the edge pixel
    base = np.floor(src).astype(np.int64)
    t = src - base
    taps = [_cubic(t + 1, a), _cubic(t, a), _cubic(1 - t, a), _cubic(2 - t, a)]
    w = np.zeros((n_out, n_in))
    for k, tap in enumerate(taps):
        np.add.at(w, (np.arange(n_out), np.clip(base - 1 + k, 0, n_in - 1)), tap)
    return w


def _cubic(d, a):
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))
