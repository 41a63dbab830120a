"""What image tasks share: an image processor, image inputs, batches of equal-sized images."""

import itertools
import os

import numpy as np

from ...preprocess.image.load import load_image
from ..base import Pipeline
from ..featurizers import ImageFeaturizer


class VisionPipeline(Pipeline):
    """A pipeline over an image processor (preprocessor_config.json). An input is a PIL image, a
    path, encoded bytes or a NumPy array; each becomes one chunk holding its features."""

    featurizers = ("image_processor",)
    # Processed images are large (DETR at 800x1333: 12.8 MB each): read only two batches ahead,
    # enough to group images of one size, where text reads 16-64 batches ahead.
    lookahead_batches = list_lookahead_batches = 2
    prefetch = True  # files decode in background threads while the model runs

    def __init__(self, model, config=None, *, image_processor, **kwargs):
        self.image_processor = image_processor
        self.featurizer = ImageFeaturizer(image_processor)
        super().__init__(model, config, **kwargs)

    def _is_single(self, inputs):
        return is_image(inputs)

    def _input_kind(self):
        return "an image (a PIL.Image, a path, encoded bytes or a NumPy array)"

    def preprocess(self, image):
        yield self.features(image)

    def features(self, image):
        """A chunk for one image: its processed features under ``image``."""
        return {"image": self.image_processor(load_image(image))}

    def _forward(self, chunks, **params):
        """Images of one size run together (chunks come sorted by size): a graph that takes any
        size compiles once per size, and no image is padded past what its processor makes, so a
        batch gives what each image gives alone."""
        out = []
        for _, group in itertools.groupby(chunks, key=lambda c: self.featurizer.size(c["image"])):
            out += self._forward_group(list(group), **params)
        return out

    def _forward_group(self, chunks):
        return super()._forward(chunks)


def is_image(x):
    """Whether ``x`` is one image input (not a list or stream of them)."""
    if isinstance(x, (str, bytes, bytearray, os.PathLike, np.ndarray)):
        return True
    return type(x).__module__.startswith("PIL.") and hasattr(x, "getbands")


def image_size(chunk):
    """(height, width) of the input image of ``chunk``."""
    return tuple(int(v) for v in chunk["image"]["original_size"])
