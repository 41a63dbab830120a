"""Featurizers as the pipeline layer sees them: each holds one kind of item, says how big an item
is (batches are sorted by it), and pads a batch of items to a compiled shape (``buckets``).

    featurizer.key                      # the chunk entry that holds the item ("encoding", "image")
    featurizer.size(item)               # a sort key: tokens, (height, width), ...
    featurizer.padded(item)             # (text) its padded length: a batch's rows are grouped
    featurizer.bucket(item)             # (text) its length bucket, before pad_or_compile
    featurizer.batch(items, rows, inputs, task)   # {input name: array} padded to ``rows`` rows
"""

import numpy as np

from .. import buckets
from ..errors import PipelineError

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class TextFeaturizer:
    """A tokenizer's encodings, padded to a length bucket (``lengths``), or to the longer
    compiled length a window runs that bucket at (``runs_at``: bucket -> length, set by the
    pipeline for a window's calls, buckets.pad_or_compile; only where ``coarsens``: the default
    buckets, not a ``sequence_length=`` the user chose)."""

    key = "encoding"

    def __init__(self, tokenizer, lengths, coarsens=False):
        self.tokenizer, self.lengths, self.coarsens = tokenizer, tuple(lengths), coarsens
        self.runs_at = {}

    def size(self, encoding):
        return len(encoding.ids)

    def bucket(self, encoding):
        """The length bucket of ``encoding``."""
        return buckets.length(len(encoding.ids), self.lengths)

    def padded(self, encoding):
        """The length ``encoding`` pads to alone (how the rows of a batch are grouped)."""
        bucket = self.bucket(encoding)
        return self.runs_at.get(bucket, bucket)

    def batch(self, encodings, rows, inputs, task):
        length = self.padded(max(encodings, key=self.size))
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


class AudioFeaturizer:
    """A feature extractor's features of one clip: fixed-size log-mels (Whisper, AST, CLAP), or
    raw samples of any length (wav2vec2's ``input_values`` [T]). Clips of any length pad to a
    length bucket when the graph takes an ``attention_mask``; without one, padding would change
    the result (wav2vec2-base normalizes over time, padding included), so such a clip runs at
    its own length."""

    key = "audio"

    def __init__(self, extractor, inputs):
        self.extractor = extractor
        self.masked = "attention_mask" in inputs

    def main(self, item):
        return item[self.extractor.model_input_names[0]]

    def size(self, item):
        return int(self.main(item).size)

    def shape(self, item):
        """The compiled shape ``item`` needs (a batch holds one)."""
        main = self.main(item)
        if main.ndim == 1 and self.masked:
            return (buckets.octave_length(main.shape[0]),)
        return main.shape

    def batch(self, items, rows, inputs, task):
        shape = self.shape(items[0])
        padded = self.extractor.pad(items, length=shape[0] if len(shape) == 1 else None)
        batch = {k: v for k, v in padded.items() if k in inputs}
        missing = [n for n in inputs if n not in batch]
        if missing:
            raise PipelineError(f"The model takes input(s) {missing} that a {task} pipeline does "
                                f"not make from its feature extractor (it makes {sorted(padded)})")
        spare = rows - len(items)
        if spare:
            batch = {k: np.concatenate([v, np.repeat(v[:1], spare, axis=0)])
                     for k, v in batch.items()}
        return batch
