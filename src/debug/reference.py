"""onnxruntime as the reference of a divergence search.

The graph runs with graph optimizations off (the values are the graph's own, not those of
onnxruntime's fused kernels) and every value its nodes make exposed as an output. Values are
fetched a window at a time: each fetch reruns the graph and returns only the names asked for, so
memory holds one window, never every value of a large graph. A node onnxruntime has no kernel
for is left out with the nodes that read what it makes; ``missing`` says which."""

import os
import re
import shutil
import tempfile
import weakref

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import dtypes
from ..engine.graph import parse_graph
from ..errors import TransmuterError

# onnxruntime's words for a node it cannot run: no kernel, or an op it does not know at all
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'")
_UNKNOWN_OP = re.compile(r"(?:([\w.]+):)?(\w+)\(-?\d+\) is not a registered function/op")
_MAX_LEFT_OUT = 32  # ops refused before the search gives up on onnxruntime
_PROTOBUF_LIMIT = 2**31 - 2**20  # a serialized ModelProto past 2 GiB fails; a margin for outputs
PERTURBATION = 1e-6  # relative: how far inputs and weights move to size an int8 file's noise
# ops that quantize activations: their values move by a quantization step on a rounding tie
QUANTIZING = ("QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
              "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "MatMulIntegerToFloat")


def onnxruntime():
    try:
        import onnxruntime as ort
    except ImportError:
        raise TransmuterError("transmuter.debug compares with onnxruntime, which is not "
                              "installed: pip install onnxruntime") from None
    return ort


class Reference:
    """onnxruntime's session over ``proto`` (external data read in) with every value exposed."""

    def __init__(self, proto: onnx.ModelProto):
        self.proto = proto
        self.missing = []  # (op_type, node name) onnxruntime has no kernel for
        exposed = onnx.ModelProto()
        exposed.CopyFrom(proto)
        known = {o.name for o in exposed.graph.output}
        for node in exposed.graph.node:
            for name in node.output:
                if name and name not in known:
                    known.add(name)
                    # a name alone: onnxruntime infers the type (tensor or sequence) itself
                    exposed.graph.output.append(onnx.ValueInfoProto(name=name))
        self.session = self._session(exposed)
        self.names = {o.name for o in self.session.get_outputs()}
        self.input_names = [i.name for i in self.session.get_inputs()]

    def _session(self, exposed):
        ort = onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        for _ in range(_MAX_LEFT_OUT):
            try:
                return _session(ort, exposed, options)
            except Exception as e:  # noqa: BLE001  onnxruntime's errors share no base but Exception
                lacking = _lacking(str(e), exposed.graph)
                if not lacking:
                    raise TransmuterError(f"onnxruntime cannot run this graph, so there is no "
                                          f"reference to compare with: {e}") from None
                self.missing += [(n.op_type, n.name) for n in lacking]
                _drop(exposed.graph, lacking)
        raise TransmuterError(f"onnxruntime lacks more than {_MAX_LEFT_OUT} of this graph's "
                              f"ops ({self.missing[:5]} ...): there is little left to compare")

    def values(self, names, feeds):
        """{name: onnxruntime's value} for ``names`` (those it computes) on ``feeds``."""
        names = [n for n in dict.fromkeys(names) if n in self.names]
        if not names:
            return {}
        feeds = {k: v for k, v in feeds.items() if k in self.input_names}
        try:
            return dict(zip(names, self.session.run(names, feeds)))
        except Exception as e:  # noqa: BLE001  onnxruntime's errors share no base but Exception
            raise TransmuterError(f"onnxruntime fails on these inputs, so there is no reference "
                                  f"to compare with: {e}") from None


def _session(ort, proto, options):
    """An InferenceSession over ``proto``: from memory, or past protobuf's 2 GiB from a
    temporary folder where its weights are written as external data."""
    if proto.ByteSize() < _PROTOBUF_LIMIT:
        return ort.InferenceSession(proto.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])
    folder = tempfile.mkdtemp(prefix="transmuter-debug-")
    try:
        path = os.path.join(folder, "model.onnx")
        onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location="model.onnx_data")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(session, shutil.rmtree, folder, True)  # it may map the weights' file
    return session


def _lacking(message, graph):
    """The nodes of ``graph`` that onnxruntime's error ``message`` refuses, or []."""
    found = _NO_KERNEL.search(message)
    if found:
        op_type, name = found.groups()
        return [n for n in graph.node if n.op_type == op_type and (n.name == name or not name)]
    found = _UNKNOWN_OP.search(message)
    if found:
        domain, op_type = found.groups()
        return [n for n in graph.node if n.op_type == op_type
                and (domain is None or n.domain in (domain, "" if domain == "ai.onnx" else domain))]
    return []


def _drop(graph, nodes):
    """Remove ``nodes`` and every node that reads, directly or not, what they make; the outputs
    of the graph that no longer exist go too."""
    made = {name for n in nodes for name in n.output}
    lost, gone = set(made), set()  # gone: positions. Not id(): protobuf hands out a wrapper per
    # access, and a freed one's id comes back on another node (a reader of a dropped node kept)
    for i, node in enumerate(graph.node):  # topological order: a reader comes after its makers
        if set(node.output) & made or (set(node.input) | _outer_reads(node)) & lost:
            gone.add(i)
            lost |= set(node.output)
    keep = [n for i, n in enumerate(graph.node) if i not in gone]
    del graph.node[:]
    graph.node.extend(keep)
    outputs = [o for o in graph.output if o.name not in lost]
    del graph.output[:]
    graph.output.extend(outputs)


def _outer_reads(node):
    names = set()
    for attr in node.attribute:
        for g in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
            for inner in g.node:
                names |= set(inner.input) | _outer_reads(inner)
    return names


# --- a subgraph as a model of its own --------------------------------------------------------

def body_model(body: onnx.GraphProto, outer: onnx.ModelProto, feeds):
    """The If / Loop / Scan body ``body`` of ``outer`` as a model of its own: its declared inputs
    and the names it reads from the enclosing scope become graph inputs, typed from ``feeds``
    (their values), so onnxruntime can expose the values inside it, which it cannot inside the
    node that holds it."""
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    free = sorted(parse_graph(body).free_names() - set(graph_input_names(body)))
    missing = [name for name in graph_input_names(body) + free if name not in feeds]
    if missing:
        raise TransmuterError(f"The body {body.name!r} reads {missing} from the enclosing graph, "
                              "values the reference did not give")
    names = graph_input_names(body) + free
    del graph.input[:]
    graph.input.extend(typed(name, feeds[name]) for name in names)  # the values' own types
    return helper.make_model(graph, opset_imports=list(outer.opset_import),
                             ir_version=outer.ir_version)


def graph_input_names(graph):
    inits = {t.name for t in graph.initializer}
    return [i.name for i in graph.input if i.name not in inits]


def typed(name, value):
    """A ValueInfoProto for ``value``: a tensor of its type and rank, or a sequence (a list)."""
    if isinstance(value, list):
        elem = np.asarray(value[0]).dtype if value else np.dtype(np.float32)
        return helper.make_tensor_sequence_value_info(name, dtypes.to_onnx(elem), None)
    value = np.asarray(value)
    # rank fixed, sizes free: a Loop's carried values may grow from one iteration to the next
    return helper.make_tensor_value_info(name, dtypes.to_onnx(value.dtype), [None] * value.ndim)


# --- plain runs, and the file's own noise ----------------------------------------------------

def outputs(proto, feeds):
    """onnxruntime's graph outputs (optimizations off) of ``proto`` on ``feeds``, by name."""
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = _session(ort, proto, options)
    names = [o.name for o in session.get_outputs()]
    declared = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in declared})))


def quantizes_activations(proto):
    """Whether the graph quantizes values it computes (int8 files): those move by a step where
    a rounding tie falls the other way, so they are compared against the file's own noise."""
    return any(n.op_type in QUANTIZING for n in all_nodes(proto.graph))


def all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
                yield from all_nodes(g)


def perturbed(proto):
    """``proto`` with each float weight moved by 1e-6 relative (a fixed pattern of signs)."""
    moved = onnx.ModelProto()
    moved.CopyFrom(proto)
    for tensor in moved.graph.initializer:
        value = numpy_helper.to_array(tensor)
        if value.dtype.kind == "f" and value.size:
            tensor.CopyFrom(numpy_helper.from_array(_move(value), tensor.name))
    return moved


def perturbed_feeds(feeds):
    return {k: _move(np.asarray(v)) if np.asarray(v).dtype.kind == "f" else v
            for k, v in feeds.items()}


def _move(value):
    signs = np.where(np.arange(value.size).reshape(value.shape) % 2, 1.0, -1.0)
    return (value + PERTURBATION * np.abs(value) * signs).astype(value.dtype)
