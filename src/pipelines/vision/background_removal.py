"""background-removal: transformers.js' BackgroundRemovalPipeline (transformers has none), over
the one-channel matting / saliency exports it runs (briaai/RMBG-1.4, BiRefNet, MODNet, BEN).

    pipe("portrait.jpg")                  -> PIL "RGBA" image: the input's pixels, the mask as alpha
    pipe("portrait.jpg", return_mask=True) -> PIL "L" image: the mask alone

As transformers.js 4.3 (src/pipelines/image-segmentation.js with no subtask, then
background-removal.js): the graph's first output for the image ([1, H, W]); a sigmoid when any
value lies outside [-1e-5, 1 + 1e-5] (BiRefNet gives logits, RMBG-1.4 and MODNet probabilities);
times 255 in float32, truncated to uint8; resized to the input's size with transformers.js' Node
resize (sharp's affine bilinear, preprocess/image/resize_sharp.py); put as the alpha of the
input's RGB (an RGBA input's alpha is replaced). The graph's single input is fed the processor's
pixel_values whatever its name (RMBG-1.4's and MODNet's is ``input``).
"""

import numpy as np

from ...errors import PipelineError
from ...preprocess.image.load import load_image
from ...preprocess.image.resize_sharp import sharp_bilinear
from .base import VisionPipeline, image_size

# transformers.js: "an epsilon to safeguard against numerical/precision issues when detecting the
# normalization mode of the output (i.e., sigmoid already applied, or not)"
EPSILON = 1e-5


class BackgroundRemovalPipeline(VisionPipeline):
    task = "background-removal"

    def __init__(self, model, config=None, **kwargs):
        names = [v.name for v in model.inputs]
        if "pixel_values" not in names and len(names) != 1:
            raise PipelineError(f"{self.task} feeds one image input (pixel_values, or a graph's "
                                f"only input); this graph takes {names}")
        self.input_name = "pixel_values" if "pixel_values" in names else names[0]
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, return_mask=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if not isinstance(return_mask, bool):
            raise PipelineError(f"return_mask must be True or False, got {return_mask!r}")
        return {}, {}, {"return_mask": return_mask}

    def features(self, image):
        """The processed features, and the RGB pixels the cut-out is made of (load_image drops an
        alpha channel without compositing: an RGBA input keeps its RGB and gets the mask as its
        alpha, as transformers.js' putAlpha replaces it)."""
        loaded = load_image(image)
        return {"image": self.image_processor(loaded), "cutout_source": loaded}

    def _feed(self, chunks):
        """pixel_values under the graph's input name, spare rows copied from the first."""
        pixels = self.image_processor.pad([c["image"] for c in chunks])["pixel_values"]
        spare = self._rows(len(chunks)) - len(chunks)
        if spare:
            pixels = np.concatenate([pixels, np.repeat(pixels[:1], spare, axis=0)])
        return {self.input_name: pixels.astype(self._inputs[self.input_name].dtype, copy=False)}

    def postprocess(self, outputs, return_mask=False):
        out = outputs[0]
        mask = alpha_mask(self.output(out, "output"), image_size(out))
        if return_mask:
            return mask
        cutout = out["cutout_source"].convert("RGBA")
        cutout.putalpha(mask)
        return cutout


def alpha_mask(item, size):
    """transformers.js: [1, h, w] (sigmoid where needed) * 255 -> uint8, resized to ``size``
    (height, width): an "L" image."""
    from PIL import Image

    x = np.asarray(item, np.float32)
    if x.ndim != 3 or x.shape[0] != 1:  # transformers.js: RawImage.fromTensor, then putAlpha
        raise PipelineError(f"background-removal takes a one-channel mask per image ([1, H, W]); "
                            f"the graph's first output gives {list(np.shape(item))} per image: use "
                            "a matting / saliency export such as RMBG-1.4, BiRefNet or MODNet")
    x = x[0]
    if ((x < -EPSILON) | (x > 1 + EPSILON)).any():
        # Tensor.sigmoid_: 1 / (1 + Math.exp(-x)) in float64, stored as float32
        x = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    # mul_(255) in float32, then Uint8Array.from: truncation toward zero, modulo 256 (values here
    # lie in [0, 255], a NaN becomes 0)
    levels = np.nan_to_num(x * np.float32(255), nan=0.0)
    mask = np.trunc(levels).astype(np.int64).astype(np.uint8)
    return Image.fromarray(sharp_bilinear(mask[..., None], size)[..., 0])
