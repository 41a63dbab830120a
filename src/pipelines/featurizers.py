"""Featurizers as the pipeline layer sees them: each holds one kind of item, says how big an item
is (batches are sorted by it), and pads a batch of items to a compiled shape (``buckets``).

    featurizer.key                      # the chunk entry that holds the item ("encoding", "image")
    featurizer.size(item)               # a sort key: tokens, (height, width), ...
    featurizer.batch(items, rows, inputs, task)   # {input name: array} padded to ``rows`` rows
"""

import numpy as np

from . import buckets
from .base import PipelineError

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class TextFeaturizer:
    """A tokenizer's encodings, padded to a length bucket (``lengths``)."""

    key = "encoding"

    def __init__(self, tokenizer, lengths):
        self.tokenizer, self.lengths = tokenizer, tuple(lengths)

    def size(self, encoding):
        return len(encoding.ids)

    def batch(self, encodings, rows, inputs, task):
        length = buckets.length(max(len(e.ids) for e in encodings), self.lengths)
        names = [n for n in TEXT_INPUTS if n in inputs]
        missing = [n for n in inputs if n not in names]
        if missing:
            raise PipelineError(f"The model takes input(s) {missing} that a {task} pipeline does "
                                f"not make; it needs {', '.join(TEXT_INPUTS)}")
        return self.tokenizer.pad(encodings, length, names, rows=rows)


class ImageFeaturizer:
    """An image processor's features (``pixel_values`` [C, H, W], maybe ``pixel_mask``): a batch
    is padded by the processor (DETR pads to its largest image; fixed-size families stack), with
    spare rows copied from the first so every row holds a real image."""

    key = "image"

    def __init__(self, processor):
        self.processor = processor

    def size(self, features):
        return tuple(features["pixel_values"].shape[-2:])

    def batch(self, items, rows, inputs, task):
        padded = self.processor.pad(items)
        batch = {k: padded[k] for k in ("pixel_values", "pixel_mask") if k in inputs and k in padded}
        missing = [n for n in inputs if n not in batch]
        if missing:
            raise PipelineError(f"The model takes input(s) {missing} that a {task} pipeline does "
                                "not make; it needs an image model taking pixel_values")
        spare = rows - len(items)
        if spare:
            batch = {k: np.concatenate([v, np.repeat(v[:1], spare, axis=0)])
                     for k, v in batch.items()}
        return batch
