"""Owlv2ImageProcessorFast (transformers 4.57, models/owlv2/image_processing_owlv2_fast.py):
rescale to float32, pad to a square with 0.5 (bottom / right), blur with torchvision's
gaussian_blur, resize with torch's bilinear interpolation (no antialias), normalize in float32.

Its resize is not the slow one's (scikit-image's Gaussian then `ndi.zoom`, ../zoom.py): the
sigma is the same ((factor - 1) / 2), but the kernel is torchvision's (2 * ceil(3 sigma) + 1 taps,
reflect padding, and no blur at all where either axis' sigma is 0), and the sampling is
torch's `interpolate(mode="bilinear", align_corners=False)`. As transformers passes
`(kernel_sizes[0], kernel_sizes[1])` to gaussian_blur, whose first entry is the x (width) one,
the height's kernel runs along the width and the other way round (equal for square images).
"""

import math

import numpy as np

from ....errors import InputError
from .. import resize_fast as R
from .. import sizes as S
from .resized import BILINEAR, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from .fast import FastImageProcessor

_F32 = np.float32


class Owlv2ImageProcessorFast(FastImageProcessor):
    names = ("Owlv2ImageProcessorFast",)
    defaults = {"resample": BILINEAR, "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD,
                "size": {"height": 960, "width": 960}, "do_resize": True, "do_rescale": True,
                "do_normalize": True, "do_pad": True}

    def family(self):
        self.pads_batch = False
        if not self.do_rescale and (self.do_pad or self.do_resize):
            # uint8 pixels would be padded with int(0.5) and blurred with integer rounding
            raise InputError(f"{self.name}: padding / resizing without do_rescale (on uint8 "
                             "pixels) is not supported")

    def check_size(self):
        S.require(self.size, ("height", "width"), self.name)

    def transform(self, pixels):
        """Owlv2ImageProcessorFast._preprocess. The center crop options are not read there."""
        image = pixels.astype(_F32)
        if self.do_rescale:
            image = image * _F32(self.rescale_factor)
        if self.do_pad:
            side = max(image.shape[:2])
            image = np.pad(image, ((0, side - image.shape[0]), (0, side - image.shape[1]), (0, 0)),
                           constant_values=_F32(0.5))
        if self.do_resize:
            image = resize(image, (self.size["height"], self.size["width"]))
        size = image.shape[:2]
        if self.do_normalize:
            channels = image.shape[-1]
            mean = np.broadcast_to(np.asarray(self.image_mean, _F32), (channels,))
            std = np.broadcast_to(np.asarray(self.image_std, _F32), (channels,))
            image = (image - mean) / std
        return image.astype(_F32), size


def resize(image, size):
    """Owlv2ImageProcessorFast.resize on (H, W, C) float32, anti_aliasing=True, default sigma."""
    factors = np.array(image.shape[:2], _F32) / np.array(size, _F32)
    sigma = np.maximum((factors - _F32(1)) / _F32(2), _F32(0)).astype(_F32)
    if not np.any(sigma == 0):
        kernel_sizes = [2 * int(math.ceil(3 * float(s))) + 1 for s in sigma]
        # gaussian_blur(kernel_size=(k[0], k[1]), sigma=[s[0], s[1]]): entry 0 is x (width)
        image = gaussian_blur(image, kernel_x=kernel_sizes[0], sigma_x=float(sigma[0]),
                              kernel_y=kernel_sizes[1], sigma_y=float(sigma[1]))
    return R.interpolate_bilinear(image, size)


def _kernel_1d(size, sigma):
    """torchvision.transforms.v2.functional._get_gaussian_kernel1d (float32)."""
    lim = (size - 1) / (2.0 * math.sqrt(2.0))
    x = np.linspace(-lim, lim, size).astype(_F32)
    v = -((x / _F32(sigma)) ** 2).astype(np.float64)
    e = np.exp(v - v.max())  # softmax
    return (e / e.sum()).astype(_F32)


def gaussian_blur(image, *, kernel_x, sigma_x, kernel_y, sigma_y):
    """torchvision's gaussian_blur on a float image: reflect padding by half a kernel, then the
    separable kernel (one 2-D convolution there; the sums' order differs by float32 rounding)."""
    pad_x, pad_y = kernel_x // 2, kernel_y // 2
    if pad_y >= image.shape[0] or pad_x >= image.shape[1]:
        raise InputError(f"An image of {image.shape[0]}x{image.shape[1]} pixels cannot be blurred "
                         f"with a {kernel_y}x{kernel_x} kernel (reflect padding needs the image "
                         "larger than half the kernel), as torchvision cannot either")
    padded = np.pad(image.astype(np.float64), ((pad_y, pad_y), (pad_x, pad_x), (0, 0)),
                    mode="reflect")
    wx, wy = _kernel_1d(kernel_x, sigma_x), _kernel_1d(kernel_y, sigma_y)
    height, width = image.shape[:2]
    # separable, in float64: torchvision's 2-D kernel is the float32 outer product of these (its
    # rounding, ~6e-8 relative, is far below that of its float32 sums)
    rows = sum(w * padded[:, j:j + width] for j, w in enumerate(wx.astype(np.float64)))
    out = sum(w * rows[i:i + height] for i, w in enumerate(wy.astype(np.float64)))
    return out.astype(_F32)
