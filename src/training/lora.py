"""Low-rank adapters on an ONNX export's MatMul / Gemm weights (``training.lora``).

Each chosen weight W (as the graph holds it: [in, out] for MatMul, either way for Gemm) trains as
W + (alpha / rank) * A @ B, with A [W rows, rank] drawn as PEFT draws its lora_A (Kaiming-uniform,
a = sqrt(5)) and B [rank, W columns] zero, so the adapted model starts as the original. Only A and
B train; ``merge`` gives the merged weights by initializer name, which ``model.apply`` runs and
``transmuter.save`` writes (the saved file has no adapter: the same graph, new weights).
"""

import math

import jax.numpy as jnp
import numpy as np

from ..errors import InputError
from ..engine.graph import walk

_WEIGHT_OPS = {"MatMul": 1, "Gemm": 1}  # op -> the input that holds the weight


class Adapters:
    """``init(seed)`` -> the adapter params {weight name: {"A": ..., "B": ...}};
    ``merge(params)`` -> {weight name: merged weight}, traced under jit as any array math."""

    def __init__(self, model, names, rank, alpha):
        self.model, self.names, self.rank, self.alpha = model, tuple(names), rank, alpha
        self.scale = alpha / rank

    def __repr__(self):
        return f"Adapters({len(self.names)} weights, rank={self.rank}, alpha={self.alpha})"

    def init(self, seed=0):
        rng = np.random.default_rng(seed)
        params = {}
        for name in self.names:
            rows, cols = self.model.params[name].shape
            bound = 1 / math.sqrt(rows)  # kaiming_uniform(a=sqrt(5)) over fan_in = rows
            params[name] = {"A": jnp.asarray(rng.uniform(-bound, bound, (rows, self.rank)),
                                             jnp.float32),
                            "B": jnp.zeros((self.rank, cols), jnp.float32)}
        return params

    def merge(self, params):
        missing = set(self.names) - set(params)
        if missing:
            raise InputError(f"adapter params lack {sorted(missing)[:3]}: make them with "
                             "adapters.init()")
        return {name: self.model.params[name] + self.scale * (p["A"] @ p["B"])
                for name, p in params.items()}


def adapters(model, *, rank=8, alpha=None, targets=None):
    """Adapters of ``rank`` (``alpha`` default: rank, a scale of 1) on the float32 2-D weights
    that MatMul / Gemm nodes read; ``targets``: a list of initializer names or a predicate
    ``name -> bool`` over those weights (default: all of them)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"rank must be a positive int, got {rank!r}")
    alpha = rank if alpha is None else alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise InputError(f"alpha must be a positive number, got {alpha!r}")
    found = _weights(model)
    if not found:
        raise InputError("This model has no float32 MatMul or Gemm weights to adapt (a "
                         "quantized or half export?): load the fp32 export for LoRA")
    if targets is None:
        names = found
    elif callable(targets):
        names = [n for n in found if targets(n)]
    else:
        names = list(targets)
        unknown = [n for n in names if n not in found]
        if unknown:
            raise InputError(f"lora targets {unknown[:3]} are not float32 MatMul/Gemm weights "
                             f"of this model; those are e.g. {found[:3]}")
    if not names:
        raise InputError("lora targets chose no weight")
    return Adapters(model, names, rank, alpha)


def _weights(model):
    """Names of the float32 2-D initializers that a MatMul or Gemm reads as its weight."""
    names = []
    for node in walk(model.graph):
        at = _WEIGHT_OPS.get(node.op_type)
        if at is None or node.domain not in ("", "ai.onnx") or len(node.inputs) <= at:
            continue
        name = node.inputs[at]
        value = model.params.get(name)
        if value is not None and value.ndim == 2 and np.dtype(value.dtype) == np.float32 \
                and name not in names:
            names.append(name)
    return names
