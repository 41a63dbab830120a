"""Recurrent layers: RNN, GRU, LSTM. The time loop is written once (``_run``): per direction, the
input projections for every step are one matmul, then the backend's ``scan`` primitive walks the
time steps (lax.scan on JAX), holding the state of a batch entry past its sequence length."""

import numpy as np

from .registry import op
from .select import reverse_sequence

# name -> (function of (xp, x, alpha, beta), default alpha, default beta); None: not used.
_ACTIVATIONS = {
    "relu": (lambda xp, x, a, b: xp.maximum(x, 0), None, None),
    "tanh": (lambda xp, x, a, b: xp.tanh(x), None, None),
    "sigmoid": (lambda xp, x, a, b: 1 / (1 + xp.exp(-x)), None, None),
    "affine": (lambda xp, x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda xp, x, a, b: xp.where(x > a, x, 0), 1.0, None),
    "scaledtanh": (lambda xp, x, a, b: a * xp.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda xp, x, a, b: xp.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * (xp.exp(x) - 1)), 1.0, None),
    "softsign": (lambda xp, x, a, b: x / (1 + xp.abs(x)), None, None),
    "softplus": (lambda xp, x, a, b: xp.logaddexp(x, 0), None, None),
}


def _activations(names, alphas, betas, defaults, n_dirs):
    """One list of callables per direction; alphas and betas are consumed in order by the
    activations that take them."""
    names = list(names) if names else list(defaults) * n_dirs
    alphas, betas = list(alphas or []), list(betas or [])
    fns = []
    for name in names:
        fn, da, db = _ACTIVATIONS[name.lower()]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        fns.append(lambda xp, x, fn=fn, a=a, b=b: fn(xp, x, a, b))
    per = len(names) // n_dirs
    return [fns[d * per:(d + 1) * per] for d in range(n_dirs)]


def _run(xp, cell, x, w, r, b, lens, states, *, gates, direction, layout, clip, project=None):
    """Shared driver. ``cell(xp, xw, state, r, rb, d, clip, live) -> new state`` for one step,
    where ``xw`` is the input projection plus its bias, ``live`` the rows still running (None:
    all); the first state is the hidden state. Returns Y and the final states, in ONNX layout.
    ``project(d, x, valid) -> x @ W[d]^T`` replaces the float product of
    the inputs (DynamicQuantizeLSTM's weights are integers, (dirs, input, gates * hidden));
    ``valid`` marks the steps of x that some sequence reaches (None: all)."""
    if layout:
        x = xp.transpose(x, (1, 0, 2))
        states = [None if s is None else xp.transpose(s, (1, 0, 2)) for s in states]
    steps, batch = x.shape[0], x.shape[1]
    n_dirs = w.shape[0]
    # R: LSTM's is (dirs, gates * hidden, hidden), DynamicQuantizeLSTM's (dirs, hidden, gates *
    # hidden)
    hidden = r.shape[1] if project is not None else r.shape[-1]
    dtype = xp.dtype_of(x)
    mask = live = None
    if lens is not None:
        t = xp.arange(steps, dtype=np.int64)[:, None]
        mask = t < xp.astype(lens, np.int64)[None, :]
        # Rows whose state entering step t is still running (ORT's Y zeroes it after a row's
        # last step, and the quantized LSTM quantizes that zero).
        live = t <= xp.astype(lens, np.int64)[None, :]
    ys, finals = [], []
    for d in range(n_dirs):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        xd = x
        if reverse:
            xd = xp.flip(x, axis=0) if lens is None else reverse_sequence(xp, x, lens)
        wb = b[d, :gates * hidden] if b is not None else 0
        rb = b[d, gates * hidden:] if b is not None else xp.zeros((gates * hidden,), dtype)
        if project is None:
            xw = xp.matmul(xd, xp.transpose(w[d])) + wb  # (steps, batch, gates * hidden)
        else:
            valid = None if lens is None else xp.arange(steps, dtype=np.int64) < xp.max(
                xp.astype(lens, np.int64))
            xw = project(d, xd, valid) + wb
        init = [xp.zeros((batch, hidden), dtype) if s is None else s[d] for s in states]
        init = [xp.astype(s, dtype) for s in init]

        def step(state, inputs, d=d):
            xw_t, keep, live = inputs[0], *(inputs[1:] if len(inputs) > 1 else (None, None))
            new = cell(xp, xw_t, state, r[d], rb, d, clip, live)
            if keep is not None:
                k = keep[:, None]
                new = [xp.where(k, n, s) for n, s in zip(new, state)]
                return new, [xp.where(k, new[0], xp.zeros((), dtype))]
            return new, [new[0]]

        xs = [xw] if mask is None else [xw, mask, live]
        if steps:
            final, (y,) = xp.scan(step, init, xs, length=steps)
        else:
            final, y = init, xp.zeros((0, batch, hidden), dtype)
        if reverse:
            y = xp.flip(y, axis=0) if lens is None else reverse_sequence(xp, y, lens)
        ys.append(y)
        finals.append(final)
    y = xp.stack(ys, axis=1)  # (steps, dirs, batch, hidden)
    outs = [xp.stack([f[k] for f in finals]) for k in range(len(states))]
    if layout:
        y = xp.transpose(y, (2, 0, 1, 3))
        outs = [xp.transpose(o, (1, 0, 2)) for o in outs]
    return (y, *outs)


def _clip(xp, v, clip):
    return v if clip is None else xp.clip(v, -clip, clip)


def _n_dirs(direction):
    return 2 if direction == "bidirectional" else 1


# -- RNN ------------------------------------------------------------------------------------------

def _rnn(xp, x, w, r, b, lens, h0, *, activations, alpha, beta, clip, direction, layout):
    acts = _activations(activations, alpha, beta, ["Tanh"], _n_dirs(direction))

    def cell(xp, xw, state, rd, rb, d, clip, live):
        (h,) = state
        return [acts[d][0](xp, _clip(xp, xw + xp.matmul(h, xp.transpose(rd)) + rb, clip))]

    return _run(xp, cell, x, w, r, b, lens, [h0], gates=1, direction=direction, layout=layout,
                clip=clip)


@op("RNN", 1)
def rnn_v1(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None,
           direction="forward", output_sequence=0):
    return _rnn(xp, x, w, r, b, sequence_lens, initial_h, activations=activations,
                alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                layout=0)


@op("RNN", 14)
def rnn(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=None, activation_alpha=None, activation_beta=None, clip=None,
        direction="forward", layout=0):
    return _rnn(xp, x, w, r, b, sequence_lens, initial_h, activations=activations,
                alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                layout=layout)


# -- GRU ------------------------------------------------------------------------------------------

def _gru(xp, x, w, r, b, lens, h0, *, activations, alpha, beta, clip, direction, layout,
         linear_before_reset):
    acts = _activations(activations, alpha, beta, ["Sigmoid", "Tanh"], _n_dirs(direction))

    def cell(xp, xw, state, rd, rb, d, clip, live):
        (h,) = state
        f, g = acts[d]
        n = h.shape[-1]
        rz, rr, rh = rd[:n], rd[n:2 * n], rd[2 * n:]
        z = f(xp, _clip(xp, xw[:, :n] + xp.matmul(h, xp.transpose(rz)) + rb[:n], clip))
        reset = f(xp, _clip(xp, xw[:, n:2 * n] + xp.matmul(h, xp.transpose(rr)) + rb[n:2 * n],
                            clip))
        if linear_before_reset:
            hh = xw[:, 2 * n:] + reset * (xp.matmul(h, xp.transpose(rh)) + rb[2 * n:])
        else:
            hh = xw[:, 2 * n:] + xp.matmul(reset * h, xp.transpose(rh)) + rb[2 * n:]
        hh = g(xp, _clip(xp, hh, clip))
        return [(1 - z) * hh + z * h]

    return _run(xp, cell, x, w, r, b, lens, [h0], gates=3, direction=direction, layout=layout,
                clip=clip)


@op("GRU", 1)
def gru_v1(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None,
           direction="forward", linear_before_reset=0, output_sequence=0):
    return _gru(xp, x, w, r, b, sequence_lens, initial_h, activations=activations,
                alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                layout=0, linear_before_reset=linear_before_reset)


@op("GRU", 14)
def gru(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
        activations=None, activation_alpha=None, activation_beta=None, clip=None,
        direction="forward", layout=0, linear_before_reset=0):
    return _gru(xp, x, w, r, b, sequence_lens, initial_h, activations=activations,
                alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                layout=layout, linear_before_reset=linear_before_reset)


# -- LSTM -----------------------------------------------------------------------------------------

def _lstm(xp, x, w, r, b, lens, h0, c0, p, *, activations, alpha, beta, clip, direction, layout,
          input_forget, project=None, recur=None):
    """``project`` and ``recur(d, h, live) -> h @ R[d]^T`` replace the float products (see _run)."""
    acts = _activations(activations, alpha, beta, ["Sigmoid", "Tanh", "Tanh"], _n_dirs(direction))

    def cell(xp, xw, state, rd, rb, d, clip, live):
        h, c = state
        f, g, hact = acts[d]
        n = h.shape[-1]
        hr = xp.matmul(h, xp.transpose(rd)) if recur is None else recur(d, h, live)
        pre = xw + hr + rb  # gates i, o, f, c
        pi, po, pf = (p[d, :n], p[d, n:2 * n], p[d, 2 * n:]) if p is not None else (0, 0, 0)
        i = f(xp, _clip(xp, pre[:, :n] + pi * c, clip))
        fg = 1 - i if input_forget else f(xp, _clip(xp, pre[:, 2 * n:3 * n] + pf * c, clip))
        cc = g(xp, _clip(xp, pre[:, 3 * n:], clip))
        c_new = fg * c + i * cc
        o = f(xp, _clip(xp, pre[:, n:2 * n] + po * c_new, clip))
        return [o * hact(xp, c_new), c_new]

    return _run(xp, cell, x, w, r, b, lens, [h0, c0], gates=4, direction=direction, layout=layout,
                clip=clip, project=project)


@op("LSTM", 1)
def lstm_v1(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
            hidden_size=None, activations=None, activation_alpha=None, activation_beta=None,
            clip=None, direction="forward", input_forget=0, output_sequence=0):
    return _lstm(xp, x, w, r, b, sequence_lens, initial_h, initial_c, p, activations=activations,
                 alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                 layout=0, input_forget=input_forget)


@op("LSTM", 14)
def lstm(xp, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
         hidden_size=None, activations=None, activation_alpha=None, activation_beta=None,
         clip=None, direction="forward", input_forget=0, layout=0):
    return _lstm(xp, x, w, r, b, sequence_lens, initial_h, initial_c, p, activations=activations,
                 alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                 layout=layout, input_forget=input_forget)
