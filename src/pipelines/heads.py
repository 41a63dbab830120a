"""Heads shared by text, image and audio tasks: scores over ``id2label`` classes."""

import numpy as np

from ..errors import PipelineError

FUNCTIONS = ("softmax", "sigmoid", "none")


def softmax(x, axis=-1):
    x = np.asarray(x, np.float64 if np.asarray(x).dtype == np.float64 else np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x)))


def apply(logits, function):
    """``function`` ("softmax", "sigmoid", "none") over float32 logits."""
    logits = np.asarray(logits).astype("float32", copy=False)
    if function == "sigmoid":
        return sigmoid(logits)
    if function == "softmax":
        return softmax(logits)
    return logits


def check_function(function_to_apply):
    """The lower-cased name of a valid ``function_to_apply`` (None stays None)."""
    if function_to_apply is None:
        return None
    function = str(getattr(function_to_apply, "value", function_to_apply)).lower()
    if function not in FUNCTIONS:
        raise PipelineError(f"function_to_apply must be one of {FUNCTIONS}, got "
                            f"{function_to_apply!r}")
    return function


def text_function(config):
    """TextClassificationPipeline's default: regression -> none; multi-label or one label ->
    sigmoid; else softmax."""
    problem = config.get("problem_type")
    num_labels = len(config.get("id2label") or {})
    if problem == "regression":
        return "none"
    if problem == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def image_function(config):
    """ImageClassificationPipeline.postprocess's default (not the text one: a regression model
    with several labels gets softmax here)."""
    problem = config.get("problem_type")
    labels = len(config.get("id2label") or {})
    if problem == "multi_label_classification" or labels == 1:
        return "sigmoid"
    if problem == "single_label_classification" or labels > 1:
        return "softmax"
    return config.get("function_to_apply") or "none"


def ranked(scores, label, top_k=None):
    """[{"label", "score"}] best first (ties keep class order), the first ``top_k``."""
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    order = order if top_k is None else order[:top_k]
    return [{"label": label(i), "score": float(scores[i])} for i in order]
