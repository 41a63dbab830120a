"""compute_type="f32": run a half-precision graph in float32, as ONNX Runtime does on CPU;
compute_type="bf16": run a float32 graph in bfloat16 (mixed precision, for accelerators).

f32: the parsed graph is rewritten once, at load: half initializers and constant attributes
become float32, every Cast (and dtype attribute) to a half type targets float32 instead, inputs
declared half are accepted as given and cast to float32 by a leading Cast, and outputs declared
half are cast back by trailing Casts, so callers see the dtypes the graph declares.

bf16 is the same rewrite the other way, with one difference: the float32 initializers stay
float32 (the weights a gradient updates and save writes back: an optimizer's small steps would
vanish in bfloat16) and each is read through a Cast to bfloat16, as mixed-precision training keeps
float32 master weights. Normalizations keep computing their statistics in float32 (the ops'
``stash_type``), as autocast keeps them."""

import numpy as np
from onnx import TensorProto

from ..graph import Graph, Node

HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
# Attributes naming an output element type (Cast, EyeLike, Random*, Bernoulli, Dequantize...).
_TYPE_ATTRS = ("to", "dtype", "output_dtype")
_SUFFIX = "::f32"
_BF16_SUFFIX = "::bf16"


def _is_half(dtype):
    return isinstance(dtype, np.dtype) and dtype.kind in "fV" and dtype.itemsize == 2


def _upcast_value(value):
    return value.astype(np.float32) if isinstance(value, np.ndarray) and _is_half(value.dtype) \
        else value


def _subgraphs(node):
    for value in node.attrs.values():
        yield from (g for g in (value if isinstance(value, list) else [value])
                    if isinstance(g, Graph))


def _upcast_graph(graph: Graph, top=True):
    """Initializers, attributes (and, in subgraphs, declared types), in place."""
    graph.initializers = {k: _upcast_value(v) for k, v in graph.initializers.items()}
    if not top:
        for info in graph.inputs + graph.outputs:
            if _is_half(info.dtype):
                info.dtype = np.dtype(np.float32)
    for node in graph.nodes:
        for key, value in node.attrs.items():
            if key in _TYPE_ATTRS and isinstance(value, int) and value in HALF:
                node.attrs[key] = TensorProto.FLOAT
            elif isinstance(value, np.ndarray):
                node.attrs[key] = _upcast_value(value)
            elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                node.attrs[key] = [_upcast_value(v) for v in value]
        for g in _subgraphs(node):
            _upcast_graph(g, top=False)


def _rename_reads(graph: Graph, old, new, top=True):
    """Every read of ``old`` (node inputs, subgraph outputs taken from outside) becomes ``new``."""
    if not top:
        for info in graph.outputs:
            if info.name == old:
                info.name = new
    for node in graph.nodes:
        node.inputs = [new if n == old else n for n in node.inputs]
        for g in _subgraphs(node):
            _rename_reads(g, old, new, top=False)


def upcast_half(graph: Graph) -> Graph:
    """Rewrite ``graph`` (parsed, top level) to compute in float32; returns it."""
    _upcast_graph(graph)
    head, tail = [], []
    for info in graph.inputs:
        if _is_half(info.dtype):
            inner = info.name + _SUFFIX
            _rename_reads(graph, info.name, inner)
            head.append(Node(f"{info.name}/to_f32", "Cast", "", [info.name], [inner],
                             {"to": TensorProto.FLOAT}))
    producers = {o: node for node in graph.nodes for o in node.outputs}
    for info in graph.outputs:
        if not _is_half(info.dtype):
            continue
        inner = info.name + _SUFFIX
        if info.name in producers:
            node = producers[info.name]
            node.outputs = [inner if o == info.name else o for o in node.outputs]
        elif info.name in graph.initializers:
            graph.initializers[inner] = graph.initializers.pop(info.name)
        elif info.name not in graph.input_names:
            continue
        _rename_reads(graph, info.name, inner)
        to = TensorProto.BFLOAT16 if info.dtype.kind == "V" else TensorProto.FLOAT16
        tail.append(Node(f"{info.name}/to_half", "Cast", "", [inner], [info.name], {"to": to}))
    graph.nodes = head + graph.nodes + tail
    return graph


# --- compute_type="bf16" ------------------------------------------------------------------------

def _is_f32(dtype):
    return isinstance(dtype, np.dtype) and dtype == np.float32


def _down_value(value):
    import ml_dtypes

    return value.astype(ml_dtypes.bfloat16) if isinstance(value, np.ndarray) and \
        _is_f32(value.dtype) else value


def _downcast_graph(graph: Graph, top=True):
    """Constant attributes, Cast targets and (in subgraphs) declared types, in place."""
    import ml_dtypes

    if not top:
        for info in graph.inputs + graph.outputs:
            if _is_f32(info.dtype):
                info.dtype = np.dtype(ml_dtypes.bfloat16)
    for node in graph.nodes:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for key in ("value_float", "value_floats"):
                if key in node.attrs:  # the op makes float32 of these: give it the tensor
                    node.attrs = {"value": np.array(node.attrs.pop(key), ml_dtypes.bfloat16)}
        for key, value in node.attrs.items():
            if key in _TYPE_ATTRS and isinstance(value, int) and value == TensorProto.FLOAT:
                node.attrs[key] = TensorProto.BFLOAT16
            elif isinstance(value, np.ndarray):
                node.attrs[key] = _down_value(value)
            elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                node.attrs[key] = [_down_value(v) for v in value]
        for g in _subgraphs(node):
            _downcast_graph(g, top=False)


def downcast_float(graph: Graph) -> Graph:
    """Rewrite ``graph`` (parsed, top level) to compute in bfloat16; returns it."""
    _downcast_graph(graph)
    tail = []
    reads = [name for name, value in graph.initializers.items()
             if isinstance(value, np.ndarray) and _is_f32(value.dtype)]
    reads += [info.name for info in graph.inputs if _is_f32(info.dtype)]
    _rename_all(graph, {name: name + _BF16_SUFFIX for name in reads})
    head = [Node(f"{name}/to_bf16", "Cast", "", [name], [name + _BF16_SUFFIX],
                 {"to": TensorProto.BFLOAT16}) for name in reads]
    producers = {o: node for node in graph.nodes for o in node.outputs}
    for info in graph.outputs:
        if not _is_f32(info.dtype) or info.name not in producers:
            continue  # an output that is an input or a weight is read as it is
        inner = info.name + _BF16_SUFFIX
        node = producers[info.name]
        node.outputs = [inner if o == info.name else o for o in node.outputs]
        _rename_all(graph, {info.name: inner})
        tail.append(Node(f"{info.name}/to_f32", "Cast", "", [inner], [info.name],
                         {"to": TensorProto.FLOAT}))
    graph.nodes = head + graph.nodes + tail
    return graph


def _rename_all(graph: Graph, names: dict, top=True):
    """``_rename_reads`` for many names in one walk (a model has thousands of weights). A
    subgraph that defines a name itself (a branch's own ``present.0.key``) keeps its reads."""
    if not top:
        own = {o for node in graph.nodes for o in node.outputs} | set(graph.input_names) | \
            set(graph.initializers)
        names = {k: v for k, v in names.items() if k not in own}
        for info in graph.outputs:
            info.name = names.get(info.name, info.name)
    for node in graph.nodes:
        node.inputs = [names.get(n, n) for n in node.inputs]
        for g in _subgraphs(node):
            _rename_all(g, names, top=False)
