"""Image ops: ImageDecoder (Pillow, on the host) and CenterCropPad."""

import io

import numpy as np

from .registry import op


@op("ImageDecoder", 20, host=True)
def image_decoder(xp, encoded, *, pixel_format="RGB"):
    """Decode an encoded image (uint8 bytes) to (H, W, C) uint8: RGB, BGR or Grayscale."""
    import PIL.Image

    image = PIL.Image.open(io.BytesIO(np.asarray(encoded, np.uint8).tobytes()))
    if pixel_format == "Grayscale":
        return np.asarray(image.convert("L"), np.uint8)[:, :, None]
    rgb = np.asarray(image if image.mode == "RGB" else image.convert("RGB"), np.uint8)
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[:, :, ::-1])
    if pixel_format != "RGB":
        raise ValueError(f"ImageDecoder: unknown pixel_format {pixel_format!r}")
    return rgb


@op("CenterCropPad", 18, static=(1,))
def center_crop_pad(xp, x, shape, *, axes=None):
    """Crop or zero-pad ``axes`` around their centre to ``shape``."""
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    crop = [slice(None)] * rank
    pad = [(0, 0)] * rank
    for a, target in zip(axes, np.asarray(shape).reshape(-1)):
        size, target = x.shape[a], int(target)
        if target < size:
            start = (size - target) // 2
            crop[a] = slice(start, start + target)
        elif target > size:
            before = (target - size) // 2
            pad[a] = (before, target - size - before)
    y = x[tuple(crop)]
    return xp.pad(y, pad) if any(p != (0, 0) for p in pad) else y
