"""``transmuter coverage run``: each recorded case through Transmuter, compiled, on the recorded
feed, compared with onnxruntime's recorded outputs. A case passes when every output agrees
within the tolerance of its variant plus twice the file's own noise; ``results.json`` holds
``{"task", "repo", "variant", "status": "pass" | "differs" | "error", "size", "error"}``."""

import pathlib

import numpy as np

from ..debug.compare import compare
from ..engine.compiled import compile
from ..hub.load import load
from . import cases

# float32 graphs: rounding differs by ~1e-6 per op between XLA / MLX and onnxruntime's MLAS and
# grows through a graph; 1e-4 is the bound the tests hold whole graphs to. float16 keeps 11 bits
# (~5e-4 relative per op), so half variants get 1e-2.
TOLERANCE = {"fp16": 1e-2, "q4f16": 1e-2}
DEFAULT_TOLERANCE = 1e-4


def check(folder, *, backend="jax", offline=False, progress=print):
    """Run every recorded case of ``folder``; write ``results.json``; return its list."""
    results = []
    for entry in cases.read(folder, "recorded.json", "record"):
        result = {k: entry[k] for k in ("task", "repo", "variant")}
        if "error" in entry:
            result.update(status="error", error=f"record: {entry['error']}")
        else:
            try:
                result.update(check_case(folder, entry, backend, offline))
            except Exception as e:  # noqa: BLE001  any failure is the case's result, not the run's
                result.update(status="error", error=f"{type(e).__name__}: {e}")
        progress(f"run {result['task']} {result['repo']} {result['variant']}: "
                 f"{result['status']}{' ' + result['error'] if 'error' in result else ''}")
        results.append(result)
    cases.write(folder, "results.json", results)
    return results


def check_case(folder, entry, backend, offline):
    with np.load(pathlib.Path(folder) / entry["record"]) as arrays:
        feed = {k[6:]: arrays[k] for k in arrays.files if k.startswith("input/")}
        want = {k[7:]: arrays[k] for k in arrays.files if k.startswith("output/")}
        noise = {k[6:]: float(arrays[k]) for k in arrays.files if k.startswith("noise/")}
    model = load(entry["repo"], entry["file"], backend=backend, local_files_only=offline)
    got = compile(model)(feed)
    tol = TOLERANCE.get(entry["variant"], DEFAULT_TOLERANCE)
    worst, failed = 0.0, False
    for name, ref in want.items():
        diff = compare(np.asarray(got[name]), ref, tol, tol, 2 * noise.get(name, 0.0))
        failed |= not diff.ok
        worst = max(worst, diff.max_abs if not diff.why else float("inf"))
    return {"status": "differs" if failed else "pass", "size": worst, "tolerance": tol}
