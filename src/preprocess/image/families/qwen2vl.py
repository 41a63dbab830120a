"""Qwen2VLImageProcessor (transformers 4.57 ``image_processing_qwen2_vl.py``, the slow one that
AutoImageProcessor loads for Qwen2-VL / Qwen2.5-VL repos): each image resized by ``smart_resize``
(both sides multiples of patch x merge, the area within min_pixels..max_pixels), rescaled,
normalized, repeated to the temporal patch and cut into flattened patches in the merge order the
vision tower reads; and Qwen2VLProcessor's expansion of ``<|image_pad|>`` in the prompt."""

import math

import numpy as np

from ....errors import InputError
from .. import transforms as T

IMAGE_PAD = "<|image_pad|>"
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # transformers' OPENAI_CLIP_MEAN / _STD
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


class Qwen2VLImages:
    """Qwen2VLImageProcessor's settings from preprocessor_config.json. As its 4.57 ``__init__``:
    ``min_pixels`` / ``max_pixels`` set the area bounds (defaults 56 * 56 and 28 * 28 * 1280); a
    ``size`` dict is replaced by those defaults there, so only min_pixels / max_pixels count."""

    def __init__(self, config):
        c = self.config = dict(config)
        self.min_pixels = int(c.get("min_pixels") or 56 * 56)
        self.max_pixels = int(c.get("max_pixels") or 28 * 28 * 1280)
        self.patch = int(c.get("patch_size", 14))
        self.temporal = int(c.get("temporal_patch_size", 2))
        self.merge = int(c.get("merge_size", 2))
        self.resample = T.check_resample(c.get("resample", 3), "Qwen2VLImageProcessor")

    def process(self, images, min_pixels=None, max_pixels=None):
        """``(pixel_values [patches, C * temporal * patch * patch] float32, image_grid_thw
        [images, 3] int64)`` of ``images`` (H, W, C uint8 arrays), or ``(None, None)`` without
        images; ``min_pixels`` / ``max_pixels`` override the config's (a call's
        images_kwargs)."""
        if not images:
            return None, None
        low = self.min_pixels if min_pixels is None else int(min_pixels)
        high = self.max_pixels if max_pixels is None else int(max_pixels)
        patches, grids = zip(*(self._patches(np.asarray(i), low, high) for i in images))
        return np.concatenate(patches), np.array(grids, np.int64)

    def tokens(self, grid):
        """The prompt tokens one image's grid (t, h, w) becomes: its patches merged."""
        return int(np.prod(grid)) // self.merge ** 2

    def _patches(self, image, low, high):
        c = self.config
        height, width = image.shape[:2]
        if c.get("do_resize", True):
            height, width = smart_resize(height, width, self.patch * self.merge, low, high)
            image = T.resize(image, (height, width), self.resample)
        pixels = T.rescale(image, c.get("rescale_factor", 1 / 255)) if c.get("do_rescale", True) \
            else image.astype(np.float32)
        if c.get("do_normalize", True):
            pixels = T.normalize(pixels, c.get("image_mean", CLIP_MEAN),
                                 c.get("image_std", CLIP_STD))
        frames = np.repeat(pixels.transpose(2, 0, 1)[None], self.temporal, axis=0)  # [T, C, H, W]
        p, m, channels = self.patch, self.merge, frames.shape[1]
        gh, gw = height // p, width // p
        x = frames.reshape(1, self.temporal, channels, gh // m, m, p, gw // m, m, p)
        x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # merge blocks row-major, then their 2 x 2
        return x.reshape(gh * gw, channels * self.temporal * p * p), (1, gh, gw)


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """image_processing_qwen2_vl.smart_resize: the nearest multiples of ``factor``, scaled into
    [min_pixels, max_pixels] with the aspect ratio kept."""
    if max(height, width) / min(height, width) > 200:
        raise InputError(f"An image of {height}x{width} pixels has an aspect ratio over 200, "
                         "which Qwen2VLImageProcessor refuses: crop or pad it")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def expand_prompt(text, counts):
    """Qwen2VLProcessor: the i-th ``<|image_pad|>`` of ``text`` repeated ``counts[i]`` times."""
    pieces = text.split(IMAGE_PAD)
    if len(pieces) - 1 != len(counts):
        raise InputError(f"The prompt has {len(pieces) - 1} {IMAGE_PAD} token(s) but "
                         f"{len(counts)} image(s) were given: give one image per {IMAGE_PAD}")
    return pieces[0] + "".join(IMAGE_PAD * n + rest for n, rest in zip(counts, pieces[1:]))
