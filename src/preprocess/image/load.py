"""Images in: `load_image` turns a file, its bytes, a PIL image or an array into the RGB PIL image
that transformers' pipelines hand to an image processor (`transformers.image_utils.load_image`:
EXIF orientation applied, then `convert("RGB")`, which drops alpha and clips 16-bit values as
Pillow does). An image processor (preprocess/image/processor.py, picked by auto.py) makes the
model inputs from it.

    from transmuter.preprocess.image.load import load_image
    from transmuter.preprocess.image.auto import image_processor_for
    proc = image_processor_for(preprocessor_config)
    features = proc(load_image("cat.jpg"))      # {"pixel_values": (C, H, W) float32, ...}
"""

import base64
import binascii
import io
import os
import pathlib

import numpy as np
import PIL.Image
import PIL.ImageOps

from ...errors import InputError
from .. import url

# What Pillow raises on a file it cannot read: not an image, truncated, corrupt, too large.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, PIL.Image.DecompressionBombError)


def load_image(image):
    """An RGB `PIL.Image.Image` from `image`: a PIL image, a path (str or pathlib), an http(s)
    URL, the bytes of an encoded file, a base64 / `data:image/...` string, or a NumPy array
    (HWC, HW or CHW; uint8, or floats in [0, 1] or with integer values in [0, 255], read as
    transformers' `to_pil_image` reads them). Anything else, or a file Pillow cannot decode,
    raises `InputError` naming it."""
    if isinstance(image, PIL.Image.Image):
        pil, what = image, f"the PIL image ({image.mode}, {image.width}x{image.height})"
    elif isinstance(image, (bytes, bytearray, memoryview)):
        what = f"bytes of {len(image)} bytes"
        pil = _decode(io.BytesIO(bytes(image)), what)
    elif isinstance(image, pathlib.PurePath) or isinstance(image, str):
        pil, what = _open_str(image)
    elif isinstance(image, np.ndarray):
        what = f"the array of shape {image.shape} ({image.dtype})"
        pil = array_to_pil(image)
    else:
        raise InputError(f"Cannot read an image from a {type(image).__module__}."
                         f"{type(image).__qualname__}: give a PIL image, a file path, the bytes "
                         "of an encoded file, or a NumPy array")
    try:
        # transformers.image_utils.load_image: exif_transpose, then convert("RGB") (no compositing)
        return PIL.ImageOps.exif_transpose(pil).convert("RGB")
    except _DECODE_ERRORS as e:
        raise InputError(f"Cannot convert {what} to RGB: {e}") from None


def _open_str(source):
    path = os.fspath(source)
    if isinstance(source, pathlib.PurePath) or os.path.isfile(path):
        if not os.path.isfile(path):
            raise InputError(f"No image file at {path!r}")
        with open(path, "rb") as f:
            return _decode(f, repr(path)), repr(path)
    if url.is_url(path):  # as transformers' load_image: fetched (preprocess/url.py)
        return _decode(io.BytesIO(url.fetch(path, "image")), repr(path)), repr(path)
    # transformers' load_image reads any other string as base64 (optionally a data: URI)
    data = path.split(",", 1)[1] if path.startswith("data:image/") else path
    try:
        raw = base64.b64decode(data, validate=True)
        return _decode(io.BytesIO(raw), "base64"), _short(path)
    except (binascii.Error, ValueError, InputError):
        raise InputError(f"{_short(path)} is neither an image file (no such file) nor base64 "
                         "image data") from None


def _short(text, limit=60):
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _decode(stream, what):
    """Open and fully decode (Pillow is lazy: a truncated file fails only at load)."""
    try:
        image = PIL.Image.open(stream)
        image.load()
    except PIL.UnidentifiedImageError:
        raise InputError(f"{what} is not an image file Pillow can read") from None
    except _DECODE_ERRORS as e:
        raise InputError(f"Cannot decode {what} (truncated or corrupt?): {e}") from None
    return image


def array_to_pil(array):
    """transformers.image_transforms.to_pil_image for NumPy: channels moved last (inferred as
    infer_channel_dimension_format does: 1 or 3 channels, first wins when both fit), a single
    channel squeezed, floats in [0, 1] scaled by 255, then cast to uint8 (truncating). A 2-D array
    is one grey channel and a 4-channel HWC array is RGBA (Pillow's reading of them)."""
    if array.size == 0:
        raise InputError(f"An image array has no pixels (shape {array.shape})")
    if array.ndim == 2:
        array = array[:, :, None]
    elif array.ndim != 3:
        raise InputError(f"An image array has 2 or 3 dimensions (HW, HWC or CHW), got shape "
                         f"{array.shape}")
    if array.shape[0] in (1, 3):
        array = np.moveaxis(array, 0, -1)
    elif array.shape[-1] not in (1, 3, 4):
        raise InputError(f"Cannot tell the channel axis of an image array of shape {array.shape}: "
                         "give HWC or CHW with 1 or 3 channels (or HWC RGBA)")
    if array.shape[-1] == 1:
        array = array[:, :, 0]
    if array.dtype != np.uint8:
        array = _to_uint8(array)
    return PIL.Image.fromarray(np.ascontiguousarray(array))


def _to_uint8(array):
    """transformers.image_transforms._rescale_for_pil_conversion, then astype(uint8)."""
    if array.dtype == bool or np.issubdtype(array.dtype, np.integer) or np.allclose(
            array, array.astype(int)):
        if array.size and (array.min() < 0 or array.max() > 255):
            raise InputError(f"An image array with values in [{array.min()}, {array.max()}] "
                             "cannot be read as uint8 pixels (expected [0, 255])")
        return array.astype(np.uint8)
    if not np.issubdtype(array.dtype, np.floating):
        raise InputError(f"Cannot read an image array of dtype {array.dtype}")
    if array.min() < 0 or array.max() > 1:
        raise InputError(f"A float image array has values in [{array.min()}, {array.max()}]: "
                         "expected [0, 1] (or integer values in [0, 255])")
    # rescale(image, 255): float64 product, float32 result, then truncated to uint8
    return (array.astype(np.float64) * 255).astype(np.float32).astype(np.uint8)


__all__ = ["load_image", "array_to_pil"]
