"""Transmuter as an ``onnx.backend.base.Backend``, so onnx's own ``BackendTest`` can drive it.

    from transmuter.integrations.onnx_backend import TransmuterBackend
    rep = TransmuterBackend.prepare(model_proto, device="CPU")
    outputs = rep.run([x, y])
"""

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .. import backends
from ..engine.compiled import compile
from ..engine.model import Model
from ..engine.run import run


class TransmuterRep(BackendRep):
    """A prepared model; ``run`` takes inputs in graph order (or by name) and returns a tuple."""

    def __init__(self, model: Model, compiled: bool):
        self.model = model
        self._fn = compile(model) if compiled else None

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feed = dict(zip([v.name for v in self.model.inputs], inputs))
        outputs = self._fn(feed) if self._fn is not None else run(self.model, feed)
        return tuple(_host(outputs[name]) for name in self.model.graph.output_names)


def _host(value):
    if value is None or isinstance(value, (np.ndarray, str)):
        return value
    if isinstance(value, list):
        return [_host(v) for v in value]
    return np.asarray(value)


class TransmuterBackend(Backend):
    """Device strings: "CPU" runs on JAX; "MLX" on MLX. ``compiled=True`` jit-compiles."""

    @classmethod
    def _backend(cls, device):
        return "mlx" if str(device).upper().startswith("MLX") else "jax"

    @classmethod
    def prepare(cls, model, device="CPU", compiled=False, **kwargs):
        super().prepare(model, device, **kwargs)
        return TransmuterRep(Model(model, backend=cls._backend(device)), compiled)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """Run one NodeProto on ``inputs`` (in the node's input order)."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        graph_inputs = [onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(
            np.asarray(value).dtype), np.shape(value)) for name, value in zip(node.input, inputs)]
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(name) for name in node.output]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        domain = node.domain or ""
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(domain, opset)])
        # Outputs have no declared types, which onnx's checker (run by prepare) rejects.
        return TransmuterRep(Model(model, backend=cls._backend(device)), False).run(list(inputs))

    @classmethod
    def supports_device(cls, device):
        if str(device).upper().startswith("MLX"):
            try:
                backends.get("mlx")
            except ImportError:
                return False
            return True
        return str(device).upper() in ("CPU", "CUDA", "GPU", "TPU")


prepare = TransmuterBackend.prepare
run_model = TransmuterBackend.run_model
run_node = TransmuterBackend.run_node
supports_device = TransmuterBackend.supports_device
