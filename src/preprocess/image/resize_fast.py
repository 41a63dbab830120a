"""torchvision's resize, as transformers' `*ImageProcessorFast` call it
(`torchvision.transforms.v2.functional.resize(image, size, interpolation, antialias=True)` on a
uint8 CHW tensor), in NumPy. Images are (H, W, C) uint8 here, as elsewhere in this package.

What torchvision 0.29 / PyTorch 2.14 do on the CPU (`resize_image`, then ATen's
`_upsample_{bilinear,bicubic}2d_aa` in aten/src/ATen/native/cpu/UpSampleKernel.cpp):

* BICUBIC and LANCZOS always, and BILINEAR where `torch.backends.cpu.get_cpu_capability()` is
  "AVX2" or "AVX512" or the machine is ARM (`_do_native_uint8_resize_on_cpu`), run ATen's native
  uint8 kernel: separable anti-aliased weights (Pillow's: the support is the filter's times the
  downscale factor; Keys' cubic with a = -0.5, Lanczos a = 3), computed in float64, normalised,
  then scaled to int16 at a precision chosen from the largest weight; each pass (width first,
  then height) is an integer dot product plus half an LSB, shifted down and clamped to uint8.
* BILINEAR elsewhere (ATen's DEFAULT kernels: `ATEN_CPU_CAPABILITY=default`, old x86) casts to
  float32, resamples in float32 (weights computed in float32 too) and rounds half to even back to
  uint8: `resize(..., native_uint8_bilinear=False)`. (On CUDA torchvision takes a float path too,
  with its own kernels: not reproduced here.)
* NEAREST (transformers maps PIL's NEAREST to NEAREST_EXACT): source index
  floor((i + 0.5) * in / out), no antialiasing.

A size equal to the input's returns the image unchanged, and an axis whose size does not change
is not resampled (as ATen skips it).
"""

import math

import numpy as np

from ...errors import InputError

NEAREST, LANCZOS, BILINEAR, BICUBIC = 0, 1, 2, 3
_F32 = np.float32


def resize(image, size, resample, native_uint8_bilinear=True):
    """(H, W, C) uint8 -> (h, w, C) uint8, as torchvision's antialiased resize makes it."""
    if image.dtype != np.uint8:
        raise TypeError(f"resize expects uint8 pixels, got {image.dtype}")  # internal invariant
    height, width = int(size[0]), int(size[1])
    if height <= 0 or width <= 0:
        raise InputError(f"An image of {image.shape[0]}x{image.shape[1]} pixels would be resized "
                         f"to {height}x{width}: its aspect ratio is too extreme for this processor")
    if (height, width) == image.shape[:2]:
        return image
    if resample == NEAREST:
        rows = _nearest_exact(image.shape[0], height)
        cols = _nearest_exact(image.shape[1], width)
        return image[rows][:, cols]
    if resample not in (LANCZOS, BILINEAR, BICUBIC):
        raise InputError(f"resample={resample!r}: torchvision resizes tensors with NEAREST (0), "
                         "LANCZOS (1), BILINEAR (2) or BICUBIC (3) only")
    if resample != BILINEAR or native_uint8_bilinear:
        out = image
        for axis, n in ((1, width), (0, height)):  # width first, as ATen's separable kernel
            if out.shape[axis] != n:
                out = _pass_uint8(out, axis, n, resample)
        return out
    out = image.astype(_F32)
    for axis, n in ((1, width), (0, height)):
        if out.shape[axis] != n:
            out = _pass_float32(out, axis, n)
    return np.rint(out).astype(np.uint8)  # round_() (half to even), then .to(uint8)


def interpolate_bilinear(image, size):
    """torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=False) on
    (H, W, C) float32, as ATen's AVX2 / AVX-512 CPU kernels compute it: the source coordinate
    (o + 0.5) * (in / out) - 0.5 with one rounding to float32 (a fused multiply-add: a rounded
    product moves it by up to an ulp, 3e-5 near 256, and the pixel by as much times a neighbour's
    difference), clamped at 0; then the two taps' weights t and 1 - t along each axis."""
    out = image
    for axis, n in ((0, size[0]), (1, size[1])):
        n_in = out.shape[axis]
        if n_in == n:
            continue
        scale = np.float64(_F32(n_in) / _F32(n))  # exact products in float64
        src = np.maximum(((np.arange(n) + 0.5) * scale - 0.5).astype(_F32), _F32(0))
        lo = np.minimum(src.astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        shape = [1] * out.ndim
        shape[axis] = n
        t = (src - lo.astype(_F32)).reshape(shape)
        a, b = np.take(out, lo, axis=axis), np.take(out, hi, axis=axis)
        out = ((_F32(1) - t) * a + t * b).astype(_F32)
    return out


def nearest_exact(image, size):
    """interpolate(mode="nearest-exact") on (H, W, C): each axis' source index, as torchvision's
    NEAREST on tensors."""
    rows, cols = (_nearest_exact(n_in, n) for n_in, n in zip(image.shape[:2], size))
    return image[rows][:, cols]


def _nearest_exact(in_size, out_size):
    """ATen's nearest_neighbor_exact_compute_source_index (float32 scale)."""
    scale = _F32(in_size) / _F32(out_size)
    index = np.floor(((np.arange(out_size) + 0.5) * np.float64(scale)).astype(_F32))
    return np.minimum(index.astype(np.int64), in_size - 1)


# ---- the uint8 path: float64 weights scaled to int16 -------------------------------------------

def _linear(x):
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _cubic(x, a=-0.5):
    """HelperInterpCubic::aa_filter (Keys, a = -0.5 with antialiasing)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _lanczos(x):
    """HelperInterpLanczos: sinc(x) * sinc(x / 3) on [-3, 3)."""
    return np.where((x >= -3.0) & (x < 3.0), _sinc(x) * _sinc(x / 3.0), 0.0)


def _sinc(x):
    safe = np.where(x == 0.0, 1.0, x)
    return np.where(x == 0.0, 1.0, np.sin(np.pi * safe) / (np.pi * safe))


_FILTERS = {BILINEAR: (2, _linear), BICUBIC: (4, _cubic), LANCZOS: (6, _lanczos)}


def _weights_f64(in_size, out_size, resample):
    """HelperInterpBase::_compute_index_ranges_weights<double> with antialias: per output index
    the first source index, and the normalised weights (zero past each window)."""
    interp, filt = _FILTERS[resample]
    scale = in_size / out_size
    support = interp * 0.5 * scale if scale >= 1.0 else interp * 0.5
    taps = int(math.ceil(support)) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    center = scale * (np.arange(out_size) + 0.5)
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xsize = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    xsize = np.clip(xsize, 0, taps)
    j = np.arange(taps)
    w = filt((j[None, :] + xmin[:, None] - center[:, None] + 0.5) * invscale)
    w = np.where(j[None, :] < xsize[:, None], w, 0.0)
    total = np.zeros(out_size)
    for k in range(taps):  # summed in order, as the C++ loop does
        total = total + w[:, k]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    return xmin, w


def _int16_weights(in_size, out_size, resample):
    """HelperInterpBase::_compute_index_ranges_int16_weights."""
    xmin, w = _weights_f64(in_size, out_size, resample)
    wt_max = float(w.max()) if w.size else 0.0
    precision = 0
    while precision < 22 and int(0.5 + wt_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    v = w * (1 << precision)
    w16 = np.where(v < 0, np.trunc(v - 0.5), np.trunc(v + 0.5)).astype(np.int64)
    return xmin, w16, precision


def _pass_uint8(image, axis, out_size, resample):
    """basic_loop_aa_{horizontal,vertical}<uint8_t>: integer dot product, + 2**(p-1), >> p,
    clamped to [0, 255]."""
    in_size = image.shape[axis]
    xmin, w16, precision = _int16_weights(in_size, out_size, resample)
    src = np.moveaxis(image, axis, 0).astype(np.int64)
    acc = np.full((out_size,) + src.shape[1:], 1 << (precision - 1), np.int64)
    shape = (out_size,) + (1,) * (src.ndim - 1)
    for k in range(w16.shape[1]):
        index = np.minimum(xmin + k, in_size - 1)  # past the window the weight is 0
        acc += src[index] * w16[:, k].reshape(shape)
    out = np.clip(acc >> precision, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


# ---- the float32 path: weights and sums in float32 ---------------------------------------------

def _weights_f32(in_size, out_size):
    """_compute_index_ranges_weights<float> for the bilinear filter: every float expression of the
    C++ in its type (float32 products / sums, double where a double literal enters)."""
    scale = _F32(in_size) / _F32(out_size)
    s64 = float(scale)
    support = _F32(1.0 * s64) if s64 >= 1.0 else _F32(1.0)
    taps = int(math.ceil(float(support))) * 2 + 1
    invscale = _F32(1.0 / s64) if s64 >= 1.0 else _F32(1.0)
    center = (s64 * (np.arange(out_size) + 0.5)).astype(_F32)
    lo = (center - support).astype(np.float64) + 0.5
    hi = (center + support).astype(np.float64) + 0.5
    xmin = np.maximum(np.trunc(lo).astype(np.int64), 0)
    xsize = np.clip(np.minimum(np.trunc(hi).astype(np.int64), in_size) - xmin, 0, taps)
    j = np.arange(taps)
    offset = (j[None, :] + xmin[:, None]).astype(_F32) - center[:, None]  # float32 subtraction
    x = ((offset.astype(np.float64) + 0.5) * float(invscale)).astype(_F32)
    x = np.abs(x)
    w = np.where(x < 1.0, (1.0 - x.astype(np.float64)).astype(_F32), _F32(0.0)).astype(_F32)
    w = np.where(j[None, :] < xsize[:, None], w, _F32(0.0)).astype(_F32)
    total = np.zeros(out_size, _F32)
    for k in range(taps):
        total = (total + w[:, k]).astype(_F32)
    safe = np.where(total == 0, _F32(1.0), total).astype(_F32)
    w = np.where(total[:, None] != 0, (w / safe[:, None]).astype(_F32), w).astype(_F32)
    return xmin, xsize, w


def _pass_float32(image, axis, out_size):
    """basic_loop_aa_{horizontal,vertical}<float>: output = t0 * w0, then output += t * w, each
    product and sum rounded to float32."""
    in_size = image.shape[axis]
    xmin, xsize, w = _weights_f32(in_size, out_size)
    src = np.moveaxis(image, axis, 0)
    shape = (out_size,) + (1,) * (src.ndim - 1)
    acc = (src[np.minimum(xmin, in_size - 1)] * w[:, 0].reshape(shape)).astype(_F32)
    for k in range(1, w.shape[1]):
        index = np.minimum(xmin + k, in_size - 1)
        term = (src[index] * w[:, k].reshape(shape)).astype(_F32)
        live = (k < xsize).reshape(shape)
        acc = np.where(live, (acc + term).astype(_F32), acc)
    return np.moveaxis(acc, 0, axis)
