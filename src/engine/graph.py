"""A light, parsed view of an ONNX graph: nodes with Python attributes, subgraphs recursively."""

import dataclasses
import heapq

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from .. import dtypes
from ..errors import ModelLoadError


@dataclasses.dataclass
class ValueInfo:
    name: str
    dtype: object  # np.dtype, or "sequence"/"optional"/None when not a tensor
    shape: tuple | None  # ints for fixed dims, str for symbolic ones, None for unknown rank

    def __repr__(self):
        dims = "?" if self.shape is None else "[" + ", ".join(str(d) for d in self.shape) + "]"
        dt = dtypes.name(self.dtype) if isinstance(self.dtype, np.dtype) else self.dtype
        return f"{self.name}: {dt}{dims}"


@dataclasses.dataclass
class Node:
    name: str
    op_type: str
    domain: str
    inputs: list
    outputs: list
    attrs: dict
    opdef: object = None  # registry.OpDef, resolved at load time

    @property
    def label(self):
        return f"{self.op_type} node {self.name!r}" if self.name else f"{self.op_type} node"


@dataclasses.dataclass
class Graph:
    name: str
    nodes: list
    inputs: list  # ValueInfo
    outputs: list  # ValueInfo
    initializers: dict  # name -> np.ndarray

    @property
    def input_names(self):
        return [v.name for v in self.inputs]

    @property
    def output_names(self):
        return [v.name for v in self.outputs]

    def free_names(self):
        """Names this graph reads from an enclosing scope."""
        defined = set(self.input_names) | set(self.initializers)
        free = set()
        for node in self.nodes:
            free |= {n for n in node_reads(node) if n not in defined}
            defined |= set(node.outputs)
        free |= {n for n in self.output_names if n not in defined}
        return free


def node_reads(node):
    """Every name a node reads: its inputs and what its subgraphs read from outside."""
    names = {n for n in node.inputs if n}
    for value in node.attrs.values():
        for g in value if isinstance(value, list) else [value]:
            if isinstance(g, Graph):
                names |= g.free_names()
    return names


def value_info(vi: onnx.ValueInfoProto) -> ValueInfo:
    t = vi.type
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        shape = None
        if t.tensor_type.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                          for d in t.tensor_type.shape.dim)
        return ValueInfo(vi.name, dtypes.to_numpy(t.tensor_type.elem_type), shape)
    return ValueInfo(vi.name, {"sequence_type": "sequence", "optional_type": "optional"}.get(kind),
                     None)


def tensor_to_numpy(tensor: onnx.TensorProto) -> np.ndarray:
    """The tensor's own data. External data was read in by onnx_file.read_onnx, which checks
    where it lives; here it would be read against the working directory, so it is refused."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        raise ModelLoadError(
            f"Tensor {tensor.name!r} still stores its data in an external file ({location!r}). "
            "Load the model from its .onnx path, or call "
            "onnx.load_external_data_for_model(proto, folder) first.")
    if tensor.data_type == onnx.TensorProto.STRING:
        return np.array([s.decode("utf-8") for s in tensor.string_data],
                        dtype=object).reshape(tuple(tensor.dims))
    return numpy_helper.to_array(tensor)  # no base_dir: never a file


def sparse_to_numpy(sparse: onnx.SparseTensorProto) -> np.ndarray:
    values = tensor_to_numpy(sparse.values)
    indices = tensor_to_numpy(sparse.indices).astype(np.int64)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:  # linear indices
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def attribute(attr: AttributeProto, parse_graph):
    A = AttributeProto
    kind = attr.type
    if kind == A.FLOAT:
        return float(attr.f)
    if kind == A.INT:
        return int(attr.i)
    if kind == A.STRING:
        return attr.s.decode("utf-8", errors="surrogateescape")
    if kind == A.TENSOR:
        return tensor_to_numpy(attr.t)
    if kind == A.GRAPH:
        return parse_graph(attr.g)
    if kind == A.FLOATS:
        return [float(f) for f in attr.floats]
    if kind == A.INTS:
        return [int(i) for i in attr.ints]
    if kind == A.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in attr.strings]
    if kind == A.TENSORS:
        return [tensor_to_numpy(t) for t in attr.tensors]
    if kind == A.GRAPHS:
        return [parse_graph(g) for g in attr.graphs]
    if kind == A.SPARSE_TENSOR:
        return sparse_to_numpy(attr.sparse_tensor)
    if kind == A.TYPE_PROTO:
        return attr.tp
    raise NotImplementedError(f"attribute {attr.name!r} of type {kind}")


def parse_graph(g: onnx.GraphProto) -> Graph:
    initializers = {t.name: tensor_to_numpy(t) for t in g.initializer}
    for st in g.sparse_initializer:
        initializers[st.values.name] = sparse_to_numpy(st)
    nodes = []
    for n in g.node:
        attrs = {a.name: attribute(a, parse_graph) for a in n.attribute}
        nodes.append(Node(n.name, n.op_type, n.domain, list(n.input), list(n.output), attrs))
    inputs = [value_info(v) for v in g.input if v.name not in initializers]
    outputs = [value_info(v) for v in g.output]
    return Graph(g.name, topological(nodes, g.name), inputs, outputs, initializers)


def topological(nodes, graph_name=""):
    """``nodes`` in an order where each runs after the nodes whose outputs it reads, as
    onnxruntime orders them: the float16 converters that make ``*_fp16.onnx`` with float32 inputs
    append their input Casts last. Already sorted graphs (nearly all) come back as they are; among
    ready nodes the file's order is kept; a cycle is an error that names its nodes."""
    producer = {out: i for i, n in enumerate(nodes) for out in n.outputs if out}
    needs = [{producer[r] for r in node_reads(n) if r in producer}
             for i, n in enumerate(nodes)]
    if all(all(j < i for j in deps) for i, deps in enumerate(needs)):
        return nodes
    waiting = [len(deps) for deps in needs]
    readers = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for j in deps:
            readers[j].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in readers[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(ready, k)
    if len(order) < len(nodes):
        stuck = [nodes[i].label for i, count in enumerate(waiting) if count][:5]
        raise ModelLoadError(f"Graph {graph_name!r} has a cycle: {', '.join(stuck)} (and the nodes "
                             "they read from) each wait on the other's outputs")
    return [nodes[i] for i in order]


def walk(graph: Graph):
    """Every node, including those in subgraphs."""
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            for g in value if isinstance(value, list) else [value]:
                if isinstance(g, Graph):
                    yield from walk(g)
