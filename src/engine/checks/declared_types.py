"""Declared types checked as ONNX Runtime checks them when it builds its graph (a flipped byte in
a type is data type 0 or a missing type; fuzz 20261203:2410, :9393, :5323): a main-graph input
must have a type; the element types of the graph's inputs and outputs, and of the value_info
of a value some node makes or reads (in subgraphs too), must name a data type. ONNX Runtime
ignores value_info of names no node uses and takes an output declared with no type at all;
so does this."""

import onnx

from ...errors import ModelLoadError

_CODES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def check(graph: onnx.GraphProto):
    """Raise ModelLoadError naming the first value whose declared type names no data type."""
    for v in graph.input:
        if v.type.WhichOneof("value") is None:
            raise ModelLoadError(f"Graph input {v.name!r} has no type: an ONNX model declares "
                                 "the type of each input (the file is corrupt, or re-export it)")
    for what, values in (("Graph input", graph.input), ("Graph output", graph.output)):
        for v in values:
            _check(v, what)
    _check_value_info(graph)


def _check_value_info(graph):
    used = {name for node in graph.node for name in [*node.input, *node.output] if name}
    for v in graph.value_info:
        if v.name in used:
            _check(v, "The value_info of")
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _check_value_info(sub)


def _check(value, what):
    code = _bad_code(value.type)
    if code is not None:
        raise ModelLoadError(f"{what} {value.name!r} declares element type {code}, which names "
                             "no ONNX data type (the file is corrupt: re-export it, or fix the "
                             "declared type)")


def _bad_code(t):
    """The first element type code in TypeProto ``t`` that names no data type, or None."""
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        code = getattr(t, kind).elem_type
        return None if code in _CODES else code
    if kind in ("sequence_type", "optional_type"):
        inner = getattr(t, kind)
        return _bad_code(inner.elem_type) if inner.HasField("elem_type") else None
    if kind == "map_type":
        if t.map_type.key_type not in _CODES:
            return t.map_type.key_type
        return _bad_code(t.map_type.value_type)
    return None
