"""image-to-image: transformers' ImageToImagePipeline (Swin2SR super-resolution).

    pipe("small.png")              -> PIL "RGB" image, the processed (padded) size x the upscale
    pipe(["a.png", "b.png"])       -> [PIL image, PIL image]

As transformers 4.57: the graph's ``reconstruction`` [C, H, W] clamped to [0, 1], moved to HWC,
``(x * 255).round()`` in float32, then uint8. The processor's padding is not cropped
(Swin2SRImageProcessor pads bottom / right to ``(h // size_divisor + 1) * size_divisor``), so
a 64x64 image through an x2 model gives 144x144, as transformers' own docstring shows.
"""

import numpy as np

from ...errors import PipelineError
from .base import VisionPipeline


class ImageToImagePipeline(VisionPipeline):
    task = "image-to-image"

    def __init__(self, model, config=None, **kwargs):
        names = [o.name for o in model.outputs]
        if "reconstruction" not in names:
            raise PipelineError(f"{self.task}: the model has no 'reconstruction' output (it has "
                                f"{names}); use an image-to-image export such as a Swin2SR "
                                "super-resolution model")
        super().__init__(model, config, **kwargs)

    def postprocess(self, outputs):
        from PIL import Image

        out = self.output(outputs[0], "reconstruction")
        # transformers: output.squeeze().float().clamp_(0, 1), moveaxis(0, -1), (x * 255.0).round()
        # (float32: NumPy keeps a float32 array times a Python float in float32, as torch's numpy()
        # result is), astype(uint8). Only the channel axis is squeezed here: one channel gives an
        # "L" image (transformers' full squeeze would also drop a height or width of 1).
        x = np.clip(np.asarray(out, np.float32), 0, 1)
        x = np.moveaxis(x, 0, -1)
        pixels = (x * np.float32(255.0)).round().astype(np.uint8)
        if pixels.shape[-1] == 1:
            pixels = pixels[..., 0]
        return Image.fromarray(pixels)
