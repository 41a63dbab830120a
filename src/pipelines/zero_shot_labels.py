"""What zero-shot image and audio classification share: candidate labels and their template,
the split layout's second graph (a ``text_model.onnx`` beside the image or audio half), and the
unit text embeddings of a label set, computed once and kept."""

import numpy as np

from .base import PipelineError

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


def component(repo, split):
    """The joint model.onnx when the repo has one, else the split half named ``split``."""
    names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
    joint = any(n.startswith("model") for n in names)
    return "model" if joint or not any(n.startswith(split) for n in names) else split


def load_text_model(repo, half, variant, what):
    """The repo's text_model.onnx, on ``half``'s backend and compute type."""
    from ..model import load

    if repo is None:
        raise PipelineError(f"A split {what} loaded by hand needs text_model= (the text half's "
                            "transmuter.Model) or config= its repo folder")
    file = repo.choose("text_model", variant).path
    return load(repo.fetch_onnx(file), backend=half.backend.name, compute_type=half.compute_type)


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
