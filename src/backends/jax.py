"""JAX backend: jax.numpy plus lax primitives; compiles with jax.jit.

ONNX graphs are full of int64 and some float64; JAX narrows both unless x64 is on. We enable it
only inside ``scope()``, around tracing and running, never globally on the user's process."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import NotConcrete, common
from . import compile_cache, jax_kernels
from ..errors import InputError


class JaxNamespace(common.Namespace):
    module = jnp
    name = "jax"

    def asarray(self, x, dtype=None):
        return jnp.asarray(x, dtype=dtype)

    def astype(self, x, dtype):
        return jnp.asarray(x).astype(dtype)

    def dtype_of(self, x):
        return np.dtype(x.dtype)

    def bitcast(self, x, dtype):
        """The same bits read as ``dtype`` (of the same width)."""
        return lax.bitcast_convert_type(x, dtype)

    def after(self, x, y):
        # XLA runs work that reads only weights as early as it likes (opt-barriers are dropped on
        # CPU before scheduling), so x | min(bits of y, 0): the same x, data-dependent on y.
        first = lax.bitcast_convert_type(jnp.ravel(y)[:1].astype(jnp.float32), jnp.uint32)
        zero = jnp.minimum(first, jnp.uint32(0))
        return x | zero.astype(x.dtype).reshape((1,) * x.ndim)

    def stop_gradient(self, x):
        return lax.stop_gradient(x)

    def nbits_kernel(self, a, b, scales, zero_points, reference, **sizes):
        """MatMulNBits through the native kernel (backends/jax_kernels.py), or None."""
        return jax_kernels.matmul_nbits(a, b, scales, zero_points, reference, **sizes)

    def int8_kernel(self, a, b, b_zero_point, reference):
        """MatMulInteger through the native kernel (backends/jax_kernels.py), or None."""
        return jax_kernels.matmul_integer(a, b, b_zero_point, reference)

    def int8_weight_kernel(self, a, b, zero_point, scale, reference):
        """A float32 product by a dequantized 8-bit weight through the native kernel
        (backends/jax_kernels.py), or None."""
        return jax_kernels.matmul_int8_weight(a, b, zero_point, scale, reference)

    def softmax(self, x, axis=-1):
        return _softmax(x, axis)

    def log_softmax(self, x, axis=-1):
        return jax.nn.log_softmax(x, axis=axis)

    def erf(self, x):
        return jax.scipy.special.erf(x)

    def update_rows(self, x, new, start, axis):
        """Namespace.update_rows; one entry (a chat, a service's request) as one
        lax.dynamic_update_slice, which traces in 0.3-0.4 ms where the scatter takes 1.4-1.6 ms
        (a vmap of slices 1.2-1.3 ms): SmolLM2-135M's first chat call traces 120 cache writes."""
        if x.shape[0] != 1:
            return super().update_rows(x, new, start, axis)
        return lax.dynamic_update_slice_in_dim(x, new, jnp.reshape(start, (-1,))[0], axis)

    def index_update(self, x, index, updates, mode="set"):
        ref = x.at[index]
        return {"set": ref.set, "add": ref.add, "mul": ref.multiply, "max": ref.max,
                "min": ref.min}[mode](updates, mode="promise_in_bounds" if mode == "set" else None)

    def is_concrete(self, x):
        return not isinstance(x, jax.core.Tracer)

    def scan(self, f, init, xs, length):
        return lax.scan(f, init, xs, length=length)

    def while_loop(self, cond_fn, body_fn, init):
        return lax.while_loop(cond_fn, body_fn, init)

    def cond(self, pred, true_fn, false_fn):
        if not isinstance(pred, jax.core.Tracer):
            return true_fn() if bool(pred) else false_fn()
        return lax.cond(jnp.reshape(pred, ()).astype(bool), true_fn, false_fn)

    def conv(self, x, w, *, strides, pads, dilations, groups, lhs_dilation=None):
        """N-d convolution in ONNX layout (N, C, *spatial) with weights (M, C/groups, *kernel).

        ``pads`` is ONNX's [begin..., end...] (negative values crop); ``lhs_dilation`` spreads the
        input (a transposed convolution's strides)."""
        nd = x.ndim - 2
        return lax.conv_general_dilated(
            x, w, window_strides=tuple(strides), padding=list(zip(pads[:nd], pads[nd:])),
            lhs_dilation=None if lhs_dilation is None else tuple(lhs_dilation),
            rhs_dilation=tuple(dilations), feature_group_count=groups)

    def reduce_window(self, x, init, op, *, window, strides, padding, dilation=None):
        """Windowed reduction; ``op`` is "max", "min" or "add"; ``padding`` pairs per axis, filled
        with ``init``."""
        fn = {"max": lax.max, "min": lax.min, "add": lax.add}[op] if isinstance(op, str) else op
        return lax.reduce_window(x, jnp.asarray(init, x.dtype), fn, tuple(window), tuple(strides),
                                 [tuple(p) for p in padding],
                                 window_dilation=None if dilation is None else tuple(dilation))

    def fft(self, x, *, n, axis, kind="fft"):
        """``kind`` ("fft", "ifft", "rfft", "irfft") along ``axis`` at length ``n`` (NumPy's)."""
        return getattr(jnp.fft, kind)(x, n=n, axis=axis)

    def topk(self, x, k, *, axis=-1, largest=True):
        """Top k along ``axis``, ties broken towards the lower index (as ONNX asks)."""
        moved = jnp.moveaxis(x, axis, -1)
        if not largest:
            moved = -moved if jnp.issubdtype(moved.dtype, jnp.floating) or jnp.issubdtype(
                moved.dtype, jnp.signedinteger) else ~moved
        values, indices = lax.top_k(moved, k)
        values = jnp.take_along_axis(jnp.moveaxis(x, axis, -1), indices, axis=-1)
        return jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices.astype(jnp.int64), -1, axis)

    def random(self, kind, shape, dtype, *, seed, key=None):
        """Draws of ``kind`` ("uniform" in [0, 1), "normal") from the key of ``seed`` (a uint32),
        or from ``key`` (a key threaded through the run) with ``seed`` folded in."""
        k = jax.random.key(seed) if key is None else jax.random.fold_in(key, seed)
        draw = {"uniform": jax.random.uniform, "normal": jax.random.normal}[kind]
        return draw(k, tuple(shape), dtype)


# XLA's CPU compiler hands fused regions to YNNPACK by default; on transformer graphs that ran
# slower than its own emitters (all-MiniLM-L6-v2, 32 rows x 128 tokens: 1.41 s with it, 1.03 s
# without; x 256: 3.4 s -> 2.3 s; decoder steps unchanged; 2 CPU cores, jaxlib 0.10). Set per
# compiled function, so the rest of the user's process keeps XLA's defaults. Dots of weights
# dequantized in the graph (MatMulNBits: W is (N, K), a transposed operand) run 2.5x slower in
# XLA's emitter than in YNNPACK, so those graphs give their dots, alone, to YNNPACK (int4 decoder,
# 64-token prompt: 218 -> 119 ms at batch 1, 681 -> 590 ms and decode steps -10% at batch 8); and
# so do graphs that multiply by a transposed weight, also an (N, K) operand: a tied embedding as
# the lm_head (Whisper's 51,865 x 384: 2.3 ms for one row in XLA's emitter, 23-24 ms for 2 or 4,
# 3.5 ms in YNNPACK; whisper-tiny's cache step at batch 4: 25 -> 8.7 ms).
_CPU_OPTIONS = {
    False: {"xla_cpu_experimental_ynn_fusion_type": ""},
    True: {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"},
}
_options = {}


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axis):
    return jax.nn.softmax(x, axis=axis)


@_softmax.defjvp
def _softmax_jvp(axis, primals, tangents):
    """jax.nn.softmax's own rule, but a row of all -inf (a padded query that every key is masked
    from) gets a zero tangent: its output is NaN, as ONNX defines it, and exported attention
    replaces it by 0 (Where(IsNaN)), yet NaN * 0 in the plain rule would poison every gradient."""
    (x,), (t,) = primals, tangents
    y = _softmax(x, axis)
    safe = jnp.where(jnp.isnan(y), 0, y)
    return y, safe * (t - (safe * t).sum(axis, keepdims=True))


def _compiler_options(library_dots=False):
    """The CPU options above when the default device is a CPU and this jaxlib knows them."""
    if not _options:
        # the probe is a compile in every process, made before the persistent cache is on
        # (~0.04 s): both settings set one option, so where the library-dot value compiles the
        # other does too (one probe, not two: whisper-tiny's pipeline made both)
        _options[True] = _probe(_CPU_OPTIONS[True])
        _options[False] = dict(_CPU_OPTIONS[False]) if _options[True] else \
            _probe(_CPU_OPTIONS[False])
    return _options[library_dots]


def _probe(options):
    """``options`` where the default device is a CPU and this jaxlib compiles with them."""
    if jax.default_backend() != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=options)(np.float32(0))
        return dict(options)
    except Exception:  # an older or newer jaxlib without the option
        return None


class JaxBackend:
    name = "jax"
    xp = JaxNamespace()
    takes_host_arrays = True  # a jitted call moves NumPy arguments to the device itself
    lowers = True  # compile's functions trace (lower) apart from compiling: compile_ahead.py

    def scope(self):
        return jax.enable_x64(True)

    def asarray(self, value):
        return jnp.asarray(value)

    def put_weight(self, value):
        """A weight handed over at load (a NumPy array nobody writes to again) as a device array.
        jnp.asarray compiles an identity per shape and dtype (all-MiniLM-L6-v2: 8 compiles,
        0.2-0.3 s of every process's load); device_put compiles nothing, and on CPU may share
        the NumPy buffer, which is why it is only for arrays nobody mutates."""
        return jax.device_put(value)

    def is_array(self, x):
        return isinstance(x, jax.Array)

    def check_params(self, params):
        """Refuse float64 params being differentiated while x64 is off: jax.grad computes the
        backward pass after the call returns, outside ``scope()``, where JAX would narrow it to
        float32 (a warning, then gradients off by ~1e-8)."""
        if jax.config.jax_enable_x64:
            return
        for name, value in params.items():
            if isinstance(value, jax.core.Tracer) and value.dtype == np.float64:
                raise InputError(f"params[{name!r}] is float64 and being differentiated with "
                                 "JAX's 64-bit mode off, so its gradient would be computed in "
                                 "float32: run jax.grad inside `with jax.enable_x64(True):` (or "
                                 "set JAX_ENABLE_X64=1)")

    def random_key(self, seed):
        return jax.random.PRNGKey(seed & 0xFFFFFFFF)

    def to_host(self, x):
        if isinstance(x, jax.core.Tracer):
            raise NotConcrete()
        return np.asarray(x)

    def compile(self, fn, donate_argnums=(), library_dots=False):
        """jax.jit with the CPU options above (``library_dots``: the function multiplies by
        weights it dequantizes or transposes; compiled.library_dots)."""
        plain = jax.jit(fn, donate_argnums=donate_argnums)
        options = _compiler_options(library_dots)
        if options is None:
            return plain
        tuned = jax.jit(fn, donate_argnums=donate_argnums, compiler_options=options)

        def call(*args):
            try:
                return tuned(*args)
            except ValueError as e:  # inside the user's own jit or grad: options are top-level only
                if "top-level" not in str(e):
                    raise
                return plain(*args)

        call.lower = tuned.lower  # jit's way to read what it compiles (tests read the HLO)
        return call

    def abstract(self, shape, dtype):
        """A value of ``shape`` and ``dtype`` known only by them, for lowering ahead."""
        return jax.ShapeDtypeStruct(tuple(shape), dtype)

    def block(self, tree):
        return jax.block_until_ready(tree)

    def persistent_cache(self, option=None):
        """A context for a call that compiles: JAX's persistent compilation cache as ``option``
        (``compile_cache=``) asks, turned on at the first compile (backends/compile_cache.py)."""
        return compile_cache.scope(option)


BACKEND = JaxBackend()
