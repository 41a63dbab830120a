"""Native CPU kernels: small C files called from compiled JAX code through ``jax.ffi``
(design.md §3 "Native kernels"). This layer builds and loads them; ``backends/jax_kernels.py``
makes them primitives of the JAX CPU backend, with the pure-JAX path as reference and fallback.

They are built at first use into the user's cache (kernels/build.py). Off, with one log line that
says why, where they cannot run: no C compiler, a CPU other than x86-64 with AVX2 and FMA, or
``TRANSMUTER_KERNELS=0`` in the environment (read once, at first use)."""

import ctypes
import logging
import os

from . import build

log = logging.getLogger("transmuter")
_state = {}


def library():
    """The loaded kernel library (a ctypes.CDLL), or None where the kernels are off."""
    if "library" not in _state:
        _state["library"], _state["why"] = _load()
        if _state["library"] is None:
            asked = _state["why"].startswith("TRANSMUTER_KERNELS")
            level = logging.DEBUG if asked else logging.WARNING
            log.log(level, "transmuter: native CPU kernels off (%s); quantized products run on "
                    "XLA's slower path", _state["why"])
    return _state["library"]


def why_off():
    """Why the kernels are off ("" when they are on)."""
    library()
    return _state["why"]


def instruction_set():
    """The instruction set the kernels use here ("avx512vnni", "avxvnni", "avx2"), or ""."""
    lib = library()
    return lib.tm_kernels_isa().decode() if lib is not None else ""


def reset():
    """Forget the choice, so that the next use reads TRANSMUTER_KERNELS again (for tests)."""
    _state.clear()


def _load():
    if os.environ.get("TRANSMUTER_KERNELS", "1").strip() in ("0", "false", "off", "no"):
        return None, "TRANSMUTER_KERNELS=0"
    try:
        path = build.build()
    except build.BuildError as e:
        return None, str(e)
    lib = ctypes.CDLL(str(path))
    lib.tm_kernels_isa.restype = ctypes.c_char_p
    if not lib.tm_kernels_isa():
        return None, "this CPU lacks AVX2 and FMA"
    return lib, ""
