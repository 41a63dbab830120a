import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX's persistent compilation cache (src/compile_cache.py) stays off in the suite: results never
# depend on what an earlier run left on disk, and nothing is written to the machine's ~/.cache.
# tests/test_compile_cache.py turns it on in child processes, each with its own temp folder.
os.environ.setdefault("TRANSMUTER_COMPILE_CACHE", "0")


def pytest_terminal_summary(terminalreporter):
    """Per backend: `N passed, M excluded` over the ONNX conformance cases."""
    counts = {}
    for status in ("passed", "failed", "skipped"):
        for report in terminalreporter.stats.get(status, []):
            node = getattr(report, "nodeid", "")
            if "test_conformance.py::test_conformance[" not in node:
                continue
            backend = node.split("[", 1)[1].split("-", 1)[0]
            c = counts.setdefault(backend, {"passed": 0, "failed": 0, "skipped": 0})
            c[status] += 1
    for backend, c in sorted(counts.items()):
        terminalreporter.write_line(f"conformance {backend}: {c['passed']} passed, "
                                    f"{c['skipped']} excluded, {c['failed']} failed")
