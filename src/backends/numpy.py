"""The host namespace: NumPy, for static values (constant folding while tracing).

Primitives NumPy lacks (convolution, pooling windows, erf, ...) are computed by JAX on the CPU in
compile-time-eval mode, so they stay concrete even while an outer function is being traced."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from . import common
from .jax import BACKEND as jax_backend


class NumpyNamespace(common.Namespace):
    module = np
    name = "numpy"

    def asarray(self, x, dtype=None):
        return np.asarray(x, dtype=dtype)

    def astype(self, x, dtype):
        return np.asarray(x).astype(dtype, copy=False)

    def dtype_of(self, x):
        return np.asarray(x).dtype

    def bitcast(self, x, dtype):
        """The same bits read as ``dtype`` (of the same width)."""
        return np.asarray(x).view(dtype)

    def erf(self, x):
        x = np.asarray(x)
        return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()

    def index_update(self, x, index, updates, mode="set"):
        out = np.array(x, copy=True)
        if mode == "set":
            out[index] = updates
        else:
            ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[mode]
            ufunc.at(out, index, updates)
        return out

    def is_concrete(self, x):
        return not isinstance(x, jax.core.Tracer)  # a traced value read from an outer scope

    def cond(self, pred, true_fn, false_fn):
        return true_fn() if bool(pred) else false_fn()

    def __getattr__(self, name):
        # Primitives only a device namespace has: evaluate them with JAX, eagerly, and come back.
        if name in common.PRIMITIVES:
            fn = getattr(jax_backend.xp, name)

            def host(*args, **kwargs):
                with jax.ensure_compile_time_eval(), jax.enable_x64(True):
                    out = fn(*args, **kwargs)
                return jax.tree_util.tree_map(np.asarray, out)

            return host
        return getattr(np, name)


XP = NumpyNamespace()
_ = jnp
