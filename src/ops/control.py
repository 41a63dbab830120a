"""Control flow: If, Loop, Scan. Subgraph attributes arrive as callables returning output lists
(``fn.graph`` is the parsed subgraph).

If with a host condition runs one branch inline; with a traced condition it becomes the backend's
``cond`` (lax.cond) when both branches give the same types, else the node runs eagerly (a break).

Loop and Scan run as Python loops when their values are concrete (eager, or all on the host).
Under a trace they become the backend's ``while_loop`` (a Loop without scan outputs, any trip
count) or ``scan`` (a Loop with a host trip count that never stops early; every Scan) when the
loop-carried shapes are loop-invariant and the body traces; failing that, they unroll when the trip
count is on the host, and otherwise the node runs eagerly (a break).

A Loop is bounded (``max_loop_trips``): one whose length is known before it runs (a host trip
count, a condition that stays true) is refused past the bound, and a loop run on the host stops
with an error when it reaches it. A traced ``while_loop`` whose condition comes from data runs as
the graph says (as ONNX Runtime runs it)."""

import os

import numpy as np

from .bounds import TooLarge
from .registry import NeedsStatic, op
from ..backends import NotConcrete
from .values import NeedsHost, is_static


class _Traced(Exception):
    """A value that decides control flow is only known inside a trace."""


class _NotTraceable(Exception):
    """The loop cannot become a backend loop (shapes vary, a sequence is carried, a host value
    is needed inside)."""


def _concrete(xp, value):
    if isinstance(value, list):
        return all(_concrete(xp, v) for v in value)
    return value is None or is_static(value) or xp.is_concrete(value)


def _host(xp, value):
    if not _concrete(xp, value):
        raise _Traced()
    return np.asarray(value)


def _as_bool(xp, value):
    return bool(_host(xp, value).reshape(-1)[0])


def _empty_stack(xp, infos, probe):
    """Stacked scan outputs of a loop that ran zero times: (0, *element shape) each. The shapes
    come from the body's declared outputs, or from running the body once on the initial values."""
    if all(isinstance(i.dtype, np.dtype) and i.shape is not None
           and all(isinstance(d, int) for d in i.shape) for i in infos):
        return [xp.zeros((0,) + tuple(i.shape), i.dtype) for i in infos]
    values = probe()
    return [xp.zeros((0,) + tuple(v.shape), xp.dtype_of(v)) for v in values]


def _stack(xp, values):
    if all(is_static(v) for v in values):
        return np.stack([np.asarray(v) for v in values])
    return xp.stack(values)


def _like(xp, value, ref):
    """``value`` as a backend array with ``ref``'s dtype (loop state keeps one type)."""
    return xp.astype(xp.asarray(value), xp.dtype_of(ref))


# -- If -------------------------------------------------------------------------------------------

@op("If", 1, raw=True)
def if_(xp, cond, *, then_branch, else_branch):
    if _concrete(xp, cond):
        return tuple(then_branch() if _as_bool(xp, cond) else else_branch())
    try:
        outputs = xp.cond(cond, then_branch, else_branch)
    except (TypeError, ValueError):  # the branches differ in shape or type: decide on the host
        raise NeedsStatic(0) from None
    return tuple(outputs)


# -- Loop -----------------------------------------------------------------------------------------

@op("Loop", 1, raw=True)
def loop(xp, max_trip_count, cond, *carried, body):
    n_scan = len(body.graph.outputs) - 1 - len(carried)
    args = (xp, max_trip_count, cond, list(carried), body, n_scan)
    if _counted(xp, max_trip_count, cond, body):
        _check_trips(int(_host(xp, max_trip_count).reshape(-1)[0]))
    control_known = _concrete(xp, max_trip_count) and _concrete(xp, cond)
    if control_known and _concrete(xp, list(carried)):
        try:
            return _loop_unrolled(*args)
        except _Traced:  # the body decides to stop from a traced value
            pass
    try:
        return _loop_traced(*args)
    except (_NotTraceable, _Traced, NeedsHost, NotConcrete, TypeError):
        pass
    if control_known:
        try:
            return _loop_unrolled(*args)
        except _Traced:
            pass
    raise NeedsStatic()


def max_loop_trips():
    """The most iterations a Loop may run: TRANSMUTER_MAX_LOOP_TRIPS, else 10**6 (a loop of an
    exported model runs a few hundred; 2**62 is a file that never ends)."""
    return int(os.environ.get("TRANSMUTER_MAX_LOOP_TRIPS") or 10**6)


def _check_trips(trips):
    if trips > max_loop_trips():
        raise TooLarge(f"the Loop would run {trips:,} iterations, past the {max_loop_trips():,} "
                       "a loop may run (TRANSMUTER_MAX_LOOP_TRIPS moves the limit)")


def _counted(xp, max_trip_count, cond, body):
    """Whether the loop runs exactly its trip count: a count known on the host, the condition
    absent or true, and the body passing its condition through (or a constant true), as
    exporters write ``for`` loops. Only such a loop's length is known before it runs."""
    if max_trip_count is None or not _concrete(xp, max_trip_count):
        return False
    if cond is not None and not (_concrete(xp, cond) and _as_bool(xp, cond)):
        return False
    graph = body.graph
    out, cond_in = graph.outputs[0].name, graph.inputs[1].name
    if out == cond_in:
        return True
    node = next((n for n in graph.nodes if out in n.outputs), None)
    return node is not None and node.op_type == "Identity" and node.inputs == [cond_in]


def _loop_unrolled(xp, max_trip_count, cond, carried, body, n_scan):
    trips = None if max_trip_count is None else int(_host(xp, max_trip_count).reshape(-1)[0])
    keep_going = True if cond is None else _as_bool(xp, cond)
    values, scans, i = list(carried), [], 0
    while keep_going and (trips is None or i < trips):
        if i == max_loop_trips():  # the body has not stopped it: refused, not run for ever
            _check_trips(i + 1)
        out = body(np.array(i, np.int64), np.array(keep_going), *values)
        keep_going = _as_bool(xp, out[0])
        values = list(out[1:1 + len(carried)])
        scans.append(out[1 + len(carried):])
        i += 1
    if scans:
        stacked = [_stack(xp, [s[k] for s in scans]) for k in range(n_scan)]
    elif n_scan:
        stacked = _empty_stack(xp, body.graph.outputs[1 + len(carried):],
                               lambda: body(np.array(0, np.int64), np.array(True), *carried)[
                                   1 + len(carried):])
    else:
        stacked = []
    return tuple(values) + tuple(stacked)


def _loop_traced(xp, max_trip_count, cond, carried, body, n_scan):
    if any(v is None or isinstance(v, list) for v in carried):
        raise _NotTraceable()  # sequences and optionals change structure between iterations
    init = [_like(xp, v, v) for v in carried]
    n = len(carried)
    if n_scan:
        # Scan outputs need a trip count on the host and a loop that never stops early.
        if max_trip_count is None or (cond is not None and not _as_bool(xp, cond)):
            raise _NotTraceable()
        trips = int(_host(xp, max_trip_count).reshape(-1)[0])
        if trips <= 0:
            return tuple(init) + tuple(_empty_stack(xp, body.graph.outputs[1 + n:], lambda: body(
                np.array(0, np.int64), np.array(True), *init)[1 + n:]))

        def step(values, i):
            out = body(i, np.array(True), *values)
            if not (is_static(out[0]) and bool(np.asarray(out[0]).reshape(-1)[0])):
                raise _NotTraceable()
            return [_like(xp, o, r) for o, r in zip(out[1:1 + n], values)], list(out[1 + n:])

        values, stacked = xp.scan(step, init, xp.arange(trips, dtype=np.int64), length=trips)
        return tuple(values) + tuple(stacked)

    def keep_going(state):
        i, flag, _ = state
        if max_trip_count is None:
            return flag
        return xp.logical_and(flag, i < xp.astype(xp.reshape(max_trip_count, ()), np.int64))

    def step(state):
        i, flag, values = state
        out = body(i, flag, *values)
        flag = xp.astype(xp.reshape(xp.asarray(out[0]), ()), np.bool_)
        return i + 1, flag, [_like(xp, o, r) for o, r in zip(out[1:], values)]

    flag0 = np.array(True) if cond is None else cond
    flag0 = xp.astype(xp.reshape(xp.asarray(flag0), ()), np.bool_)
    state = (xp.asarray(np.array(0, np.int64)), flag0, init)
    _, _, values = xp.while_loop(keep_going, step, state)
    return tuple(values)


# -- Scan -----------------------------------------------------------------------------------------

def _scan(xp, state, seqs, body, *, axes, dirs, out_axes, out_dirs):
    """Scan-9 semantics on already-split state and scan inputs; returns (final state, outputs)."""
    n_state = len(state)
    seqs = [xp.moveaxis(xp.asarray(s), a % s.ndim, 0)
            for s, a in zip(seqs, axes or [0] * len(seqs))]
    seqs = [xp.flip(s, axis=0) if d else s for s, d in zip(seqs, dirs or [0] * len(seqs))]
    steps = seqs[0].shape[0] if seqs else 0
    infos = body.graph.outputs[n_state:]
    if steps and not _concrete(xp, list(state) + seqs):
        try:
            def step(values, xs):
                out = body(*values, *xs)
                return [_like(xp, o, r) for o, r in zip(out[:n_state], values)], list(out[n_state:])

            state, ys = xp.scan(step, [_like(xp, v, v) for v in state], seqs, length=steps)
        except (_NotTraceable, _Traced, NeedsHost, NotConcrete, TypeError):
            state, ys = _scan_unrolled(xp, state, seqs, body, steps, infos)
    else:
        state, ys = _scan_unrolled(xp, state, seqs, body, steps, infos)
    outputs = []
    for k, y in enumerate(ys):
        y = xp.asarray(y)
        if out_dirs and out_dirs[k]:
            y = xp.flip(y, axis=0)
        axis = out_axes[k] if out_axes else 0
        outputs.append(xp.moveaxis(y, 0, axis % y.ndim))
    return list(state), outputs


def _scan_unrolled(xp, state, seqs, body, steps, infos):
    state, outs = list(state), []
    for t in range(steps):
        out = body(*state, *[s[t] for s in seqs])
        state = list(out[:len(state)])
        outs.append(out[len(state):])
    if outs:
        return state, [_stack(xp, [o[k] for o in outs]) for k in range(len(infos))]
    return state, _empty_stack(xp, infos, lambda: body(*state, *[s[0] for s in seqs])[len(state):])


@op("Scan", 9, raw=True)
def scan(xp, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    n_state = len(inputs) - num_scan_inputs
    state, outputs = _scan(xp, inputs[:n_state], inputs[n_state:], body, axes=scan_input_axes,
                           dirs=scan_input_directions, out_axes=scan_output_axes,
                           out_dirs=scan_output_directions)
    return tuple(state) + tuple(outputs)


@op("Scan", 8, static=(0,), raw=True)
def scan_v8(xp, sequence_lens, *inputs, body, num_scan_inputs, directions=None):
    """Scan-8: batch axis 0 on every input and output, scanning axis 1, per-batch lengths."""
    n_state = len(inputs) - num_scan_inputs
    batch = inputs[0].shape[0]
    full = inputs[n_state].shape[1] if num_scan_inputs else 0
    lens = [full] * batch if sequence_lens is None or np.size(sequence_lens) == 0 else [
        int(v) for v in np.asarray(sequence_lens).reshape(-1)]
    states, outs = [], []
    for b in range(batch):
        seqs = [s[b, :lens[b]] for s in inputs[n_state:]]
        state, ys = _scan(xp, [s[b] for s in inputs[:n_state]], seqs, body, axes=None,
                          dirs=directions, out_axes=None, out_dirs=None)
        if lens[b] < full:  # pad the outputs of a shorter sequence with zeros
            ys = [xp.concatenate([y, xp.zeros((full - lens[b],) + y.shape[1:], xp.dtype_of(y))])
                  for y in ys]
        states.append(state)
        outs.append(ys)
    n_out = len(outs[0]) if outs else 0
    return (tuple(xp.stack([s[k] for s in states]) for k in range(n_state))
            + tuple(xp.stack([o[k] for o in outs]) for k in range(n_out)))
