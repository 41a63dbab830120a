"""ONNX node conformance cases on each backend: eager for all, compiled for a sample.

Exclusions (tests/conformance_exclusions.txt) are skipped with their reason; the end of the run
prints `N passed, M excluded` per backend (tests/conftest.py)."""

import warnings

import pytest

from tests import conformance

EXCLUDED = conformance.load_exclusions()
CASES = conformance.cases()
# Compiling every case would cost minutes of XLA time; every 16th case runs compiled too, so the
# trace path (static folding, breaks) is exercised across op families. All of them compiled:
# python -m tests.conformance --compiled (see README).
COMPILED_SAMPLE = {c.name for c in CASES[::16]}


def _params():
    for backend in ("jax", "mlx"):
        for case in CASES:
            reason = conformance.exclusion_reason(EXCLUDED, backend, case.name)
            marks = [pytest.mark.skip(reason=f"excluded: {reason}")] if reason else []
            yield pytest.param(case, backend, id=f"{backend}-{case.name}", marks=marks)


@pytest.mark.parametrize("case, backend", list(_params()))
def test_conformance(case, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conformance.run_case(case, backend)
        # MLX's compiled path is covered by tests/test_models.py; here an mx.compile trace that
        # stops at a graph break can leave MLX unable to evaluate later cases in this process.
        if case.name in COMPILED_SAMPLE and backend == "jax":
            conformance.run_case(case, backend, compiled=True)
