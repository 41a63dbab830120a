"""transformers' `*ImageProcessorFast` (4.57) of the detection / dense families: DETR (and its
verbatim copies: Conditional and Deformable DETR, Grounding DINO), YOLOS, RT-DETR, MaskFormer /
Mask2Former, DPT, SAM, SAM 2 and Swin2SR (Owlv2's is in owlv2_fast.py), and transformers 5's
RfDetrImageProcessor (RF-DETR), a torchvision-backend class of the same kind.

Each reads its options as the Fast classes do (fast.FastImageProcessor: a null or
missing key takes the class default), takes its size rule from ../sizes.py (the slow family's)
and resizes with torchvision's antialiased kernel on uint8 (../resize_fast.py), then rescales
and normalizes fused in float32. Where a Fast class differs from its slow one beyond that, its
docstring says so.
"""

import math

import numpy as np

from ....errors import InputError
from .. import resize_fast as R
from .. import sizes as S
from .. import transforms as T
from .resized import (BICUBIC, BILINEAR, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD)
from .dense import DetrImageProcessor, centred_pad
from .fast import FastImageProcessor, pad_to, center_crop

_ON = {"do_resize": True, "do_rescale": True, "do_normalize": True}
_DEFAULT_MEAN_STD = {"image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD}
# the annotation options of the DETR family: they change labels only, never pixels
_ANNOTATIONS = {"format": "coco_detection", "do_convert_annotations": None,
                "return_segmentation_masks": None}


class DetrImageProcessorFast(FastImageProcessor):
    """DetrImageProcessorFast._preprocess: resize, rescale + normalize, then pad bottom / right with
    zeros (to pad_size, or to the batch's largest image) with a pixel_mask of 1 on real pixels.
    do_center_crop and crop_size are read and not used, as there."""

    names = ("DetrImageProcessorFast", "ConditionalDetrImageProcessorFast",
             "DeformableDetrImageProcessorFast", "GroundingDinoImageProcessorFast")
    defaults = {"resample": BILINEAR, "size": {"shortest_edge": 800, "longest_edge": 1333},
                "default_to_square": False, "do_pad": True, **_DEFAULT_MEAN_STD, **_ON,
                **_ANNOTATIONS}
    makes_mask = True

    def __init__(self, config):
        super().__init__(self.legacy_keys(dict(config)))

    @staticmethod
    def legacy_keys(config):
        """DetrImageProcessorFast.__init__: pad_and_return_pixel_mask is do_pad; max_size caps
        an int size (1333 where size is given without it)."""
        if "pad_and_return_pixel_mask" in config:
            config["do_pad"] = config.pop("pad_and_return_pixel_mask")
        size = config.pop("size", None)
        max_size = config.pop("max_size") if "max_size" in config else (
            None if size is None else 1333)
        size = size if size is not None else {"shortest_edge": 800, "longest_edge": 1333}
        config["size"] = S.size_dict(size, max_size=max_size, default_to_square=False)
        return config

    def family(self, **annotations):
        self.pads_batch = self.do_pad  # with pad_size too: pad() then stacks the pixel masks

    def check_size(self):
        self.output_size((1, 1))

    def aspect_size(self, image_hw):
        return S.aspect_ratio_size(image_hw, self.size["shortest_edge"], self.size["longest_edge"])

    def output_size(self, image_hw):
        """DetrImageProcessorFast.resize's choice of rule by the keys of `size`."""
        size = self.size
        if size.get("shortest_edge") and size.get("longest_edge"):
            return self.aspect_size(image_hw)
        if size.get("max_height") and size.get("max_width"):
            return S.max_height_width_size(image_hw, size["max_height"], size["max_width"])
        if size.get("height") and size.get("width"):
            return (size["height"], size["width"])
        raise InputError(f"{self.name}: size must have height and width, or shortest_edge and "
                         f"longest_edge, or max_height and max_width; got {sorted(size)}")

    def transform(self, pixels):
        if self.do_resize:
            pixels = self.resize(pixels)
        size = pixels.shape[:2]
        pixels = self.rescale_normalize(pixels)
        if self.do_pad and self.pad_size is not None:
            pixels = pad_to(pixels, (self.pad_size["height"], self.pad_size["width"]))
        return pixels, size

    finish = DetrImageProcessor.finish  # the pixel mask, as the slow family makes it


class YolosImageProcessorFast(DetrImageProcessorFast):
    """DETR's Fast steps with YOLOS's size rule (multiples of 16). Unlike the slow YOLOS, its pad
    returns a pixel_mask (YolosImageProcessorFast copies DETR's pad)."""

    names = ("YolosImageProcessorFast",)

    def aspect_size(self, image_hw):
        return S.yolos_size(image_hw, self.size["shortest_edge"], self.size["longest_edge"])


class RTDetrImageProcessorFast(DetrImageProcessorFast):
    """DETR's Fast steps with RT-DETR's defaults (640x640, no normalize, no pad); its __init__
    reads no legacy keys (an int size is a shortest edge, which its resize refuses)."""

    names = ("RTDetrImageProcessorFast",)
    defaults = {**DetrImageProcessorFast.defaults, "size": {"height": 640, "width": 640},
                "do_normalize": False, "do_pad": False, "do_convert_annotations": True}

    def __init__(self, config):
        FastImageProcessor.__init__(self, config)


class RfDetrImageProcessor(DetrImageProcessorFast):
    """transformers 5.24's RfDetrImageProcessor (RF-DETR; 4.57 has none), a torchvision-backend
    class without "Fast" in its name: DETR Fast's options, defaults, size rules and pad (with its
    pixel_mask), but in another order and with another resize. It rescales first (float32 pixel
    times rescale_factor), resizes that float image with `tvF.resize(antialias=False)`, torch's
    bilinear interpolation without antialias (NEAREST: nearest-exact), then normalizes, (x - mean)
    / std in float32 (not fused with the rescale). Its __init__ reads pad_and_return_pixel_mask
    only where do_pad is missing (`kwargs.setdefault`), and max_size as DETR's."""

    names = ("RfDetrImageProcessor",)

    def __init__(self, config):
        config = dict(config)
        legacy_pad = config.pop("pad_and_return_pixel_mask", None)
        if legacy_pad is not None:
            config.setdefault("do_pad", legacy_pad)
        super().__init__(config)

    def family(self, **annotations):
        super().family(**annotations)
        if not self.do_rescale and (self.do_resize or self.do_normalize):
            # torchvision's float kernels would get uint8 pixels (and normalize refuses them)
            raise InputError(f"{self.name}: do_resize / do_normalize without do_rescale (on uint8 "
                             "pixels) is not supported")
        if self.do_resize and self.resample not in (BILINEAR, R.NEAREST):
            raise InputError(f"{self.name}: resample={self.resample!r}: only BILINEAR (2) and "
                             "NEAREST (0) are supported for its float resize without antialias")

    def transform(self, pixels):
        image = pixels.astype(np.float32)
        if self.do_rescale:
            image = image * np.float32(self.rescale_factor)
        if self.do_resize:
            size = self.output_size(image.shape[:2])
            resize = R.nearest_exact if self.resample == R.NEAREST else R.interpolate_bilinear
            image = resize(image, size)
        size = image.shape[:2]
        if self.do_normalize:
            channels = image.shape[-1]
            mean = np.array(T.per_channel(self.image_mean, channels, "image_mean"), np.float32)
            std = np.array(T.per_channel(self.image_std, channels, "image_std"), np.float32)
            image = (image - mean) / std
        if self.do_pad and self.pad_size is not None:
            image = pad_to(image, (self.pad_size["height"], self.pad_size["width"]))
        return image.astype(np.float32), size


class MaskFormerImageProcessorFast(DetrImageProcessorFast):
    """MaskFormer / Mask2Former Fast: DETR's size rule (not the slow ones' shortest edge capped by
    max_size: get_size_with_aspect_ratio, and max_height / max_width), then both sides up to a
    multiple of size_divisor; rescale + normalize; always padded, always a pixel_mask (do_pad is
    not read). ignore_index, do_reduce_labels and num_labels concern segmentation maps only."""

    names = ("MaskFormerImageProcessorFast", "Mask2FormerImageProcessorFast")
    defaults = {"resample": BILINEAR, "size": {"shortest_edge": 800, "longest_edge": 1333},
                "default_to_square": False, "do_pad": True, "size_divisor": 32,
                "do_reduce_labels": False, "ignore_index": None, "num_labels": None,
                **_DEFAULT_MEAN_STD, **_ON}
    size_divisor = 0  # until family() reads it (setup checks the size rule first)

    @staticmethod
    def legacy_keys(config):
        """Mask2FormerImageProcessorFast.__init__: max_size without size sets the default's
        longest_edge; an int size with no max_size is a bare shortest edge (refused by resize)."""
        if "pad_and_return_pixel_mask" in config:
            config["do_pad"] = config.pop("pad_and_return_pixel_mask")
        size, max_size = config.pop("size", None), config.pop("max_size", None)
        if size is None:
            size = {"shortest_edge": 800, "longest_edge": 1333 if max_size is None else max_size}
        config["size"] = S.size_dict(size, max_size=max_size, default_to_square=False)
        return config

    def family(self, size_divisor, **labels):
        if isinstance(size_divisor, bool) or not isinstance(size_divisor, int) or size_divisor < 0:
            raise InputError(f"{self.name}: size_divisor must be a whole number >= 0, got "
                             f"{size_divisor!r}")
        self.size_divisor = size_divisor
        self.do_pad = self.pads_batch = True

    def output_size(self, image_hw):
        out = super().output_size(image_hw)
        if self.size_divisor > 0:
            d = self.size_divisor
            out = tuple(int(math.ceil(side / d) * d) for side in out)
        return out


class DPTImageProcessorFast(FastImageProcessor):
    """DPTImageProcessorFast._preprocess: resize (DPT's rule), center crop, then - unlike the slow
    DPT, which pads after normalizing - the centred pad to a multiple of size_divisor with zeros
    on the uint8 pixels, so the padding reads (0 - mean) / std after the fused normalize."""

    names = ("DPTImageProcessorFast",)
    defaults = {"resample": BICUBIC, "size": {"height": 384, "width": 384},
                "image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD,
                "do_pad": False, "ensure_multiple_of": 1, "keep_aspect_ratio": False,
                "size_divisor": None, "do_reduce_labels": None, **_ON}

    def family(self, ensure_multiple_of, keep_aspect_ratio, size_divisor, do_reduce_labels):
        self.ensure_multiple_of, self.keep_aspect_ratio = ensure_multiple_of, keep_aspect_ratio
        self.size_divisor, self.pads_batch = size_divisor, False
        if self.do_resize and not isinstance(ensure_multiple_of, int):
            raise InputError(f"{self.name}: ensure_multiple_of must be a whole number, got "
                             f"{ensure_multiple_of!r}")
        if self.do_pad and not size_divisor:
            raise InputError(f"{self.name}: do_pad is set without a size_divisor")

    def check_size(self):
        S.require(self.size, ("height", "width"), self.name)

    def output_size(self, image_hw):
        return S.dpt_size(image_hw, (self.size["height"], self.size["width"]),
                          self.keep_aspect_ratio, self.ensure_multiple_of)

    def transform(self, pixels):
        if self.do_resize:
            pixels = self.resize(pixels)
        if self.do_center_crop:
            pixels = center_crop(pixels, (self.crop_size["height"], self.crop_size["width"]))
        size = pixels.shape[:2]
        if self.do_pad:
            pixels = T.pad(pixels, (centred_pad(size[0], self.size_divisor),
                                    centred_pad(size[1], self.size_divisor)))
        return self.rescale_normalize(pixels), size


class SamImageProcessorFast(FastImageProcessor):
    """SamImageProcessorFast: the Fast base's steps with SAM's longest-edge rule, padded to
    pad_size (1024x1024). `size` is the resized size (the slow processor's reshaped_input_sizes;
    the Fast one's reshaped_input_sizes in 4.57 repeat the original sizes)."""

    names = ("SamImageProcessorFast",)
    defaults = {"resample": BILINEAR, "size": {"longest_edge": 1024}, "do_convert_rgb": True,
                "do_pad": True, "pad_size": {"height": 1024, "width": 1024},
                "mask_size": {"longest_edge": 256}, "mask_pad_size": {"height": 256, "width": 256},
                **_DEFAULT_MEAN_STD, **_ON}

    def family(self, mask_size, mask_pad_size):
        pass  # segmentation maps (labels) only

    def check_size(self):
        S.require(self.size, ("longest_edge",), self.name)

    def output_size(self, image_hw):
        return S.longest_edge_size(image_hw, self.size["longest_edge"])


class Sam2ImageProcessorFast(FastImageProcessor):
    """Sam2ImageProcessorFast (SAM 2 / 2.1): the Fast base's steps as they are. Unlike SAM's, no
    aspect-preserving longest-edge resize and no padding to pad_size (do_pad is None): the image
    is squeezed to size's height x width (1024x1024), so `size` is that height x width (its
    reshaped_input_sizes, like SAM Fast's, repeat the original sizes). do_pad / pad_size are the
    base's (a do_pad config pads, as there); mask_pad_size is not read."""

    names = ("Sam2ImageProcessorFast",)
    defaults = {"resample": BILINEAR, "size": {"height": 1024, "width": 1024},
                "mask_size": {"height": 256, "width": 256}, "do_convert_rgb": True,
                "do_pad": None, **_DEFAULT_MEAN_STD, **_ON}

    def family(self, mask_size):
        pass  # segmentation maps (labels) only


class Sam3ImageProcessor(Sam2ImageProcessorFast):
    """Sam3ImageProcessor (SAM 3 and its tracker; transformers 5's torchvision-backend class,
    Sam3ImageProcessorFast in earlier releases): SAM 2's steps with SAM 3's defaults, 1008x1008,
    288x288 masks and the "standard" mean / std (0.5)."""

    names = ("Sam3ImageProcessor", "Sam3ImageProcessorFast")
    defaults = {**Sam2ImageProcessorFast.defaults, "size": {"height": 1008, "width": 1008},
                "mask_size": {"height": 288, "width": 288},
                "image_mean": IMAGENET_STANDARD_MEAN, "image_std": IMAGENET_STANDARD_STD}


class Swin2SRImageProcessorFast(FastImageProcessor):
    """Swin2SRImageProcessorFast._preprocess: rescale (float32), then the slow one's symmetric pad
    to the next multiple of size_divisor (always at least one more block). Resize, crop and
    normalize options are not read, as there."""

    names = ("Swin2SRImageProcessorFast",)
    defaults = {"do_rescale": True, "do_pad": True, "size_divisor": 8}

    def __init__(self, config):
        config = dict(config)
        # __init__: `kwargs.setdefault("size_divisor", pad_size)`, so a missing size_divisor is
        # the legacy pad_size, or None (not the class default 8)
        pad_size = config.pop("pad_size", None)
        config.setdefault("size_divisor", pad_size)
        for key in ("do_resize", "do_center_crop", "do_normalize"):
            config.pop(key, None)
        super().__init__(config)

    def family(self, size_divisor):
        self.pads_batch = False
        self.size_divisor = size_divisor
        if self.do_pad and self.size_divisor is None:
            raise InputError(f"{self.name}: do_pad is set without a size_divisor (or the legacy "
                             "pad_size): transformers' Swin2SRImageProcessorFast then fails on "
                             "every image; set size_divisor (8 for the Hub's Swin2SR models)")

    def transform(self, pixels):
        size = pixels.shape[:2]
        pixels = self.rescale_normalize(pixels)
        if self.do_pad:
            s = self.size_divisor
            pad_h, pad_w = (size[0] // s + 1) * s - size[0], (size[1] // s + 1) * s - size[1]
            if pad_h > size[0] or pad_w > size[1]:
                # torchvision's symmetric pad indexes the image once: it fails (IndexError) where
                # NumPy's, the slow processor's, would reflect again
                raise InputError(f"{self.name}: an image of {size[0]}x{size[1]} pixels needs "
                                 f"{pad_h}x{pad_w} of symmetric padding, more than it has (as "
                                 "torchvision refuses); use Swin2SRImageProcessor, or a larger "
                                 "image")
            pixels = T.pad(pixels, ((0, pad_h), (0, pad_w)), mode="symmetric")
        return pixels, size
