"""Test images for the image processors, made the same way by the recording script (export venv,
transformers) and by tests/test_image_processor.py (default suite, no torch).

The photos are scikit-image's bundled samples (`skimage.data`, shipped inside the wheel: no
download); they are not committed. Every crop, mode conversion and encoding here is plain NumPy or
a lossless Pillow call, so both sides see identical pixels; `pixels_digest` lets the test tell "the
input differs" (another decoder for the one JPEG sample) apart from "the processor differs".

A case is `(name, kind, make)`: `make()` returns the source handed to `load_image`: a PIL image
(kind "pil"), the bytes of an encoded file ("bytes"), or a NumPy array ("array").
"""

import hashlib
import io

import numpy as np
import PIL.Image


def _data(name):
    import skimage.data

    return np.asarray(getattr(skimage.data, name)())


def _pil(array, mode=None):
    if mode is None:
        return PIL.Image.fromarray(np.ascontiguousarray(array))
    return PIL.Image.frombytes(mode, (array.shape[1], array.shape[0]),
                               np.ascontiguousarray(array).tobytes())


def _mosaic():
    """1024 x 1024 RGB: astronaut, immunohistochemistry and their mirror images."""
    a, b = _data("astronaut"), _data("immunohistochemistry")
    return np.concatenate([np.concatenate([a, b], 1), np.concatenate([b[::-1], a[:, ::-1]], 1)], 0)


def _la():
    moon = _data("moon")
    alpha = np.broadcast_to(np.linspace(0, 255, moon.shape[1]).astype(np.uint8), moon.shape)
    return _pil(np.stack([moon, alpha], -1), "LA")


def _palette():
    """chelsea in 64 colours: 2 bits per channel, the palette spelled out (no Pillow quantizer)."""
    rgb = _data("chelsea")
    r, g, b = (rgb[..., c] >> 6 for c in range(3))
    index = (r << 4 | g << 2 | b).astype(np.uint8)
    levels = np.array([32, 96, 160, 224], np.uint8)
    palette = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1)
    image = _pil(index, "P")
    image.putpalette(palette.tolist())
    return image


def _cmyk():
    rgb = _data("coffee")[::2, ::2].astype(np.int32)
    k = 255 - rgb.max(-1)
    cmy = 255 - rgb - k[..., None]
    return _pil(np.concatenate([cmy, k[..., None]], -1).astype(np.uint8), "CMYK")


def _encoded(image, fmt, orientation=None):
    buffer = io.BytesIO()
    if orientation is None:
        image.save(buffer, fmt)
    else:
        exif = PIL.Image.Exif()
        exif[0x0112] = orientation  # Orientation tag, as cameras write it
        image.save(buffer, fmt, exif=exif, quality=90)
    return buffer.getvalue()


CASES = [
    # RGB photos of many shapes
    ("astronaut", "pil", lambda: _pil(_data("astronaut"))),
    ("coffee", "pil", lambda: _pil(_data("coffee"))),
    ("chelsea", "pil", lambda: _pil(_data("chelsea"))),
    ("rocket_jpeg", "pil", lambda: _pil(_data("rocket"))),
    ("ihc_257x129", "pil", lambda: _pil(_data("immunohistochemistry")[100:357, 50:179])),
    ("colorwheel", "pil", lambda: _pil(_data("colorwheel"))),
    ("coffee_tall", "pil", lambda: _pil(_data("coffee")[:, 200:330])),
    ("astronaut_strip", "pil", lambda: _pil(_data("astronaut")[200:230])),
    ("row_1x37", "pil", lambda: _pil(_data("astronaut")[256:257, :37])),
    ("column_53x1", "pil", lambda: _pil(_data("chelsea")[:53, 100:101])),
    ("pixel_1x1", "pil", lambda: _pil(_data("coffee")[200:201, 300:301])),
    ("tiny_2x3", "pil", lambda: _pil(_data("astronaut")[100:102, 200:203])),
    ("mosaic_1024", "pil", lambda: _pil(_mosaic())),
    ("astronaut_48x64", "pil", lambda: _pil(_data("astronaut")[180:228, 200:264])),
    ("coffee_33x17", "pil", lambda: _pil(_data("coffee")[150:183, 250:267])),
    # other modes: load_image converts them to RGB as Pillow does
    ("camera_L", "pil", lambda: _pil(_data("camera"))),
    ("coins_L", "pil", lambda: _pil(_data("coins"))),
    ("page_L", "pil", lambda: _pil(_data("page"))),
    ("text_L", "pil", lambda: _pil(_data("text"))),
    ("horse_1", "pil", lambda: _pil(_data("horse"))),
    ("logo_RGBA", "pil", lambda: _pil(_data("logo"))),
    ("moon_LA", "pil", _la),
    ("chelsea_P", "pil", _palette),
    ("coffee_CMYK", "pil", _cmyk),
    ("camera_I16_scaled", "pil", lambda: _pil(_data("camera").astype(np.uint16) * 257)),
    ("coins_I16", "pil", lambda: _pil(_data("coins").astype(np.uint16))),
    ("gravel_I", "pil", lambda: _pil(_data("gravel").astype(np.int32) * 2)),
    ("grass_F", "pil", lambda: _pil(_data("grass").astype(np.float32) * 0.75)),
    # encoded files
    ("chelsea_png_bytes", "bytes", lambda: _encoded(_pil(_data("chelsea")), "PNG")),
    ("coffee_jpeg_exif6", "bytes",
     lambda: _encoded(_pil(_data("coffee")[:240, :360]), "JPEG", orientation=6)),
    ("astronaut_jpeg_exif3", "bytes",
     lambda: _encoded(_pil(_data("astronaut")[::3, ::2]), "JPEG", orientation=3)),
    ("chelsea_jpeg_exif8", "bytes",
     lambda: _encoded(_pil(_data("chelsea")[:, :300]), "JPEG", orientation=8)),
    # arrays, as transformers' to_pil_image reads them
    ("ihc_hwc_uint8", "array", lambda: _data("immunohistochemistry")[:200, :300].copy()),
    ("astronaut_chw_uint8", "array",
     lambda: _data("astronaut")[::4, ::4].transpose(2, 0, 1).copy()),
    ("coins_hw_uint8", "array", lambda: _data("coins").copy()),
    ("chelsea_hwc_float01", "array", lambda: _data("chelsea") / 255.0),
    ("coffee_chw_float32", "array",
     lambda: (_data("coffee")[::2, ::2].transpose(2, 0, 1) / np.float32(255)).astype(np.float32)),
    ("colorwheel_float_integers", "array", lambda: _data("colorwheel").astype(np.float32)),
]

BY_NAME = {name: (kind, make) for name, kind, make in CASES}

# A handful of varied shapes for the processors that do not need every mode again.
CORE = ["astronaut", "coffee", "chelsea", "ihc_257x129", "coffee_tall", "astronaut_strip",
        "row_1x37", "column_53x1", "tiny_2x3", "mosaic_1024", "camera_L", "logo_RGBA"]

# Processors that do not resize (Swin2SR): their output is as large as the input.
SMALL = ["astronaut_48x64", "coffee_33x17", "row_1x37", "column_53x1", "pixel_1x1", "tiny_2x3"]

# Full-size Hub configs: few images (their outputs are large).
FEW = ["astronaut", "coffee", "coffee_tall"]


def make(name):
    """The source object of case `name`."""
    return BY_NAME[name][1]()


def pixels_digest(image):
    """sha256 of an RGB PIL image's pixels and size: both sides check they saw the same input."""
    array = np.ascontiguousarray(np.asarray(image, np.uint8))
    return hashlib.sha256(repr(array.shape).encode() + array.tobytes()).hexdigest()[:16]
