"""Detection, segmentation, depth, super-resolution and SAM families: sizes that follow the image,
padding, pixel masks. Same conventions as resized.py (setup = transformers' __init__
signature, transform = its preprocess).
"""

import math

import numpy as np

from ....errors import InputError
from .. import sizes as S
from .. import transforms as T
from .resized import (BICUBIC, BILINEAR, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, RESCALE)
from ..processor import ImageProcessor
from ..zoom import owlv2_resize


class DetrImageProcessor(ImageProcessor):
    """DetrImageProcessor (Grounding DINO's, Conditional and Deformable DETR's are verbatim copies
    of its preprocessing):
    resize, rescale, normalize, then pad bottom / right with zeros (to pad_size, or to the batch's
    largest image) with a pixel_mask of 1 on real pixels."""

    names = ("DetrImageProcessor", "GroundingDinoImageProcessor", "ConditionalDetrImageProcessor",
             "DeformableDetrImageProcessor")
    legacy = ("max_size", "pad_and_return_pixel_mask")
    makes_mask = True

    def setup(self, *, format="coco_detection", do_resize=True, size=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=True, image_mean=None,
              image_std=None, do_convert_annotations=None, do_pad=True, pad_size=None,
              **legacy):
        # format / do_convert_annotations concern annotations (labels) only
        if "pad_and_return_pixel_mask" in legacy:
            do_pad = legacy["pad_and_return_pixel_mask"]
        max_size = legacy.get("max_size", None if size is None else 1333)
        size = size if size is not None else {"shortest_edge": 800, "longest_edge": 1333}
        self.size = S.size_dict(size, max_size=max_size, default_to_square=False)
        self.do_resize = do_resize
        self.resample = self.read_resample(do_resize, resample)
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=IMAGENET_DEFAULT_MEAN, default_std=IMAGENET_DEFAULT_STD)
        self.do_pad = self.pads_batch = bool(do_pad)
        self.pad_size = pad_size
        if do_pad and pad_size is not None:
            S.require(pad_size, ("height", "width"), self.name, "pad_size")
        if do_resize:
            self.output_size((1, 1))  # an unusable size dict fails now, not at the first image

    def output_size(self, image_hw):
        """DetrImageProcessor.resize's choice of rule by the keys of `size`."""
        size = self.size
        if "shortest_edge" in size and "longest_edge" in size:
            return S.aspect_ratio_size(image_hw, size["shortest_edge"], size["longest_edge"])
        if "max_height" in size and "max_width" in size:
            return S.max_height_width_size(image_hw, size["max_height"], size["max_width"])
        if "height" in size and "width" in size:
            return (size["height"], size["width"])
        raise InputError(f"{self.name}: size must have height and width, or shortest_edge and "
                         f"longest_edge, or max_height and max_width; got {sorted(size)}")

    def transform(self, pixels):
        if self.do_resize:
            pixels = T.resize(pixels, self.output_size(pixels.shape[:2]), self.resample)
        size = pixels.shape[:2]
        pixels = self.rescale_normalize(pixels)
        if self.do_pad and self.pad_size is not None:
            pixels = _pad_bottom_right(pixels, (self.pad_size["height"], self.pad_size["width"]))
        return pixels, size

    def finish(self, features):
        if self.do_pad and self.makes_mask:
            # make_pixel_mask: ones over the image, zeros over the padding
            mask = np.zeros(features["pixel_values"].shape[1:], np.int64)
            mask[:features["size"][0], :features["size"][1]] = 1
            features["pixel_mask"] = mask
        return features


def _pad_bottom_right(pixels, target_hw):
    """DetrImageProcessor._pad_image: zeros below and to the right."""
    extra_h, extra_w = target_hw[0] - pixels.shape[0], target_hw[1] - pixels.shape[1]
    if extra_h < 0 or extra_w < 0:
        raise InputError(f"Cannot pad an image of {pixels.shape[0]}x{pixels.shape[1]} to "
                         f"pad_size {target_hw[0]}x{target_hw[1]}")
    return T.pad(pixels, ((0, extra_h), (0, extra_w)))


class YolosImageProcessor(DetrImageProcessor):
    """DETR's steps with YOLOS's size rule (multiples of 16); its pad makes no pixel_mask."""

    names = ("YolosImageProcessor",)
    makes_mask = False

    def setup(self, *, format="coco_detection", do_resize=True, size=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=True, image_mean=None,
              image_std=None, do_convert_annotations=None, do_pad=True, pad_size=None,
              **legacy):
        super().setup(format=format, do_resize=do_resize, size=size, resample=resample,
                      do_rescale=do_rescale, rescale_factor=rescale_factor,
                      do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                      do_convert_annotations=do_convert_annotations, do_pad=do_pad,
                      pad_size=pad_size, **legacy)

    def output_size(self, image_hw):
        size = self.size
        if "shortest_edge" in size and "longest_edge" in size:
            return S.yolos_size(image_hw, size["shortest_edge"], size["longest_edge"])
        return super().output_size(image_hw)


class RTDetrImageProcessor(DetrImageProcessor):
    """DETR's steps with RT-DETR's defaults: 640x640, no normalize, no pad; ``size`` is read
    without DETR's legacy max_size of 1333."""

    names = ("RTDetrImageProcessor",)

    def setup(self, *, format="coco_detection", do_resize=True, size=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=False, image_mean=None,
              image_std=None, do_convert_annotations=True, do_pad=False, pad_size=None):
        super().setup(format=format, do_resize=do_resize,
                      size=size if size is not None else {"height": 640, "width": 640},
                      resample=resample, do_rescale=do_rescale, rescale_factor=rescale_factor,
                      do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                      do_convert_annotations=do_convert_annotations, do_pad=do_pad,
                      pad_size=pad_size, max_size=None)


class DPTImageProcessor(ImageProcessor):
    names = ("DPTImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, keep_aspect_ratio=False,
              ensure_multiple_of=1, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None, do_pad=False, size_divisor=None,
              do_reduce_labels=False):
        self.size = S.size_dict(size if size is not None else {"height": 384, "width": 384})
        self.do_resize = do_resize
        if do_resize:
            S.require(self.size, ("height", "width"), self.name)
        self.resample = self.read_resample(do_resize, resample)
        self.keep_aspect_ratio, self.ensure_multiple_of = keep_aspect_ratio, ensure_multiple_of
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=IMAGENET_STANDARD_MEAN, default_std=IMAGENET_STANDARD_STD)
        self.do_pad, self.size_divisor = do_pad, size_divisor
        if do_pad and not size_divisor:
            raise InputError(f"{self.name}: do_pad is set without a size_divisor")

    def transform(self, pixels):
        """DPTImageProcessor._preprocess: resize, rescale, normalize, pad to a multiple."""
        if self.do_resize:
            target = S.dpt_size(pixels.shape[:2], (self.size["height"], self.size["width"]),
                                self.keep_aspect_ratio, self.ensure_multiple_of)
            pixels = T.resize(pixels, target, self.resample)
        size = pixels.shape[:2]
        pixels = self.rescale_normalize(pixels)
        if self.do_pad:
            pixels = T.pad(pixels, (centred_pad(size[0], self.size_divisor),
                                    centred_pad(size[1], self.size_divisor)))
        return pixels, size


def centred_pad(length, divisor):
    """DPTImageProcessor.pad_image's _get_pad: up to a multiple, the odd pixel after."""
    extra = math.ceil(length / divisor) * divisor - length
    return (extra // 2, extra - extra // 2)


class Swin2SRImageProcessor(ImageProcessor):
    names = ("Swin2SRImageProcessor",)
    legacy = ("pad_size",)

    def setup(self, *, do_rescale=True, rescale_factor=RESCALE, do_pad=True, size_divisor=8,
              **legacy):
        # transformers' __init__: `size_divisor if size_divisor is not None else pad_size`
        self.size_divisor = size_divisor if size_divisor is not None else legacy.get("pad_size")
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor)
        self.do_pad = do_pad
        if do_pad and not self.size_divisor:
            raise InputError(f"{self.name}: do_pad is set without a size_divisor")

    def transform(self, pixels):
        """Swin2SRImageProcessor.preprocess: rescale, then symmetric padding to the next multiple
        of size_divisor (always at least one more row and column block: `h // s + 1`)."""
        size = pixels.shape[:2]
        if self.do_rescale:
            pixels = T.rescale(pixels, self.rescale_factor)
        if self.do_pad:
            s = self.size_divisor
            pad_h, pad_w = (size[0] // s + 1) * s - size[0], (size[1] // s + 1) * s - size[1]
            pixels = T.pad(pixels, ((0, pad_h), (0, pad_w)), mode="symmetric")
        return pixels, size


class SamImageProcessor(ImageProcessor):
    names = ("SamImageProcessor",)

    def setup(self, *, do_resize=True, size=None, mask_size=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=True, image_mean=None,
              image_std=None, do_pad=True, pad_size=None, mask_pad_size=None,
              do_convert_rgb=True):
        # mask_size / mask_pad_size concern segmentation maps (labels) only
        size = size if size is not None else {"longest_edge": 1024}
        self.size = (size if isinstance(size, dict)
                     else S.size_dict(None, max_size=size, default_to_square=False))
        self.do_resize = do_resize
        if do_resize:
            S.require(self.size, ("longest_edge",), self.name)
        self.resample = self.read_resample(do_resize, resample)
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=IMAGENET_DEFAULT_MEAN, default_std=IMAGENET_DEFAULT_STD)
        self.do_pad = do_pad
        self.pad_size = S.size_dict(pad_size if pad_size is not None
                                    else {"height": 1024, "width": 1024})
        if do_pad:
            S.require(self.pad_size, ("height", "width"), self.name, "pad_size")
        self.do_convert_rgb = bool(do_convert_rgb)

    def transform(self, pixels):
        """SamImageProcessor._preprocess: resize the longest edge, rescale, normalize, pad."""
        if self.do_resize:
            target = S.longest_edge_size(pixels.shape[:2], self.size["longest_edge"])
            pixels = T.resize(pixels, target, self.resample)
        size = pixels.shape[:2]  # reshaped_input_sizes
        pixels = self.rescale_normalize(pixels)
        if self.do_pad:
            pixels = _pad_bottom_right(pixels, (self.pad_size["height"], self.pad_size["width"]))
        return pixels, size


class Owlv2ImageProcessor(ImageProcessor):
    names = ("Owlv2ImageProcessor",)

    def setup(self, *, do_rescale=True, rescale_factor=RESCALE, do_pad=True, do_resize=True,
              size=None, resample=BILINEAR, do_normalize=True, image_mean=None, image_std=None):
        # `resample` is stored but unused: Owlv2's resize is scikit-image's (linear, antialiased)
        self.size = S.size_dict(size if size is not None else {"height": 960, "width": 960})
        self.do_pad, self.do_resize = do_pad, do_resize
        if do_resize:
            S.require(self.size, ("height", "width"), self.name)
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=OPENAI_CLIP_MEAN, default_std=OPENAI_CLIP_STD)
        if not do_rescale and (do_pad or do_resize):
            # uint8 pixels would be padded with int(0.5) and filtered with integer rounding
            raise InputError(f"{self.name}: padding / resizing without do_rescale (on uint8 "
                             "pixels) is not supported")

    def transform(self, pixels):
        """Owlv2ImageProcessor.preprocess: rescale, pad to a square with 0.5 (grey, bottom /
        right), resize, normalize."""
        if self.do_rescale:
            pixels = T.rescale(pixels, self.rescale_factor)
        if self.do_pad:
            side = max(pixels.shape[:2])
            pixels = T.pad(pixels, ((0, side - pixels.shape[0]), (0, side - pixels.shape[1])),
                           value=0.5)
        if self.do_resize:
            pixels = owlv2_resize(pixels, (self.size["height"], self.size["width"]))
        size = pixels.shape[:2]
        if self.do_normalize:
            pixels = T.normalize(pixels, self.image_mean, self.image_std)
        return pixels, size
