"""Contrib (com.microsoft) nodes against ONNX Runtime's schemas (ops/contrib/schemas.py), which
onnx lacks: attribute names and types, input and output counts, and the element types of the
inputs, as ONNX Runtime checks them at load. The output types found are handed back so that
onnx's inference types the standard nodes after them and a graph output's declared type is
checked (engine/checks/validate.py)."""

import onnx

from ...errors import ModelLoadError
from ...ops.contrib.schemas import DEFAULT_DOMAIN, SCHEMAS

CONTRIB = "com.microsoft"


def schema(node):
    """ONNX Runtime's schema of a com.microsoft ``node``, or of one of its own ops in the
    default domain (fuzz 20261203:7891: an int32 scale of SimplifiedLayerNormalization, which
    onnx cannot type-check), or None (not one we run)."""
    if node.domain == CONTRIB:
        return SCHEMAS.get(node.op_type)
    return DEFAULT_DOMAIN.get(node.op_type) if node.domain in ("", "ai.onnx") else None


def check_node(node, spec, label):
    """Attributes and counts of ``node`` against ``spec`` (schemas.SCHEMAS)."""
    for attr in node.attribute:
        want = spec["attributes"].get(attr.name)
        if want is None:
            raise ModelLoadError(f"{label} has attribute {attr.name!r}, which ONNX Runtime's "
                                 f"{node.op_type} does not define (takes: "
                                 f"{', '.join(spec['attributes']) or 'none'})")
        got = onnx.AttributeProto.AttributeType.Name(attr.type) \
            if attr.type in onnx.AttributeProto.AttributeType.values() else str(attr.type)
        if got != want:
            raise ModelLoadError(f"{label}: attribute {attr.name!r} is {got}, where "
                                 f"{node.op_type} takes {want}")
    for what, names, formals in (("inputs", node.input, spec["inputs"]),
                                 ("outputs", node.output, spec["outputs"])):
        variadic = formals and formals[-1][2] == "Variadic"
        if len(names) > len(formals) and not variadic:
            raise ModelLoadError(f"{label} has {len(names)} {what}, where {node.op_type} takes "
                                 f"at most {len(formals)}")
        for i, (name, formal) in enumerate(zip(names, formals)):
            if not name and formal[2] == "Single":
                raise ModelLoadError(f"{label} leaves {what[:-1]} {i} ({formal[0]!r}) empty, "
                                     f"which {node.op_type} requires")
        required = sum(f[2] == "Single" for f in formals)
        if len(names) < required:
            raise ModelLoadError(f"{label} has {len(names)} {what}, where {node.op_type} takes "
                                 f"at least {required}")


def output_types(nodes, types, label):
    """{output name: elem type} of the contrib ``nodes`` whose inputs' types ``types`` (name ->
    elem type) knows, each input's type checked against its constraint first."""
    found, types = {}, dict(types)
    for node in nodes:
        spec = schema(node)
        if spec is None:
            continue
        bound = {}
        for i, (name, formal) in enumerate(zip(node.input, _formals(spec["inputs"],
                                                                    len(node.input)))):
            elem = types.get(name) if name else None
            if elem is None:
                continue
            param = formal[1]
            allowed = spec["types"].get(param, [param])
            if f"tensor({type_name(elem)})" not in allowed:
                raise ModelLoadError(f"{label(node)}: input {i} ({formal[0]!r}) {name!r} is "
                                     f"{type_name(elem)}, where {node.op_type} takes "
                                     f"{', '.join(a[7:-1] for a in allowed)}")
            if formal[2] == "Variadic":  # QLinearConcat's mix uint8 values and float scales
                continue
            if bound.setdefault(param, elem) != elem:
                raise ModelLoadError(f"{label(node)}: input {i} ({formal[0]!r}) {name!r} is "
                                     f"{type_name(elem)}, where {node.op_type}'s other {param} "
                                     f"inputs are {type_name(bound[param])}")
        for name, formal in zip(node.output, _formals(spec["outputs"], len(node.output))):
            allowed = spec["types"].get(formal[1], [formal[1]])
            elem = bound.get(formal[1]) or (_code(allowed[0]) if len(allowed) == 1 else None)
            if name and elem is not None:
                found[name] = types[name] = elem
    return found


def stand_in(graph):
    """Each contrib node of ``graph`` (a weightless copy) replaced, for onnx's inference, by a
    Reshape of the input its output takes its type from to a shape no one knows (an untyped
    graph input): the nodes after it get their types, no shape is claimed; an output of a fixed
    type is a Cast of it."""
    nodes, shape = [], "__contrib_shape__"
    for node in graph.node:
        spec = schema(node)
        if spec is None:
            nodes.append(node)
            continue
        for k, (name, formal) in enumerate(zip(node.output, _formals(spec["outputs"],
                                                                     len(node.output)))):
            source = _source(node, spec, formal[1])
            allowed = spec["types"].get(formal[1], [formal[1]])
            if not name:
                continue
            if source is None and len(allowed) == 1:
                source = next((i for i in node.input if i), None)
            if source is None:
                continue
            step = onnx.helper.make_node("Reshape", [source, shape], [f"{name}__shaped"])
            cast = onnx.helper.make_node("Cast", [step.output[0]], [name], to=_code(allowed[0])) \
                if len(allowed) == 1 else onnx.helper.make_node("Identity", [step.output[0]],
                                                               [name])
            nodes += [step, cast]
    if any(schema(n) is not None for n in graph.node):
        graph.input.append(onnx.helper.make_tensor_value_info(shape, onnx.TensorProto.INT64,
                                                              None))
    del graph.node[:]
    graph.node.extend(nodes)


def _source(node, spec, param):
    """The first present input of ``node`` whose type parameter is ``param``."""
    for name, formal in zip(node.input, _formals(spec["inputs"], len(node.input))):
        if name and formal[1] == param:
            return name
    return None


def _formals(formals, n):
    if formals and formals[-1][2] == "Variadic" and n > len(formals):
        return formals + [formals[-1]] * (n - len(formals))
    return formals


def type_name(elem):
    name = onnx.TensorProto.DataType.Name(elem) if elem in \
        onnx.TensorProto.DataType.values() else f"type {elem}"
    return name.lower()


def _code(text):
    return onnx.TensorProto.DataType.Value(text[7:-1].upper())
