"""Which initializers train (``load(trainable=)``), and the params a call is given.

A weight can train when a gradient can reach it: some node reads it as data (not as a static
value: a shape, a Resize scale) and it is float32 or float64 in the source file. Integer,
quantized and half weights cannot: their updates would be rounded away or have no meaning, so
asking for them is refused with the way out (train the fp32 export, quantize after saving)."""

import difflib

import numpy as np

from ... import dtypes
from ...errors import InputError, ModelLoadError
from ..graph import walk
from .weights import SPARSE

_TRAINABLE = (np.dtype(np.float32), np.dtype(np.float64))
_FP32 = ("Fine-tune the fp32 export instead (load(repo, variant='fp32'), or its "
         "onnx/model.onnx) and quantize or convert the saved file afterwards")


def select(graph, table, option) -> frozenset:
    """The names (as the model keeps them) of the initializers ``option`` trains: True (every
    float weight a gradient reaches, but scalars: scale factors and epsilons the exporter
    folded in), a list of names, or a predicate ``name -> bool`` over those weights."""
    if option is False or option is None:
        return frozenset()
    entries = {e.stored: e for e in table.entries.values()}
    static, data = _static_reads(graph), _data_reads(graph)
    reached = [n for n in graph.initializers if n in data and n not in static
               and n in entries and entries[n].storage != SPARSE]
    if option is True:
        _refuse_untrainable(reached, graph, entries)
        return frozenset(n for n in reached if _kind(entries[n].dtype) == "float"
                         and graph.initializers[n].size > 1)
    if callable(option):
        weights = [n for n in reached if _kind(entries[n].dtype) != "integer"]
        chosen = [n for n in weights if option(n)]
    elif isinstance(option, (list, tuple, set, frozenset)) and \
            all(isinstance(n, str) for n in option):
        chosen = list(option)
        _check_names(chosen, graph, entries, static, reached)
    else:
        raise ModelLoadError(f"trainable={option!r}: give True, False, a list of initializer "
                             "names, or a predicate name -> bool")
    for name in chosen:
        kind = _kind(entries[name].dtype)
        if kind != "float":
            raise ModelLoadError(_refusal(name, kind, entries[name].dtype, graph))
    return frozenset(chosen)


def merged(model, params):
    """``model.params`` with ``params`` (a dict by initializer name: all of them, or the
    trainable ones) over it; a name that is no parameter of the model is refused."""
    if params is None or params is model.params:
        return model.params
    if not isinstance(params, dict):
        raise InputError(f"params must be a dict by initializer name (model.trainable_params), "
                         f"got {type(params).__name__}")
    for name in params:
        if name not in model.params:
            raise InputError(_unknown_param(model, name))
    check = getattr(model.backend, "check_params", None)
    if check is not None:
        check(params)
    full = dict(model.params)
    with model.backend.scope():  # NumPy weights to the device: on the host they would fold in
        full.update({k: model.backend.asarray(v) if isinstance(v, np.ndarray) else v
                     for k, v in params.items()})
    return full


def _unknown_param(model, name):
    if name in model.constants:
        return (f"params names {name!r}, a constant of this model (a small or static value, "
                f"folded at load), not a parameter: load with trainable=[{name!r}, ...] (or "
                "trainable=True) to train it")
    close = difflib.get_close_matches(name, list(model.params), n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return f"params names {name!r}, which is no parameter of this model{hint}"


def _data_reads(graph):
    """Names some node reads as data (a backend array inside a trace)."""
    reads = set()
    for node in walk(graph):
        n = len(node.inputs)
        reads |= {name for i, name in enumerate(node.inputs)
                  if name and not node.opdef.host and not node.opdef.needs_static(i, n)}
    return reads


def _static_reads(graph):
    """name -> (node, position) of an initializer read as a static value somewhere."""
    found = {}
    for node in walk(graph):
        n = len(node.inputs)
        for i, name in enumerate(node.inputs):
            if name in graph.initializers and (node.opdef.host or node.opdef.needs_static(i, n)):
                found.setdefault(name, (node, i))
    return found


def _kind(dtype):
    dtype = np.dtype(dtype)
    if dtype in _TRAINABLE:
        return "float"
    if dtypes.is_float(dtype):
        return "half"  # float16, bfloat16, float8
    if dtype.kind in "iuV" and dtype.itemsize == 1:
        return "quantized"  # (u)int8, (u)int4, (u)int2: quantized weights and zero points
    return "integer"


def _readers(graph, name):
    return sorted({node.op_type for node in walk(graph) if name in node.inputs})


def _refusal(name, kind, dtype, graph):
    readers = ", ".join(_readers(graph, name)) or "no node"
    what = {"half": "a half-precision weight: optimizer steps in it lose small updates, and "
                    "write-back rounds them away",
            "quantized": "a quantized weight: gradients need float weights",
            "integer": "an integer tensor (indices or shapes): no gradient reaches it"}[kind]
    fix = "Train float32 or float64 weights only" if kind == "integer" else _FP32
    return (f"Initializer {name!r} ({dtypes.name(dtype)}, read by {readers}) cannot train: it is "
            f"{what}. {fix}.")


def _refuse_untrainable(reached, graph, entries):
    """trainable=True on a quantized or half export: its main weights cannot train, and
    training the few float ones left (norms, biases) silently would not be what was asked."""
    for kind in ("quantized", "half"):
        found = [n for n in reached if _kind(entries[n].dtype) == kind
                 and graph.initializers[n].size > 1]
        if found:
            first, dtype = found[0], entries[found[0]].dtype
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            raise ModelLoadError(
                f"trainable=True: this export holds {kind} weights ({dtypes.name(dtype)} "
                f"{first!r}{more}, read by {', '.join(_readers(graph, first))}), which cannot "
                f"train. {_FP32}; or pass trainable= a list or a predicate of its float32 "
                "weights to train only those.")


def _check_names(names, graph, entries, static, reached):
    for name in names:
        if name not in graph.initializers:
            close = difflib.get_close_matches(name, list(graph.initializers), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ModelLoadError(f"trainable= names {name!r}, which is no initializer of this "
                                 f"graph{hint}")
        if name in static:
            node, i = static[name]
            raise ModelLoadError(f"trainable= names {name!r}, which {node.label} reads as a "
                                 f"static value (input {i}): no gradient reaches it")
        if entries.get(name) is not None and entries[name].storage == SPARSE:
            raise ModelLoadError(f"trainable= names {name!r}, a sparse initializer: it cannot "
                                 "train (its write-back would not be sparse)")
        if name not in reached:
            raise ModelLoadError(f"trainable= names {name!r}, which no node reads as data: no "
                                 "gradient reaches it")
