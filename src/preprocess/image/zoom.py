"""Owlv2ImageProcessor.resize without SciPy: scikit-image's `resize` as transformers copies it
(`ndi.gaussian_filter` anti-aliasing, then `ndi.zoom(order=1, mode="mirror", grid_mode=True)`,
clipped to the input's range), written in NumPy.

SciPy's "mirror" extension is NumPy's "reflect" (d c b | a b c d | c b a). Both filters compute
in float64 and store float32 (the image's dtype), the Gaussian after each axis as SciPy does.
"""

import numpy as np


def owlv2_resize(image, size):
    """transformers.models.owlv2.image_processing_owlv2.Owlv2ImageProcessor.resize on an
    (H, W, C) float image, anti_aliasing=True and its default sigma."""
    out_shape = (size[0], size[1], image.shape[2])
    factors = np.divide(image.shape, out_shape)
    sigmas = np.maximum(0, (factors - 1) / 2)
    filtered = image
    for axis, sigma in enumerate(sigmas):
        if sigma > 1e-15:
            filtered = _gaussian_1d(filtered, float(sigma), axis).astype(image.dtype)
    zoomed = filtered.astype(np.float64)
    for axis in (0, 1):
        zoomed = _linear_zoom_1d(zoomed, 1 / factors[axis], axis)
    out = zoomed.astype(image.dtype)
    # skimage's _clip_warp_output: clip to the input's range
    return np.clip(out, np.min(image), np.max(image))


def _gaussian_1d(image, sigma, axis, truncate=4.0):
    """scipy.ndimage.gaussian_filter1d (order 0, mode "mirror") along `axis`, in float64."""
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 / (sigma * sigma) * x.astype(np.float64) ** 2)
    weights /= weights.sum()
    data = np.moveaxis(image.astype(np.float64), axis, 0)
    padded = _reflect(data, radius)
    n = data.shape[0]
    out = np.zeros_like(data)
    for j, w in enumerate(weights):
        out += w * padded[j:j + n]
    return np.moveaxis(out, 0, axis)


def _reflect(data, width):
    """Extend axis 0 by `width` on both sides, SciPy "mirror" (a length-1 axis repeats)."""
    if data.shape[0] == 1:
        return np.repeat(data, 2 * width + 1, axis=0)
    return np.pad(data, ((width, width),) + ((0, 0),) * (data.ndim - 1), mode="reflect")


def _linear_zoom_1d(data, zoom, axis):
    """scipy.ndimage.zoom(order=1, mode="mirror", grid_mode=True) along one axis: output pixel
    o samples input coordinate (o + 0.5) * in/out - 0.5, linearly between its neighbours."""
    n_in = data.shape[axis]
    n_out = int(round(n_in * zoom))
    scale = n_in / n_out
    coords = (np.arange(n_out) + 0.5) * scale - 0.5
    start = np.floor(coords).astype(np.int64)
    t = coords - start
    moved = np.moveaxis(data, axis, 0)
    padded = _reflect(moved, 1)  # coordinates lie in [-0.5, n_in - 0.5]: one pixel each side
    lo, hi = padded[start + 1], padded[start + 2]
    shape = (-1,) + (1,) * (moved.ndim - 1)
    return np.moveaxis(lo * (1 - t).reshape(shape) + hi * t.reshape(shape), 0, axis)
