"""Running one case on Transmuter and on onnxruntime, and the verdict.

A case passes when Transmuter raises its own error (a TransmuterError: ModelLoadError,
InputError, OpError, HubError, PipelineError, TokenizerError, ...), or returns what onnxruntime
returns on the same file and feed. It fails on any other exception, on an answer that differs,
and on an answer where onnxruntime refuses the file or the feed (an invalid model or input
accepted). Signals, time-outs and memory past the limit are seen by the pool (pool.py)."""

import json
import os
import traceback

import numpy as np

from tests import fixtures

# The fixtures' own bar (tests/test_models.py, tests/test_variants.py: fp32 and q4 within 1e-4 of
# onnxruntime), plus a relative part: mutated weights and inputs (1e30, a flipped exponent bit)
# scale the outputs, and summation order then differs in proportion.
ATOL, RTOL = 1e-4, 1e-4
# Cases whose weights are garbage (flipped bytes, a shifted external-data offset, an element set
# to 1e30): activations reach 1e29, and two correct summation orders in float32 then differ in
# proportion to the largest value. Measured: 1.7e-4 on one element of 1,408 (t5), 2.7e-4 on 2 of
# 120,832 (llama-gqa), 1.1e-3 relative at 5e29. The bar there: 1e-3 of the output's largest
# magnitude, 1e-2 relative; NaN against a finite value still fails.
CORRUPT_KINDS = {"flip-bytes", "splice", "zero-run", "truncate", "wrong-offset", "wrong-length",
                 "initializer-data", "truncated-file"}
CORRUPT_SCALE, CORRUPT_RTOL = 1e-3, 1e-2
SRC = os.path.dirname(os.path.abspath(__import__("transmuter").__file__))


def passed(outcome):
    return {"status": "pass", "outcome": outcome}


def failed(outcome, message="", where=""):
    return {"status": "fail", "outcome": outcome, "message": message[:300], "where": where}


def where_of(error):
    """The innermost Transmuter frame of ``error``'s traceback, and its last frame."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(SRC)]
    inner = ours[-1] if ours else (frames[-1] if frames else None)
    last = frames[-1] if frames else None
    text = lambda f: f"{os.path.relpath(f.filename, os.path.dirname(SRC))}:{f.lineno} {f.name}"
    if inner is None:
        return ""
    return text(inner) + ("" if last is inner else f" (raised in {text(last)})")


def foreign(error):
    verdict = failed(f"foreign {type(error).__name__}", f"{type(error).__name__}: {error}",
                     where_of(error))
    verdict["traceback"] = "".join(traceback.format_exception(error))[-4000:]
    return verdict


def reference_feed(fixture, graph):
    """The recorded first-step feed of a fixture graph and its static input names."""
    manifest = json.loads((fixtures.ROOT / fixture / "manifest.json").read_text())
    entry = manifest["graphs"][graph]
    inputs, _ = fixtures.steps(fixture, entry["reference"])[0]
    return inputs, entry.get("static_inputs", [])


def run_ours(model, feed, mode, static_names):
    import transmuter

    if mode == "eager":
        return transmuter.run(model, feed)
    static = {k: v for k, v in feed.items() if k in static_names}
    dynamic = {k: v for k, v in feed.items() if k not in static_names}
    return transmuter.compile(model, dynamic, static_inputs=static)(dynamic)


def ours(load_source, feed, backend, mode, static_names, model=None):
    """("ok", outputs) / ("own", error) / ("foreign", error) of loading and running."""
    import transmuter

    try:
        if model is None:
            model = transmuter.load(load_source, backend=backend)
        return "ok", {k: np.asarray(v) for k, v in run_ours(model, feed, mode, static_names).items()}
    except transmuter.TransmuterError as e:
        return "own", e
    except BaseException as e:  # noqa: BLE001 - every other type is the finding
        if isinstance(e, KeyboardInterrupt):
            raise
        return "foreign", e


_SESSIONS = {}


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == attr.GRAPH else list(attr.graphs)):
                yield from _graphs(g)


def ort_session(path, cache=False, optimize=True):
    import onnxruntime as ort

    if cache and optimize and path in _SESSIONS:
        return _SESSIONS[path]
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(path, options,
                                   providers=["CPUExecutionProvider"])
    if cache and optimize:
        _SESSIONS[path] = session
    return session


def ort_run(path, feed, cache=False, optimize=True):
    """onnxruntime's outputs by name, or the exception it raised."""
    try:
        session = ort_session(path, cache, optimize)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feed)))
    except Exception as e:  # noqa: BLE001 - onnxruntime refusing is an answer too
        return e


def _gqa(path):
    try:
        import onnx

        model = onnx.load(path, load_external_data=False)
        return any(n.op_type == "GroupQueryAttention" for g in _graphs(model.graph) for n in g.node)
    except Exception:  # noqa: BLE001
        return False


def compare(got, want, feed, gqa, corrupt=False):
    """None when ``got`` equals onnxruntime's ``want``, else what differs. In a
    GroupQueryAttention graph the present rows past each row's attention-mask sum are left out
    (onnxruntime zeroes them, we keep the past's buffer; tests/test_models.py does the same)."""
    if set(got) != set(want):
        return f"outputs {sorted(got)} != onnxruntime's {sorted(want)}"
    mask = feed.get("attention_mask")
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{name}: {g.dtype}{list(g.shape)} != onnxruntime's {w.dtype}{list(w.shape)}"
        if gqa and name.startswith("present"):
            if mask is None or np.asarray(mask).ndim != 2 or g.ndim != 4:
                continue
            valid = np.asarray(mask).sum(-1)
            g = np.concatenate([g[b, :, :r].reshape(-1) for b, r in enumerate(valid)])
            w = np.concatenate([w[b, :, :r].reshape(-1) for b, r in enumerate(valid)])
        if w.dtype.kind in "fc":
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            atol, rtol = ATOL, RTOL
            if corrupt and w64.size:
                finite = np.abs(w64[np.isfinite(w64)])
                atol = CORRUPT_SCALE * max(1.0, float(finite.max()) if finite.size else 1.0)
                rtol = CORRUPT_RTOL
            if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
                bad = ~np.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True)
                i = np.flatnonzero(bad)[0]
                return (f"{name}: {int(bad.sum())} of {bad.size} differ, first at {i}: "
                        f"{g64.reshape(-1)[i]!r} vs onnxruntime's {w64.reshape(-1)[i]!r}")
        elif not np.array_equal(g, w):
            return f"{name}: values differ from onnxruntime's"
    return None


def verdict(kind, result, ort_path, ort_feed, our_feed, cache=False):
    """The verdict of one run of ours (``result``) against onnxruntime on ``ort_path``."""
    status, value = result
    if status == "own":
        return passed(f"own error {type(value).__name__}")
    if status == "foreign":
        return foreign(value)
    if ort_path is None or ort_feed is None:
        return failed("accepted (must refuse)", f"{kind}: loaded and ran; only our own error "
                      "is right here")
    phase("ort")
    want = ort_run(ort_path, ort_feed, cache)
    corrupt, gqa = kind in CORRUPT_KINDS, _gqa(ort_path)
    diff = None if isinstance(want, Exception) else compare(value, want, our_feed, gqa, corrupt)
    if diff is None and not isinstance(want, Exception):
        return passed("same as onnxruntime")
    # onnxruntime's optimizer rewrites the graph first, and two of its outcomes are its own:
    # it runs shape inference again on the rewritten graph and refuses what constant folding
    # made known (a Cast of a [1] constant as a Range's limit, where it takes a scalar:
    # 20261205:3428), and its fused kernels (LayerNormalization, attention) sum in another
    # order, which corrupt weights amplify past any tolerance (a weight x 1e6: 0.012 on a logit
    # between its own two modes, 20261205:2495). Where its kernels run the file as given and
    # agree with ours, that is onnxruntime's answer for the file.
    plain = ort_run(ort_path, ort_feed, optimize=False)
    if not isinstance(plain, Exception):
        plain_diff = compare(value, plain, our_feed, gqa, corrupt)
        if plain_diff is None:
            return passed("same as onnxruntime without its optimizer")
        if isinstance(want, Exception):
            # only the optimizer refused (its rewrite lost a value the graph defines: 20261207:4020)
            return failed("different answer", f"{plain_diff} (onnxruntime without its optimizer; "
                          f"with it: {str(want).strip().splitlines()[0][:150]})")
    if isinstance(want, Exception):
        return failed("accepted (onnxruntime refuses)",
                      f"onnxruntime: {str(want).strip().splitlines()[0][:250]}")
    return failed("different answer", diff)


_PHASE = None


def set_phase_writer(write):
    global _PHASE
    _PHASE = write


def phase(name, detail=None):
    """Tell the pool which runtime is running (a crash inside onnxruntime is not ours) and the
    case's detail (a crash report names it); returns ``detail``."""
    if _PHASE is not None:
        _PHASE(name, detail)
    return detail
