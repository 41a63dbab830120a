"""Builds the native kernels once per machine, into the user's cache, at their first use.

The C sources sit beside this file; ``ffi.cc`` includes XLA's FFI header, which jaxlib ships
(``jax.ffi.include_dir()``). The library lands in ``$TRANSMUTER_CACHE/kernels/<key>/`` (default
``~/.cache/transmuter``), where ``key`` hashes the sources, the flags, the compilers and jaxlib's
version, so an upgrade builds afresh. Concurrent processes take a file lock: one builds, the others
wait and load its result. The build writes into a temporary folder and renames it into place, so a
killed build never leaves a half-written library. Takes about 5 s with gcc."""

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
LIBRARY = "libtransmuter_kernels.so"
# One copy of each kernel per instruction set; dispatch.c picks one at run time.
VARIANTS = {
    "_avx2": ["-mavx2", "-mfma"],
    "_avxvnni": ["-mavx2", "-mfma", "-mavxvnni"],
    "_avx512vnni": ["-mavx2", "-mfma", "-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512vnni"],
}
KERNELS = ["matmul_nbits.c", "matmul_integer.c", "matmul_int8_weight.c"]
C_FLAGS = ["-O3", "-fPIC", "-std=c11", "-fno-math-errno"]
CXX_FLAGS = ["-O2", "-fPIC", "-std=c++17"]


class BuildError(Exception):
    """Why the kernels could not be built here (the caller falls back to XLA's path)."""


def cache_root():
    return Path(os.environ.get("TRANSMUTER_CACHE") or Path.home() / ".cache" / "transmuter")


def compilers():
    """(cc, c++) as found on PATH ($CC / $CXX first), or BuildError naming what is missing."""
    found = []
    for var, default in (("CC", "cc"), ("CXX", "c++")):
        name = os.environ.get(var, default)
        path = shutil.which(name)
        if path is None:
            raise BuildError(f"no C compiler: {name!r} is not on PATH (install gcc, or set ${var})")
        found.append(path)
    return found


def check_machine():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise BuildError(f"no native kernels for {platform.machine()} CPUs yet")


def _version(compiler):
    return subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout


def _key(cc, cxx, include):
    import jaxlib

    digest = hashlib.sha256()
    for path in sorted(HERE.glob("*.[ch]")) + sorted(HERE.glob("*.cc")):
        digest.update(path.name.encode() + path.read_bytes())
    for part in (repr(VARIANTS), repr(C_FLAGS), repr(CXX_FLAGS), _version(cc), _version(cxx),
                 jaxlib.__version__, str(include)):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _run(command, cwd):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"{' '.join(command[:1])} failed:\n{done.stderr[-2000:]}")


def _compile(cc, cxx, include, out, extra_c=(), extra_cxx=()):
    objects = []
    for suffix, flags in VARIANTS.items():
        for source in KERNELS:
            obj = out / f"{Path(source).stem}{suffix}.o"
            _run([cc, *C_FLAGS, *extra_c, *flags, f"-DKERNEL_SUFFIX={suffix}", "-c",
                  str(HERE / source), "-o", str(obj)], out)
            objects.append(obj)
    obj = out / "dispatch.o"
    _run([cc, *C_FLAGS, *extra_c, "-c", str(HERE / "dispatch.c"), "-o", str(obj)], out)
    objects.append(obj)
    obj = out / "ffi.o"
    _run([cxx, *CXX_FLAGS, *extra_cxx, f"-I{include}", f"-I{HERE}", "-c", str(HERE / "ffi.cc"),
          "-o", str(obj)], out)
    objects.append(obj)
    # -z defs: a symbol left undefined fails here, not at the first call
    _run([cxx, "-shared", "-Wl,-z,defs", *extra_cxx, "-o", str(out / LIBRARY),
          *map(str, objects), "-lm"], out)


def build(extra_c=(), extra_cxx=(), tag=""):
    """The path of the built library, building it first if this machine has none (BuildError if
    it cannot be built). ``extra_*`` and ``tag`` serve the sanitizer build of the tests."""
    import jax.ffi

    check_machine()
    cc, cxx = compilers()
    include = jax.ffi.include_dir()
    key = _key(cc, cxx, include) + tag
    folder = cache_root() / "kernels" / key
    library = folder / LIBRARY
    if library.exists():
        return library
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same key
        if library.exists():
            return library
        with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
            _compile(cc, cxx, include, Path(tmp), extra_c, [*extra_c, *extra_cxx])
            os.replace(tmp, folder)
            os.mkdir(tmp)  # TemporaryDirectory removes what it made
    return library
