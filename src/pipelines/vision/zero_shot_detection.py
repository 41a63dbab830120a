"""zero-shot-object-detection: transformers' ZeroShotObjectDetectionPipeline over OWL-ViT / OWLv2
exports (``model.onnx``: ``input_ids``, ``attention_mask``, ``pixel_values`` in; ``logits``
[images, boxes, text queries] and ``pred_boxes`` [images, boxes, 4] as normalized centre x, y,
width, height out).

    pipe("street.jpg", candidate_labels=["a cat", "a car"])
        -> [{"score", "label", "box": {"xmin", "ymin", "xmax", "ymax"}}, ...]  best first
    pipe({"image": "street.jpg", "candidate_labels": ["a cat"]})   # labels with the image
    pipe(["a.jpg", "b.jpg"], candidate_labels=[["a cat"], ["a car"]])  # a label list per image

transformers runs the model once per (image, label), one text query each; here an image runs once
with all its labels as its text queries (padded to the longest: OWL's text encoder is causal and
pools at the end-of-text token, so padding changes no label's embedding, and the class head scores
each query on its own), which gives the same scores within float32 rounding.

Grounding DINO exports take the same inputs and options (and ``text_threshold``): their own
logic is grounding_dino.py's, whose class the registry's family table (pipelines/registry.py)
gives a model whose config.json says model_type "grounding-dino".
"""

import numpy as np

from ...errors import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import sigmoid
from .base import VisionPipeline, image_size, is_image
from .detection import box_dict, corners


class ZeroShotObjectDetectionPipeline(VisionPipeline):
    task = "zero-shot-object-detection"
    featurizers = ("image_processor", "tokenizer")

    def __init__(self, model, config=None, *, tokenizer, image_processor, **kwargs):
        self.tokenizer = tokenizer
        names, inputs = {v.name for v in model.outputs}, {v.name for v in model.inputs}
        if not {"logits", "pred_boxes"} <= names or not {"input_ids", "pixel_values"} <= inputs:
            raise PipelineError(f"{self.task} runs OWL-ViT / OWLv2 / Grounding DINO detectors "
                                "(input_ids and "
                                "pixel_values in, logits and pred_boxes out); this graph takes "
                                f"{sorted(inputs)} and gives {sorted(names)}")
        # Owlv2ImageProcessor pads each image to a square before resizing: its
        # post_process_object_detection scales boxes by max(height, width), OWL-ViT's by the sides
        self.square = type(image_processor).__name__ in ("Owlv2ImageProcessor",
                                                         "Owlv2ImageProcessorFast")
        super().__init__(model, config, image_processor=image_processor, **kwargs)

    def __call__(self, inputs, candidate_labels=None, **kwargs):
        nested = isinstance(candidate_labels, (list, tuple)) and bool(candidate_labels) and all(
            isinstance(x, (list, tuple)) for x in candidate_labels)
        if isinstance(inputs, (list, tuple)) and nested:
            # transformers' list of images zipped with a list of label lists
            if len(candidate_labels) != len(inputs):
                raise PipelineError(f"{len(inputs)} images with {len(candidate_labels)} label "
                                    "lists: give one list of candidate_labels per image, or one "
                                    "list for all")
            inputs = [{"image": x, "candidate_labels": labels}
                      for x, labels in zip(inputs, candidate_labels)]
            candidate_labels = None
        if candidate_labels is not None:
            kwargs["candidate_labels"] = candidate_labels
        return super().__call__(inputs, **kwargs)

    def _is_single(self, inputs):
        return is_image(inputs) or isinstance(inputs, dict)

    def _input_kind(self):
        return ("an image (a PIL.Image, a path, encoded bytes or a NumPy array) with "
                "candidate_labels=, or a dict {'image': ..., 'candidate_labels': [...]}")

    def _sanitize_parameters(self, candidate_labels=None, text_queries=None, threshold=0.1,
                             top_k=None, exact_boxes=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if text_queries is not None:  # transformers' old name
            candidate_labels = text_queries
        labels = None if candidate_labels is None else _labels(candidate_labels)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise PipelineError(f"threshold must be a number, got {threshold!r}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                  or top_k < 0):
            raise PipelineError(f"top_k must be a non-negative int or None, got {top_k!r}")
        return {"labels": labels}, {}, {"threshold": float(threshold), "top_k": top_k,
                                        "exact_boxes": bool(exact_boxes)}

    def preprocess(self, inputs, labels=None):
        if isinstance(inputs, dict):
            if "image" not in inputs:
                raise PipelineError(f"A {self.task} input dict needs an 'image' key (and "
                                    f"'candidate_labels'), got keys {sorted(inputs)}")
            if inputs.get("candidate_labels") is not None:
                labels = _labels(inputs["candidate_labels"])
            image = inputs["image"]
        else:
            image = inputs
        if labels is None:
            raise PipelineError(f"{self.task} needs candidate_labels=[...] (or inputs as "
                                "{'image': ..., 'candidate_labels': [...]})")
        if not is_image(image):
            raise PipelineError(f"{self.task} takes {self._input_kind()}; got "
                                f"{type(image).__name__}: {image!r:.80}")
        yield dict(self.features(image), labels=labels)

    def _forward_group(self, chunks):
        """Images of one size with the same labels run together: pixel_values [rows, ...] and
        each image's labels as its text queries, input_ids [rows * labels, length]."""
        groups = {}
        for i, chunk in enumerate(chunks):
            groups.setdefault(tuple(chunk["labels"]), []).append(i)
        out = [None] * len(chunks)
        for labels, rows in groups.items():
            group = [chunks[i] for i in rows]
            n = self._rows(len(group))
            feed = {**self._image_feed(group, n), **self._text_feed(labels, n)}
            result = self._run_model(feed)
            for j, i in enumerate(rows):
                out[i] = dict(chunks[i], logits=result["logits"][j],
                              pred_boxes=result["pred_boxes"][j])
        return out

    def _image_feed(self, chunks, rows):
        text = set(TEXT_INPUTS) & set(self._inputs)
        image_inputs = {k: v for k, v in self._inputs.items() if k not in text}
        feed = self.featurizer.batch([c["image"] for c in chunks], rows, image_inputs, self.task)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _text_feed(self, labels, rows):
        """Each label tokenized alone as transformers does (no truncation: the text encoder
        has model_max_length positions), padded to the longest, repeated for every image row."""
        encodings = []
        for label in labels:
            enc = self.tokenizer.encode(label, truncation=False)
            limit = self.tokenizer.model_max_length
            if limit is not None and len(enc.ids) > limit:
                raise PipelineError(f"The label {label!r:.80} is {len(enc.ids)} tokens; the "
                                    f"text encoder takes at most {limit}")
            encodings.append(enc)
        names = [n for n in TEXT_INPUTS if n in self._inputs]
        feed = self.tokenizer.pad(encodings, max(len(e.ids) for e in encodings), names)
        return {k: np.tile(v, (rows, 1)).astype(self._inputs[k].dtype, copy=False)
                for k, v in feed.items()}

    def postprocess(self, outputs, threshold=0.1, top_k=None, exact_boxes=False):
        """post_process_object_detection for each label (transformers runs them one by one):
        sigmoid of the query's logit, kept above ``threshold`` (and non-zero), corners scaled to
        the image; then all labels' boxes sorted by score, the first ``top_k``."""
        out = outputs[0]
        height, width = image_size(out)
        scale = [max(height, width)] * 4 if self.square else [width, height, width, height]
        boxes = corners(out["pred_boxes"].astype(np.float32)) * np.array(scale, np.float32)
        with np.errstate(over="ignore"):  # exp(-x) of a very negative logit: a score of 0
            scores = sigmoid(out["logits"].astype(np.float32))  # [boxes, labels]
        results = []
        for j, label in enumerate(out["labels"]):
            results += detections(scores[:, j], boxes, label, threshold, exact_boxes)
        return ranked(results, top_k)


def detections(scores, boxes, label, threshold, exact=False):
    """One label's boxes as the pipeline lists them from post_process_object_detection: score
    above ``threshold`` and non-zero (its ``scores.nonzero()``), in query order."""
    keep = np.flatnonzero((scores > np.float32(threshold)) & (scores != 0))
    return [{"score": float(scores[q]), "label": label, "box": box_dict(boxes[q], exact)}
            for q in keep]


def ranked(results, top_k):
    """All labels' boxes best first (a stable sort, as transformers' ``sorted``), the first
    ``top_k`` (0 or None: all)."""
    results.sort(key=lambda r: r["score"], reverse=True)
    return results[:top_k] if top_k else results


def _labels(candidate_labels):
    """The labels of one image: a list of strings; a string is split on commas, as transformers
    splits it (not stripped)."""
    labels = candidate_labels.split(",") if isinstance(candidate_labels, str) else candidate_labels
    if not isinstance(labels, (list, tuple)) or not labels or \
            not all(isinstance(x, str) for x in labels):
        raise PipelineError(f"candidate_labels must be a non-empty list of strings (or a "
                            f"comma-separated string), got {candidate_labels!r:.80}")
    return list(labels)
