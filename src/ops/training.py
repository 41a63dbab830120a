"""Optimizer steps of the ai.onnx.preview.training domain: Adagrad, Momentum, Adam.

Inputs are R (learning rate), T (step count), then the n tensors to optimize, their n gradients
and their n accumulators of each kind (X1..Xn, G1..Gn, V1..Vn[, H1..Hn]). Outputs are the new
tensors, then the new accumulators, kind by kind. T is read as an array (no host round trip)."""

from .registry import op

DOMAIN = "ai.onnx.preview.training"


def _groups(inputs, kinds, name):
    """(x_i, g_i, acc_i...) per optimized tensor from the flat input list."""
    if len(inputs) % kinds:
        raise ValueError(f"{name} takes R, T and {kinds} inputs per optimized tensor; got "
                         f"{len(inputs) + 2} inputs")
    n = len(inputs) // kinds
    return [tuple(inputs[k * n + i] for k in range(kinds)) for i in range(n)]


def _flat(results):
    """[(x_1, a_1, ...), (x_2, a_2, ...)] -> (x_1, x_2, ..., a_1, a_2, ...)."""
    return tuple(v for kind in zip(*results) for v in kind)


def _scalar(xp, v, like):
    """A one-element input or an attribute as a 0-d array of ``like``'s dtype."""
    dt = xp.dtype_of(like)
    return xp.asarray(v, dt) if isinstance(v, (int, float)) else xp.astype(xp.reshape(v, ()), dt)


@op("Adagrad", 1, domain=DOMAIN)
def adagrad(xp, r, t, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    out = []
    for x, g, h in _groups(inputs, 3, "Adagrad"):
        rate = _scalar(xp, r, x) / (1 + _scalar(xp, t, x) * decay_factor)
        g = norm_coefficient * x + g
        h = h + g * g
        out.append((x - rate * g / (xp.sqrt(h) + epsilon), h))
    return _flat(out)


@op("Momentum", 1, domain=DOMAIN)
def momentum(xp, r, t, *inputs, alpha, beta, mode, norm_coefficient):
    """Standard or Nesterov momentum; the gradient's coefficient is 1 on the first step (T=0)."""
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum mode must be 'standard' or 'nesterov', not {mode!r}")
    out = []
    for x, g, v in _groups(inputs, 3, "Momentum"):
        rate = _scalar(xp, r, x)
        coefficient = xp.where(xp.reshape(t, ()) > 0, _scalar(xp, beta, x), _scalar(xp, 1, x))
        g = norm_coefficient * x + g
        v = alpha * v + coefficient * g
        step = v if mode == "standard" else g + alpha * v
        out.append((x - rate * step, v))
    return _flat(out)


@op("Adam", 1, domain=DOMAIN)
def adam(xp, r, t, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    """Adam with bias correction from the second step on (T > 0)."""
    out = []
    for x, g, v, h in _groups(inputs, 4, "Adam"):
        steps = _scalar(xp, t, x)
        corrected = (_scalar(xp, r, x) * xp.sqrt(1 - _scalar(xp, beta, x) ** steps)
                     / (1 - _scalar(xp, alpha, x) ** steps))
        rate = xp.where(xp.reshape(t, ()) > 0, corrected, _scalar(xp, r, x))
        g = norm_coefficient * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * (g * g)
        x = x - rate * (v / (xp.sqrt(h) + epsilon))
        out.append(((1 - norm_coefficient_post) * x, v, h))
    return _flat(out)
