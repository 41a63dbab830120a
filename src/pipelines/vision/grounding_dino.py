"""zero-shot-object-detection on Grounding DINO exports (onnx-community/grounding-dino-tiny-ONNX's
``model.onnx``: ``pixel_values``, ``pixel_mask``, ``input_ids``, ``token_type_ids``,
``attention_mask`` in; ``logits`` [images, queries, max_text_len] (each prompt token's logit for
each query, -inf past the prompt) and ``pred_boxes`` [images, queries, 4] out). Inputs and
options are zero_shot_detection.py's; two ways to read the labels:

    pipe("street.jpg", candidate_labels=["a cat", "a car"])
        transformers' pipeline: each label is its own prompt, tokenized alone (no period added);
        a box scores the sigmoid of its best token logit (GroundingDinoImageProcessor's
        post_process_object_detection) and is labelled with that candidate label
    pipe("street.jpg", candidate_labels=["a cat", "a car"], text_threshold=0.25)
        GroundingDinoProcessor's: the labels joined into one prompt ("a cat. a car.", lower
        case), one forward per image, post_process_grounded_object_detection: boxes whose best
        token scores above ``threshold``, each labelled with the phrase its tokens above
        ``text_threshold`` spell (decoded as the processor decodes them: "a cat", "car.", ...)

The graph builds Grounding DINO's phrase masks from the prompt's [CLS] / [SEP] / "." / "?"
tokens, so padding a prompt would change them: prompts run at their own length, those of one
length together.
"""

import numpy as np

from ...errors import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import sigmoid
from .base import image_size
from .detection import box_dict, corners
from .zero_shot_detection import ZeroShotObjectDetectionPipeline, detections, ranked


class GroundingDinoDetectionPipeline(ZeroShotObjectDetectionPipeline):
    """ZeroShotObjectDetectionPipeline for a model whose config.json says grounding-dino."""

    def __init__(self, model, config=None, **kwargs):
        super().__init__(model, config, **kwargs)
        missing = {"pixel_mask", "token_type_ids", "attention_mask"} - set(self._inputs)
        if missing:
            raise PipelineError(f"A Grounding DINO graph takes pixel_values, pixel_mask, "
                                f"input_ids, token_type_ids and attention_mask; this one lacks "
                                f"{sorted(missing)}")
        self.max_text_len = int((self.config or {}).get("max_text_len", 256))

    def _sanitize_parameters(self, text_threshold=None, **kwargs):
        pre, forward, post = super()._sanitize_parameters(**kwargs)
        if text_threshold is not None and (isinstance(text_threshold, bool) or not isinstance(
                text_threshold, (int, float)) or not 0 <= text_threshold <= 1):
            raise PipelineError(f"text_threshold must be a number in [0, 1] (or None: each label "
                                f"its own prompt, as transformers' pipeline), got "
                                f"{text_threshold!r}")
        grounded = text_threshold is not None
        post.update(text_threshold=float(text_threshold) if grounded else None)
        return pre, {"grounded": grounded}, post

    def preprocess(self, inputs, labels=None):
        for chunk in super().preprocess(inputs, labels):
            empty = [x for x in chunk["labels"] if not x.strip()]
            if empty:
                raise PipelineError(f"candidate_labels {chunk['labels']!r:.80} hold an empty "
                                    "label: Grounding DINO finds a phrase's boxes, give words")
            yield chunk

    def _forward_group(self, chunks, grounded=False):
        """Every (image, prompt) pair is a row; rows whose prompts have one length run together,
        at most ``batch_size`` at a time. Each chunk gains ``found``: per prompt, its logits,
        boxes and token ids."""
        prompts = [[joined(c["labels"])] if grounded else c["labels"] for c in chunks]
        by_length = {}
        for i, texts in enumerate(prompts):
            for j, text in enumerate(texts):
                enc = self._encode(text)
                by_length.setdefault(len(enc.ids), []).append((i, j, enc))
        found = [[None] * len(texts) for texts in prompts]
        for rows in by_length.values():
            for start in range(0, len(rows), self.batch_size):
                part = rows[start:start + self.batch_size]
                result = self._run_rows(chunks, part)
                for r, (i, j, enc) in enumerate(part):
                    found[i][j] = (result["logits"][r], result["pred_boxes"][r], enc.ids)
        return [dict(c, found=found[i]) for i, c in enumerate(chunks)]

    def _encode(self, text):
        """The prompt's encoding, as transformers' tokenizer call makes it (no truncation: the
        graph's phrase masks cover at most max_text_len tokens, so a longer prompt is refused)."""
        enc = self.tokenizer.encode(text, truncation=False)
        if len(enc.ids) > self.max_text_len:
            raise PipelineError(f"The prompt {text!r:.80} is {len(enc.ids)} tokens; Grounding "
                                f"DINO reads at most {self.max_text_len} (config.json "
                                "max_text_len): use fewer or shorter labels")
        return enc

    def _run_rows(self, chunks, part):
        rows = self._rows(len(part))
        # spare rows repeat the first: every row holds a real image and prompt
        part = part + [part[0]] * (rows - len(part))
        image_inputs = {k: v for k, v in self._inputs.items() if k not in TEXT_INPUTS}
        feed = self.featurizer.batch([chunks[i]["image"] for i, _, _ in part], rows,
                                     image_inputs, self.task)
        names = [n for n in TEXT_INPUTS if n in self._inputs]
        encodings = [enc for _, _, enc in part]
        feed.update(self.tokenizer.pad(encodings, len(encodings[0].ids), names))
        return self._run_model({k: v.astype(self._inputs[k].dtype, copy=False)
                                for k, v in feed.items()})

    def postprocess(self, outputs, threshold=0.1, top_k=None, exact_boxes=False,
                    text_threshold=None):
        out = outputs[0]
        height, width = image_size(out)
        scale = np.array([width, height, width, height], np.float32)
        results = []
        for j, (logits, boxes, ids) in enumerate(out["found"]):
            boxes = corners(boxes.astype(np.float32)) * scale
            with np.errstate(over="ignore"):  # exp(inf) past the prompt: a probability of 0
                probs = sigmoid(logits.astype(np.float32))  # [queries, max_text_len]
            if text_threshold is None:
                results += detections(probs.max(-1), boxes, out["labels"][j], threshold,
                                      exact_boxes)
            else:
                results += self._grounded(probs, boxes, ids, threshold, text_threshold,
                                          exact_boxes)
        return ranked(results, top_k)

    def _grounded(self, probs, boxes, ids, threshold, text_threshold, exact):
        """post_process_grounded_object_detection: the queries whose best token scores above
        ``threshold``, each labelled with its tokens above ``text_threshold`` (get_phrases_from_
        posmap: never the first token, nor the last column of the logits), decoded."""
        scores = probs.max(-1)
        results = []
        for q in np.flatnonzero(scores > np.float32(threshold)):
            posmap = probs[q] > np.float32(text_threshold)
            posmap[0] = posmap[-1] = False
            tokens = [ids[t] for t in np.flatnonzero(posmap[:len(ids)])]
            results.append({"score": float(scores[q]), "label": self.tokenizer.decode(tokens),
                            "box": box_dict(boxes[q], exact)})
        return results


def joined(labels):
    """GroundingDinoProcessor's prompt for a list of labels: "a cat. a dog." (each stripped and
    lower-cased, joined by ". ", a final "."); a single label that holds a "." is a prompt
    already and stays as given. Several labels holding dots would each be a prompt of their own
    for transformers (a batch of texts for one image): refused."""
    dotted = [x for x in labels if "." in x]
    if dotted and len(labels) > 1:
        raise PipelineError(f"The labels {dotted!r:.80} hold '.', which separates Grounding "
                            "DINO's phrases: give labels without dots, or one prompt like "
                            "'a cat. a dog.'")
    if dotted:
        return labels[0]
    return ". ".join(x.strip().lower() for x in labels) + "."
