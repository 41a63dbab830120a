"""A merged decoder on a bucketed KV cache: the past becomes a longer buffer whose free rows are
masked, so a decode compiles a few buffer sizes instead of one shape per generated token.

A merged decoder without ``position_ids`` (Whisper, BART, Marian, Xenova's GPT-2) reads its
positions from the past's length, and without an attention mask it attends to every past row. So
a past padded from L valid rows to a buffer of P would put the new token at position P and let it
attend to P - L rows of zeros. The rewrite gives the graph one more input, ``PAST_LENGTH`` (L,
an int64 scalar), and changes two things, both found in the graph, never per architecture:

- **The padded rows are masked.** Before each Softmax of a self-attention over a present
  (Concat(past, new) on the length axis), the scores of the rows [L, P) become the dtype's lowest
  value (``PaddedPast``). The graph's own causal mask, made for a past of P rows, lets every past
  row through and masks the new rows causally: a superset of the true mask, so the two together
  are exactly it.
- **Positions count L rows, not P.** A Gather from a weight (a learned or sinusoidal position
  table) whose indices are the past's length plus a range (Range(P, P + S), P + arange, ...,
  only through ops that shift with P: Add, Sub of something else, Cast, Unsqueeze, Expand, Tile,
  Reshape, Range) reads indices - P + L (``PastShift``).

Everything else the past's length reaches must be a shape (a static input of an op) or the
attention mask. Anything else (T5's relative position buckets, rotary angles computed from
positions, a graph with another attention op) leaves the graph as it is, with the reason: its
cache keeps growing one row a step (generation/steppers.GrowingCache).

The new rows of a step sit after the buffer in the present (rows [P, P + S)); the caller writes
them into the buffer at row L (generation/cache.write_rows)."""

import copy
import dataclasses

import ml_dtypes
import numpy as np

from ...ops.registry import OpDef
from ..graph import Graph, Node, ValueInfo, node_reads

PAST_LENGTH = "transmuter::past_length"  # the valid rows of every self-attention past

# ops whose output values shift with P when their data input does (input 0; the others are not
# the past's length): positions made from it
_CARRY = frozenset({"Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Tile", "Identity",
                    "Flatten"})
# between a past (or its present) and the product of attention scores: q @ kᵀ
_KEY_SIDE = frozenset({"Transpose", "Mul", "Div", "Reshape", "Cast", "Expand", "Unsqueeze",
                       "Squeeze", "Identity"})
# between the scores' product and the Softmax: a scale, a mask
_SCORE_SIDE = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Cast", "Max", "Min"})
_PRODUCTS = frozenset({"MatMul", "TransposedMatMul"})


class NotApplicable(Exception):
    """Why the rewrite leaves a graph as it is."""


@dataclasses.dataclass
class _Scope:
    """One graph's analysis: which values are static (known while tracing), and how those that
    depend on the past's length depend on it: "shape" (a past's Shape, P at axis 2), "shift"
    (values that move by d when P does) or "other"."""
    graph: Graph
    static: set
    tags: dict
    producer: dict
    readers: dict
    keyed: set
    values: dict
    weights: frozenset = frozenset()


def mask_past(graph, pasts, constants=None, params=()):
    """A copy of ``graph`` rewritten to run on past buffers with ``PAST_LENGTH`` valid rows
    (see above); NotApplicable when the graph does not allow it. ``pasts``: the self-attention
    past inputs (keys and values); ``constants``: the weights known on the host, by name;
    ``params``: the names of the others (device arrays)."""
    graph = copy.deepcopy(graph)
    pasts, rewritten = frozenset(pasts), 0
    for sub in _graphs(graph):  # a merged decoder's with-past branch, a with-past graph itself
        named = _aliases(sub, pasts)
        if any(_past_concat(n, named) for n in sub.nodes):
            _rewrite(sub, named, dict(constants or {}), frozenset(params))
            rewritten += 1
    if not rewritten:
        raise NotApplicable("no self-attention reads its past through a Concat on the length "
                            "axis")
    graph.inputs = graph.inputs + [ValueInfo(PAST_LENGTH, np.dtype(np.int64), ())]
    return graph


def _graphs(graph):
    yield graph
    for node in graph.nodes:
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, Graph):
                    yield from _graphs(sub)


def _aliases(graph, pasts):
    """``pasts`` and the names that are a past itself (Identity, a Concat of one input:
    Florence-2's export wraps each past so)."""
    names = set(pasts)
    for n in graph.nodes:
        if n.op_type in ("Identity", "Concat") and len(n.inputs) == 1 and n.inputs[0] in names:
            names.add(n.outputs[0])
    return frozenset(names)


def _past_concat(node, pasts):
    return node.op_type == "Concat" and len(node.inputs) == 2 and node.inputs[0] in pasts


def _rewrite(graph, pasts, constants, params):
    concats = [n for n in graph.nodes if _past_concat(n, pasts)]
    for n in concats:
        if n.attrs.get("axis") not in (2, -2):
            raise NotApplicable(f"{n.label} concatenates the past on axis {n.attrs.get('axis')}, "
                                "not the length axis 2")
    presents = {n.outputs[0]: n.inputs[0] for n in concats}  # present -> its past
    scope = _analyse(graph, pasts, presents, constants)
    scope.weights = frozenset(constants) | params | set(graph.initializers)
    softmaxes = _attention_over_past(graph, scope, presents)
    if len(softmaxes) * 2 != len(concats):
        raise NotApplicable(f"{len(concats)} past Concats but {len(softmaxes)} attentions found "
                            "over them (one per key and value pair expected)")
    shifts = _boundaries(graph, scope, softmaxes)
    _insert(graph, softmaxes, shifts)


def _analyse(graph, pasts, presents, constants):
    producer = {out: n for n in graph.nodes for out in n.outputs}
    readers = {}
    for n in graph.nodes:
        for name in node_reads(n):
            readers.setdefault(name, []).append(n)
    values = {**constants, **graph.initializers}  # what a Gather of a Shape may pick
    static = set(values)
    tags, keyed = {}, set(pasts) | set(presents)
    for n in graph.nodes:
        if n.op_type == "Constant" and isinstance(n.attrs.get("value"), np.ndarray):
            values[n.outputs[0]] = n.attrs["value"]
        reads = [name for name in n.inputs if name]
        if n.op_type == "Shape" and reads and reads[0] in keyed:
            static.update(n.outputs)
            tags[n.outputs[0]] = _shape_tag(n, reads[0] in pasts or reads[0] in presents)
            continue
        if n.op_type == "Gather" and len(reads) == 2 and reads[1] in tags and \
                reads[0] not in tags and tags[reads[1]] == "shift":
            continue  # positions into a table known on the host: shifted as any (below)
        if n.op_type in ("Shape", "Size", "Constant") or \
                (reads and all(r in static for r in reads) and not n.opdef.random and
                 not any(isinstance(v, Graph) for v in n.attrs.values())):
            static.update(n.outputs)
            if n.op_type not in ("Shape", "Size", "Constant"):
                tag = _tag(n, tags, values)
                if tag is not None:
                    tags[n.outputs[0]] = tag
            continue
        if any(r in keyed for r in reads) and not _contracts_keys(n, keyed):
            keyed.update(n.outputs)  # its shape holds P (scores, a transposed key)
    return _Scope(graph, static, tags, producer, readers, keyed, values)


def _shape_tag(node, direct):
    """A Shape of a past or present: P at axis 2 ("shape"); a start/end that picks axis 2 alone:
    "shift"; a Shape of anything else whose shape holds P: "other"."""
    if not direct:
        return "other"
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    if start == 0 and end is None:
        return "shape"
    if start in (2, -2) and end in (3, -1):
        return "shift"
    return "other" if start <= 2 and (end is None or end > 2) else None


def _tag(node, tags, values):
    """How a static node's output depends on the past's length (None: it does not)."""
    got = [tags.get(name) for name in node.inputs]
    if not any(got):
        return None
    first, rest = got[0], [t for t in got[1:] if t]
    op = node.op_type
    if "table" in got or (op == "Gather" and first is None):
        return "table"  # values read from a table by positions: T5's relative position bias
    if op == "Gather" and first == "shape" and not rest:
        index = values.get(node.inputs[1])  # which axis of [B, H, P, D] it picks
        if index is None or node.attrs.get("axis", 0) != 0:
            return "other"
        index = np.asarray(index) % 4
        return None if not (index == 2).any() else "shift" if index.size == 1 else "other"
    if first == "shift" and not rest and (op in _CARRY or op in ("Add", "Sub", "Gather")):
        return "shift"  # Sub: P + s - x; Gather: elements of a shifted vector
    if op == "Add" and got == [None, "shift"]:
        return "shift"
    if op == "Range" and got[:2] == ["shift", "shift"] and not any(got[2:]):
        return "shift"  # Range(P, P + S): S values from P
    return "other"


def _contracts_keys(node, keyed):
    """A product that sums over the keys (probabilities @ v) or attention fused whole: its
    output's shape holds no P."""
    if node.op_type == "FusedAttention":
        return True
    return node.op_type in _PRODUCTS and node.inputs[0] in keyed and node.inputs[1] in keyed


def _attention_over_past(graph, scope, presents):
    """The Softmax nodes (or FusedAttention nodes) of attention whose keys are a present:
    {id(node): (node, the present's past)}."""
    found = {}
    for n in graph.nodes:
        if n.op_type == "Softmax":
            product = _product_below(n.inputs[0], scope.producer)
            past = product is not None and _key_past(product, scope.producer, presents)
        elif n.op_type == "FusedAttention":
            members = n.attrs["members"]
            past = _key_past(members[0].node, scope.producer, presents,
                             n.inputs[members[0].reads[1]])
        else:
            continue
        if past:
            found[id(n)] = (n, past)
    return found


def _product_below(name, producer, depth=0):
    node = producer.get(name)
    if node is None or depth > 8:
        return None
    if node.op_type in _PRODUCTS:
        return node
    if node.op_type in _SCORE_SIDE:
        for source in node.inputs:
            found = _product_below(source, producer, depth + 1)
            if found is not None:
                return found
    return None


def _key_past(product, producer, presents, key=None):
    """The past whose present ``product`` multiplies as its keys (q @ kᵀ), or None."""
    name = product.inputs[1] if key is None else key
    for _ in range(8):
        if name in presents:
            return presents[name]
        node = producer.get(name)
        if node is None or node.op_type not in _KEY_SIDE:
            return None
        name = node.inputs[0]
    return None


def _boundaries(graph, scope, softmaxes):
    """Where a value that depends on the past's length meets the model's data: a shape (fine),
    a position table's Gather (its indices to shift: returned) or an attention mask (fine);
    NotApplicable for anything else."""
    shifts = []
    masked = {id(n) for n, _ in softmaxes.values()}
    for n in graph.nodes:
        if all(o in scope.static for o in n.outputs if o):
            continue  # a static node: its tags are propagated
        reads = [(i, name) for i, name in enumerate(n.inputs) if scope.tags.get(name)]
        inner = {name for name in node_reads(n) - set(n.inputs) if scope.tags.get(name)}
        if inner:
            raise NotApplicable(f"{n.label}'s subgraph reads {sorted(inner)[0]!r}, which "
                                "depends on the past's length")
        for i, name in reads:
            if n.opdef.needs_static(i, len(n.inputs)):
                if n.inputs[0] in scope.keyed:
                    continue  # a size of what is P long (a present reshaped): P is real there
                if _table_slice(n, scope):
                    shifts.append((n, None))
                    break
                raise NotApplicable(f"{n.label} takes {name!r}, which depends on the past's "
                                    f"length, as a bound of {n.inputs[0]!r}, which is not P long")
            if n.op_type == "Gather" and i == 1 and scope.tags[name] == "shift" and \
                    n.inputs[0] in scope.weights:  # a position table
                shifts.append((n, name))
            elif scope.tags[name] != "table" and _is_mask(n, scope, masked):
                continue
            else:
                raise NotApplicable(f"{n.label} reads {name!r}, which depends on the past's "
                                    f"length ({scope.tags[name]}), as data")
    return shifts


def _table_slice(node, scope):
    """Slice(table, P, P + S) on axis 0: positions read from a weight by a slice (older
    exports' ``embed_positions.weight[past : past + S]``), shifted as a Gather's."""
    if node.op_type != "Slice" or node.inputs[0] not in scope.weights or len(node.inputs) < 3:
        return False
    starts, ends = (scope.tags.get(name) for name in node.inputs[1:3])
    rest = node.inputs[3:]
    axes = scope.values.get(rest[0]) if rest and rest[0] else np.array([0])
    steps = scope.values.get(rest[1]) if len(rest) > 1 and rest[1] else np.array([1])
    return starts == ends == "shift" and axes is not None and steps is not None and \
        np.array_equal(np.ravel(axes), [0]) and np.array_equal(np.ravel(steps), [1])


def _is_mask(node, scope, masked, depth=0):
    """Whether ``node`` is on the way from a product to a masked Softmax: a mask added (or
    selected) into the scores."""
    if id(node) in masked:
        return True
    if node.op_type not in _SCORE_SIDE or depth > 8:
        return False
    return any(_is_mask(r, scope, masked, depth + 1)
               for out in node.outputs for r in scope.readers.get(out, ()))


def _insert(graph, softmaxes, shifts):
    for gather, name in shifts:
        if name is None:  # Slice(table, P, P + S): the same rows counted from L
            at = graph.nodes.index(gather)
            graph.nodes[at] = _node("PastSlice", [*gather.inputs[:3], _any_past(softmaxes),
                                                  PAST_LENGTH], gather.outputs[0], _SLICE)
            continue
        out = f"{name}::shifted"
        node = _node("PastShift", [name, _any_past(softmaxes), PAST_LENGTH], out, _SHIFT)
        graph.nodes.insert(graph.nodes.index(gather), node)
        gather.inputs = [out if i == 1 else x for i, x in enumerate(gather.inputs)]
    for n, past in softmaxes.values():
        if n.op_type == "Softmax":
            out = f"{n.inputs[0]}::unpadded"
            graph.nodes.insert(graph.nodes.index(n),
                               _node("PaddedPast", [n.inputs[0], past, PAST_LENGTH], out, _MASK))
            n.inputs = [out] + n.inputs[1:]
        else:
            _into_fused(n, past)


def _into_fused(fused, past):
    """A PaddedPast member before the Softmax of a FusedAttention node's chain."""
    from .fusion import Member

    inputs = list(fused.inputs)
    for name in (past, PAST_LENGTH):
        if name not in inputs:
            inputs.append(name)
    members = list(fused.attrs["members"])
    at = next(i for i, m in enumerate(members) if m.node.op_type == "Softmax")
    mask = _node("PaddedPast", ["", past, PAST_LENGTH], "", _MASK)
    members.insert(at, Member(mask, (None, inputs.index(past), inputs.index(PAST_LENGTH))))
    fused.inputs = inputs
    fused.attrs = {**fused.attrs, "members": tuple(members)}


def _any_past(softmaxes):
    return next(iter(softmaxes.values()))[1]


def _node(op_type, inputs, output, opdef):
    node = Node(f"{op_type}({inputs[0]})", op_type, "", inputs, [output], {})
    node.opdef = opdef
    return node


def padded_past(xp, scores, past, length):
    """``scores`` [..., P + S] with the keys [length, P) at the dtype's lowest value (selected,
    not added: a mask of the lowest value already there would overflow to -inf)."""
    keys = xp.arange(scores.shape[-1], dtype=np.int64)
    padded = xp.logical_and(keys >= xp.astype(length, np.int64), keys < past.shape[2])
    dtype = xp.dtype_of(scores)
    return xp.where(padded, xp.asarray(ml_dtypes.finfo(dtype).min, dtype), scores)


def past_shift(xp, indices, past, length):
    """Positions counted from the buffer's length P, counted from ``length`` instead."""
    return indices + (xp.astype(length, xp.dtype_of(indices)) - past.shape[2])


def past_slice(xp, table, starts, ends, past, length):
    """Slice(table, starts, ends) on axis 0 (positions P to P + S) read from ``length`` on."""
    start = int(np.ravel(starts)[0])
    rows = xp.arange(int(np.ravel(ends)[0]) - start, dtype=np.int64)
    return xp.take(table, rows + (xp.astype(length, np.int64) - past.shape[2] + start), axis=0)


_MASK = OpDef("", "PaddedPast", 1, padded_past)
_SLICE = OpDef("", "PastSlice", 1, past_slice, static=(1, 2))
_SHIFT = OpDef("", "PastShift", 1, past_shift)
