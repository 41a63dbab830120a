"""ONNX node conformance cases on each backend: eager for all, compiled for a sample.

Exclusions (tests/conformance_exclusions.txt) are skipped with their reason; the end of the run
prints `N passed, M excluded` per backend (tests/conftest.py)."""

import warnings

import pytest

from tests import conformance

EXCLUDED = conformance.load_exclusions()
CASES = conformance.cases()
# Compiling every case would cost minutes of XLA time; every 8th case runs compiled too, so the
# trace path (static folding, breaks) is exercised over all op families.
COMPILED_SAMPLE = {c.name for c in CASES[::8]}


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
        if case.name in COMPILED_SAMPLE:
            conformance.run_case(case, backend, compiled=True)
