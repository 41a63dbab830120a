"""A worker process: reads cases (JSON lines) on stdin, answers verdicts on its own pipe.
``python -m tests.fuzz.worker RUN_FOLDER MEMORY_BYTES``; started and restarted by pool.py.
Its address space is capped (RLIMIT_AS): memory past the limit shows as MemoryError or a crash."""

import json
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx

from . import external, feeds, judge, repo, structural
from .cases import Case
from tests import fixtures

_PROTOS, _MODELS, _BASELINES = {}, {}, {}


def _graph_path(case):
    return str(fixtures.ROOT / case.fixture / case.graph)


def _bytes(case):
    key = (case.fixture, case.graph)
    if key not in _PROTOS:
        with open(_graph_path(case), "rb") as f:
            _PROTOS[key] = f.read()
    return _PROTOS[key]


def _write(folder, data):
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    return path


def _file_case(case, folder, data):
    feed, static = judge.reference_feed(case.fixture, case.graph)
    path = _write(folder, data)
    result = judge.ours(path, feed, case.backend, case.mode, static)
    return judge.verdict(case.kind, result, path, feed, feed)


def structural_case(case, folder, rng):
    model = onnx.ModelProto.FromString(_bytes(case))
    detail = judge.phase("ours", structural.MUTATIONS[case.kind](rng, model))
    return detail, _file_case(case, folder, model.SerializeToString())


def bytes_case(case, folder, rng):
    data, detail = structural.mutate_bytes(rng, case.kind, _bytes(case))
    judge.phase("ours", detail)
    return detail, _file_case(case, folder, data)


def external_case(case, folder, rng):
    feed, static = judge.reference_feed(case.fixture, case.graph)
    model = onnx.ModelProto.FromString(_bytes(case))
    source, ort_path, detail = external.build(rng, case.kind, model, folder)
    judge.phase("ours", detail)
    result = judge.ours(source, feed, case.backend, case.mode, static)
    if case.kind in external.MUST_REFUSE and result[0] == "ok":
        outside = case.kind not in ("missing-file", "fifo", "location-is-folder", "nul-in-location")
        return detail, judge.failed("read outside the folder" if outside else
                                    "accepted (must refuse)", f"{case.kind} loaded")
    return detail, judge.verdict(case.kind, result, ort_path, feed, feed)


def _model(case):
    import transmuter

    key = (case.fixture, case.graph, case.backend)
    if key not in _MODELS:
        _MODELS[key] = transmuter.load(_graph_path(case), backend=case.backend)
    return _MODELS[key]


def inputs_case(case, folder, rng):
    feed, static = judge.reference_feed(case.fixture, case.graph)
    ours_feed, ort_feed, detail = feeds.mutate_feed(rng, case.kind, feed)
    judge.phase("ours", detail)
    result = judge.ours(None, ours_feed, case.backend, case.mode, static, model=_model(case))
    return detail, judge.verdict(case.kind, result, _graph_path(case), ort_feed, ort_feed,
                                 cache=True)


def repo_case(case, folder, rng):
    import transmuter

    key = (case.fixture, case.backend)
    if key not in _BASELINES:  # the answer's shape on the unmutated repo
        _BASELINES[key] = repo.shape_of(repo.call(str(fixtures.ROOT / case.fixture),
                                                  case.fixture, case.backend))
    path, detail = repo.build(rng, case.kind, case.fixture, folder)
    judge.phase("ours", detail)
    try:
        result = repo.call(path, case.fixture, case.backend)
    except transmuter.TransmuterError as e:
        return detail, judge.passed(f"own error {type(e).__name__}")
    except Exception as e:  # noqa: BLE001 - every other type is the finding
        return detail, judge.foreign(e)
    if repo.has_nan(result):
        return detail, judge.failed("different answer", "NaN in the answer")
    if repo.shape_of(result) != _BASELINES[key]:
        return detail, judge.failed("different answer", "answer not shaped like the "
                                    f"unmutated repo's: {str(repo.shape_of(result))[:200]}")
    return detail, judge.passed("answer shaped like the unmutated repo's")


RUNNERS = {"structural": structural_case, "bytes": bytes_case, "external": external_case,
           "inputs": inputs_case, "repo": repo_case}


def execute(case, run_folder):
    """The verdict of ``case`` (a dict with its detail and, for a failure, the traceback)."""
    folder = tempfile.mkdtemp(prefix=f"case{case.index}-", dir=run_folder)
    cwd = os.getcwd()
    try:
        detail, verdict = RUNNERS[case.cls](case, folder, case.rng())
    except Exception as e:  # noqa: BLE001 - a fault of the fuzzer itself: reported, not hidden
        detail, verdict = "fuzzer error", judge.failed("fuzzer error", repr(e), judge.where_of(e))
        verdict["traceback"] = traceback.format_exc()
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder, ignore_errors=True)
    verdict["detail"] = detail
    return verdict


def _status_mb(field):
    """A /proc/self/status field in MiB: VmRSS (resident), VmSize (the address space that
    RLIMIT_AS caps: JAX's reservations and arenas grow it far past the resident size)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    run_folder, limit = sys.argv[1], int(sys.argv[2])
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the library prints goes to stderr, not into the protocol
    write = lambda msg: out.write(json.dumps(msg) + "\n")
    judge.set_phase_writer(lambda name, detail: write({"phase": name, "detail": detail}))
    import transmuter  # noqa: F401 - imported before "ready": its time is no case's

    np.seterr(all="ignore")
    write({"ready": os.getpid()})
    for line in sys.stdin:
        case = Case(**json.loads(line))
        write({"phase": "ours", "detail": None})
        start = time.monotonic()
        verdict = execute(case, run_folder)
        verdict.update(index=case.index, rss_mb=_status_mb("VmRSS"),
                       vm_mb=_status_mb("VmSize"), seconds=time.monotonic() - start)
        write(verdict)


if __name__ == "__main__":
    main()
