"""Model: a parsed ONNX graph with its initializers, opsets and backend."""

import copy
import os

import onnx

from .. import backends, dtypes, ops
from ..backends.compile_cache import check_option
from .compile_ahead import check_option as check_ahead
from ..errors import InputError, ModelLoadError, UnsupportedOperatorError
from .checks.indices import InputIndices
from .passes import precision
from .passes.fusion import fuse
from .graph import parse_graph, walk
from .io.onnx_file import read_onnx, refuse_external_data
from .sharding import placement
from .io.trainable import merged, select
from .checks.validate import validate
from .compiled import compile
from .io.weights import WeightTable
from .inputs import check_value, host_input

# Initializers above these sizes become params: device arrays passed to compiled functions as
# arguments, never baked in as constants. Smaller ones stay static, on the host, where they fold
# into shape computations and constants. Floats and 8-bit-or-narrower integers (quantized weights
# and their zero points: never shapes) share the float threshold; wider integers and bools
# (indices, shapes, masks) stay static up to a larger size, so shape arithmetic keeps folding.
PARAM_MIN_SIZE = 64
INT_PARAM_MIN_SIZE = 1024


def read_proto(source, external=None) -> onnx.ModelProto:
    """The ModelProto of a path, bytes or ModelProto, its external data read in (``external``
    receives where: onnx_file.read_onnx). Bytes and a ModelProto have no folder: their tensors
    must hold their data already."""
    if isinstance(source, onnx.ModelProto):
        refuse_external_data(source, "an onnx.ModelProto")
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(source))
            refuse_external_data(proto, _describe(source))
            return proto
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ModelLoadError(f"No ONNX file at {path!r}")
        return read_onnx(path, external)  # reads external data itself, also behind cache symlinks
    except ModelLoadError:
        raise
    except Exception as e:
        raise ModelLoadError(f"Cannot read ONNX model from {_describe(source)}: {e}") from e


def _describe(source):
    return f"{len(source)} bytes" if isinstance(source, (bytes, bytearray)) else repr(str(source))


class Model:
    """A loaded ONNX model. Call it like the model it was exported from: ``model(**inputs)``."""

    def __init__(self, proto: onnx.ModelProto, backend="jax", compute_type=None, trainable=False,
                 checks=True, compile_cache=None, external=None, origin=None, devices=None,
                 compile_ahead=None):
        """``external``: where the source kept external data (read_proto's record); ``origin``:
        (repo or None, the file's path in it or on disk), for save_pretrained."""
        validate(proto)
        self.weights = WeightTable(proto, external)  # the proto itself is not kept
        self.origin = origin
        self.backend = backends.get(backend)
        self.placement = placement(devices, self.backend)  # engine/sharding.py; None: one device
        self.opsets = {("" if d.domain == "ai.onnx" else d.domain): d.version
                       for d in proto.opset_import}
        try:
            self.graph = parse_graph(proto.graph)
        except Exception as e:
            raise ModelLoadError(f"Cannot parse the ONNX graph: {e}") from e
        if compute_type not in (None, "f32", "float32", "bf16", "bfloat16"):
            raise ModelLoadError(f"compute_type={compute_type!r}: use None (the graph's own "
                                 "types), 'f32' (half graphs computed in float32) or 'bf16' "
                                 "(float32 graphs computed in bfloat16, weights kept float32)")
        if compute_type is not None:
            rewrite = precision.downcast_float if compute_type.startswith("bf") else \
                precision.upcast_half
            rewrite(self.graph)
        self._resolve_ops()
        fuse(self.graph)
        loaded = dict(self.graph.initializers)
        _prepare_weights(self.graph)
        self.weights.record(loaded, self.graph.initializers)
        del loaded
        self.compute_type = compute_type
        self.trainable = select(self.graph, self.weights, trainable)  # names of weights that train
        self.checks = bool(checks)  # the caller's index inputs are checked before each call
        self.compile_cache = check_option(compile_cache)  # read at the first compile
        self.compile_ahead = check_ahead(compile_ahead)  # None: the env var
        self._input_indices = None  # index_checks.InputIndices, found on first use
        self.constants, self.params = {}, {}
        put = self.backend.put_weight if self.placement is None else self.placement.put_weight
        with self.backend.scope():
            for name, value in self.graph.initializers.items():
                if name in self.trainable or _is_param(value):
                    self.params[name] = put(value)
                else:
                    self.constants[name] = value
        self.graph.initializers = {}
        self._default_fn = None

    def _resolve_ops(self):
        missing = set()
        for node in walk(self.graph):
            opset = self.opsets.get("" if node.domain == "ai.onnx" else node.domain)
            node.opdef = ops.lookup(node.domain, node.op_type, opset or 1)
            if node.opdef is None:
                missing.add((node.domain, node.op_type, opset))
        if missing:
            raise UnsupportedOperatorError(missing)

    @property
    def inputs(self):
        return self.graph.inputs

    @property
    def outputs(self):
        return self.graph.outputs

    def __repr__(self):
        return (f"Model(backend={self.backend.name!r}, inputs={self.inputs}, "
                f"outputs={self.outputs})")

    def host_inputs(self, inputs: dict) -> dict:
        """``inputs`` as the graph takes them: a Python list or number in the input's declared
        dtype (it has none of its own), a byte-swapped array in native order; a ragged list or a
        masked array refused (ONNX inputs have no mask, and filling it is the caller's choice)."""
        declared = {v.name: v for v in self.inputs}
        return {name: host_input(declared.get(name), name, value)
                for name, value in inputs.items()}

    def check_inputs(self, inputs: dict, static=()):
        """Raise InputError naming the input at fault if ``inputs`` do not fit the graph."""
        declared = {v.name: v for v in self.inputs}
        for name in inputs:
            if name not in declared:
                raise InputError(f"Unknown input {name!r}; the graph takes: "
                                 f"{', '.join(declared) or 'nothing'}")
        for name, info in declared.items():
            if name not in inputs:
                if name in static:
                    continue
                raise InputError(f"Missing input {name!r} ({info!r})")
            check_value(info, inputs[name])

    @property
    def input_indices(self):
        """The inputs that index a table (index_checks.InputIndices), found on first use."""
        if self._input_indices is None:
            self._input_indices = InputIndices(self)
        return self._input_indices

    def check_indices(self, inputs: dict):
        """Raise InputError when an input that indexes a table (``input_ids`` into the
        embeddings) holds a value past it (engine/checks/indices.py): a min and a max per such input."""
        self.input_indices.check(inputs)

    def __call__(self, **kwargs):
        return self.apply(None, **kwargs)

    @property
    def trainable_params(self) -> dict:
        """The weights ``load(trainable=)`` chose, by initializer name: the pytree to train
        (a new dict; its arrays are the model's own)."""
        return {k: v for k, v in self.params.items() if k in self.trainable}

    def apply(self, params, **inputs):
        """The outputs for ``inputs`` with ``params`` (by initializer name: the trainable ones
        or all) in place of the loaded weights: a function of params that jax.grad and
        jax.value_and_grad differentiate (and jax.jit compiles when no graph break reads a value
        computed from traced data). ``params=None`` runs the loaded weights."""
        names = {v.name for v in self.inputs}
        feed = {k: _torch_to_numpy(v) for k, v in inputs.items() if k in names}
        if self._default_fn is None:
            self._default_fn = compile(self)
        return Outputs(self._default_fn(feed, params=params))

    def full_params(self, params=None) -> dict:
        """``self.params`` with ``params`` over it (trainable.merged: unknown names refused)."""
        return merged(self, params)

    def with_graph(self, graph):
        """A model of ``graph`` (a rewrite of this one's: passes/past_mask.py) over this
        model's weights, shared, not copied; it has its own compiled functions."""
        other = copy.copy(self)
        other.graph, other._default_fn, other._input_indices = graph, None, None
        return other


class Outputs(dict):
    """The graph's outputs by name; also readable as attributes (``out.last_hidden_state``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"No output {name!r}; outputs are: {', '.join(self)}") from None


def _is_param(value):
    if value.dtype == object:
        return False
    if dtypes.is_float(value.dtype):
        return value.size > PARAM_MIN_SIZE
    if value.dtype.itemsize == 1 and value.dtype.kind in "iuV":  # (u)int8, (u)int4, (u)int2
        return value.size > PARAM_MIN_SIZE
    return value.size > INT_PARAM_MIN_SIZE


def _prepare_weights(graph):
    """Initializers stored as their readers prefer them (the ops' ``weights``). A weight that
    other nodes read as it is (a tied 4-bit embedding: genai's q4 files gather rows of the
    lm_head's MatMulNBits matrix through a Reshape) stays for them, and the one reader that
    prefers another form gets its own copy, ``name::prepared``: read raw, the lm_head's bytes
    were rebuilt into words on every decode step (5% of a SmolLM2-shaped q4 step)."""
    readers = {}
    for node in walk(graph):
        for i, name in enumerate(node.inputs):
            if name in graph.initializers:
                readers.setdefault(name, []).append((node, i))
    for name, uses in readers.items():
        wants = [(node, i, dict(node.opdef.weights).get(i)) for node, i in uses]
        wants = [w for w in wants if w[2] is not None]
        if len(wants) != 1 or name in graph.output_names:
            continue
        node, i, prepare = wants[0]
        value = prepare(graph.initializers[name], node)
        if len(uses) == 1:
            graph.initializers[name] = value
        elif value is not graph.initializers[name]:
            graph.initializers[name + "::prepared"] = value
            node.inputs = node.inputs[:i] + [name + "::prepared"] + node.inputs[i + 1:]


def _torch_to_numpy(value):
    """Accept PyTorch tensors as inputs too (NumPy, JAX, MLX and lists pass as they are)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
        return value.detach().cpu().numpy()
    return value
