"""The JAX CPU backend's native primitives: kernels/ (C, through ``jax.ffi``) where they apply,
else None, and the caller takes its pure-JAX path, which stays the reference and the fallback.

Each primitive lowers to the kernel on CPU only (``lax.platform_dependent``: GPU and TPU compile
the reference, where XLA fuses the dequantization into the product itself), and differentiates
through the reference (``custom_vjp``: the backward pass uses the dequantized weights; quantized
weights have no gradients)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import kernels

_TARGETS = {"transmuter_matmul_nbits": "TransmuterMatMulNBits",
            "transmuter_matmul_integer": "TransmuterMatMulInteger",
            "transmuter_matmul_int8_weight": "TransmuterMatMulInt8Weight"}
_registered = set()

# Rows of A up to which MatMulNBits goes to the kernel; past them XLA's path (the weight
# dequantized once, then a GEMM) wins. bench/matmul_nbits.py --rows 32,64,128,256, 4-bit block 32
# (2 cores, AVX-512 VNNI, load 7-8), kernel time / XLA time: a decoder layer's weights (1536x576,
# 576x1536, 3072x1024) 0.33-0.9 at 32 rows, 1.05-1.3 at 64; an lm_head (49152x576) 0.3 at 32,
# 0.57 at 64, 0.74 at 128, 1.25 at 256. Up to 16 rows the kernel is 1.5-10x faster throughout.
NBITS_MAX_ROWS = 32
NBITS_MAX_ROWS_LARGE = 128  # for weights of 2^24 elements and more (lm_heads)


def _target(name):
    """``name``'s FFI target registered with JAX, or None where the kernels are off."""
    lib = kernels.library()
    if lib is None:
        return None
    if name not in _registered:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, _TARGETS[name])),
                                    platform="cpu")
        _registered.add(name)
    return name


def _with_reference(kernel, reference, *args):
    """kernel(*args) on CPU, reference(*args) elsewhere; gradients through the reference."""
    def call(*xs):
        return lax.platform_dependent(*xs, cpu=kernel, default=reference)

    f = jax.custom_vjp(call)
    f.defvjp(lambda *xs: (call(*xs), xs), lambda xs, g: jax.vjp(reference, *xs)[1](g))
    return f(*args)


def matmul_nbits(a, b, scales, zero_points, reference, *, k, n, bits, block_size,
                 accuracy_level):
    """MatMulNBits' A (..., K) @ W^T (no bias) through the kernel, or None where it does not
    apply: bits other than 4 and 8, packed (uint8) zero points (the loader turns an
    initializer's into floats), more rows than NBITS_MAX_ROWS(_LARGE), or kernels off.
    ``reference(a, b, scales, zero_points)`` is the pure-JAX product."""
    target = _target("transmuter_matmul_nbits")
    lead = tuple(a.shape[:-1])
    rows = int(np.prod(lead, dtype=np.int64))
    max_rows = NBITS_MAX_ROWS_LARGE if n * k >= 1 << 24 else NBITS_MAX_ROWS
    if (target is None or bits not in (4, 8) or rows > max_rows or rows == 0
            or (zero_points is not None and not jnp.issubdtype(zero_points.dtype, jnp.floating))
            or b.dtype not in (jnp.uint8, jnp.uint32)):
        return None
    n_blocks = -(-k // block_size)
    has_zp = zero_points is not None
    zp = (jnp.reshape(zero_points, (n, n_blocks)).astype(jnp.float32) if has_zp
          else jnp.zeros((0,), jnp.float32))

    def kernel(a, b, scales, zp):
        out = jax.ShapeDtypeStruct(lead + (n,), jnp.float32)
        return jax.ffi.ffi_call(target, out)(
            a.astype(jnp.float32), b, jnp.reshape(scales, (n, n_blocks)).astype(jnp.float32),
            zp, n=np.int64(n), k=np.int64(k), bits=np.int64(bits),
            block_size=np.int64(block_size),
            accuracy_level=np.int64(4 if accuracy_level == 4 else 0), has_zero_points=has_zp)

    def ref(a, b, scales, zp):
        return reference(a, b, scales, zp if has_zp else None).astype(jnp.float32)

    return _with_reference(kernel, ref, a, b, scales, zp)


# Rows of A up to which MatMulInteger goes to the kernel; past them the float32 digits of
# ops/qlinear.py (one GEMM that converts the weight once per call) win. See docs/kernels.md.
INT8_MAX_ROWS = 32


def matmul_integer(a, b, b_zero_point, reference):
    """MatMulInteger's (A less its zero point, int32 (..., K)) @ (B - b_zero_point) in int32
    through the kernel, or None where it does not apply: B not a 2-D int8 / uint8 weight, more
    rows than INT8_MAX_ROWS, or kernels off. ``reference(a, b)`` is the pure-JAX product of the
    same operands; integers have no gradients."""
    target = _target("transmuter_matmul_integer")
    lead = tuple(a.shape[:-1])
    rows = int(np.prod(lead, dtype=np.int64))
    if (target is None or b.ndim != 2 or b.dtype not in (jnp.int8, jnp.uint8)
            or a.dtype != jnp.int32 or b.shape[0] == 0 or rows > INT8_MAX_ROWS or rows == 0):
        return None
    k, n = b.shape
    zb = jnp.broadcast_to(jnp.zeros((), jnp.int32) if b_zero_point is None
                          else jnp.reshape(b_zero_point, (-1,)).astype(jnp.int32), (n,))

    def kernel(a, b, zb):
        out = jax.ShapeDtypeStruct(lead + (n,), jnp.int32)
        return jax.ffi.ffi_call(target, out)(a, b, zb, n=np.int64(n), k=np.int64(k))

    return lax.platform_dependent(a, b, zb, cpu=kernel, default=reference)


# Rows of A up to which a float32 product by a dequantized 8-bit weight goes to the kernel; past
# them XLA's path (the weight dequantized once per call, then its GEMM) wins. bench/int8_weight.py
# (2 cores, AVX-512), all-MiniLM-L6-v2's 384x384, 384x1536, 1536x384, kernel time / XLA time:
# 0.36-0.56 at 16-64 rows, 0.70-0.77 at 128, 0.94-1.03 at 256, 0.96-1.7 at 512.
W8_MAX_ROWS = 128


def matmul_int8_weight(a, b, zero_point, scale, reference):
    """A (..., K) float32 @ ((B - zero_point) * scale) through the kernel, B a 2-D int8 / uint8
    weight [K, N] and zero_point / scale one per column (any shape of N elements) or per tensor,
    or None where it does not apply: other dtypes or shapes, more rows than W8_MAX_ROWS, or
    kernels off. ``reference(a, b, zero_point, scale)``, on the operands as given, is the graph's
    own computation; gradients go through it (to A and the scale; the 8-bit weight has none)."""
    target = _target("transmuter_matmul_int8_weight")
    lead = tuple(a.shape[:-1])
    rows = int(np.prod(lead, dtype=np.int64))
    if (target is None or b.ndim != 2 or b.dtype not in (jnp.int8, jnp.uint8)
            or a.dtype != jnp.float32 or a.shape[-1] != b.shape[0] or b.shape[0] == 0
            or rows > W8_MAX_ROWS or rows == 0):
        return None
    k, n = b.shape

    def per_column(x, dtype):
        return jnp.broadcast_to(jnp.ravel(x).astype(dtype), (n,))

    def kernel(a, b, zero_point, scale):
        out = jax.ShapeDtypeStruct(lead + (n,), jnp.float32)
        return jax.ffi.ffi_call(target, out)(a, b, per_column(zero_point, jnp.int32),
                                             per_column(scale, jnp.float32), n=np.int64(n),
                                             k=np.int64(k))

    return _with_reference(kernel, reference, a, b, jnp.asarray(zero_point), scale)
