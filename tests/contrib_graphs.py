"""One-node graphs for the com.microsoft ops, run by onnxruntime (optimizations off) and Transmuter.

``single_node`` makes a model from a node description: ``inputs`` maps input names to arrays (None
= an omitted optional input, left as ""), ``constants`` become initializers (host values, as a
graph's shape inputs are), outputs are declared with the element types ORT should produce."""

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

import transmuter
from transmuter import dtypes

BACKENDS = ["jax", "mlx"]


def single_node(op_type, inputs, outputs, *, constants=None, domain="com.microsoft", opset=22,
                **attrs):
    constants = constants or {}
    names = []
    graph_inputs, inits = [], []
    for name, value in inputs.items():
        if value is None:
            names.append("")
            continue
        names.append(name)
        if name in constants:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, dtypes.to_onnx(np.asarray(value).dtype), list(np.shape(value))))
    while names and names[-1] == "":
        names.pop()
    out_names = [name if dtype is not None else "" for name, dtype in outputs.items()]
    graph_outputs = [helper.make_tensor_value_info(name, dtypes.to_onnx(dtype), None)
                     for name, dtype in outputs.items() if dtype is not None]
    node = helper.make_node(op_type, names, out_names, domain=domain, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs, inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def feeds(model, inputs):
    declared = {i.name for i in model.graph.input}
    return {k: np.asarray(v) for k, v in inputs.items() if k in declared}


def run_ort(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds(model, inputs))))


def run_ours(model, inputs, backend):
    m = transmuter.load(model, backend=backend)
    got = transmuter.run(m, feeds(model, inputs))
    return {k: np.asarray(v) for k, v in got.items()}


def check(model, inputs, backend, *, atol, rtol=0.0, skip=()):
    """Compare every output with ORT; return both result dicts."""
    want = run_ort(model, inputs)
    got = run_ours(model, inputs, backend)
    for name, w in want.items():
        if name in skip:
            continue
        g = got[name]
        assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=atol,
                                   rtol=rtol, err_msg=name)
    return got, want
