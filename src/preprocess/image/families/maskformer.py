"""MaskFormer / Mask2Former image processors (transformers' MaskFormerImageProcessor and
Mask2FormerImageProcessor, 4.57: the same __init__ and the same image steps, verbatim copies):
resize the shortest edge (longest capped) then round both sides up to a multiple of
size_divisor, rescale, normalize, pad bottom / right with zeros to the batch's largest image (or
pad_size), with a pixel_mask of 1 on real pixels.

ignore_index, do_reduce_labels and num_labels concern segmentation maps (training labels) only:
read, as transformers reads them, and they change no pixel.
"""

import math

from ....errors import InputError
from .. import sizes as S
from .resized import BILINEAR, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, RESCALE
from .dense import DetrImageProcessor


class MaskFormerImageProcessor(DetrImageProcessor):
    """DETR's transform / pixel mask / batch padding with MaskFormer's size rule."""

    names = ("MaskFormerImageProcessor", "Mask2FormerImageProcessor")
    legacy = ("max_size",)
    makes_mask = True

    def setup(self, *, do_resize=True, size=None, size_divisor=32, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=True, image_mean=None,
              image_std=None, ignore_index=None, do_reduce_labels=False, num_labels=None,
              pad_size=None, **legacy):
        max_size = legacy.get("max_size", 1333)  # transformers' private _max_size
        size = size if size is not None else {"shortest_edge": 800, "longest_edge": max_size}
        self.size = S.size_dict(size, max_size=max_size, default_to_square=False)
        self.do_resize = do_resize
        self.resample = self.read_resample(do_resize, resample)
        if isinstance(size_divisor, bool) or not isinstance(size_divisor, int) or size_divisor < 0:
            raise InputError(f"{self.name}: size_divisor must be a whole number >= 0, got "
                             f"{size_divisor!r}")
        self.size_divisor = size_divisor
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=IMAGENET_DEFAULT_MEAN, default_std=IMAGENET_DEFAULT_STD)
        # encode_inputs always pads (there is no do_pad option) and always makes the pixel mask
        self.do_pad = self.pads_batch = True
        self.pad_size = pad_size
        if pad_size is not None:
            S.require(pad_size, ("height", "width"), self.name, "pad_size")
        if do_resize:
            self.output_size((1, 1))  # an unusable size dict fails now, not at the first image

    def output_size(self, image_hw):
        """MaskFormerImageProcessor.resize: get_maskformer_resize_output_image_size."""
        size = self.size
        if "shortest_edge" in size and "longest_edge" in size:
            out = S.shortest_edge_size(image_hw, size["shortest_edge"], default_to_square=False,
                                       max_size=size["longest_edge"])
        elif "height" in size and "width" in size:
            out = (size["height"], size["width"])
        else:
            raise InputError(f"{self.name}: size must have height and width, or shortest_edge and "
                             f"longest_edge; got {sorted(size)}")
        if self.size_divisor > 0:
            d = self.size_divisor
            out = tuple(int(math.ceil(side / d) * d) for side in out)
        return out
