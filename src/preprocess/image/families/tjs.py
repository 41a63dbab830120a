"""transformers.js' base ImageProcessor: the preprocessor_config.json of background-removal exports
(briaai/RMBG-1.4, BiRefNet, MODNet) names ``"feature_extractor_type": "ImageFeatureExtractor"``, a
class transformers (Python) does not have; transformers.js runs it as its generic ImageProcessor
(src/image_processors_utils.js). Its ``preprocess`` is followed step by step: RGB, resize to
size {width, height} or by {shortest_edge, longest_edge} (rounded down to a multiple of
size_divisibility), as transformers.js does in Node (sharp's affine bilinear, not Pillow's:
../resize_sharp.py), rescale (a float64 product stored as float32), normalize, pad (zeros to a
multiple of size_divisibility).
"""

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from ....errors import InputError
from .resized import BILINEAR, RESCALE, Resized
from ..resize_sharp import sharp_bilinear

# transformers.js' RESAMPLING_MAPPING: box (4) and hamming (5) fall back to bilinear (it warns)
BILINEAR_LIKE = {BILINEAR: "bilinear", 4: "box", 5: "hamming"}


class TransformersJsImageProcessor(Resized):
    # auto.processor_type() renames FeatureExtractor -> ImageProcessor, as transformers'
    # AutoImageProcessor does: "ImageFeatureExtractor" becomes this name (transformers itself
    # has no such class)
    names = ("ImageImageProcessor",)
    do_convert_rgb = True  # transformers.js: config.do_convert_rgb ?? true

    def setup(self, *, do_resize=None, size=None, image_size=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=False, image_mean=None, image_std=None,
              mean=None, std=None, do_convert_rgb=True, do_pad=False, pad_size=None,
              size_divisibility=None, size_divisor=None, max_size=None, do_center_crop=False,
              do_thumbnail=False, keep_aspect_ratio=False, ensure_multiple_of=None):
        size = size if size is not None else image_size
        do_resize = do_resize if do_resize is not None else size is not None
        for name, value in (("do_center_crop", do_center_crop), ("do_thumbnail", do_thumbnail),
                            ("pad_size", pad_size), ("keep_aspect_ratio", keep_aspect_ratio)):
            if value:
                raise InputError(f"preprocessor_config.json: {self.name} (transformers.js' generic "
                                 f"processor) with {name} is not supported yet: resize to size "
                                 "{width, height} or {shortest_edge, longest_edge}, "
                                 "size_divisibility, rescale, normalize and do_pad are")
        if isinstance(size, int) and not isinstance(size, bool):  # shortest edge, max_size cap
            size = {"shortest_edge": size, "longest_edge": max_size if max_size else size}
        keys = set(size) if isinstance(size, dict) else None
        if do_resize and keys not in ({"width", "height"}, {"shortest_edge"}, {"longest_edge"},
                                      {"shortest_edge", "longest_edge"}):
            raise InputError(f"preprocessor_config.json: {self.name} resizes to size {{width, "
                             "height}} (briaai/RMBG-1.4's) or {shortest_edge, longest_edge}, "
                             f"got size {size!r}")
        self.read(do_resize, size or {"height": 1, "width": 1}, resample, do_rescale,
                  rescale_factor, do_normalize, image_mean if image_mean is not None else mean,
                  image_std if image_std is not None else std, None, None)
        self.do_convert_rgb = bool(do_convert_rgb)
        self.divisor = size_divisibility if size_divisibility is not None else size_divisor
        # do_pad pads to a multiple of the divisor; without one it pads to size {width, height},
        # which a resized image already has
        self.do_pad = bool(do_pad) and bool(self.divisor)
        if do_resize and resample not in BILINEAR_LIKE:
            raise InputError(f"preprocessor_config.json: resample {resample!r} is not supported "
                             f"yet by {self.name} (transformers.js' sharp resize is reproduced "
                             "for bilinear, 2, only)")

    def check_size(self):
        """setup checked the key sets this processor takes."""

    def transform(self, pixels):
        if self.do_resize or self.divisor:
            height, width = self.output_size(pixels.shape[:2])
            pixels = sharp_bilinear(pixels, (height, width))
        out = self.rescale_normalize(pixels)
        if self.do_pad:  # pad_image: zeros after normalizing, bottom / right
            d = self.divisor
            height, width = out.shape[:2]
            out = np.pad(out, ((0, -height % d), (0, -width % d), (0, 0)))
        return out, pixels.shape[:2]

    def output_size(self, image_hw):
        """get_resize_output_image_size: (height, width)."""
        src_h, src_w = image_hw
        size = self.size if self.do_resize else {}
        if "width" in size:
            return size["height"], size["width"]
        if size:
            short, long = size.get("shortest_edge"), size.get("longest_edge")
            factor = 1 if short is None else max(short / src_w, short / src_h)
            new_w, new_h = src_w * factor, src_h * factor
            if long is not None:
                factor = min(long / new_w, long / new_h)
                new_w, new_h = new_w * factor, new_h * factor
            # Math.floor(Number(x.toFixed(2))): round half up on the exact double, then floor
            width, height = (math.floor(Decimal(v).quantize(Decimal("0.01"), ROUND_HALF_UP))
                             for v in (new_w, new_h))
        else:
            width, height = src_w, src_h
        if self.divisor:  # enforce_size_divisibility
            width, height = (max(v // self.divisor, 1) * self.divisor for v in (width, height))
        return height, width
