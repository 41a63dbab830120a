"""The simple ops of the ai.onnx.ml domain (traditional ML pipelines exported to ONNX)."""

from .registry import op


@op("Binarizer", 1, domain="ai.onnx.ml")
def binarizer(xp, x, *, threshold=0.0):
    return xp.astype(x > xp.asarray(threshold, xp.dtype_of(x)), xp.dtype_of(x))


@op("ArrayFeatureExtractor", 1, domain="ai.onnx.ml")
def array_feature_extractor(xp, x, indices):
    """Selects columns of the last axis (a 1-D input counts as one row)."""
    out = xp.take(x, xp.reshape(indices, (-1,)), axis=x.ndim - 1)
    return xp.reshape(out, (1, -1)) if x.ndim == 1 else out
