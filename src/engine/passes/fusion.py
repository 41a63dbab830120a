"""Three rewrites of the graph at load, for XLA's CPU compiler: a MatMul reads a transposed operand
in place, attention runs in blocks of query rows, and a MatMul by an 8-bit weight that the graph
dequantizes can go to a native kernel.

**Transposed operands.** MatMul(a, Transpose(x)) with batch axes (attention's q @ kᵀ) makes XLA
copy x transposed first: it folds a transpose into a 2-D product, not into a batched one. For
Whisper-tiny's cross-attention at a decode step (6 heads x 1500 keys, 4 layers) the copy makes
the products take 1.4 ms, where one dot_general over x as it is takes 0.4 ms. So the pair becomes
one node that contracts x's own axes (einsum); weights (2-D, folded by XLA already, and seen by
compiled.library_dots) keep their Transpose, and a product of a weight stays a MatMul of its own
(training/lora.py finds the weights it adapts there).

**Attention in blocks.** Exported attention is MatMul(q, kᵀ) -> scale / mask -> Softmax ->
MatMul(·, v), and XLA's CPU compiler writes the whole [..., S, T] score tensor out at each step.
Past a few million scores (SigLIP at 512 px: 12 x 1024 x 1024, Whisper's encoder: 6 x 1500 x
1500) that runs 2-3x slower than the same chain over 128 query rows at a time, whose scores stay
in cache (2 CPU cores, jaxlib 0.10: attention of SigLIP's shape alone 53-62 ms -> 21 ms; the
whole 512-px SigLIP encoder 925 -> 792 ms). Each row of the chain's output
depends only on that row of q and of the mask, so the blocks give the same numbers.
Tried and not taken: each head alone, in blocks of up to 2^19 scores (nested scans, the mask
shared by all heads). The product, softmax, product of SigLIP's shape alone went from 43.6 to
24.6 ms (onnxruntime 22.2), but the whole SigLIP encoder (mask add and Casts in the chain) ran
slower in three in-process A/Bs: 1,298 -> 1,445, 1,666 -> 1,784, 1,536 -> 1,717 ms.

**Dequantized weights.** Weight-only int8 files (Cast(q) * scale, or DequantizeLinear(q, scale,
zero point), then MatMul) make XLA write the whole float32 weight out on every call before its
product: all-MiniLM-L6-v2 in that form takes 17 ms for one 16-token sentence, 5.8 ms with the
weights folded to float32 (onnxruntime folds them at load: 3.5 ms). The chain becomes one node
that hands the product to the backend's native kernel (``xp.int8_weight_kernel``, kernels/
matmul_int8_weight.c: the weight read as bytes, dequantized exactly as the graph does it) where
there is one and the shapes allow it; elsewhere it runs the nodes as they are.

The chain's nodes stay as they are inside one node, and each block runs them as the runner would
(each op's own function, attributes and opset version): nothing about an op is written again
here. Small score tensors, and a chain whose shapes are not those of attention, run the nodes
once over the whole arrays, so a broken graph fails exactly as it would unfused."""

import dataclasses
import math

import numpy as np
import onnx

from ...errors import OpError, TransmuterError
from ..graph import Graph, Node, node_reads
from ...ops.registry import OpDef
from ..runner import describe_failure

ROWS = 128  # query rows per block
_SCORES = 1 << 22  # fewer scores than this (16 MB in f32) run as one block...
_SLICE = 1 << 18  # ...and so do those whose [S, T] per head stays small (ViT's 197 x 197)
_SCALES = frozenset({"Add", "Sub", "Mul", "Div"})  # between the MatMul and the Softmax
_PRODUCTS = frozenset({"MatMul", "TransposedMatMul"})  # q @ kᵀ
_TRANSPOSE_SIDE = frozenset({"Transpose", "Mul", "Div"})  # between a Transpose and its MatMul


@dataclasses.dataclass(frozen=True)
class Member:
    node: Node
    reads: tuple  # per input: an index into the fused node's inputs, or None: the chain so far


def fuse(graph, weights=frozenset()):
    """Both rewrites on the nodes (already resolved) of ``graph`` and its subgraphs (If branches:
    a merged decoder's), in place. ``weights``: the initializers of the graphs around it."""
    weights = weights | set(graph.initializers)
    for node in graph.nodes:
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, Graph):
                    fuse(sub, weights)
    _replace(graph, lambda *scope: _transposed_products(*scope, weights))
    _replace(graph, lambda *scope: _attention_chains(*scope, weights))
    _replace(graph, lambda *scope: _dequantized_products(*scope, weights))


def _replace(graph, find):
    """Replace the chains that ``find(graph, producer, consumer, private)`` yields (lists of
    nodes, each ending at the node whose place its fused node takes) by their fused nodes."""
    readers = {}
    for node in graph.nodes:
        for name in node_reads(node):
            readers[name] = readers.get(name, 0) + 1
    private = {name for name, count in readers.items() if count == 1} - set(graph.output_names)
    producer = {out: node for node in graph.nodes for out in node.outputs}
    consumer = {name: node for node in graph.nodes for name in node.inputs if name in private}
    fused = {id(chain[-1]): (node, {id(n) for n in chain})
             for chain, node in find(graph, producer, consumer, private)}
    if not fused:
        return
    drop = set().union(*(members for _, members in fused.values()))
    graph.nodes = [fused[id(n)][0] if id(n) in fused else n
                   for n in graph.nodes if id(n) in fused or id(n) not in drop]


def _transposed_products(graph, producer, consumer, private, weights):
    """MatMul(a, Transpose(x)), and MatMul(a, Transpose(x) * c) (transformers' SDPA exports
    scale kᵀ by a scalar): the chains from the Transpose to the MatMul."""
    for node in graph.nodes:
        if node.op_type != "MatMul" or not _plain(node):
            continue
        chain, name = [node], node.inputs[1]
        while name in private and name in producer:
            made = producer[name]
            if not _plain(made) or len(made.outputs) != 1:
                break
            chain.insert(0, made)
            if made.op_type == "Transpose":
                if made.inputs[0] not in weights:
                    yield chain, _fused_node(chain, "TransposedMatMul", _TRANSPOSED,
                                             [n.name or n.op_type for n in chain],
                                             first=node.inputs[0])
                break
            if made.op_type == "Mul" and len(made.inputs) == 2:
                name = next((n for n in made.inputs if n in private
                             and getattr(producer.get(n), "op_type", None) in _TRANSPOSE_SIDE),
                            None)
            elif made.op_type == "Div" and len(made.inputs) == 2:
                name = made.inputs[0]
            else:
                break


def _attention_chains(graph, producer, consumer, private, weights):
    for node in graph.nodes:
        if node.op_type == "Softmax" and _plain(node):
            chain = _chain(node, producer, consumer, private)
            if chain and not weights & {*chain[0].inputs, *chain[-1].inputs}:
                yield chain, _fused_node(chain, "FusedAttention", _ATTENTION,
                                         [n.name or n.op_type for n in chain])


def _dequantized_products(graph, producer, consumer, private, weights):
    """MatMul(a, Cast(q) * scale) and MatMul(a, DequantizeLinear(q, scale[, zero point])), q and
    the rest weights: the chains from the dequantization to the MatMul (whether the kernel takes
    them is decided by shapes and dtypes when the node runs)."""
    for node in graph.nodes:
        if node.op_type != "MatMul" or not _plain(node) or node.inputs[1] not in private:
            continue
        made = producer.get(node.inputs[1])
        chain = None
        if made is None or len(made.outputs) != 1:
            continue
        if made.op_type == "DequantizeLinear" and _plain(made) and \
                all(name and name in weights for name in made.inputs):
            chain = [made, node]
        elif made.op_type == "Mul" and _plain(made) and len(made.inputs) == 2:
            cast = next((producer[n] for n in made.inputs if n in private
                         and getattr(producer.get(n), "op_type", None) == "Cast"), None)
            if cast is not None and _plain(cast) and cast.inputs[0] in weights and \
                    cast.attrs.get("to") == onnx.TensorProto.FLOAT and \
                    all(n in weights for n in made.inputs if n != cast.outputs[0]):
                chain = [cast, made, node]
        if chain is not None:
            yield chain, _fused_node(chain, "DequantizedMatMul", _DEQUANTIZED,
                                     [n.name or n.op_type for n in chain], first=node.inputs[0])


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
        if node.op_type in _PRODUCTS:
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
    if node.op_type in _PRODUCTS:
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


def _fused_node(chain, op_type, opdef, names, first=None):
    """One node in place of ``chain``: its inputs are those the chain reads from outside
    (``first`` first: a product's left operand stays its input 0)."""
    inputs, members, made = [] if first is None else [first], [], None
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
    fused = Node(" -> ".join(names), op_type, "", inputs, list(chain[-1].outputs),
                 {"members": tuple(members)})
    fused.opdef = opdef
    return fused


def transposed_matmul(xp, *inputs, members):
    """MatMul(a, Transpose(x) [* c]) as one contraction over x's axes, where the shapes allow
    it. A float32 product is scaled after its sum, as onnxruntime's FusedMatMul scales (an ulp
    or so from scaling first); a half one scales x first, exactly as the graph rounds: scaling
    after would move its result by a half-precision ulp (1e-3)."""
    transpose, *scales, product = members
    a, x = inputs[product.reads[0]], inputs[transpose.reads[0]]
    factors = [(m.node.op_type, inputs[next(r for r in m.reads if r is not None)])
               for m in scales]
    spec = _contraction(a, x, transpose.node.attrs.get("perm"))
    if spec is None or not xp.is_float(a) or any(
            np.size(c) != 1 or np.ndim(c) > x.ndim for _, c in factors):
        return _run(xp, inputs, members)
    first = xp.is_half(a)
    if first:
        x = _scaled(x, factors)
    y = xp.einsum(spec, a, x)
    return y if first else _scaled(y, factors)


def _scaled(y, factors):
    for op_type, c in factors:
        y = y * c if op_type == "Mul" else y / c
    return y


def _contraction(a, x, perm):
    """The einsum of a @ transpose(x, perm), or None (a rank below 3, axes that do not match:
    then the two nodes run as they are, and raise what they raise)."""
    n = getattr(x, "ndim", 0)
    perm = _perm(perm, n)
    if n < 3 or getattr(a, "ndim", 0) < 2 or perm is None or a.shape[-1] != x.shape[perm[-2]]:
        return None
    if perm[:-2] == list(range(n - 2)) and perm[-2:] == [n - 1, n - 2]:
        return "...ij,...kj->...ik"  # batch axes in place: they broadcast as MatMul's do
    batch = "abcdefghlmnopqrstuvwxyz"[:n - 2]
    if n - 2 > len(batch) or a.ndim != n or \
            tuple(a.shape[:-2]) != tuple(x.shape[p] for p in perm[:-2]):
        return None
    letters = batch + "jk"  # the transposed operand's axes
    xs = "".join(letters[perm.index(i)] for i in range(n))
    return f"{batch}ij,{xs}->{batch}ik"


def attention(xp, *inputs, members):
    """The chain's output; over blocks of query rows when its scores are many (see above)."""
    plan = _plan(inputs, members)
    if plan is None:
        return _run(xp, inputs, members)
    rows, sliced = plan
    inputs, members = _hoisted(xp, list(inputs), members)
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


def _hoisted(xp, inputs, members):
    """The chain with the transposed operands of its products made once, before the blocks
    (where a block contracts k or v as it is, XLA copies it again for each block)."""
    out = []
    for m in members:
        if m.node.op_type == "TransposedMatMul":
            *prepare, product = m.node.attrs["members"]
            own = [None if r is None else inputs[r] for r in m.reads]  # its inputs: a, x, scales
            inputs.append(_run(xp, own, prepare))
            m = Member(product.node, (m.reads[0], len(inputs) - 1))
        out.append(m)
    return inputs, out


def dequantized_matmul(xp, *inputs, members):
    """MatMul(a, dequantized 8-bit weight) through the backend's native kernel where it has one
    and the operands fit it, else (and as the kernel's reference and gradient) the chain as the
    graph writes it."""
    kernel = getattr(xp, "int8_weight_kernel", None)
    found = _int8_weight(inputs, members) if kernel is not None else None
    if found is not None:
        def chain(*operands):  # the nodes themselves, on the kernel's operands
            view = list(inputs)
            for i, x in zip(found, operands):
                if i is not None:
                    view[i] = x
            return _run(xp, view, members)

        y = kernel(*(0 if i is None else inputs[i] for i in found), chain)
        if y is not None:
            return y
    return _run(xp, inputs, members)


def _int8_weight(inputs, members):
    """Where (indices into ``inputs``) a, q, the zero point (None: none) and the scale are, for a
    chain whose weight is 2-D 8-bit, dequantized to float32 with one scale (and zero point) per
    column or per tensor; else None."""
    *dequantize, product = members
    if len(dequantize) == 2:  # Cast, Mul
        iq, iz = dequantize[0].reads[0], None
        i_s = next(r for r in dequantize[1].reads if r is not None)
    else:
        node, reads = dequantize[0].node, dequantize[0].reads
        iq, i_s, iz = reads[0], reads[1], reads[2] if len(reads) > 2 else None
        if node.attrs.get("block_size", 0) or node.attrs.get("output_dtype", 0) not in (0, 1):
            return None
        if np.size(inputs[i_s]) != 1 and node.attrs.get("axis", 1) not in (1, -1):
            return None
    a, q, scale = inputs[product.reads[0]], inputs[iq], inputs[i_s]
    if getattr(q, "ndim", 0) != 2 or q.dtype not in (np.int8, np.uint8) or \
            getattr(a, "dtype", None) != np.float32 or getattr(scale, "dtype", None) != np.float32:
        return None
    n = q.shape[1]
    per_column = lambda v: np.size(v) == 1 or (np.ndim(v) <= 2 and np.size(v) == n  # noqa: E731
                                                and v.shape[-1] == n)
    if not per_column(scale) or (iz is not None and not per_column(inputs[iz])):
        return None
    return product.reads[0], iq, iz, i_s


def _run(xp, inputs, members):
    value = None
    for m in members:
        args = [value if r is None else inputs[r] for r in m.reads]
        try:
            value = m.node.opdef.fn(xp, *args, **m.node.attrs)
        except TransmuterError:
            raise
        except Exception as e:
            raise OpError(describe_failure(m.node, args, e)) from e
    return value


def _plan(inputs, members):
    """(rows per block, the inputs to cut into blocks), or None to run the chain whole: too few
    scores, or shapes that are not attention's: [..., S, D] @ [..., D, T], operands that
    broadcast to the scores, a last-axis Softmax, then @ [..., T, Dv]."""
    first, last = members[0], members[-1]
    (qi, ki), vi = first.reads[:2], last.reads[1]
    operands = [r for m in members[1:-1] for r in m.reads if r is not None]
    scales = {*first.reads[2:], *last.reads[2:]}  # of a transposed operand: not cut in rows
    if last.reads[0] is not None or vi is None or len({qi, ki, vi}) < 3 or \
            {qi, ki, vi} & (set(operands) | scales) or qi in scales:
        return None
    q = inputs[qi]
    k, v = _right_operand(first, inputs[ki]), _right_operand(last, inputs[vi])
    if getattr(q, "ndim", 0) < 2 or k is None or v is None or len(k) < 2 or len(v) < 2:
        return None
    size, keys = q.shape[-2], k[-1]
    if q.shape[-1] != k[-2] or v[-2] != keys or size < 2 * ROWS:
        return None
    try:
        scores = tuple(np.broadcast_shapes(q.shape[:-2], k[:-2], v[:-2])) + (size, keys)
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


def _right_operand(member, x):
    """The shape of a product's right operand: ``x``'s, or as the Transpose folded into it
    leaves ``x`` (None: a perm that is not one)."""
    shape = tuple(getattr(x, "shape", ()))
    if member.node.op_type != "TransposedMatMul":
        return shape
    perm = _perm(member.node.attrs["members"][0].node.attrs.get("perm"), len(shape))
    return None if perm is None else tuple(shape[p] for p in perm)


def _perm(perm, n):
    """A Transpose's ``perm`` for rank ``n`` as a list (none given: the axes reversed), or None
    where it is not a permutation of them (the Transpose itself then says so)."""
    perm = list(range(n))[::-1] if perm is None else list(perm)
    return perm if sorted(perm) == list(range(n)) else None


def _blocks(xp, x, rows, count):
    """``x`` [..., S, n] as [count, ..., rows, n], zero rows padded at the end."""
    pad = count * rows - x.shape[-2]
    if pad:
        x = xp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)])
    x = xp.reshape(x, tuple(x.shape[:-2]) + (count, rows, x.shape[-1]))
    return xp.moveaxis(x, -3, 0)


_TRANSPOSED = OpDef("", "TransposedMatMul", 1, transposed_matmul)
_ATTENTION = OpDef("", "FusedAttention", 1, attention)
_DEQUANTIZED = OpDef("", "DequantizedMatMul", 1, dequantized_matmul)
