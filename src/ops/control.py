"""Control flow: If, Loop, Scan. Subgraph attributes arrive as callables returning output lists.

If with a host condition runs one branch inline; with a traced condition it becomes the backend's
``cond`` (lax.cond) when both branches give the same shapes, else the node runs eagerly (a break).
Loop and Scan unroll on the host's trip count; a loop whose continuation is only known inside a
trace runs eagerly (a break)."""

import numpy as np

from .registry import NeedsStatic, op
from ..runner import is_static


def _as_bool(value):
    if not is_static(value):
        raise NeedsStatic()
    return bool(np.asarray(value).reshape(-1)[0])


@op("If", 1)
def if_(xp, cond, *, then_branch, else_branch):
    if is_static(cond):
        outputs = then_branch() if _as_bool(cond) else else_branch()
    else:
        try:
            outputs = xp.cond(cond, then_branch, else_branch)
        except TypeError:  # branches differ in shape or type: decide on the host
            raise NeedsStatic(0) from None
    return tuple(outputs)


@op("Loop", 1)
def loop(xp, max_trip_count, cond, *carried, body):
    trips = None if max_trip_count is None else int(np.asarray(max_trip_count).reshape(-1)[0])
    keep_going = True if cond is None else _as_bool(cond)
    values = list(carried)
    scans = []
    i = 0
    while keep_going and (trips is None or i < trips):
        out = body(np.array(i, np.int64), np.array(keep_going))
        keep_going = _as_bool(out[0])
        values = out[1:1 + len(carried)]
        scans.append(out[1 + len(carried):])
        i += 1
    n_scan = len(scans[0]) if scans else _n_scan_outputs(body, carried)
    stacked = [xp.stack([s[k] for s in scans]) if scans else None for k in range(n_scan)]
    return tuple(values) + tuple(stacked)


def _n_scan_outputs(body, carried):
    return 0


@op("Scan", 9)
def scan(xp, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    n_state = len(inputs) - num_scan_inputs
    state, seqs = list(inputs[:n_state]), list(inputs[n_state:])
    axes = scan_input_axes or [0] * num_scan_inputs
    dirs = scan_input_directions or [0] * num_scan_inputs
    seqs = [xp.moveaxis(s, a, 0) for s, a in zip(seqs, axes)]
    seqs = [xp.flip(s, axis=0) if d else s for s, d in zip(seqs, dirs)]
    steps = seqs[0].shape[0] if seqs else 0
    outs = []
    for t in range(steps):
        out = body(*state, *[s[t] for s in seqs])
        state = list(out[:n_state])
        outs.append(out[n_state:])
    n_out = len(outs[0]) if outs else 0
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    stacked = []
    for k in range(n_out):
        y = xp.stack([o[k] for o in outs])
        if out_dirs[k]:
            y = xp.flip(y, axis=0)
        stacked.append(xp.moveaxis(y, 0, out_axes[k] % y.ndim))
    return tuple(state) + tuple(stacked)
