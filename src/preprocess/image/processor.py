"""Image processors: preprocessor_config.json in, the model's `pixel_values` out, equal to
transformers' slow image processors (4.57) within float32 rounding, with no torch.

    from transmuter.preprocess.image.auto import image_processor_for
    proc = image_processor_for(config)           # dispatch on image_processor_type (auto.py)
    features = proc(image)   # {"pixel_values": (C, H, W) float32, "original_size": (h, w),
                             #  "size": (h, w) after resize / crop, before padding,
                             #  "pixel_mask": (H, W) int64 for the DETR family}
    batch = proc.pad([features, ...])            # (N, C, H, W) [+ pixel_mask (N, H, W)]

This module holds the base class `ImageProcessor` and the checks every config goes through; the
families are its subclasses under families/, and preprocess/image/auto.py maps each
`image_processor_type` to one of them.

A family is a subclass whose `setup` has the keyword arguments of its transformers `__init__` (and
the same defaults): those are the options it reads from the config, and the only ones that can
change its output. Other keys are ignored, as transformers ignores them (`proc.ignored` lists
them). An option value we do not implement raises `InputError`, never a different result.

An `image_processor_type` ending in "Fast" picks transformers' torchvision-backed processor of that
family (families/fast.py and families/dense_fast.py, resize in resize_fast.py), whose pixels
differ from the slow one's; a Fast type of a family without one is refused with a hint at the
slow type.
"""

import inspect
import math

import numpy as np
import PIL.Image

from ...errors import InputError
from . import transforms as T
from .load import load_image

# Keys every config may carry that never change pixel values (no family reads them).
METADATA = {"image_processor_type", "feature_extractor_type", "processor_class", "auto_map",
            "_valid_processor_keys", "_processor_class"}

MAX_SIDE = 1 << 16  # pixels: past it a resize is a memory bomb, not an image size


def check_fields(config):
    """Raise InputError naming the preprocessor_config.json field whose type or value no image
    processor takes (a size of inf or 10^30, a mean of '', a null std): they escaped as
    TypeError / OverflowError from Pillow and NumPy, or gave NaN scores."""
    if not isinstance(config, dict):
        raise InputError(f"preprocessor_config.json holds a {type(config).__name__}, not an "
                         "object of settings: fix or re-download the file")
    for key in ("image_processor_type", "feature_extractor_type"):
        if config.get(key) is not None and not isinstance(config[key], str):
            _bad(key, config[key], "a class name (a string)")
    for key in ("size", "crop_size", "pad_size"):
        value = config.get(key)
        items = (value.items() if isinstance(value, dict) else
                 enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)])
        for sub, side in items:
            name = key if sub is None else f"{key}.{sub}"
            if side is not None and (isinstance(side, bool) or not isinstance(side, int)
                                     or not 0 < side <= MAX_SIDE):
                _bad(name, side, f"a whole number of pixels in [1, {MAX_SIDE}]")
    for key in ("image_mean", "image_std"):
        value = config.get(key)
        if value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if not values or not all(_finite(v) and abs(v) <= F32_MAX and
                                 (key == "image_mean" or abs(v) >= F32_TINY) for v in values):
            _bad(key, value, "a number or a list of finite float32 numbers" +
                 (", none of them 0" if key == "image_std" else ""))
    factor = config.get("rescale_factor")
    # 255 * factor is a float32 pixel: past float32's range it is inf, the answer NaN
    # (fuzz 20261204:1123: 1e308 gave NaN scores)
    if factor is not None and not (_finite(factor) and abs(factor) * 255 <= F32_MAX):
        _bad("rescale_factor", factor, "a finite number (1/255) whose pixels fit float32")


F32_MAX, F32_TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


def _finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _bad(name, value, takes):
    shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
    raise InputError(f"preprocessor_config.json: {name!r} is {shown}, where an image processor "
                     f"takes {takes}: fix the file")


class ImageProcessor:
    """Base of the families; `auto.image_processor_for(config)` picks one."""

    names = ()           # the image_processor_type names a family serves (auto.py's table)
    legacy = ()          # old config keys a family's __init__ still reads from **kwargs
    pads_batch = False   # pad() pads to the batch's largest image (DETR, YOLOS)
    do_convert_rgb = False

    def __init__(self, config):
        self.config = dict(config)
        params = inspect.signature(self.setup).parameters
        known = {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY} | set(self.legacy)
        self.ignored = sorted(k for k in self.config if k not in known and k not in METADATA)
        self.setup(**{k: v for k, v in self.config.items() if k in known})

    @property
    def name(self):
        return self.config.get("image_processor_type") or type(self).__name__

    def setup(self, **options):
        raise NotImplementedError

    # ---- one image -------------------------------------------------------------------------

    def __call__(self, image):
        image = self._rgb(image)
        out, size = self.transform_image(image)
        features = {"pixel_values": np.ascontiguousarray(out.transpose(2, 0, 1), np.float32),
                    "original_size": (image.height, image.width),
                    "size": tuple(int(v) for v in size)}
        return self.finish(features)

    def transform_image(self, image):
        """`transform` of an RGB PIL image. A family whose first step is Pillow's resize resizes
        the PIL image itself (the pixels transformers gets from its array, without copying the
        full-size image out to NumPy and back: a third of a ViT's preprocessing on a photo)."""
        return self.transform(np.asarray(image))

    def _rgb(self, image):
        """The RGB PIL image whose (H, W, 3) uint8 array transformers' to_numpy_array sees: a PIL
        image as given (converted to RGB only where the family's do_convert_rgb says so, as its
        preprocess does); anything else through load_image (as transformers' pipelines do)."""
        if not isinstance(image, PIL.Image.Image):
            image = load_image(image)
        if self.do_convert_rgb and image.mode != "RGB":
            image = image.convert("RGB")
        if image.mode != "RGB":
            raise InputError(f"{self.name} takes RGB images (it does not convert, as transformers' "
                             f"does not), got a PIL image in mode {image.mode!r}: pass it through "
                             "load_image() or .convert('RGB') first")
        return image

    def transform(self, pixels):
        """(H, W, 3) uint8 -> ((H', W', C) array, (h, w) before padding). Family specific."""
        raise NotImplementedError

    def finish(self, features):
        """A family's last word on one image's features (the DETR family adds its pixel mask)."""
        return features

    # ---- shared steps, in transformers' order of rescale then normalize ------------------------

    def rescale_normalize(self, image):
        """Rescale then normalize. On uint8 pixels each output is a function of one byte and its
        channel, so the steps run once on the 256 values of each channel (the same operations in
        the same dtypes: the same bits) and the image looks them up, 5-10x faster."""
        if image.dtype == np.uint8 and (self.do_rescale or self.do_normalize):
            return T.lookup(image, self._table(image.shape[-1]))
        return self._rescale_normalize(image)

    def _rescale_normalize(self, image):
        if self.do_rescale:
            image = T.rescale(image, self.rescale_factor)
        if self.do_normalize:
            image = T.normalize(image, self.image_mean, self.image_std)
        return image

    def _table(self, channels):
        """(256, channels): what rescale_normalize makes of each byte value in each channel."""
        tables = self.__dict__.setdefault("_tables", {})
        if channels not in tables:
            values = np.repeat(np.arange(256, dtype=np.uint8)[:, None], channels, axis=1)
            tables[channels] = self._rescale_normalize(values[None])[0]
        return tables[channels]

    def read_common(self, *, do_rescale, rescale_factor, do_normalize=False, image_mean=None,
                    image_std=None, default_mean=None, default_std=None):
        """The rescale / normalize options as transformers' validate_preprocess_arguments wants."""
        self.do_rescale, self.rescale_factor = do_rescale, rescale_factor
        self.do_normalize = do_normalize
        self.image_mean = image_mean if image_mean is not None else default_mean
        self.image_std = image_std if image_std is not None else default_std
        if do_rescale and rescale_factor is None:
            raise InputError(f"{self.name}: do_rescale is set without a rescale_factor")
        if do_normalize and (self.image_mean is None or self.image_std is None):
            raise InputError(f"{self.name}: do_normalize is set without image_mean / image_std")

    def read_resample(self, do_resize, resample):
        if do_resize:
            if resample is None:
                raise InputError(f"{self.name}: do_resize is set without a resample filter")
            T.check_resample(resample, self.name)
        return resample

    # ---- a batch -----------------------------------------------------------------------------

    def pad(self, features, *, height=None, width=None):
        """Batch the features of several images. Fixed-size families stack them (images of
        different sizes are an error); padding families (DETR, YOLOS) pad bottom / right with
        zeros to the largest height and width, or to `height` x `width` when given."""
        if not features:
            raise InputError("pad() needs the features of at least one image")
        shapes = [f["pixel_values"].shape for f in features]
        if self.pads_batch:
            return self._pad_batch(features, shapes, height, width)
        if len(set(shapes)) > 1 or (height, width) not in ((None, None), shapes[0][1:]):
            want = "" if height is None and width is None else f" (asked for {height}x{width})"
            raise InputError(f"{self.name} does not pad: cannot batch pixel_values of shapes "
                             f"{sorted(set(shapes))}{want}")
        return self._batch(features, np.stack([f["pixel_values"] for f in features]))

    def _pad_batch(self, features, shapes, height, width):
        max_h, max_w = max(s[1] for s in shapes), max(s[2] for s in shapes)
        height, width = max_h if height is None else height, max_w if width is None else width
        if height < max_h or width < max_w:
            raise InputError(f"Cannot pad images of up to {max_h}x{max_w} to {height}x{width}")
        pixels = np.stack([
            np.pad(f["pixel_values"], ((0, 0), (0, height - s[1]), (0, width - s[2])))
            for f, s in zip(features, shapes)])
        batch = self._batch(features, pixels)
        if "pixel_mask" in features[0]:
            batch["pixel_mask"] = np.stack([
                np.pad(f["pixel_mask"], ((0, height - s[1]), (0, width - s[2])))
                for f, s in zip(features, shapes)])
        return batch

    @staticmethod
    def _batch(features, pixels):
        return {"pixel_values": pixels,
                "original_size": np.array([f["original_size"] for f in features], np.int64),
                "size": np.array([f["size"] for f in features], np.int64)}

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"
