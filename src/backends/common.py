"""What every array namespace shares: NumPy's names, plus helpers written once over them."""

import numpy as np

from .. import dtypes
from . import NotConcrete

# Primitives that the host namespace borrows from JAX (evaluated eagerly on the CPU).
PRIMITIVES = frozenset({"conv", "conv_transpose", "reduce_window", "topk", "fft", "random"})


class MissingDtype(TypeError):
    """The backend has no arrays of a dtype (MLX: float8, int4/int2, float4). The runner then runs
    the node on the host, where NumPy holds every ONNX type through ml_dtypes."""


class Namespace:
    """Base of the array namespaces. Subclasses set ``module`` (np, jnp) or override names."""

    module = np
    name = "base"

    def __getattr__(self, name):
        return getattr(self.module, name)

    def after(self, x, y):
        """Integer ``x`` unchanged, but as a value that exists only once ``y`` does: work on it
        waits for ``y`` (see JaxNamespace). Eager namespaces run in program order already."""
        return x

    def stop_gradient(self, x):
        """``x``, seen as a constant by differentiation (namespaces without it have none)."""
        return x

    def softmax(self, x, axis=-1):
        e = self.exp(x - self.max(x, axis=axis, keepdims=True))
        return e / self.sum(e, axis=axis, keepdims=True)

    def log_softmax(self, x, axis=-1):
        shifted = x - self.max(x, axis=axis, keepdims=True)
        return shifted - self.log(self.sum(self.exp(shifted), axis=axis, keepdims=True))

    def is_float(self, x):
        return dtypes.is_float(self.dtype_of(x))

    def is_half(self, x):
        return dtypes.is_half(self.dtype_of(x))

    def is_concrete(self, x):
        """False for a value that exists only inside a trace (jit, compile); True otherwise."""
        return True

    def update_rows(self, x, new, start, axis):
        """``x`` with ``new`` written along ``axis`` at [start[b], start[b] + n) in each entry b
        of axis 0 (``new``: ``x``'s shape but n along ``axis``; ``start``: [B] ints, moved into
        [0, length - n] as lax.dynamic_update_slice moves them). A scatter here; JAX writes a lone
        entry's block as one dynamic slice, which traces 4x faster."""
        start = self.clip(self.reshape(start, [-1] + [1] * (x.ndim - 1)), 0,
                          x.shape[axis] - new.shape[axis])
        index = []
        for d in range(x.ndim):
            shape = [1] * x.ndim
            shape[d] = new.shape[d]
            steps = self.reshape(self.arange(new.shape[d], dtype=np.int64), shape)
            index.append(start + steps if d == axis else steps)
        return self.index_update(x, tuple(index), new)

    # Loops, as Python loops; a device namespace maps them to its compiled loops (lax.scan, ...).
    def scan(self, f, init, xs, length):
        """``f(carry, x) -> (carry, list of arrays)`` over the leading axis of ``xs`` (an array or
        a list of arrays); returns the last carry and each output stacked over the steps."""
        carry, ys = init, []
        for t in range(length):
            carry, y = f(carry, [x[t] for x in xs] if isinstance(xs, list) else xs[t])
            ys.append(y)
        if not ys:
            raise NotImplementedError("a zero-length scan has no output shapes to stack")
        return carry, [self.stack([y[k] for y in ys]) for k in range(len(ys[0]))]

    def while_loop(self, cond_fn, body_fn, init):
        """Raises NotConcrete when the condition is only known inside a trace."""
        state = init
        while True:
            flag = cond_fn(state)
            if not self.is_concrete(flag):
                raise NotConcrete()
            if not bool(flag):
                return state
            state = body_fn(state)
