"""Backends: an array namespace with NumPy's names plus the few primitives that differ, a way to
compile, and moves between host and device. ``numpy`` holds host (static) values."""

import importlib

from ..errors import InputError

NAMES = ("jax", "mlx")


class NotConcrete(Exception):
    """A value was needed on the host while it only exists inside a trace (jit/compile)."""


def get(name: str):
    """The backend object called ``name`` ("jax" or "mlx")."""
    if name not in NAMES:
        raise InputError(f"Unknown backend {name!r}: choose one of {', '.join(NAMES)}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ImportError as e:
        extra = " (pip install 'mlx[cpu]' on Linux, or mlx on macOS)" if name == "mlx" else ""
        raise ImportError(f"Backend {name!r} is not available: {e}{extra}") from e
    return module.BACKEND
