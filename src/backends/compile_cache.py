"""JAX's persistent compilation cache: a shape compiled in one process is not compiled again in
the next.

The cache is JAX's own (``jax_compilation_cache_dir``), turned on at the first compile, never at
import, in the user's cache folder as huggingface_hub keeps its cache:
``$XDG_CACHE_HOME/transmuter/jax`` (default ``~/.cache/transmuter/jax``).
``TRANSMUTER_COMPILE_CACHE`` moves it (a folder) or turns it off (``0``, ``off``, ``false``,
``no`` or empty); ``compile_cache=`` on ``load``, ``compile`` and ``pipeline`` does the same for
one model. JAX keeps one cache per process: the first compile that asks for a folder sets it.

A JAX setting of the user's wins: when ``jax_compilation_cache_dir`` is already set (by
``jax.config.update`` or ``JAX_COMPILATION_CACHE_DIR``), or ``jax_enable_compilation_cache`` is
off, nothing is changed; a size bound or a minimum compile time the user chose is kept.

Keys: JAX hashes the StableHLO module, the compile options (the per-function XLA options of
backends/jax.py included), jaxlib's version, the platform, XLA_FLAGS and the devices. Everything
Transmuter contributes to an executable is in that module (tracing runs in every process; the
static values a trace records stay in memory), so a new Transmuter that traces a different
module gets a new key, and one that traces the same module may reuse the same executable: the
folder needs no Transmuter version. Entries of an older jaxlib are never hit again; the size
bound (least recently used first, through ``jax_compilation_cache_max_size``) evicts them.

MLX has no persistent compilation cache: ``mx.compile`` compiles again in every process."""

import contextlib
import os
import warnings

from ..errors import InputError

ENV = "TRANSMUTER_COMPILE_CACHE"
OFF = ("", "0", "off", "false", "no", "none")
MAX_BYTES = 2 * 2**30  # the bound on the folder (JAX evicts the least recently used entries)
# Compiles shorter than this are not written: reading an entry back costs 5-12 ms, and the many
# tiny jits (eager ops, 5-25 ms) would fill the folder with files not worth keeping. Not 0.1 s:
# generation's cache helpers (take, place and write over every layer's buffers) compile in
# 0.07-0.12 s on 2 busy cores, so at 0.1 s whisper-tiny's first transcription compiled 4-5 of them
# again in every process (~0.35 s of a warm-cache first transcription; read back: ~0.03 s).
MIN_COMPILE_SECS = 0.03
_JAX_DEFAULTS = {"jax_compilation_cache_max_size": -1,
                 "jax_persistent_cache_min_compile_time_secs": 1.0}

_warned = set()  # folders asked for after the cache was on elsewhere


def default_folder():
    """``$XDG_CACHE_HOME/transmuter/jax``, else ``~/.cache/transmuter/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "transmuter", "jax")


def check_option(value):
    """Refuse a ``compile_cache=`` that is not None, a bool or a folder."""
    if value is None or isinstance(value, bool) or isinstance(value, (str, os.PathLike)):
        return value
    raise InputError(f"compile_cache must be None (TRANSMUTER_COMPILE_CACHE, else "
                     f"{default_folder()}), False (off) or a folder, got {value!r}")


def folder_for(option=None):
    """The folder ``option`` asks for, or None when it turns the cache off. ``None`` and True
    read TRANSMUTER_COMPILE_CACHE (read at each compile, so it may be set after import)."""
    check_option(option)
    if option is False:
        return None
    if option is None or option is True:
        value = os.environ.get(ENV)
        if value is None:
            return default_folder()
        if value.strip().lower() in OFF:
            return None
        option = value
    return os.path.abspath(os.path.expanduser(os.fspath(option)))


def active_folder():
    """The folder JAX's persistent cache writes to in this process, or None."""
    import jax

    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir


def scope(option=None):
    """A context for a call that compiles: turns JAX's cache on at the folder ``option`` asks
    for (once per process); when ``option`` turns it off, nothing compiled inside is written."""
    wanted = folder_for(option)
    if wanted is not None:
        _enable(wanted, explicit=not (option is None or option is True))
        return contextlib.nullcontext()
    if active_folder() is None:
        return contextlib.nullcontext()
    from jax._src import config  # the threshold is read at each write, per thread

    return config.persistent_cache_min_compile_time_secs(float("inf"))


def _enable(folder, explicit):
    import jax

    if not jax.config.jax_enable_compilation_cache:
        return  # the user turned JAX's cache off
    active = jax.config.jax_compilation_cache_dir
    if active is None:
        if not _writable(folder):
            return
        for name, value in (("jax_compilation_cache_max_size", MAX_BYTES),
                            ("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECS)):
            if getattr(jax.config, name) == _JAX_DEFAULTS[name]:  # else the user's own choice
                jax.config.update(name, value)
        jax.config.update("jax_compilation_cache_dir", folder)
    elif explicit and os.path.abspath(active) != folder and folder not in _warned:
        _warned.add(folder)  # JAX reads its folder once per process: it cannot move now
        warnings.warn(f"JAX's compilation cache is at {active} in this process (set before "
                      f"this model's first compile): compile_cache={folder!r} is not used",
                      stacklevel=4)


def _writable(folder):
    """Create ``folder``; when it cannot be, say so once (compiles go on, uncached)."""
    try:
        os.makedirs(folder, exist_ok=True)
        return os.access(folder, os.W_OK)
    except OSError as e:
        if folder not in _warned:
            _warned.add(folder)
            warnings.warn(f"Cannot create the compilation cache folder {folder} ({e}): compiled "
                          f"shapes are not kept. Set {ENV} to a writable folder, or to 0",
                          stacklevel=5)
        return False
