"""Out-of-range indices are refused on the host, as ONNX Runtime refuses them.

A compiled gather cannot raise: past its axis JAX reads NaN (or clamps: 2^62 wrapped to a valid
row), and MLX reads past its buffer (garbage, or a crash). So indices are checked where their
values are known, on the host, from the ops' ``indices=`` metadata (ops/bounds.py):

- **Static indices** (initializers, Constant nodes, values folded on the host): when their node
  runs, eagerly or while a compiled segment is traced (``check_static``: an OpError naming the
  node, the index, the axis and its size).
- **Graph inputs** that reach an op's indices as they are or through ops that keep every value
  (Cast to an integer type, Reshape, Unsqueeze, Squeeze, Flatten, Expand, Transpose, Identity):
  ``input_ids`` into the embedding table, ``token_type_ids`` into the type table. ``InputIndices``
  finds them once per model, in subgraphs too (a merged decoder's If branches read input_ids
  by name); before each call a min and a max per such input (microseconds) say whether all is
  well, else an InputError names the input, the value, its position and the range. The indexed
  data must have a shape known before the call: a weight or a Constant (also through Cast,
  Identity, DequantizeLinear, Transpose: a tied embedding), or another graph input.
- **Indices computed inside the graph** from data (an ArgMax, arithmetic on positions) are only
  known inside the compiled function, where nothing can raise: they are not checked.
  (jax.experimental.checkify could raise there, but it changes every compiled function's
  signature and adds a device-to-host read per call, and MLX has nothing like it.)

``load(..., checks=False)`` (or ``compile``'s / ``run``'s ``checks=``) skips the input checks.
"""

import dataclasses
import functools

import numpy as np

from ... import dtypes
from ...backends.numpy import XP as NP
from ...errors import InputError, OpError
from ...ops.contrib.group_query_attention import check_seqlens
from ..graph import Graph, walk

# Ops whose output holds exactly the values of their first input (in another shape): a graph
# input through them still indexes with its own values. The first two also keep the layout, so
# the columns of a GatherND / ScatterND index keep their meaning.
KEEPS_VALUES = {"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand",
                "Transpose"}
KEEPS_LAYOUT = {"Identity", "Cast"}
# Ops whose output has the shape of their first input: indexed data made by them from a weight.
KEEPS_SHAPE = {"Identity", "Cast", "DequantizeLinear"}


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    value: int
    at: tuple  # position in the index array
    axis: int  # axis of the data
    size: int  # its size
    column: int | None = None  # GatherND / ScatterND: the column of the indices' last axis


def out_of_range(values, spec, data_shape, attrs):
    """The first index of ``values`` (a host array) past its axis of data shaped ``data_shape``,
    or None when all are in [-size, size - 1]. A min and a max when all is well."""
    if values.size == 0 or values.dtype.kind not in "iu":
        return None
    limits = spec.limits(tuple(data_shape), tuple(values.shape), attrs)
    if limits is None:
        return None  # the op reports shapes that do not fit
    if not spec.columns:
        axis, size = limits
        if values.min() >= -size and values.max() < size:
            return None
        return _first(values, (values < -size) | (values >= size), axis, size)
    sizes = np.array([size for _, size in limits], np.int64)
    rows = values.reshape(-1, len(limits))
    if (rows.min(axis=0) >= -sizes).all() and (rows.max(axis=0) < sizes).all():
        return None
    bad = (values < -sizes) | (values >= sizes)
    column = int(np.argwhere(bad.reshape(-1, len(limits)).any(axis=0))[0, 0])
    axis, size = limits[column]
    bad[..., [c for c in range(len(limits)) if c != column]] = False
    return dataclasses.replace(_first(values, bad, axis, size), column=column)


def _first(values, bad, axis, size):
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return OutOfRange(int(values[at]), at, axis, int(size))


def _valid(size):
    return f"[{-size}, {size - 1}]" if size else "nowhere (the axis is empty)"


def check_static(node, args):
    """Raise OpError when a static index of ``node`` is past its axis (called by the runner
    before the node runs; ``args`` are its inputs as they are, static ones still on the host)."""
    for position, spec in node.opdef.indices:
        if max(position, spec.data) >= len(args):
            continue
        index, data = args[position], args[spec.data]
        if not isinstance(index, (np.ndarray, np.generic)) or data is None \
                or isinstance(data, list) or getattr(data, "shape", None) is None:
            continue
        bad = out_of_range(np.asarray(index), spec, data.shape, node.attrs)
        if bad is not None:
            what = ("it picks" if bad.column is None
                    else f"column {bad.column} of its last axis picks")
            raise OpError(
                f"{node.label} has index {bad.value} at {list(bad.at)} of "
                f"{node.inputs[position]!r}, out of range: {what} along axis {bad.axis} of "
                f"{node.inputs[spec.data]!r}, of size {bad.size}, so those indices must be in "
                f"{_valid(bad.size)} (ONNX Runtime refuses the model too)")


@dataclasses.dataclass(frozen=True)
class Use:
    """Graph input ``input`` reaches input ``spec``'s indices of ``node`` with its own values."""

    input: str
    node: object
    spec: object
    data_name: str  # the node's data input, for messages
    data_shape: tuple | None  # known at load (a weight, a constant), else
    data_input: str | None  # the graph input whose shape the data has


class InputIndices:
    """The graph inputs that index tables (found once per model), checked before each call."""

    def __init__(self, model):
        self.uses = _find_uses(model)
        self.lengths = _find_lengths(model)

    def check(self, inputs):
        """Raise InputError naming the input when a value in ``inputs`` is out of range."""
        values, done = {}, set()  # one call's: a decoder's layers share a chain
        for lengths in self.lengths:
            lengths.check(inputs, values, done)
        hosted = {}
        for use in self.uses:
            value = inputs.get(use.input)
            shape = use.data_shape
            if use.data_input is not None:
                data = inputs.get(use.data_input)
                shape = None if data is None else getattr(data, "shape", None)
            if value is None or shape is None:
                continue
            if use.input not in hosted:
                hosted[use.input] = np.asarray(value)
            bad = out_of_range(hosted[use.input], use.spec, shape, use.node.attrs)
            if bad is not None:
                raise InputError(_input_message(use, bad))

    def table(self, name):
        """(rows, use) of the smallest table input ``name`` picks rows of (axis 0), or None."""
        found = []
        for use in self.uses:
            if use.input == name and use.data_shape and not use.spec.columns:
                axis, size = use.spec.limits(use.data_shape, (), use.node.attrs) or (None, None)
                if axis == 0:
                    found.append((size, use))
        return min(found, key=lambda f: f[0]) if found else None


def _input_message(use, bad):
    what = (f"takes column {bad.column} of its last axis as indices" if bad.column is not None
            else "takes its values as indices")
    hint = (": token ids the model's vocabulary lacks (from another tokenizer, or tokens added "
            "to it?)" if use.input.endswith("input_ids") else "")
    return (f"Input {use.input!r} holds {bad.value} at {list(bad.at)}, out of range{hint}. "
            f"{use.node.label} {what} into axis {bad.axis} of {use.data_name!r}, which has "
            f"{bad.size} entries there, so they must be in {_valid(bad.size)}: pass values in "
            "that range (load(..., checks=False) skips this check)")


def _find_uses(model):
    """Every (graph input, index operand) pair, in the graph and in its subgraphs (a merged
    decoder gathers ``input_ids`` inside the branches of its ``If``: they read it by name)."""
    graph = model.graph
    readers, producers = {}, {}
    shapes = {name: tuple(v.shape) for table in (model.constants, model.params)
              for name, v in table.items() if getattr(v, "shape", None) is not None}
    known = _Known(shapes, producers, model.constants)
    for node in walk(graph):
        for i, name in enumerate(node.inputs):
            if name:
                readers.setdefault(name, []).append((node, i))
        producers.update({out: node for out in node.outputs if out})
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, Graph):
                    shapes.update({k: tuple(v.shape) for k, v in sub.initializers.items()})
    inputs = {v.name for v in graph.inputs}
    uses = []
    for info in graph.inputs:
        if not (isinstance(info.dtype, np.dtype) and info.dtype.kind in "iu"):
            continue
        frontier, seen = [(info.name, True)], set()
        while frontier:
            name, layout = frontier.pop()
            if (name, layout) in seen:
                continue
            seen.add((name, layout))
            for node, i in readers.get(name, ()):
                for position, spec in node.opdef.indices:
                    if position == i and (layout or not spec.columns) \
                            and spec.data < len(node.inputs):
                        use = _use(info.name, node, spec, known, inputs)
                        if use is not None and not any(_same(use, u) for u in uses):
                            uses.append(use)
                if i == 0 and _keeps_values(node):
                    frontier.append((node.outputs[0], layout and node.op_type in KEEPS_LAYOUT))
    return uses


def _same(a, b):
    """Two uses that check the same thing (a merged decoder's two branches gather one table)."""
    return (a.input, a.data_name, a.data_shape, a.data_input, a.spec, a.node.attrs) == \
        (b.input, b.data_name, b.data_shape, b.data_input, b.spec, b.node.attrs)


def _keeps_values(node):
    if node.op_type not in KEEPS_VALUES or not node.outputs or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Cast":  # a cast to float (and back) may round: not followed
        try:
            return dtypes.to_numpy(node.attrs.get("to", 0)).kind in "iu"
        except NotImplementedError:
            return False
    return True


def _use(input_name, node, spec, known, inputs):
    """The Use of ``node``'s data when its shape is known before the call, else None."""
    name = node.inputs[spec.data]
    if name in inputs:
        return Use(input_name, node, spec, name, None, name)
    shape = known.shape(name)
    return None if shape is None else Use(input_name, node, spec, name, shape, None)


@dataclasses.dataclass
class _Known:
    """What is known of the graph's values at load: weights' shapes, their producers, and the
    small constants on the host (a Reshape's target)."""

    shapes: dict
    producers: dict
    constants: dict

    def shape(self, name, depth=0):
        """The shape of value ``name`` known at load: a weight, a Constant, or one of those
        through ops that keep its shape, transpose it (a tied embedding: Transpose of the
        lm_head) or reshape it to a constant target (a q4 embedding sharing the lm_head's
        packed MatMulNBits weight)."""
        if name in self.shapes:
            return self.shapes[name]
        producer = self.producers.get(name)
        if producer is None or producer.domain not in ("", "ai.onnx") or depth > 8:
            return None
        if producer.op_type == "Constant":
            return _shape_of(producer.attrs.get("value"))
        if producer.op_type not in KEEPS_SHAPE | {"Transpose", "Reshape"} or not producer.inputs:
            return None
        shape = self.shape(producer.inputs[0], depth + 1)
        if shape is None or producer.op_type in KEEPS_SHAPE:
            return shape
        if producer.op_type == "Reshape":
            return self._reshaped(producer, shape)
        perm = producer.attrs.get("perm", list(reversed(range(len(shape)))))
        return tuple(shape[p] for p in perm) if sorted(perm) == list(range(len(shape))) else None

    def _reshaped(self, node, shape):
        """The output shape of Reshape ``node`` of an input shaped ``shape``, when its target is
        a constant and fits (else None: the op reports it when it runs)."""
        target = self.value(node.inputs[1]) if len(node.inputs) > 1 else None
        if target is None or target.ndim != 1 or target.dtype.kind not in "iu":
            return None
        dims = [int(d) for d in target]
        if not node.attrs.get("allowzero", 0):
            dims = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(dims)]
        count = int(np.prod(shape, dtype=object))
        if dims.count(-1) == 1:
            rest = int(np.prod([d for d in dims if d != -1], dtype=object))
            if rest <= 0 or count % rest:
                return None
            dims[dims.index(-1)] = count // rest
        if any(d < 0 for d in dims) or int(np.prod(dims, dtype=object)) != count:
            return None
        return tuple(dims)

    def value(self, name):
        """The host value of constant ``name`` (an initializer kept static, a Constant node)."""
        if name in self.constants:
            value = self.constants[name]
        else:
            producer = self.producers.get(name)
            if producer is None or producer.op_type != "Constant" \
                    or producer.domain not in ("", "ai.onnx"):
                return None
            value = producer.attrs.get("value")
        return value if isinstance(value, np.ndarray) else None


def _shape_of(value):
    return tuple(value.shape) if isinstance(value, np.ndarray) else None


# Ops a host check may run to compute GroupQueryAttention's seqlens_k and total_sequence_length
# from the caller's attention_mask (ReduceSum - 1, Cast; Shape, Gather): a few tiny host ops.
LENGTH_OPS = {"Cast", "Sub", "Add", "ReduceSum", "Shape", "Gather", "Squeeze", "Unsqueeze",
              "Reshape", "Identity"}


@dataclasses.dataclass(frozen=True)
class Lengths:
    """GroupQueryAttention ``node``'s seqlens_k, computed from graph inputs by ``chain``:
    checked on the host before each call, since the compiled op cannot raise (past the rotary
    cache it read clamped rows, where ONNX Runtime refuses)."""

    node: object
    chain: tuple  # the nodes, in order
    known: object
    inputs: frozenset  # the graph inputs the chain reads

    @functools.cached_property
    def masks(self):
        """The inputs the chain sums (an attention_mask): their values must be 0 or 1."""
        return frozenset(n for node in self.chain if node.op_type == "ReduceSum"
                         for n in node.inputs[:1] if n in self.inputs)

    @functools.cached_property
    def chain_key(self):
        """The chain by its nodes' identities (nodes are not hashable; the graph keeps them)."""
        return tuple(id(node) for node in self.chain)

    @functools.cached_property
    def rotary_rows(self):
        """The rows of the node's cos cache where it applies rotary, else None."""
        cos = self.known.shape(self.node.inputs[7]) if len(self.node.inputs) > 7 else None
        return cos[0] if cos and self.node.attrs.get("do_rotary", 0) else None

    def check(self, inputs, env, done):
        """``env``: the values computed so far in this call; ``done``: what it has checked.
        Both are shared by the checks of the call's other GroupQueryAttention nodes: a
        decoder's layers share one chain, so a layer whose chain, past length and rotary cache
        an earlier one had is not checked again (each of SmolLM2-135M's 30 layers ran the chain
        and the mask check: 2.3 ms a decode step, a sixth of it at one row; all of the call's
        index checks now take 0.5 ms, cProfile over 128 steps)."""
        past = inputs.get(self.node.inputs[3]) if len(self.node.inputs) > 3 else None
        past_len = past.shape[2] if getattr(past, "ndim", 0) == 4 else 0
        same = (self.chain_key, *self.node.inputs[5:7], past_len, self.rotary_rows)
        if same in done:
            return
        done.add(same)
        for name in self.inputs:
            if name in env:
                continue
            try:
                env[name] = np.asarray(inputs[name])
            except Exception:  # noqa: BLE001 - missing or traced: the call reports it
                return
        for name in self.masks:
            mask = env[name]
            if mask.size and mask.dtype.kind in "iu" and (mask.min() < 0 or mask.max() > 1):
                # its row sums are the lengths: 2^62 wraps past int32 to a valid-looking one
                at = [int(i) for i in np.argwhere((mask < 0) | (mask > 1))[0]]
                raise InputError(f"Input {name!r} holds {int(mask[tuple(at)])} at {at}: an "
                                 f"attention mask holds 0s and 1s ({self.node.label} reads its "
                                 "row sums as lengths; load(..., checks=False) skips this check)")
        try:
            for node in self.chain:
                if all(out in env for out in node.outputs if out):
                    continue
                args = [env[n] if n in env else self.known.value(n) for n in node.inputs]
                result = node.opdef.fn(NP, *args, **node.attrs)
                env.update(zip(node.outputs, result if isinstance(result, tuple) else (result,)))
            seqlens, total = (env[n] if n in env else self.known.value(n)
                              for n in self.node.inputs[5:7])
            total = int(np.asarray(total).reshape(-1)[0])
        except Exception:  # noqa: BLE001 - shapes the graph refuses: its ops report them
            return
        try:
            check_seqlens(seqlens, present=max(total, past_len), rotary_rows=self.rotary_rows)
        except ValueError as e:
            names = ", ".join(repr(n) for n in sorted(self.inputs))
            raise InputError(f"{self.node.label}: {e} (from input {names}; load(..., "
                             "checks=False) skips this check)") from None


def _find_lengths(model):
    graph = model.graph
    producers = {out: node for node in graph.nodes for out in node.outputs if out}
    shapes = {name: tuple(v.shape) for table in (model.constants, model.params)
              for name, v in table.items() if getattr(v, "shape", None) is not None}
    known = _Known(shapes, producers, model.constants)
    inputs = {v.name for v in graph.inputs}
    found = []
    for node in graph.nodes:
        if node.op_type != "GroupQueryAttention" or len(node.inputs) < 7:
            continue
        chain, reads = [], set()
        if all(_chain(n, known, inputs, chain, reads) for n in node.inputs[5:7]) and reads:
            found.append(Lengths(node, tuple(chain), known, frozenset(reads)))
    return found


def _chain(name, known, inputs, chain, reads, depth=0):
    """Add to ``chain`` the nodes computing ``name`` from graph inputs and constants with
    LENGTH_OPS; False when another op (or a deep chain) computes it."""
    if name in inputs:
        reads.add(name)
        return True
    if known.value(name) is not None:
        return True
    node = known.producers.get(name)
    if node is None or node.op_type not in LENGTH_OPS or depth > 8 \
            or node.domain not in ("", "ai.onnx"):
        return False
    if node in chain:
        return True
    if not all(_chain(n, known, inputs, chain, reads, depth + 1) for n in node.inputs if n):
        return False
    chain.append(node)
    return True
