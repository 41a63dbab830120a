"""What zero-shot image and audio classification share: candidate labels and their template,
the split layout's second graph (a ``text_model.onnx`` beside the image or audio half), the unit
text embeddings of a label set, computed once and kept, and the forward pass over both layouts
(``ZeroShotLabels``)."""

import numbers

import numpy as np

from ..errors import PipelineError
from ..hub.load import load_beside
from .featurizers import TEXT_INPUTS

LABEL_SETS_KEPT = 8  # label-set embeddings a split pipeline keeps (one call's set is reused)


def check_labels(candidate_labels, task):
    """candidate_labels as a non-empty list of strings."""
    labels = [candidate_labels] if isinstance(candidate_labels, str) else candidate_labels
    if not isinstance(labels, (list, tuple)) or not labels or \
            not all(isinstance(x, str) for x in labels):
        raise PipelineError(f"{task}: candidate_labels must be a non-empty list of strings, got "
                            f"{candidate_labels!r:.80}")
    return list(labels)


def check_template(hypothesis_template):
    if not isinstance(hypothesis_template, str) or "{}" not in hypothesis_template:
        raise PipelineError(f"hypothesis_template must be a string with a {{}} for the label, "
                            f"got {hypothesis_template!r:.80}")
    return hypothesis_template


def check_scale(value, name, layout):
    """A split layout's ``logit_scale`` / ``logit_bias``: a finite number (a scale positive)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not np.isfinite(value) or (name == "logit_scale" and value <= 0):
        kind = "a positive number (exp of the stored log scale)" if name == "logit_scale" \
            else "a finite number"
        raise PipelineError(f"{name} for the split {layout} files must be {kind}, got "
                            f"{value!r:.80}")
    return float(value)


def component(repo, split):
    """The joint model.onnx when the repo has one, else the split half named ``split``."""
    names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
    joint = any(n.startswith("model") for n in names)
    return "model" if joint or not any(n.startswith(split) for n in names) else split


def load_text_model(repo, half, variant, what):
    """The repo's text_model.onnx, loaded as ``half`` was."""
    if repo is None:
        raise PipelineError(f"A split {what} loaded by hand needs text_model= (the text half's "
                            "transmuter.Model) or config= its repo folder")
    file = repo.choose("text_model", variant).path
    return load_beside(half, repo, file)


def unit(x):
    """CLIP's and CLAP's ``x / x.norm(p=2, dim=-1, keepdim=True)``."""
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class LabelEmbeddings:
    """Unit text embeddings per label set, the last ``LABEL_SETS_KEPT`` sets kept:
    ``embed(texts, run)`` calls ``run(texts)`` (the text graph's outputs) on a new set only."""

    def __init__(self):
        self._sets = {}

    def keys(self):
        """The label sets kept (tuples of texts)."""
        return self._sets.keys()

    def embed(self, texts, run):
        key = tuple(texts)
        if key not in self._sets:
            if len(self._sets) >= LABEL_SETS_KEPT:
                self._sets.pop(next(iter(self._sets)))
            out = run(texts)
            self._sets[key] = unit(out.get("text_embeds", next(iter(out.values()))))
        return self._sets[key]


class ZeroShotLabels:
    """The zero-shot classification pass shared by images and audio, mixed in before the
    modality's pipeline base. A class names its ``item`` key (``"image"``), its
    ``default_template``, the joint graph's ``logits_output`` and the split half's
    ``embeds_output``; ``__init__`` sets ``joint``, and for the split layout ``text_model``,
    ``scale``, ``bias`` and ``_label_sets``; ``_text_feed(texts, inputs)`` tokenizes the labels."""

    item = default_template = logits_output = embeds_output = None
    bias = 0.0

    def _sanitize_parameters(self, candidate_labels=None, hypothesis_template=None, **unknown):
        super()._sanitize_parameters(**unknown)
        if candidate_labels is None:
            return {}, {"labels": None}, {}
        labels = check_labels(candidate_labels, self.task)
        template = check_template(hypothesis_template or self.default_template)
        return {}, {"labels": labels, "template": template}, {}

    def _forward_group(self, chunks, labels=None, template=None):
        if labels is None:
            raise PipelineError(f"{self.task} needs candidate_labels=[...]")
        texts = [template.format(x) for x in labels]
        if self.joint:
            feed = {**self._feed(chunks), **self._text_feed(texts, self._inputs)}
            logits = self.output(self._run_model(feed), self.logits_output)
        else:
            items = unit(self.output(self._run_model(self._feed(chunks)), self.embeds_output))
            logits = self.scale * items @ self._label_embeddings(texts).T + self.bias
        return [dict(c, labels=labels, logits=logits[i]) for i, c in enumerate(chunks)]

    def _feed(self, chunks):
        """The batch's images or clips, padded to a compiled row count (text inputs apart)."""
        items = [c[self.item] for c in chunks]
        own = {k: v for k, v in self._inputs.items() if k not in TEXT_INPUTS}
        feed = self.featurizer.batch(items, self._rows(len(items)), own, self.task)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _label_embeddings(self, texts):
        """Unit text embeddings of ``texts`` (split layout), computed once per label set."""
        inputs = {v.name: v for v in self.text_model.inputs}
        return self._label_sets.embed(texts, lambda t: self._run_model(
            self._text_feed(t, inputs), self.text_model))
