"""transformers' `*ImageProcessorFast` (4.57, transformers/image_processing_utils_fast.py and
models/<family>/image_processing_<family>_fast.py) for the classification-style families: the
torchvision resize of ../resize_fast.py on uint8 pixels, their center crop, and the fused
`rescale_and_normalize` in float32. Their pixel values differ from the slow (Pillow) processors'.

A fast class reads its options differently from a slow one: every key of
`DefaultFastImageProcessorKwargs` (plus the family's own) is read from the config, and a missing
key takes the class default (`defaults` here, the class attributes there), while a null one stays
None (ImageProcessingMixin.__init__ sets every key as an attribute before the Fast __init__
looks for defaults): a null do_normalize does not normalize, a null resample with do_resize is
refused. So a ViT Fast config may center-crop or pad, which ViT slow cannot.
"""

import numpy as np

from ....errors import InputError
from .. import resize_fast as R
from .. import sizes as S
from .. import transforms as T
from .resized import (BICUBIC, BILINEAR, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, RESCALE)
from ..processor import METADATA, ImageProcessor

# transformers.image_processing_utils_fast.BaseImageProcessorFast's class attributes
_BASE = {"do_resize": None, "size": None, "default_to_square": True, "resample": None,
         "do_center_crop": None, "crop_size": None, "do_rescale": None, "rescale_factor": RESCALE,
         "do_normalize": None, "image_mean": None, "image_std": None, "do_pad": None,
         "pad_size": None, "do_convert_rgb": None}
# DefaultFastImageProcessorKwargs keys that never change pixel values
_INERT = {"return_tensors", "data_format", "input_data_format", "device", "disable_grouping"}


class FastImageProcessor(ImageProcessor):
    """BaseImageProcessorFast._preprocess: resize, center crop, rescale + normalize, pad."""

    defaults = {}

    def __init__(self, config):
        self.config = dict(config)
        options = {**_BASE, **self.defaults}
        known = set(options) | _INERT
        self.ignored = sorted(k for k in self.config if k not in known and k not in METADATA)
        for key in options:
            if key in self.config:  # even null: transformers keeps the None (see above)
                options[key] = self.config[key]
        self.setup(**options)

    def setup(self, *, do_resize, size, default_to_square, resample, do_center_crop, crop_size,
              do_rescale, rescale_factor, do_normalize, image_mean, image_std, do_pad, pad_size,
              do_convert_rgb, **family):
        self.do_resize, self.resample = bool(do_resize), resample
        self.size = None if size is None else S.size_dict(size, default_to_square=default_to_square)
        self.do_center_crop = bool(do_center_crop)
        self.crop_size = None if crop_size is None else S.size_dict(crop_size,
                                                                   param_name="crop_size")
        self.read_common(do_rescale=bool(do_rescale), rescale_factor=rescale_factor,
                         do_normalize=bool(do_normalize), image_mean=image_mean,
                         image_std=image_std)
        if self.do_resize:
            if self.size is None or resample is None:  # as validate_fast_preprocess_arguments
                raise InputError(f"{self.name}: do_resize is set without size and resample")
            if resample not in (0, 1, 2, 3):
                raise InputError(f"{self.name}: resample={resample!r}: torchvision resizes tensors "
                                 "with NEAREST (0), LANCZOS (1), BILINEAR (2) or BICUBIC (3) only")
            self.check_size()
        if self.do_center_crop:
            if self.crop_size is None:
                raise InputError(f"{self.name}: do_center_crop is set without a crop_size")
            S.require(self.crop_size, ("height", "width"), self.name, "crop_size")
        self.do_pad = bool(do_pad)
        self.pad_size = None if pad_size is None else S.size_dict(pad_size, param_name="pad_size")
        if self.do_pad and self.pad_size is not None:
            S.require(self.pad_size, ("height", "width"), self.name, "pad_size")
        self.pads_batch = self.do_pad and self.pad_size is None
        self.do_convert_rgb = bool(do_convert_rgb)
        self.family(**family)

    def family(self):
        """The family's own options (crop_pct, do_flip_channel_order, do_reduce_labels)."""

    def check_size(self):
        self.output_size((1, 1))  # an unusable size dict fails now, not at the first image

    def output_size(self, image_hw):
        """BaseImageProcessorFast.resize's choice of rule by the keys of `size`."""
        size = self.size
        if size.get("shortest_edge") and size.get("longest_edge"):
            return S.aspect_ratio_size(image_hw, size["shortest_edge"], size["longest_edge"])
        if size.get("shortest_edge"):
            return S.shortest_edge_size(image_hw, size["shortest_edge"], default_to_square=False)
        if size.get("max_height") and size.get("max_width"):
            return S.max_height_width_size(image_hw, size["max_height"], size["max_width"])
        if size.get("height") and size.get("width"):
            return (size["height"], size["width"])
        raise InputError(f"{self.name}: size must have height and width, or max_height and "
                         f"max_width, or shortest_edge; got {sorted(size)}")

    def transform(self, pixels):
        if self.do_resize:
            pixels = self.resize(pixels)
        if self.do_center_crop:
            pixels = center_crop(pixels, (self.crop_size["height"], self.crop_size["width"]))
        size = pixels.shape[:2]
        pixels = self.rescale_normalize(pixels)
        if self.do_pad and self.pad_size is not None:
            pixels = pad_to(pixels, (self.pad_size["height"], self.pad_size["width"]))
        return pixels, size

    def resize(self, pixels):
        return R.resize(pixels, self.output_size(pixels.shape[:2]), self.resample)

    def rescale_normalize(self, image):
        """BaseImageProcessorFast.rescale_and_normalize: with both, one normalize in float32 by
        mean / rescale_factor and std / rescale_factor (`_fuse_mean_std_and_rescale_factor`:
        float32 tensors times the float 1 / rescale_factor); rescale alone is a float32 product;
        neither leaves the values as they are."""
        if self.do_normalize:
            mean, std = self.image_mean, self.image_std
            channels = image.shape[-1]
            mean = np.array(T.per_channel(mean, channels, "image_mean"), np.float32)
            std = np.array(T.per_channel(std, channels, "image_std"), np.float32)
            if self.do_rescale:
                factor = np.float32(1.0 / self.rescale_factor)
                mean, std = mean * factor, std * factor
            return (image.astype(np.float32) - mean) / std
        if self.do_rescale:
            return image.astype(np.float32) * np.float32(self.rescale_factor)
        return image.astype(np.float32)


def center_crop(image, size):
    """BaseImageProcessorFast.center_crop: where the crop is larger, pad with zeros (the smaller
    half before, floor), then crop at int((h - crop_h) / 2)."""
    height, width = image.shape[:2]
    crop_h, crop_w = int(size[0]), int(size[1])
    if crop_w > width or crop_h > height:
        top = (crop_h - height) // 2 if crop_h > height else 0
        left = (crop_w - width) // 2 if crop_w > width else 0
        bottom = (crop_h - height + 1) // 2 if crop_h > height else 0
        right = (crop_w - width + 1) // 2 if crop_w > width else 0
        image = T.pad(image, ((top, bottom), (left, right)))
        height, width = image.shape[:2]
    top, left = int((height - crop_h) / 2.0), int((width - crop_w) / 2.0)
    return image[top:top + crop_h, left:left + crop_w]


def torchvision_center_crop(image, size):
    """torchvision.transforms.v2.functional.center_crop (offsets rounded half to even; only
    called where the crop fits)."""
    height, width = image.shape[:2]
    top, left = int(round((height - size[0]) / 2.0)), int(round((width - size[1]) / 2.0))
    return image[top:top + size[0], left:left + size[1]]


def pad_to(pixels, target_hw):
    """BaseImageProcessorFast.pad: zeros below and to the right."""
    extra_h, extra_w = target_hw[0] - pixels.shape[0], target_hw[1] - pixels.shape[1]
    if extra_h < 0 or extra_w < 0:
        raise InputError(f"Cannot pad an image of {pixels.shape[0]}x{pixels.shape[1]} to "
                         f"pad_size {target_hw[0]}x{target_hw[1]}")
    return T.pad(pixels, ((0, extra_h), (0, extra_w)))


def _fast(name, **defaults):
    """A family with only class-attribute defaults (ViTImageProcessorFast and the like)."""
    return type(name, (FastImageProcessor,), {"defaults": defaults, "names": (name,)})


_STD = {"image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD}
_CLIP = {"image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD}
_ON = {"do_resize": True, "do_rescale": True, "do_normalize": True}

ViTImageProcessorFast = _fast("ViTImageProcessorFast", resample=BILINEAR,
                              size={"height": 224, "width": 224}, **_STD, **_ON)
SiglipImageProcessorFast = _fast("SiglipImageProcessorFast", resample=BICUBIC,
                                 size={"height": 224, "width": 224}, default_to_square=False,
                                 **_STD, **_ON)
CLIPImageProcessorFast = _fast("CLIPImageProcessorFast", resample=BICUBIC,
                               size={"shortest_edge": 224}, default_to_square=False,
                               crop_size={"height": 224, "width": 224}, do_center_crop=True,
                               do_convert_rgb=True, **_CLIP, **_ON)
BitImageProcessorFast = _fast("BitImageProcessorFast", resample=BICUBIC,
                              size={"shortest_edge": 224}, default_to_square=False,
                              crop_size={"height": 224, "width": 224}, do_center_crop=True,
                              do_convert_rgb=True, **_CLIP, **_ON)
DeiTImageProcessorFast = _fast("DeiTImageProcessorFast", resample=BICUBIC,
                               size={"height": 256, "width": 256},
                               crop_size={"height": 224, "width": 224}, do_center_crop=True,
                               **_STD, **_ON)
OwlViTImageProcessorFast = _fast("OwlViTImageProcessorFast", resample=BICUBIC,
                                 size={"height": 768, "width": 768},
                                 crop_size={"height": 768, "width": 768}, do_center_crop=False,
                                 do_resize=True, do_rescale=True, do_normalize=None, **_CLIP)
MobileNetV1ImageProcessorFast = _fast("MobileNetV1ImageProcessorFast", resample=BILINEAR,
                                      size={"shortest_edge": 256}, default_to_square=False,
                                      crop_size={"height": 224, "width": 224},
                                      do_center_crop=True, **_STD, **_ON)


class _ReducesLabels(FastImageProcessor):
    """do_reduce_labels changes segmentation maps (labels) only, never pixel_values."""

    def family(self, do_reduce_labels=False):
        pass


def _fast_labels(name, **defaults):
    return type(name, (_ReducesLabels,), {"defaults": {**defaults, "do_reduce_labels": False},
                                          "names": (name,)})


BeitImageProcessorFast = _fast_labels("BeitImageProcessorFast", resample=BICUBIC,
                                      size={"height": 224, "width": 224},
                                      crop_size={"height": 224, "width": 224},
                                      do_center_crop=False, **_STD, **_ON)
SegformerImageProcessorFast = _fast_labels("SegformerImageProcessorFast", resample=BILINEAR,
                                           size={"height": 512, "width": 512},
                                           image_mean=IMAGENET_DEFAULT_MEAN,
                                           image_std=IMAGENET_DEFAULT_STD, **_ON)
MobileNetV2ImageProcessorFast = _fast_labels("MobileNetV2ImageProcessorFast", resample=BILINEAR,
                                             size={"shortest_edge": 256}, default_to_square=False,
                                             crop_size={"height": 224, "width": 224},
                                             do_center_crop=True, **_STD, **_ON)


class ConvNextImageProcessorFast(FastImageProcessor):
    names = ("ConvNextImageProcessorFast",)
    defaults = {"resample": BILINEAR, "size": {"shortest_edge": 384}, "default_to_square": False,
                "crop_pct": 224 / 256, **_STD, **_ON}

    def family(self, crop_pct):
        self.crop_pct = crop_pct

    def check_size(self):
        S.require(self.size, ("shortest_edge",), self.name)

    def resize(self, pixels):
        """ConvNextImageProcessorFast.resize: under 384, the shortest edge to
        int(shortest_edge / crop_pct), then torchvision's center crop to a square; from 384 on,
        a square."""
        edge = self.size["shortest_edge"]
        if edge >= 384:
            return R.resize(pixels, (edge, edge), self.resample)
        target = S.shortest_edge_size(pixels.shape[:2], int(edge / self.crop_pct),
                                      default_to_square=False)
        return torchvision_center_crop(R.resize(pixels, target, self.resample), (edge, edge))


class MobileViTImageProcessorFast(FastImageProcessor):
    names = ("MobileViTImageProcessorFast",)
    defaults = {"resample": BILINEAR, "size": {"shortest_edge": 224}, "default_to_square": False,
                "crop_size": {"height": 256, "width": 256}, "do_resize": True,
                "do_center_crop": True, "do_rescale": True, "do_flip_channel_order": True,
                "do_reduce_labels": False}

    def family(self, do_flip_channel_order, do_reduce_labels):
        self.do_flip_channel_order = bool(do_flip_channel_order)

    def rescale_normalize(self, image):
        """MobileViTImageProcessorFast._preprocess: rescale only (no normalize), then RGB to BGR."""
        if self.do_rescale:
            image = image.astype(np.float32) * np.float32(self.rescale_factor)
        image = image.astype(np.float32)
        return T.flip_channel_order(image) if self.do_flip_channel_order else image
