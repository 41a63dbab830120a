"""zero-shot-image-classification: transformers' ZeroShotImageClassificationPipeline over a
joint CLIP / SigLIP ``model.onnx`` (text and image in, ``logits_per_image`` out).

    pipe("cat.jpg", candidate_labels=["cat", "dog"])
        -> [{"score": 0.93, "label": "cat"}, {"score": 0.07, "label": "dog"}]

CLIP's scores are a softmax over the labels; SigLIP's a sigmoid per label, its texts padded to
64 tokens as transformers pads them.
"""

from ..base import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import sigmoid, softmax
from .base import VisionPipeline

SIGLIP_LENGTH = 64  # ZeroShotImageClassificationPipeline.preprocess: max_length=64 for SigLIP


class ZeroShotImageClassificationPipeline(VisionPipeline):
    task = "zero-shot-image-classification"
    featurizers = ("image_processor", "tokenizer")

    def __init__(self, model, config=None, *, tokenizer, **kwargs):
        self.tokenizer = tokenizer
        names = {v.name for v in model.outputs}
        if "logits_per_image" not in names:
            raise PipelineError(f"{self.task} runs a joint image-text model (a logits_per_image "
                                f"output, as CLIP's and SigLIP's model.onnx); this graph gives "
                                f"{sorted(names)}")
        self.siglip = "siglip" in str((config or {}).get("model_type", ""))
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, candidate_labels=None,
                             hypothesis_template="This is a photo of {}.", **unknown):
        super()._sanitize_parameters(**unknown)
        if candidate_labels is None:
            return {}, {"labels": None}, {}
        labels = [candidate_labels] if isinstance(candidate_labels, str) else candidate_labels
        if not isinstance(labels, (list, tuple)) or not labels or \
                not all(isinstance(x, str) for x in labels):
            raise PipelineError(f"candidate_labels must be a non-empty list of strings, got "
                                f"{candidate_labels!r:.80}")
        if not isinstance(hypothesis_template, str) or "{}" not in hypothesis_template:
            raise PipelineError(f"hypothesis_template must be a string with a {{}} for the "
                                f"label, got {hypothesis_template!r:.80}")
        return {}, {"labels": list(labels), "template": hypothesis_template}, {}

    def _forward_group(self, chunks, labels=None, template=None):
        if labels is None:
            raise PipelineError(f"{self.task} needs candidate_labels=[...]")
        feed = {**self._feed(chunks), **self._text_feed([template.format(x) for x in labels])}
        logits = self.output(self._run_model(feed), "logits_per_image")
        return [dict(c, labels=labels, logits=logits[i]) for i, c in enumerate(chunks)]

    def _feed(self, chunks):
        text = set(TEXT_INPUTS) & set(self._inputs)
        items = [c["image"] for c in chunks]
        image_inputs = {k: v for k, v in self._inputs.items() if k not in text}
        feed = self.featurizer.batch(items, self._rows(len(items)), image_inputs, self.task)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _text_feed(self, sequences):
        """The label texts as transformers tokenizes them: padded to the longest (CLIP), or to
        64 tokens and truncated there (SigLIP)."""
        limit = SIGLIP_LENGTH if self.siglip else None
        encodings = [self.tokenizer.encode(s, max_length=limit) for s in sequences]
        length = SIGLIP_LENGTH if self.siglip else max(len(e.ids) for e in encodings)
        names = [n for n in TEXT_INPUTS if n in self._inputs]
        feed = self.tokenizer.pad(encodings, length, names)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def postprocess(self, outputs):
        out = outputs[0]
        scores = sigmoid(out["logits"]) if self.siglip else softmax(out["logits"])
        pairs = sorted(zip(scores.tolist(), out["labels"]), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in pairs]
