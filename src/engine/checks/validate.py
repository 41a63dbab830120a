"""The checks a file passes before it is parsed, as onnx.checker and ONNX Runtime make them: a
malformed graph is refused at load with the reason, never run into a KeyError, a silent dtype
promotion or an answer for an opset nobody defined.

Structural checks (cheap, on the proto): opset imports, single assignment of every name, every
read name defined, every graph output produced, no negative dimension. Types and shapes: onnx's own
inference, run as ONNX Runtime runs it at load: on a copy without the weights (their types and
shapes are all it reads), its nodes in topological order and its value_info dropped (declared
shapes of intermediate values are hints ONNX Runtime overrides: onnxruntime-genai's builder
declares rank-0 shapes on rank-1 Constants), with data propagation (ONNX Runtime propagates the
shapes a graph computes, Shape -> Gather -> Concat -> Reshape, and checks the MatMul after them;
each subgraph's value names are made unique first, as onnx keeps one table for all graphs).
Every error of an op's inference (a type its schema refuses, an axis past the rank, MatMul
dimensions that do not fit, in If branches too) is refused, as ONNX Runtime refuses it; a graph
output's declared shape that inference contradicts is not.
"""

import heapq
import math
import re

import onnx
import onnx.helper
import onnx.shape_inference

from . import contrib as contrib_check, declared_types
from ...errors import ModelLoadError

DEFAULT_DOMAINS = ("", "ai.onnx")
# onnx's inference errors that ONNX Runtime does not make: a declared shape it contradicts
# (ONNX Runtime takes the inferred one), a node of a domain opset_import lacks (version 1 there),
# an input it could not type (a cycle, which the graph parser names; a contrib output no stand-in
# types), and onnx's own expansion of a function op (MeanVarianceNormalization's body: its
# Constant nodes fail onnx's check, the op itself is valid and ONNX Runtime runs it)
LENIENT = ("existing shape differ", "No opset import for domain",
           "expected to have type but instead is null",
           "One and only one of the attributes 'value', 'value_*' or 'sparse_value'")
# the newest opset of each standard domain that the installed onnx defines
NEWEST = {"": onnx.defs.onnx_opset_version(),
          "ai.onnx.ml": max(row[3] for row in onnx.helper.VERSION_TABLE if row[3])}
# optional inputs that ONNX Runtime's kernel refuses when named '' (the spec's way to omit one)
# rather than left out: Squeeze's axes (fuzz 20261203:4733, gpt2's branch; checked against
# onnxruntime 1.32 for the ops with optional inputs the Hub's exports use: only this one)
EMPTY_REFUSED = {("Squeeze", 1): "'Axes input is null'"}
# ONNX Runtime's contrib domain has one version: it refuses a model importing another
CONTRIB_OPSETS = {"com.microsoft": 1}


def validate(proto: onnx.ModelProto):
    """Raise ModelLoadError with the first reason ``proto`` is not a valid ONNX model."""
    _check_opsets(proto)
    _check_strings(proto.graph)
    declared_types.check(proto.graph)
    _check_graph(proto.graph, outer=frozenset(), sources=frozenset())
    opsets = {("" if e.domain in DEFAULT_DOMAINS else e.domain): e.version
              for e in proto.opset_import}
    _check_nodes(proto.graph, opsets)
    _check_types(proto)


def _check_nodes(graph, opsets):
    """Each node against its op's schema (onnx's, for the standard domains; CONTRIB_ATTRIBUTES
    for the com.microsoft ops we run): input and output counts, attribute types and values, as
    onnx.checker and ONNX Runtime refuse them; in subgraphs too."""
    for node in graph.node:
        schema = _schema(node, opsets)
        if schema is not None:
            _check_counts(node, schema)
            for attr in node.attribute:
                want = schema.attributes.get(attr.name)
                if want is None:  # onnx.checker and ONNX Runtime refuse it too
                    raise ModelLoadError(f"{_label(node)} has attribute {attr.name!r}, which "
                                         f"{node.op_type} of opset {schema.since_version} does "
                                         "not define (an export for another opset?)")
                if not attr.ref_attr_name and attr.type != want.type:
                    raise ModelLoadError(
                        f"{_label(node)}: attribute {attr.name!r} is {_attr_type(attr.type)}, "
                        f"where {node.op_type} takes {_attr_type(want.type)} (re-export the "
                        "model)")
        spec = contrib_check.schema(node)
        if spec is not None:
            contrib_check.check_node(node, spec, _label(node))
        rules = CONTRIB_ATTRIBUTES.get((node.domain, node.op_type), {})
        for attr in node.attribute:
            if attr.name in rules:
                _check_value(node, attr, *rules[attr.name])
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _check_nodes(sub, opsets)


def _schema(node, opsets):
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    if domain not in NEWEST:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:  # an op onnx does not define: the registry reports it
        return None


def _check_counts(node, schema):
    inputs = len(node.input)
    while inputs and not node.input[inputs - 1]:
        inputs -= 1  # trailing optional inputs left out
    for i, (name, formal) in enumerate(zip(node.input, schema.inputs)):
        if not name and formal.option == onnx.defs.OpSchema.FormalParameterOption.Single:
            raise ModelLoadError(f"{_label(node)} leaves input {i} ({formal.name!r}) empty, "
                                 f"which {node.op_type} requires")
        if not name and (node.op_type, i) in EMPTY_REFUSED:
            raise ModelLoadError(f"{_label(node)} names its optional input {i} "
                                 f"({formal.name!r}) as '', which ONNX Runtime refuses "
                                 f"({EMPTY_REFUSED[node.op_type, i]}): leave the input out")
    for what, n, lo, hi in (("inputs", inputs, schema.min_input, schema.max_input),
                            ("outputs", len(node.output), schema.min_output,
                             schema.max_output)):
        if not lo <= n <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi < 2**30 else f"{lo} or more"
            raise ModelLoadError(f"{_label(node)} has {n} {what}, where {node.op_type} (opset "
                                 f"{schema.since_version}) takes {want}")


def _attr_type(code):
    return onnx.AttributeProto.AttributeType.Name(code) if code in \
        onnx.AttributeProto.AttributeType.values() else f"type {code}"


# Attributes of the com.microsoft ops whose values ONNX Runtime reads otherwise than we would
# (do_rotary = 7 as off, a window of int64 min as 0) or refuses: (type, check, what it takes).
_FLAG = (onnx.AttributeProto.INT, lambda v: v in (0, 1), "0 or 1")
_EPSILON = (onnx.AttributeProto.FLOAT, lambda v: math.isfinite(v) and v >= 0,
            "a finite value >= 0")
_HEADS = (onnx.AttributeProto.INT, lambda v: 0 < v < 2**31, "a positive count")
CONTRIB_ATTRIBUTES = {
    ("com.microsoft", "GroupQueryAttention"): {
        "num_heads": _HEADS, "kv_num_heads": _HEADS,
        "do_rotary": _FLAG, "rotary_interleaved": _FLAG, "smooth_softmax": _FLAG,
        "local_window_size": (onnx.AttributeProto.INT, lambda v: v == -1 or 0 < v < 2**31,
                              "-1 (no window) or a positive length"),
        "scale": _EPSILON, "softcap": _EPSILON},
    ("com.microsoft", "SkipLayerNormalization"): {"epsilon": _EPSILON},
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): {"epsilon": _EPSILON},
    # ONNX Runtime's own op in the default domain: its schema (contrib_check) gives the
    # attribute types (fuzz 20261202:6140: stash_type given as INTS)
    ("", "SimplifiedLayerNormalization"): {"epsilon": _EPSILON},
    # a type code that names no type (0 is UNDEFINED): onnx's inference refuses it, but not in
    # an If branch whose inference gives up (fuzz 20261202:3508, gpt2's merged decoder)
    ("", "Cast"): {"to": (onnx.AttributeProto.INT, lambda v: v != 0 and v in
                          onnx.TensorProto.DataType.values(), "a TensorProto data type")},
}


def _check_value(node, attr, kind, ok, takes):
    value = onnx.helper.get_attribute_value(attr) if attr.type == kind else None
    if value is None or not ok(value):
        shown = value if value is not None else f"of {_attr_type(attr.type)}"
        raise ModelLoadError(f"{_label(node)}: attribute {attr.name!r} is {shown}, where "
                             f"{node.op_type} takes {takes}")
    if node.op_type == "GroupQueryAttention" and attr.name == "kv_num_heads":
        heads = next((a.i for a in node.attribute if a.name == "num_heads"), None)
        if heads is not None and heads % value:
            raise ModelLoadError(f"{_label(node)}: num_heads {heads} is not a multiple of "
                                 f"kv_num_heads {value}")


def _check_opsets(proto):
    if not proto.opset_import:
        raise ModelLoadError("The model has no opset_import: its file does not say which ONNX "
                             "operator set it uses (re-export it)")
    for entry in proto.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        newest = NEWEST.get(domain, CONTRIB_OPSETS.get(domain))
        if entry.version < 1 or (newest is not None and entry.version > newest):
            known = f"1 to {newest}" if newest else "1 or more"
            who = "ONNX Runtime" if domain in CONTRIB_OPSETS else f"onnx {onnx.__version__}"
            raise ModelLoadError(f"The model imports opset {entry.version} of domain "
                                 f"{entry.domain or 'ai.onnx'!r}, which is not defined ({who} "
                                 f"knows {known})")


def _check_strings(graph):
    """Names, op types and domains are text: protobuf hands a field of invalid UTF-8 (a flipped
    byte) back as bytes, which no lookup by name would find. (ONNX Runtime takes such names as
    bytes; the graph's name and the model's metadata, which nothing looks up, are let be.)"""
    for node in graph.node:
        for field, value in (("op_type", node.op_type), ("domain", node.domain),
                             ("name", node.name), *(("input", v) for v in node.input),
                             *(("output", v) for v in node.output)):
            if not isinstance(value, str):
                raise ModelLoadError(f"A node of graph {graph.name!r:.60}: its {field} is not "
                                     f"valid UTF-8 ({value[:60]!r}): the file is corrupt")
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _check_strings(sub)


def _check_graph(graph, outer, sources):
    """Single assignment within ``graph``; every name it reads defined here or in ``outer``
    (the enclosing graphs' names, for the bodies of If, Loop and Scan); none it writes an
    enclosing graph's input or initializer (``sources``; a merged decoder's branches do write
    their If's own outputs, which ONNX Runtime takes)."""
    where = f"graph {graph.name!r}" if graph.name else "the graph"
    for tensor in graph.initializer:
        if any(d < 0 for d in tensor.dims):
            raise ModelLoadError(f"Initializer {tensor.name!r} of {where} has a negative "
                                 f"dimension: {list(tensor.dims)}")
    # an initializer may repeat a graph input's name (the input's default value): allowed
    given = {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
        {s.values.name for s in graph.sparse_initializer}
    _check_node_names(graph, where)
    defined = set(given)
    for node in graph.node:  # a domain opset_import lacks is version 1, as ONNX Runtime takes it
        for name in node.output:
            if name and (name in defined or name in sources):
                raise ModelLoadError(f"{_label(node)} writes {name!r}, which {where} or a graph "
                                     "around it already defines (a graph input, an initializer "
                                     "or another node's output): each name is assigned once")
            defined.add(name)
    if outer:  # a subgraph: ONNX Runtime does not sort it, onnx.checker's order holds
        _check_file_order(graph, given, defined, where)
    known = defined | outer
    for node in graph.node:
        for name in node.input:
            if name and name not in known:
                raise ModelLoadError(f"{_label(node)} reads {name!r}, which nothing in {where} "
                                     "defines")
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _check_arity(node, attr.name, sub)
                _check_graph(sub, known, sources | given)
    for out in graph.output:
        if out.name not in known:
            raise ModelLoadError(f"Output {out.name!r} of {where} is produced by no node, input "
                                 "or initializer")


def _check_node_names(graph, where):
    """No two nodes of one graph share a name, as ONNX Runtime's VerifyNoDuplicateName holds
    after it made Constant nodes initializers (the merged decoders' 'with_past' branches repeat
    'Constant_720', which it takes)."""
    seen = set()
    for node in graph.node:
        if not node.name or (node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS):
            continue
        if node.name in seen:
            raise ModelLoadError(f"Two nodes of {where} are named {node.name!r}: a node's name "
                                 "is its own")
        seen.add(node.name)


def _check_file_order(graph, given, defined, where):
    """Each node of a subgraph reads what the subgraph makes only after the node that makes it
    (fuzz 20261202:7813: a branch node reading its own If's output 'present.0.key', which a
    later node of the branch makes; ONNX Runtime: "Nodes in a graph must be topologically
    sorted"). A name the subgraph does not make is the enclosing graph's."""
    made = set(given)
    for node in graph.node:
        for name in node.input:
            if name and name in defined and name not in made:
                raise ModelLoadError(f"{_label(node)} reads {name!r} before the node of {where} "
                                     "that makes it: the nodes of a subgraph must be in "
                                     "topological order (ONNX Runtime does not sort them)")
        made.update(n for n in node.output if n)


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
    """onnx's inference over the weightless copy, with each contrib node standing in as a
    Reshape of the input its output takes its type from (to a shape inference cannot know):
    the standard nodes after it get typed, shapes unclaimed; the contrib nodes' input types are
    then checked against ONNX Runtime's schemas (engine/checks/contrib.py). The graph outputs go in
    untyped and their declared types are compared with what inference gave them (onnx merges a
    declared output type unchecked where a producer's input comes typed but shapeless)."""
    model = _weightless(proto)
    # the inputs typed before inference (weights, graph inputs) checked first: a wrong one is
    # named, not the node that inference finds in conflict after it (fuzz 20261203:7891)
    contrib_check.output_types(proto.graph.node, _types(model.graph), _label)
    contrib_check.stand_in(model.graph)
    _stand_in_mvn(model.graph)
    for out in model.graph.output:
        out.ClearField("type")
    inferred = _infer(model)
    if inferred is None:
        return
    types = _types(inferred.graph)
    contrib_check.output_types(proto.graph.node, types, _label)
    given = {o.name: o.type.tensor_type.elem_type for o in inferred.graph.output}
    for out in proto.graph.output:
        declared, got = out.type.tensor_type.elem_type, given.get(out.name) or types.get(out.name)
        if declared and got and declared != got:
            raise ModelLoadError(f"Output {out.name!r} is declared {_type_name(declared)}, but "
                                 f"its node gives {_type_name(got)} (re-export the model, or "
                                 "fix the output's declared type)")


def _stand_in_mvn(graph):
    """Each MeanVarianceNormalization of ``graph`` (a weightless copy) made an Identity, its
    type and shape relation: onnx's function body of it adds a float Epsilon to the input's
    type, so inference refuses every half-precision one, where ONNX Runtime runs its float
    kernel between casts (opsets 17 and 19-22: equal to the f32 result rounded once)."""
    for node in graph.node:
        if node.op_type == "MeanVarianceNormalization" and node.domain in ("", "ai.onnx"):
            node.op_type = "Identity"
            del node.attribute[:]


def _infer(model):
    """``model`` with onnx's inferred value_info; ModelLoadError on the errors ONNX Runtime
    makes too; None where inference itself gives up (an op it does not know is not the file's
    fault; the runner checks what it runs)."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                 data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        conflicts = [line for line in _errors(str(e)) if not any(
            what in line for what in LENIENT)]
        if conflicts:
            raise ModelLoadError("The graph's types or shapes do not agree: "
                                 f"{'; '.join(conflicts[:3])}") from None
        try:  # only lenient errors: the same inference, its errors not raised
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                     data_prop=True)
        except Exception:  # noqa: BLE001
            return None
    except Exception:  # noqa: BLE001
        return None


def _types(graph):
    """Element types by name of the graph's inputs and inferred values (not its declared
    outputs: those are what is checked)."""
    return {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info]
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def _errors(message):
    """The separate inference errors of one message, each as "Node 'name' (Op): error", their
    bracketed tags dropped and element types named ("type ... (1) vs (7)" -> "(float32) vs
    (int64)"; other numbers in parentheses, ranks and dims, kept)."""
    message = message.replace("[ShapeInferenceError]", "").replace("[TypeInferenceError]", "")
    message = message.replace("Inference error(s):", "")
    message = re.sub(r"~\d+\b", "", message)  # the names _unique_names gave, as the file has them
    lines = []
    for part in message.split("(op_type:"):
        node, found, error = part.partition("):")
        if not found:  # an error of no node (the text before the first one)
            node, error = "", part
        if "type" in error.lower():
            error = re.sub(r"\((\d+)\)", lambda m: f"({_type_name(int(m.group(1)))})", error)
        op, _, name = node.partition(", node name:")
        # a Loop's or If's own line only wraps its body's errors: they follow as lines of their own
        if error.strip():
            op, name = op.strip(), name.strip()
            lines.append(f"Node {name or op!r} ({op}): {error.strip()}" if found
                         else error.strip())
    return lines


def _type_name(code):
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(code).name
    except Exception:  # noqa: BLE001 - not a tensor type code: keep the number
        return str(code)


def _weightless(proto):
    """``proto`` with each main-graph initializer made a typed graph input: the copy inference
    reads is small whatever the weights weigh."""
    graph = onnx.GraphProto(name="weightless")  # the name may not be text (a flipped byte)
    graph.node.extend(_sorted(proto.graph))
    graph.output.extend(proto.graph.output)
    graph.input.extend(proto.graph.input)
    for sub in _subgraphs(graph):
        sub.ClearField("value_info")
    _unique_names(graph, {name for node in graph.node for name in node.output}
                  | {v.name for v in graph.input})
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


def _unique_names(graph, taken):
    """Rename in place each value a subgraph makes whose name another graph (the outer one, a
    sibling branch) already made, and its reads. Both branches of an optimum merged decoder's If
    make the same names, which is valid; but onnx's data propagation keeps one table of values
    for all graphs, and fails ("Data for input 0 already exists") or reads the other branch's."""
    for node in graph.node:
        for sub in _own_subgraphs(node):
            renamed = {}
            for inner in sub.node:
                for i, name in enumerate(inner.output):
                    if name in taken:
                        renamed[name] = inner.output[i] = _fresh(name, taken)
                    taken.add(inner.output[i])
            _rename_reads(sub, renamed)
            _unique_names(sub, taken)


def _fresh(name, taken):
    k = 1
    while f"{name}~{k}" in taken:
        k += 1
    return f"{name}~{k}"


def _rename_reads(graph, renamed):
    if not renamed:
        return
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        for sub in _own_subgraphs(node):
            _rename_reads(sub, renamed)
    for out in graph.output:
        out.name = renamed.get(out.name, out.name)


def _own_subgraphs(node):
    for attr in node.attribute:
        yield from [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs


def _subgraphs(graph):
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield sub
                yield from _subgraphs(sub)


def _sorted(graph):
    """``graph``'s nodes in an order where each reads only values made before it (ONNX Runtime
    sorts them; onnx's inference reads them in file order): file order where it allows, a
    node's subgraph reads counted as its own. A cycle keeps its file order."""
    nodes = list(graph.node)
    maker = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users = [[] for _ in nodes]
    waits = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for j in {maker[name] for name in _reads(node) if name in maker} - {i}:
            users[j].append(i)
            waits[i] += 1
    ready = [i for i, w in enumerate(waits) if not w]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in users[i]:
            waits[k] -= 1
            if not waits[k]:
                heapq.heappush(ready, k)
    if len(order) < len(nodes):
        return nodes
    return [nodes[i] for i in order]


def _reads(node):
    yield from node.input
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            for inner in sub.node:
                yield from _reads(inner)
