"""The bilinear resize of transformers.js in Node: ``RawImage.resize`` calls sharp's
``affine([w / W, 0, 0, h / H], {interpolator: "bilinear"})``, which is libvips' vips_affine
(libvips 8.18, libvips/resample/affine.c and interpolate.c). Followed here step by step, on uint8:

- output pixel (x, y) reads input point (x / a, y / d) (pixel corners, not centres), a and d the
  scales, through the inverse matrix; along a row the point advances by adding 1 / a each pixel
  (as affine.c's generate loop does, from the row's start);
- the input is embedded in a one-pixel border of background (black) plus the stencil's extra
  pixel, so the last rows and columns of an enlarged image blend towards black, as in
  transformers.js;
- bilinear weights in 12-bit fixed point, the sum rounded half up (BILINEAR_INT).

Checked against transformers.js 4.3.2 / sharp 0.35.5 on 1- and 3-channel images of 13x17 to 333x211
resized up and down (every value equal). libvips computes a row in tiles; on images wider than a
tile a point's accumulated position may differ in its last bits from this single run per row.
"""

import numpy as np

SHIFT = 12  # VIPS_INTERPOLATE_SHIFT
SCALE = 1 << SHIFT


def sharp_bilinear(pixels, size):
    """``pixels`` (H, W, C) uint8 resized to ``size`` (height, width) as sharp's affine bilinear."""
    height, width = size
    in_h, in_w = pixels.shape[:2]
    if (in_h, in_w) == (height, width):  # RawImage.resize: "Do nothing if ... the desired size"
        return pixels
    a, d = width / in_w, height / in_h
    # vips__transform_calc_inverse of [a, 0, 0, d]: (1 / det) * d, which can differ from 1 / a in
    # the last bit (50 -> 48 pixels: 1.0416666666666665), enough to move a weight's 12-bit truncation
    tmp = 1.0 / (a * d)
    ia, id_ = tmp * d, tmp * a
    # the one-pixel border displaces the transform by 1 (trn.idx -= 1)
    fx = np.add.accumulate(np.concatenate([[1.0], np.full(width - 1, ia)]))
    fy = id_ * np.arange(height) + 1.0
    ix, iy = fx.astype(np.int64), fy.astype(np.int64)
    x = ((fx - ix) * SCALE).astype(np.int64)[None, :, None]
    y = ((fy - iy) * SCALE).astype(np.int64)[:, None, None]
    yd = SCALE - y
    c4, c2 = (y * x) >> SHIFT, (yd * x) >> SHIFT
    c3, c1 = y - c4, yd - c2
    border = np.pad(pixels.astype(np.int64), ((1, 3), (1, 3), (0, 0)))
    rows, rows1 = border[iy], border[iy + 1]
    out = (c1 * rows[:, ix] + c2 * rows[:, ix + 1] + c3 * rows1[:, ix] + c4 * rows1[:, ix + 1]
           + SCALE // 2) >> SHIFT
    return out.astype(np.uint8)
