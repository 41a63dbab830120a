"""Sequences and optionals. A sequence is a Python list of tensors (host arrays or device arrays);
an empty optional is None. Positions and split sizes must be known on the host."""

import numpy as np

from .registry import op


def _int(v):
    return int(np.asarray(v).reshape(-1)[0])


def _position(pos, length, *, insert=False):
    p = _int(pos)
    limit = length if insert else length - 1
    if not -length <= p <= limit:
        raise IndexError(f"position {p} is out of range for a sequence of {length}")
    return p + length if p < 0 else p


@op("SequenceEmpty", 11)
def sequence_empty(xp, *, dtype=None):
    return []


@op("SequenceConstruct", 11)
def sequence_construct(xp, *tensors):
    return list(tensors)


@op("SequenceLength", 11)
def sequence_length(xp, seq):
    return np.array(len(seq), np.int64)


@op("SequenceAt", 11, static=(1,))
def sequence_at(xp, seq, position):
    return seq[_position(position, len(seq))]


@op("SequenceInsert", 11, static=(2,))
def sequence_insert(xp, seq, tensor, position=None):
    out = list(seq)
    if position is None:
        out.append(tensor)
    else:
        out.insert(_position(position, len(seq), insert=True), tensor)
    return out


@op("SequenceErase", 11, static=(1,))
def sequence_erase(xp, seq, position=None):
    out = list(seq)
    del out[-1 if position is None else _position(position, len(seq))]
    return out


@op("SplitToSequence", 11, static=(1,))
def split_to_sequence(xp, x, split=None, *, axis=0, keepdims=1):
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    index = [slice(None)] * x.ndim
    if split is None:
        parts = []
        for i in range(n):
            index[axis] = i if not keepdims else slice(i, i + 1)
            parts.append(x[tuple(index)])
        return parts
    split = np.asarray(split).astype(np.int64)
    sizes = [int(split)] * (n // int(split)) if split.ndim == 0 else [int(s) for s in split]
    if split.ndim == 0 and n % int(split):
        sizes.append(n % int(split))
    parts, start = [], 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        parts.append(x[tuple(index)])
        start += size
    return parts


@op("ConcatFromSequence", 11)
def concat_from_sequence(xp, seq, *, axis, new_axis=0):
    if new_axis:
        return xp.stack(list(seq), axis=axis)
    return xp.concatenate(list(seq), axis=axis)


@op("SequenceMap", 17)
def sequence_map(xp, seq, *others, body):
    n = len(seq)
    outputs = None
    for i in range(n):
        args = [seq[i]] + [o[i] if isinstance(o, list) else o for o in others]
        result = body(*args)
        if outputs is None:
            outputs = [[] for _ in result]
        for acc, value in zip(outputs, result):
            acc.append(value)
    if outputs is None:
        outputs = [[] for _ in body.graph.output_names]
    return tuple(outputs)


@op("Optional", 15)
def optional(xp, x=None, *, type=None):
    return x


@op("OptionalHasElement", 15)
def optional_has_element(xp, x=None):
    return np.array(x is not None)


@op("OptionalGetElement", 15)
def optional_get_element(xp, x):
    if x is None:
        raise ValueError("OptionalGetElement on an empty optional")
    return x
