"""Structural mutations of a ModelProto through the onnx API, and byte mutations of its file.
Each mutates in place (or returns new bytes) and returns a one-line detail for the report."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from .cases import KINDS

# Values an attribute or a dim may become: edges, negatives, sizes past any machine.
EDGE_INTS = [0, 1, -1, 2, 3, -2, 7, 64, 2**31 - 1, -2**31, 2**40, 2**62, -2**63]
EDGE_FLOATS = [0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), -float("inf"), 0.5]
ELEM_TYPES = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT64,
              TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL,
              TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.INT4, 0, 99]


def all_nodes(graph):
    """Every node of ``graph`` and of its subgraphs (a merged decoder's If branches)."""
    found = []
    for node in graph.node:
        found.append(node)
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                found.extend(all_nodes(sub))
    return found


def _value_names(graph):
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    return names + [o for n in graph.node for o in n.output if o]


def _node(rng, model, need=None):
    nodes = [n for n in all_nodes(model.graph) if need is None or need(n)]
    return rng.choice(nodes) if nodes else None


def drop_node_input(rng, model):
    node = _node(rng, model, lambda n: len(n.input) > 0)
    i = rng.randrange(len(node.input))
    name = node.input[i]
    if rng.random() < 0.5:
        node.input[i] = ""  # an omitted optional input
    else:
        del node.input[i]
    return f"node {node.name!r} ({node.op_type}) input {i} {name!r} dropped"


def duplicate_node_input(rng, model):
    node = _node(rng, model, lambda n: len(n.input) > 0)
    i = rng.randrange(len(node.input))
    node.input.insert(rng.randrange(len(node.input) + 1), node.input[i])
    return f"node {node.name!r} ({node.op_type}) input {node.input[i]!r} duplicated"


def rename_node_input(rng, model):
    node = _node(rng, model, lambda n: len(n.input) > 0)
    i = rng.randrange(len(node.input))
    old = node.input[i]
    names = _value_names(model.graph)
    node.input[i] = rng.choice(names) if rng.random() < 0.5 else old + "_undefined"
    return f"node {node.name!r} ({node.op_type}) input {i} {old!r} -> {node.input[i]!r}"


def drop_node_output(rng, model):
    node = _node(rng, model, lambda n: len(n.output) > 0)
    i = rng.randrange(len(node.output))
    name = node.output[i]
    del node.output[i]
    return f"node {node.name!r} ({node.op_type}) output {name!r} dropped"


def duplicate_node_output(rng, model):
    node = _node(rng, model, lambda n: len(n.output) > 0)
    other = rng.choice(_value_names(model.graph))
    node.output.append(other) if rng.random() < 0.5 else node.output.insert(0, other)
    return f"node {node.name!r} ({node.op_type}) also writes {other!r}"


def rename_node_output(rng, model):
    node = _node(rng, model, lambda n: len(n.output) > 0)
    i = rng.randrange(len(node.output))
    old = node.output[i]
    node.output[i] = rng.choice(_value_names(model.graph)) if rng.random() < 0.5 else old + "_x"
    return f"node {node.name!r} ({node.op_type}) output {old!r} -> {node.output[i]!r}"


def attribute_value(rng, model):
    node = _node(rng, model, lambda n: any(a.type != onnx.AttributeProto.GRAPH
                                          for a in n.attribute))
    if node is None:
        return unknown_op(rng, model)
    attr = rng.choice([a for a in node.attribute if a.type != onnx.AttributeProto.GRAPH])
    A = onnx.AttributeProto
    if attr.type == A.INT:
        attr.i = rng.choice(EDGE_INTS)
        new = attr.i
    elif attr.type == A.FLOAT:
        attr.f = rng.choice(EDGE_FLOATS)
        new = attr.f
    elif attr.type == A.INTS and len(attr.ints):
        j = rng.randrange(len(attr.ints))
        attr.ints[j] = rng.choice(EDGE_INTS)
        if rng.random() < 0.3:
            attr.ints.append(rng.choice(EDGE_INTS))
        new = list(attr.ints)
    elif attr.type == A.STRING:
        attr.s = rng.choice([b"", b"unknown_mode", b"\xff\xfe", attr.s * 3])
        new = attr.s
    elif attr.type == A.TENSOR:
        attr.t.dims.append(rng.choice([0, 3, 2**40]))
        new = list(attr.t.dims)
    else:
        attr.ClearField("floats" if attr.type == A.FLOATS else "ints")
        new = "emptied"
    return f"node {node.name!r} ({node.op_type}) attribute {attr.name} = {new!r}"


def attribute_type(rng, model):
    node = _node(rng, model, lambda n: len(n.attribute) > 0)
    if node is None:
        return unknown_op(rng, model)
    i = rng.randrange(len(node.attribute))
    name = node.attribute[i].name
    value = rng.choice([1.5, 7, "seven", [1, 2], [0.5], b"\x00"])
    node.attribute[i].CopyFrom(helper.make_attribute(name, value))
    if rng.random() < 0.3:
        node.attribute.append(helper.make_attribute("not_an_attribute", 1))
    return f"node {node.name!r} ({node.op_type}) attribute {name} -> {value!r}"


def _initializer(rng, model):
    inits = list(model.graph.initializer)
    return rng.choice(inits) if inits else None


def initializer_dims(rng, model):
    t = _initializer(rng, model)
    choice = rng.randrange(4)
    if choice == 0 and len(t.dims):
        t.dims[rng.randrange(len(t.dims))] = rng.choice([0, -1, 1, 3, 2**40, -2**40])
    elif choice == 1:
        t.dims.append(rng.choice([1, 2, 0]))
    elif choice == 2 and len(t.dims):
        del t.dims[-1]
    else:
        t.dims[:] = list(reversed(t.dims))
    return f"initializer {t.name!r} dims -> {list(t.dims)}"


def initializer_dtype(rng, model):
    t = _initializer(rng, model)
    old = t.data_type
    t.data_type = rng.choice(ELEM_TYPES)
    return f"initializer {t.name!r} data_type {old} -> {t.data_type}"


def initializer_data(rng, model):
    t = _initializer(rng, model)
    arr = onnx.numpy_helper.to_array(t)
    choice = rng.randrange(4)
    if choice == 0:  # the bytes cut or grown: the size no longer matches the dims
        raw = onnx.numpy_helper.from_array(arr).raw_data
        t.raw_data = raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.5 else raw + b"\x01" * 8
        del t.float_data[:], t.int64_data[:], t.int32_data[:]
        return f"initializer {t.name!r} raw_data {len(raw)} -> {len(t.raw_data)} bytes"
    flat = arr.reshape(-1).copy()
    if flat.size:
        pick = rng.randrange(flat.size)
        if choice == 1 and flat.dtype.kind == "f":
            flat[pick] = rng.choice(EDGE_FLOATS)
        elif flat.dtype.kind in "iu":
            info = np.iinfo(flat.dtype)
            value = rng.choice([info.min, info.max, -1, 0, 10**6])
            flat[pick] = min(max(value, int(info.min)), int(info.max))
        else:
            flat[pick] = flat[pick] * rng.choice([-1.0, 1e6, 0.0])
    t.CopyFrom(onnx.numpy_helper.from_array(flat.reshape(arr.shape), t.name))
    return f"initializer {t.name!r} element changed (choice {choice})"


def _value_info(rng, values):
    return rng.choice(list(values))


def _retype(rng, values, what):
    v = _value_info(rng, values)
    old = v.type.tensor_type.elem_type
    v.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    return f"{what} {v.name!r} elem_type {old} -> {v.type.tensor_type.elem_type}"


def _reshape(rng, values, what):
    v = _value_info(rng, values)
    shape = v.type.tensor_type.shape
    choice = rng.randrange(4)
    if choice == 0 and len(shape.dim):
        d = shape.dim[rng.randrange(len(shape.dim))]
        d.dim_value = rng.choice([0, 1, 3, 7, 2**40])
    elif choice == 1:
        shape.dim.add().dim_value = rng.choice([1, 2])
    elif choice == 2 and len(shape.dim):
        del shape.dim[-1]
    else:
        v.type.tensor_type.ClearField("shape")
    dims = [d.dim_value or d.dim_param for d in shape.dim]
    return f"{what} {v.name!r} shape -> {dims if v.type.tensor_type.HasField('shape') else None}"


def input_type(rng, model):
    return _retype(rng, model.graph.input, "graph input")


def input_shape(rng, model):
    return _reshape(rng, model.graph.input, "graph input")


def output_type(rng, model):
    return _retype(rng, model.graph.output, "graph output")


def output_shape(rng, model):
    return _reshape(rng, model.graph.output, "graph output")


def opset_version(rng, model):
    entry = rng.choice(list(model.opset_import))
    old = entry.version
    entry.version = rng.choice([0, 1, 6, 7, 11, 13, 99, 10**6, -1, old + 1])
    return f"opset {entry.domain or 'ai.onnx'} {old} -> {entry.version}"


def remove_opset_import(rng, model):
    if rng.random() < 0.5 or len(model.opset_import) < 2:
        del model.opset_import[:]
        return "opset_import removed"
    i = rng.randrange(len(model.opset_import))
    domain = model.opset_import[i].domain
    del model.opset_import[i]
    return f"opset_import of {domain or 'ai.onnx'} removed"


def unknown_op(rng, model):
    g = model.graph
    src = rng.choice(_value_names(g))
    domain = rng.choice(["", "com.microsoft", "org.fuzz"])
    node = helper.make_node("FuzzOp", [src], [src + "_fuzz"], domain=domain, name="fuzz_node")
    g.node.insert(rng.randrange(len(g.node) + 1), node)
    if rng.random() < 0.5:
        g.output.append(helper.make_tensor_value_info(src + "_fuzz", TensorProto.FLOAT, None))
    return f"node FuzzOp ({domain or 'ai.onnx'}) reading {src!r} inserted"


def cut_graph(rng, model):
    g = model.graph
    keep = rng.randrange(len(g.node))
    del g.node[keep:]
    return f"nodes from {keep} on removed"


def drop_node(rng, model):
    g = model.graph
    i = rng.randrange(len(g.node))
    node = g.node[i]
    desc = f"node {node.name!r} ({node.op_type}) removed"
    del g.node[i]
    return desc


def output_to_intermediate(rng, model):
    """A valid cut: a graph output moved to an intermediate value (both runtimes agree)."""
    g = model.graph
    node = rng.choice([n for n in g.node if n.output and n.op_type not in ("Constant",)])
    name = node.output[0]
    j = rng.randrange(len(g.output))
    g.output[j].CopyFrom(onnx.ValueInfoProto(name=name))
    return f"graph output {j} -> {name!r} ({node.op_type})"


MUTATIONS = {kind: globals()[kind.replace("-", "_")] for kind in KINDS["structural"]}


def mutate_bytes(rng, kind, data: bytes):
    """(new bytes, detail) for a byte-level ``kind`` of cases.KINDS['bytes']."""
    buf = bytearray(data)
    if kind == "flip-bytes":
        n = rng.choice([1, 1, 2, 4, 16])
        where = sorted(rng.randrange(len(buf)) for _ in range(n))
        for i in where:
            buf[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
        return bytes(buf), f"{n} byte(s) flipped at {where[:4]}"
    if kind == "truncate":
        cut = rng.randrange(len(buf))
        return bytes(buf[:cut]), f"cut at {cut} of {len(buf)}"
    if kind == "splice":
        a, b = sorted(rng.randrange(len(buf)) for _ in range(2))
        at = rng.randrange(len(buf))
        return bytes(buf[:at] + buf[a:b] + buf[at:]), f"bytes {a}:{b} copied to {at}"
    at, n = rng.randrange(len(buf)), rng.choice([4, 64, 1024])
    buf[at:at + n] = b"\x00" * len(buf[at:at + n])
    return bytes(buf), f"{n} zero bytes at {at}"
