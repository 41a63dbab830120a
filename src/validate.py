"""The checks a file passes before it is parsed, as onnx.checker and ONNX Runtime make them: a
malformed graph is refused at load with the reason, never run into a KeyError, a silent dtype
promotion or an answer for an opset nobody defined.

Structural checks (cheap, on the proto): opset imports, single assignment of every name, every
read name defined, every graph output produced, no negative dimension. Types: onnx's own type
inference, run on a copy without the weights (their types and shapes are all it reads), and only
its type conflicts refused: ONNX Runtime refuses those too, while it tolerates declared shapes that
disagree with inference (onnxruntime-genai's builder declares rank-0 shapes on rank-1 Constants).
"""

import re

import onnx
import onnx.helper
import onnx.shape_inference

from .errors import ModelLoadError

DEFAULT_DOMAINS = ("", "ai.onnx")
# how onnx's inference words a type conflict (its other errors are shapes, or ops it cannot infer)
TYPE_CONFLICTS = ("inconsistent type", "elem type differs")
# the newest opset of each standard domain that the installed onnx defines
NEWEST = {"": onnx.defs.onnx_opset_version(),
          "ai.onnx.ml": max(row[3] for row in onnx.helper.VERSION_TABLE if row[3])}


def validate(proto: onnx.ModelProto):
    """Raise ModelLoadError with the first reason ``proto`` is not a valid ONNX model."""
    _check_opsets(proto)
    _check_graph(proto.graph, outer=frozenset())
    _check_types(proto)


def _check_opsets(proto):
    if not proto.opset_import:
        raise ModelLoadError("The model has no opset_import: its file does not say which ONNX "
                             "operator set it uses (re-export it)")
    for entry in proto.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        newest = NEWEST.get(domain)
        if entry.version < 1 or (newest is not None and entry.version > newest):
            known = f"1 to {newest}" if newest else "1 or more"
            raise ModelLoadError(f"The model imports opset {entry.version} of domain "
                                 f"{entry.domain or 'ai.onnx'!r}, which is not defined (onnx "
                                 f"{onnx.__version__} knows {known})")


def _check_graph(graph, outer):
    """Single assignment within ``graph``; every name it reads defined here or in ``outer``
    (the enclosing graphs' names, for the bodies of If, Loop and Scan)."""
    where = f"graph {graph.name!r}" if graph.name else "the graph"
    for tensor in graph.initializer:
        if any(d < 0 for d in tensor.dims):
            raise ModelLoadError(f"Initializer {tensor.name!r} of {where} has a negative "
                                 f"dimension: {list(tensor.dims)}")
    # an initializer may repeat a graph input's name (the input's default value): allowed
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
        {s.values.name for s in graph.sparse_initializer}
    for node in graph.node:  # a domain opset_import lacks is version 1, as ONNX Runtime takes it
        for name in node.output:
            if name and name in defined:
                raise ModelLoadError(f"{_label(node)} writes {name!r}, which {where} already "
                                     "defines (a graph input, an initializer or another node's "
                                     "output): each name is assigned once")
            defined.add(name)
    known = defined | outer
    for node in graph.node:
        for name in node.input:
            if name and name not in known:
                raise ModelLoadError(f"{_label(node)} reads {name!r}, which nothing in {where} "
                                     "defines")
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _check_arity(node, attr.name, sub)
                _check_graph(sub, known)
    for out in graph.output:
        if out.name not in known:
            raise ModelLoadError(f"Output {out.name!r} of {where} is produced by no node, input "
                                 "or initializer")


def _check_arity(node, name, body):
    """A Loop body takes (iteration, condition, carried...) and gives (condition, carried...,
    scans...); an If branch gives the node's outputs."""
    if node.op_type == "Loop" and name == "body":
        inputs, outputs = len(node.input), len(node.output) + 1
    elif node.op_type == "If":
        inputs, outputs = 0, len(node.output)
    else:
        return
    if len(body.input) != inputs or len(body.output) != outputs:
        raise ModelLoadError(f"{_label(node)}: its {name} takes {len(body.input)} inputs and "
                             f"gives {len(body.output)} outputs, where the node needs "
                             f"{inputs} and {outputs}")


def _label(node):
    return f"Node {node.name or node.op_type!r} ({node.op_type})"


def _check_types(proto):
    try:
        onnx.shape_inference.infer_shapes(_weightless(proto), check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        conflicts = [line for line in _errors(str(e)) if any(
            what in line for what in TYPE_CONFLICTS)]
        if conflicts:
            raise ModelLoadError(f"The graph's types do not agree: {'; '.join(conflicts[:3])}") \
                from None
    except Exception:  # noqa: BLE001 - inference's own limits (an op it does not know) are not
        pass           # the file's fault; the runner checks what it runs


def _errors(message):
    """The separate inference errors of one message, their bracketed tags dropped and element
    types named ("(1) vs (7)" -> "(float32) vs (int64)")."""
    message = message.replace("[ShapeInferenceError]", "").replace("[TypeInferenceError]", "")
    message = message.replace("Inference error(s):", "")
    message = re.sub(r"\((\d+)\)", lambda m: f"({_type_name(int(m.group(1)))})", message)
    parts = [part.strip() for part in message.split("(op_type:") if part.strip()]
    return [part.replace("):", ":", 1) for part in parts]


def _type_name(code):
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(code).name
    except Exception:  # noqa: BLE001 - not a tensor type code: keep the number
        return str(code)


def _weightless(proto):
    """``proto`` with each main-graph initializer made a typed graph input: the copy inference
    reads is small whatever the weights weigh."""
    graph = onnx.GraphProto(name=proto.graph.name)
    graph.node.extend(proto.graph.node)
    graph.output.extend(proto.graph.output)
    graph.value_info.extend(proto.graph.value_info)
    graph.input.extend(proto.graph.input)
    given = {v.name for v in proto.graph.input}
    for tensor in proto.graph.initializer:
        if tensor.name not in given:
            graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    for sparse in proto.graph.sparse_initializer:
        if sparse.values.name not in given:
            graph.input.append(onnx.helper.make_tensor_value_info(
                sparse.values.name, sparse.values.data_type, list(sparse.dims)))
    model = onnx.ModelProto(ir_version=proto.ir_version, graph=graph)
    model.opset_import.extend(proto.opset_import)
    return model
