"""Activations newer than the elementwise family: Swish."""

from .registry import op


@op("Swish", 24)
def swish(xp, x, *, alpha=1.0):
    """x * sigmoid(alpha * x)."""
    a = xp.asarray(alpha, xp.dtype_of(x))
    return x / (1 + xp.exp(-a * x))
