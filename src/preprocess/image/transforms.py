"""The steps of transformers' slow image processors (transformers 4.57 `image_transforms.py`,
`image_processing_utils.py`), in NumPy with the same dtypes at each step, so our pixel values are
theirs up to float32 rounding. Images are (H, W, C) throughout, as transformers keeps them until
the last step moves channels first.
"""

import math

import numpy as np
import PIL.Image

from ...errors import InputError

# PIL.Image.Resampling, which transformers' PILImageResampling is.
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}


def check_resample(resample, processor):
    """The filter id of a config: one of Pillow's six (what transformers passes to Image.resize)."""
    if isinstance(resample, bool) or not isinstance(resample, int) or resample not in RESAMPLE:
        known = ", ".join(f"{k} ({v})" for k, v in RESAMPLE.items())
        raise InputError(f"{processor}: resample={resample!r} is not a Pillow filter; "
                         f"expected one of {known}")
    return resample


def resize(image, size, resample):
    """transformers.image_transforms.resize on uint8 pixels (or an RGB PIL image, whose array they
    are): to_pil_image (one channel squeezed), PIL `Image.resize((width, height), resample)`, back
    to an (H, W, C) uint8 array. Every
    processor here resizes before it rescales, so pixels are still uint8 (the float path of
    to_pil_image, which scales by 255 and truncates, is never taken)."""
    if isinstance(image, PIL.Image.Image):  # an RGB image: the pixels of its array, uncopied
        pil, shape = image, (image.height, image.width)
    elif image.dtype != np.uint8:
        raise TypeError(f"resize expects uint8 pixels, got {image.dtype}")  # internal invariant
    else:
        pil, shape = PIL.Image.fromarray(image[:, :, 0] if image.shape[-1] == 1 else image), \
            image.shape
    height, width = size
    if height <= 0 or width <= 0:  # Pillow: "height and width must be > 0"
        raise InputError(f"An image of {shape[0]}x{shape[1]} pixels would be resized "
                         f"to {height}x{width}: its aspect ratio is too extreme for this processor")
    out = np.asarray(pil.resize((width, height), resample=resample))
    return out[:, :, None] if out.ndim == 2 else out


def lookup(image, table):
    """``table[v, c]`` for each pixel value v of channel c of an (H, W, C) uint8 image: (H, W, C),
    a view of a (C, H, W) array (the layout the model takes, so moving channels first is free)."""
    channels = image.transpose(2, 0, 1)
    out = np.empty(channels.shape, table.dtype)
    for c, plane in enumerate(channels):
        np.take(table[:, c], plane, out=out[c])
    return out.transpose(1, 2, 0)


def rescale(image, scale):
    """transformers.image_transforms.rescale: float64 product, then float32."""
    return (image.astype(np.float64) * scale).astype(np.float32)


def normalize(image, mean, std):
    """transformers.image_transforms.normalize: (image - mean) / std in the image's float dtype
    (uint8 becomes float32 first); mean and std as arrays of that dtype."""
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(np.float32)
    channels = image.shape[-1]
    mean = np.array(per_channel(mean, channels, "image_mean"), dtype=image.dtype)
    std = np.array(per_channel(std, channels, "image_std"), dtype=image.dtype)
    return (image - mean) / std


def per_channel(values, channels, name):
    """`values` (a number, or a list of one per channel) as a list of `channels` values;
    `name` (image_mean / image_std) names it in the error."""
    if isinstance(values, (list, tuple)):
        if len(values) != channels:
            raise InputError(f"{name} has {len(values)} values for an image of {channels} channels")
        return list(values)
    return [values] * channels


def center_crop(image, size):
    """transformers.image_transforms.center_crop: crop around the centre; where the crop is larger
    than the image, the image is first placed (ceil-centred) on zeros of the image's dtype."""
    height, width = image.shape[:2]
    crop_h, crop_w = int(size[0]), int(size[1])
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    bottom, right = top + crop_h, left + crop_w
    if top >= 0 and bottom <= height and left >= 0 and right <= width:
        return image[top:bottom, left:right]
    new_h, new_w = max(crop_h, height), max(crop_w, width)
    canvas = np.zeros((new_h, new_w) + image.shape[2:], dtype=image.dtype)
    top_pad, left_pad = math.ceil((new_h - height) / 2), math.ceil((new_w - width) / 2)
    canvas[top_pad:top_pad + height, left_pad:left_pad + width] = image
    top, bottom, left, right = top + top_pad, bottom + top_pad, left + left_pad, right + left_pad
    return canvas[max(0, top):min(new_h, bottom), max(0, left):min(new_w, right)]


def pad(image, padding, mode="constant", value=0.0):
    """transformers.image_transforms.pad: ((top, bottom), (left, right)) around the H and W axes,
    np.pad's modes ("constant" with `value`, "symmetric", "reflect", "edge")."""
    widths = tuple(padding) + ((0, 0),) * (image.ndim - 2)
    if mode == "constant":
        return np.pad(image, widths, mode="constant", constant_values=value)
    return np.pad(image, widths, mode=mode)


def flip_channel_order(image):
    """transformers.image_transforms.flip_channel_order: RGB <-> BGR."""
    return image[..., ::-1]
