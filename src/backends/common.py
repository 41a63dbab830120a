"""What every array namespace shares: NumPy's names, plus helpers written once over them."""

import numpy as np

# Primitives that the host namespace borrows from JAX (evaluated eagerly on the CPU).
PRIMITIVES = frozenset({"conv", "conv_transpose", "reduce_window", "topk", "fft"})


class Namespace:
    """Base of the array namespaces. Subclasses set ``module`` (np, jnp) or override names."""

    module = np
    name = "base"

    def __getattr__(self, name):
        return getattr(self.module, name)

    def softmax(self, x, axis=-1):
        e = self.exp(x - self.max(x, axis=axis, keepdims=True))
        return e / self.sum(e, axis=axis, keepdims=True)

    def log_softmax(self, x, axis=-1):
        shifted = x - self.max(x, axis=axis, keepdims=True)
        return shifted - self.log(self.sum(self.exp(shifted), axis=axis, keepdims=True))

    def is_float(self, x):
        from .. import dtypes

        return dtypes.is_float(self.dtype_of(x))

    def is_half(self, x):
        from .. import dtypes

        return dtypes.is_half(self.dtype_of(x))
