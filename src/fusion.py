"""Attention computed in blocks of query rows, found in the graph at load.

Exported attention is MatMul(q, kᵀ) -> scale / mask -> Softmax -> MatMul(·, v), and XLA's CPU
compiler writes the whole [..., S, T] score tensor out at each step. Past a few million scores
(SigLIP at 512 px: 12 x 1024 x 1024, Whisper's encoder: 6 x 1500 x 1500) that runs 2-3x slower
than the same chain over 128 query rows at a time, whose scores stay in cache (2 CPU cores,
jaxlib 0.10: one SigLIP layer's attention 53-62 ms -> 21 ms). Each row of the chain's output
depends only on that row of q and of the mask, so the blocks give the same numbers.

The chain's nodes stay as they are inside one node, and each block runs them as the runner would
(each op's own function, attributes and opset version): nothing about an op is written again
here. Small score tensors, and a chain whose shapes are not those of attention, run the nodes
once over the whole arrays, so a broken graph fails exactly as it would unfused."""

import dataclasses
import math

import numpy as np

from .errors import OpError, TransmuterError
from .graph import Node, node_reads
from .ops.registry import OpDef

ROWS = 128  # query rows per block
_SCORES = 1 << 22  # fewer scores than this (16 MB in f32) run as one block...
_SLICE = 1 << 18  # ...and so do those whose [S, T] per head stays small (ViT's 197 x 197)
_SCALES = frozenset({"Add", "Sub", "Mul", "Div"})  # between the MatMul and the Softmax


@dataclasses.dataclass(frozen=True)
class Member:
    node: Node
    reads: tuple  # per input: an index into the fused node's inputs, or None: the chain so far


def fuse_attention(graph):
    """Replace each attention chain of ``graph`` (its nodes already resolved) by one node."""
    readers = {}
    for node in graph.nodes:
        for name in node_reads(node):
            readers[name] = readers.get(name, 0) + 1
    private = {name for name, count in readers.items() if count == 1} - set(graph.output_names)
    producer = {out: node for node in graph.nodes for out in node.outputs}
    consumer = {name: node for node in graph.nodes for name in node.inputs if name in private}
    fused = {}
    for node in graph.nodes:
        if node.op_type == "Softmax" and _plain(node):
            chain = _chain(node, producer, consumer, private)
            if chain:
                fused[id(chain[-1])] = (_fused_node(chain), {id(n) for n in chain})
    if not fused:
        return
    drop = set().union(*(members for _, members in fused.values()))
    graph.nodes = [fused[id(n)][0] if id(n) in fused else n
                   for n in graph.nodes if id(n) in fused or id(n) not in drop]


def _plain(node):
    """An op the chain may hold: default domain, no static inputs, no context, no randomness."""
    d = node.opdef
    return node.domain in ("", "ai.onnx") and not (d.static or d.host or d.context or d.raw
                                                    or d.random or d.indices)


def _chain(softmax, producer, consumer, private):
    """[MatMul, scales/casts..., Softmax, casts..., MatMul], or None."""
    up = _scores(softmax.inputs[0], producer, private)
    if up is None:
        return None
    down, name = [], softmax.outputs[0]
    while name in private and name in consumer:
        node = consumer[name]
        if not _plain(node) or len(node.outputs) != 1:
            return None
        down.append(node)
        if node.op_type == "MatMul":
            return up + [softmax] + down if node.inputs[0] == name else None
        if node.op_type != "Cast":
            return None
        name = node.outputs[0]
    return None


def _scores(name, producer, private, depth=0):
    """The nodes from a MatMul to ``name`` through scale ops and casts (the other operand of a
    scale op is an input of the chain: a mask, a bias, a scale), or None."""
    node = producer.get(name)
    if name not in private or node is None or not _plain(node) or len(node.outputs) != 1 \
            or depth > 8:
        return None
    if node.op_type == "MatMul":
        return [node]
    if node.op_type == "Cast":
        candidates = node.inputs[:1]
    elif node.op_type in _SCALES and len(node.inputs) == 2:
        candidates = node.inputs
    else:
        return None
    for candidate in candidates:
        below = _scores(candidate, producer, private, depth + 1)
        if below is not None:
            return below + [node]
    return None


def _fused_node(chain):
    inputs, members, made = [], [], None
    for node in chain:
        reads = []
        for name in node.inputs:
            if name == made:
                reads.append(None)
            else:
                if name not in inputs:
                    inputs.append(name)
                reads.append(inputs.index(name))
        members.append(Member(node, tuple(reads)))
        made = node.outputs[0]
    last = chain[-1]
    label = " -> ".join(n.name or n.op_type for n in chain)
    fused = Node(f"attention {label}", "FusedAttention", "", inputs, list(last.outputs),
                 {"members": tuple(members)})
    fused.opdef = _OPDEF
    return fused


def attention(xp, *inputs, members):
    """The chain's output; over blocks of query rows when its scores are many (see above)."""
    plan = _plan(inputs, members)
    if plan is None:
        return _run(xp, inputs, members)
    rows, sliced = plan
    size = inputs[members[0].reads[0]].shape[-2]
    count = math.ceil(size / rows)
    blocks = [_blocks(xp, inputs[i], rows, count) for i in sliced]

    def step(carry, xs):
        view = list(inputs)
        for i, x in zip(sliced, xs):
            view[i] = x
        return carry, [_run(xp, view, members)]

    _, (out,) = xp.scan(step, None, blocks, count)
    out = xp.moveaxis(out, 0, -3)  # [..., count, rows, dv]
    out = xp.reshape(out, tuple(out.shape[:-3]) + (count * rows, out.shape[-1]))
    return out[..., :size, :]


def _run(xp, inputs, members):
    value = None
    for m in members:
        args = [value if r is None else inputs[r] for r in m.reads]
        try:
            value = m.node.opdef.fn(xp, *args, **m.node.attrs)
        except TransmuterError:
            raise
        except Exception as e:
            from .runner import describe_failure

            raise OpError(describe_failure(m.node, args, e)) from e
    return value


def _plan(inputs, members):
    """(rows per block, the inputs to cut into blocks), or None to run the chain whole: too few
    scores, or shapes that are not attention's: [..., S, D] @ [..., D, T], operands that
    broadcast to the scores, a last-axis Softmax, then @ [..., T, Dv]."""
    first, last = members[0], members[-1]
    (qi, ki), vi = first.reads, last.reads[1]
    operands = [r for m in members[1:-1] for r in m.reads if r is not None]
    if last.reads[0] is not None or vi is None or len({qi, ki, vi}) < 3 or \
            {qi, ki, vi} & set(operands):
        return None
    q, k, v = inputs[qi], inputs[ki], inputs[vi]
    if any(getattr(x, "ndim", 0) < 2 for x in (q, k, v)):
        return None
    size, keys = q.shape[-2], k.shape[-1]
    if q.shape[-1] != k.shape[-2] or v.shape[-2] != keys or size < 2 * ROWS:
        return None
    try:
        scores = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])) + (
            size, keys)
        if any(tuple(np.broadcast_shapes(inputs[r].shape, scores)) != scores for r in operands):
            return None
    except ValueError:
        return None
    softmax = next(m.node for m in members if m.node.op_type == "Softmax")
    axis = softmax.attrs.get("axis", -1 if softmax.opdef.since >= 13 else 1)
    if axis not in (-1, len(scores) - 1):
        return None
    if size * keys < _SLICE or math.prod(scores) < _SCORES:
        return None
    varying = {r for r in operands if inputs[r].ndim >= 2 and inputs[r].shape[-2] != 1}
    return math.ceil(size / math.ceil(size / ROWS)), [qi, *sorted(varying)]


def _blocks(xp, x, rows, count):
    """``x`` [..., S, n] as [count, ..., rows, n], zero rows padded at the end."""
    pad = count * rows - x.shape[-2]
    if pad:
        x = xp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)])
    x = xp.reshape(x, tuple(x.shape[:-2]) + (count, rows, x.shape[-1]))
    return xp.moveaxis(x, -3, 0)


_OPDEF = OpDef("", "FusedAttention", 1, attention)
