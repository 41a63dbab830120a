"""transformers.js' base ImageProcessor: the preprocessor_config.json of background-removal exports
(briaai/RMBG-1.4, BiRefNet, MODNet) names ``"feature_extractor_type": "ImageFeatureExtractor"``, a
class transformers (Python) does not have; transformers.js runs it as its generic ImageProcessor
(src/image_processors_utils.js). Its ``preprocess`` is followed step by step: RGB, resize to
size {width, height} as transformers.js does in Node (sharp's affine bilinear, not Pillow's:
image_resize_sharp.py), rescale (a float64 product stored as float32), normalize.
"""

from ..errors import InputError
from .image_families import BILINEAR, RESCALE, _Resized
from .image_processor import register
from .image_resize_sharp import sharp_bilinear

# transformers.js' RESAMPLING_MAPPING: box (4) and hamming (5) fall back to bilinear (with a warning)
BILINEAR_LIKE = {BILINEAR: "bilinear", 4: "box", 5: "hamming"}


# processor_type() renames FeatureExtractor -> ImageProcessor, as transformers' AutoImageProcessor
# does: "ImageFeatureExtractor" becomes this name (transformers itself has no such class)
@register("ImageImageProcessor")
class TransformersJsImageProcessor(_Resized):
    do_convert_rgb = True  # transformers.js: config.do_convert_rgb ?? true

    def setup(self, *, do_resize=None, size=None, image_size=None, resample=BILINEAR, do_rescale=True,
              rescale_factor=RESCALE, do_normalize=False, image_mean=None, image_std=None, mean=None,
              std=None, do_convert_rgb=True, do_pad=False, pad_size=None, size_divisibility=None,
              do_center_crop=False, do_thumbnail=False):
        size = size if size is not None else image_size
        do_resize = do_resize if do_resize is not None else size is not None
        for name, value in (("do_center_crop", do_center_crop), ("do_thumbnail", do_thumbnail),
                            ("size_divisibility", size_divisibility), ("pad_size", pad_size)):
            if value:
                raise InputError(f"preprocessor_config.json: {self.name} (transformers.js' generic "
                                 f"processor) with {name} is not supported yet: only resize to "
                                 "size {width, height}, rescale and normalize are")
        if do_resize and not (isinstance(size, dict) and set(size) == {"width", "height"}):
            raise InputError(f"preprocessor_config.json: {self.name} resizes to size {{width, "
                             f"height}} here (as briaai/RMBG-1.4's), got size {size!r}")
        # do_pad without pad_size pads to size {width, height}: a resized image already has it
        self.read(do_resize, size or {"height": 1, "width": 1}, resample, do_rescale, rescale_factor,
                  do_normalize, image_mean if image_mean is not None else mean,
                  image_std if image_std is not None else std, None, None)
        self.do_convert_rgb = bool(do_convert_rgb)
        if do_resize and resample not in BILINEAR_LIKE:
            raise InputError(f"preprocessor_config.json: resample {resample!r} is not supported yet by "
                             f"{self.name} (transformers.js' sharp resize is reproduced for bilinear, "
                             "2, only)")

    def transform(self, pixels):
        if self.do_resize:
            pixels = sharp_bilinear(pixels, (self.size["height"], self.size["width"]))
        return self.rescale_normalize(pixels), pixels.shape[:2]
