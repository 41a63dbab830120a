"""Walks a graph node by node. Knows values (static host arrays vs. backend arrays), not tasks.

A value is *static* when it is known on the host: a NumPy array, a Python scalar or string array,
a list of static values, or None. An op whose inputs are all static runs on NumPy (constant folding
as we go), which keeps Shape -> Gather -> Concat -> Reshape chains static inside a trace. An op input
that the registry marks static is read to the host; inside a trace that is impossible and raises
``NeedsHost``, which the compiled driver turns into a graph break.

A type the backend has no arrays of (MLX: float8, int4/int2, float4) stays on the host too: the
backend leaves such values as NumPy (ml_dtypes) arrays, and a node that fails on the backend because
it reads or makes one runs again on NumPy (a break inside a trace, like a static input)."""

import collections
import dataclasses

import numpy as np

from .. import dtypes
from ..backends import NotConcrete
from ..backends.common import MissingDtype
from ..backends.numpy import XP as NP
from ..errors import OpError, TransmuterError
from .graph import Graph
from .checks.indices import check_static
from .live_bytes import LiveBytes, last_reads
from ..ops.registry import NeedsStatic
from ..ops.values import NeedsHost, is_static


@dataclasses.dataclass
class OpContext:
    node_name: str
    n_outputs: int
    opset: int
    rng: object = None
    subgraph_opsets: dict = None


class Runner:
    """Executes nodes for one model on one backend. ``tracing`` is True inside jit/compile."""

    def __init__(self, backend, opsets):
        self.backend = backend
        self.opsets = opsets
        self.rng = None  # the random key of the current run, when the graph draws random values

    def to_host(self, value, node):
        if is_static(value):
            return np.asarray(value) if isinstance(value, np.generic) else value
        if isinstance(value, list):
            return [self.to_host(v, node) for v in value]
        try:
            return self.backend.to_host(value)
        except NotConcrete:
            raise NeedsHost(node) from None

    def to_device(self, value):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype != object:
            return self.backend.asarray(value)
        if isinstance(value, list):
            return [self.to_device(v) for v in value]
        return value

    def run_graph(self, graph: Graph, env, start=0, stop=None, on_node=None):
        """Run ``graph.nodes[start:stop]`` over the mapping ``env`` (updated in place). ``env``
        keeps every value, so their bytes add up (engine/live_bytes.py refuses a sum past memory).

        ``on_node(node, env)``, when given, is called after each node, its inputs and outputs
        still in ``env``; then the values no later node reads leave ``env`` (the graph's outputs
        stay): a walk that looks at each value once holds only the live ones."""
        live = LiveBytes() if on_node is None else \
            LiveBytes(last_reads(graph.nodes), keep=graph.output_names)
        for index, node in enumerate(graph.nodes[start:stop], start):
            self.run_node(node, env)
            if on_node is not None:
                on_node(node, env)
            for name in live.count(index, node, env):
                env.pop(name, None)
        return env

    def run_node(self, node, env):
        opdef = node.opdef
        try:
            args = [env[name] if name else None for name in node.inputs]
        except KeyError as e:
            raise OpError(f"{node.label} reads {e.args[0]!r}, which no earlier node or input "
                          "defines: the graph is not topologically sorted or is broken") from None
        if opdef.indices:  # static indices past their axis: refused as ONNX Runtime refuses them
            check_static(node, args)
        n_in = len(args)
        if opdef.host or (all(is_static(a) for a in args) and not opdef.random):
            xp = NP
            args = [self.to_host(a, node) for a in args]
        else:
            xp = self.backend.xp
            args = [self.to_host(a, node) if opdef.needs_static(i, n_in)
                    else a if opdef.raw else self.to_device(a) for i, a in enumerate(args)]
        kwargs = dict(node.attrs)
        for key, value in kwargs.items():
            if isinstance(value, Graph):
                kwargs[key] = self._subgraph_fn(value, env)
        if opdef.context:
            kwargs["ctx"] = OpContext(node.name, len(node.outputs), self.opsets.get(opdef.domain, 1),
                                      rng=self.rng if opdef.random else None)
        try:
            result = self._call(node, xp, args, kwargs)
        except (NeedsHost, TransmuterError):
            raise
        except Exception as e:
            if xp is NP or not self._lacked(e, args):
                raise OpError(describe_failure(node, args, e)) from e
            # The backend has no arrays of a type this node reads or makes (MLX: float8, int4):
            # it runs on the host, where ml_dtypes has them; inside a trace that is a break.
            args = [self.to_host(a, node) for a in args]
            try:
                result = self._call(node, NP, args, kwargs)
            except (NeedsHost, TransmuterError):
                raise
            except Exception as e:
                raise OpError(describe_failure(node, args, e)) from e
        outputs = result if isinstance(result, tuple) else (result,)
        for name, value in zip(node.outputs, outputs):
            if name:
                env[name] = value

    def _call(self, node, xp, args, kwargs):
        opdef = node.opdef
        try:
            return opdef.fn(xp, *args, **kwargs)
        except NeedsStatic as e:
            if not e.inputs:
                raise NeedsHost(node) from None
            for i in e.inputs:
                args[i] = self.to_host(args[i], node)
            return opdef.fn(xp, *args, **kwargs)

    def _lacked(self, error, args):
        """Whether a failure on the backend comes from a type it lacks: it said so, or an input
        is a host array of such a type (which only the host can compute with)."""
        if isinstance(error, MissingDtype):
            return True
        lacks = getattr(self.backend, "lacks", None)
        return lacks is not None and any(
            isinstance(a, np.ndarray) and lacks(a.dtype) for a in _flat(args))

    def _subgraph_fn(self, graph, outer_env):
        """A callable running ``graph`` with its inputs bound positionally over the outer scope."""

        def call(*inputs):
            scope = collections.ChainMap(dict(zip(graph.input_names, inputs)), graph.initializers,
                                         outer_env)
            self.run_graph(graph, scope)
            return [scope[name] for name in graph.output_names]

        call.graph = graph  # ops read the subgraph's declared inputs and outputs from here
        return call


def _flat(values):
    for v in values:
        if isinstance(v, list):
            yield from _flat(v)
        else:
            yield v


def describe_failure(node, args, error):
    def describe(a):
        if a is None:
            return "None"
        if isinstance(a, list):
            return f"sequence of {len(a)}"
        shape = tuple(getattr(a, "shape", ()))
        dtype = getattr(a, "dtype", type(a).__name__)
        try:
            dtype = dtypes.name(np.dtype(dtype))
        except TypeError:
            pass
        return f"{dtype}{list(shape)}"

    inputs = ", ".join(f"{name or '<none>'}: {describe(a)}" for name, a in zip(node.inputs, args))
    attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, Graph)}
    return (f"{node.label} (domain {node.domain or 'ai.onnx'}) failed: "
            f"{type(error).__name__}: {error}\n  inputs: {inputs}\n  attributes: {attrs}")

