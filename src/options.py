"""Checks of option values that several layers share (pipelines, serving, generation)."""

from .errors import PipelineError


def positive_int(value, what, error=PipelineError):
    """``value`` when it is an int >= 1 (a bool is not), else ``error`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{what} must be a positive int, got {value!r}")
    return value
