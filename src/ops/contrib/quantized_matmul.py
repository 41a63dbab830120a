"""com.microsoft quantized matmuls and gathers: MatMulNBits, GatherBlockQuantized, MatMulBnb4,
DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulInteger16.

Packed weights stay packed where they live (MatMulNBits' as uint32 words, see as_words); they
are unpacked by shifts and masks inside the op, so a compiled graph dequantizes on the fly and
XLA fuses it into the matmul.
MatMulNBits computes ``accuracy_level`` as onnxruntime's CPU kernel does: at 4, A is quantized to
int8 per block (int8_blocks); at 0-3, W is dequantized and multiplied in f32. On the JAX CPU
backend a native kernel (``xp.nbits_kernel``, backends/jax_kernels.py) takes the product."""

import functools

import numpy as np

from ...errors import ModelLoadError
from ..attention import f32
from ..bounds import Along
from ..qlinear import int_matmul
from ..registry import op

MS = "com.microsoft"
# 2^23 as f32 bits: OR-ing an integer q < 2^23 into its mantissa gives the float 2^23 + q exactly.
_MAGIC = np.uint32(0x4B000000)
_TWO23 = np.float32(1 << 23)


def unpack_bits(xp, packed, bits):
    """uint8 (..., n) -> uint8 (..., n * 8 // bits), lowest bits first within each byte."""
    per = 8 // bits
    shifts = xp.asarray(np.arange(0, 8, bits, dtype=np.uint8))
    vals = (xp.expand_dims(packed, -1) >> shifts) & np.uint8((1 << bits) - 1)
    return xp.reshape(vals, packed.shape[:-1] + (packed.shape[-1] * per,))


def packed_words(xp, packed):
    """uint8 (..., n) -> uint32 (..., ceil(n / 4)): the bytes read four at a time (little-endian,
    zero-padded); uint32 words (as MatMulNBits' weights are stored at load) come back as they
    are."""
    if xp.dtype_of(packed) == np.uint32:
        return packed
    lead, n = tuple(packed.shape[:-1]), packed.shape[-1]
    if n % 4:
        packed = xp.pad(packed, [(0, 0)] * len(lead) + [(0, 4 - n % 4)])
    return xp.reshape(xp.bitcast(xp.reshape(packed, lead + (-1, 4)), np.uint32), lead + (-1,))


def as_words(b, node):
    """MatMulNBits' B as uint32 words, once at load: XLA lowers a uint8 -> uint32 bitcast as a
    pass that rebuilds every word (shift, or) on each call, which cost as much as the dot."""
    if b.dtype == np.uint8 and b.shape and b.shape[-1] % 4 == 0:
        return np.ascontiguousarray(b).view("<u4")
    return b


def as_float_zero_points(zero_points, node):
    """MatMulNBits' packed zero points as f32 (N, n_blocks), once at load: unpacked inside the
    compiled step they were recomputed for every weight, which made the product 1.8x slower.
    Float zero points are the op's own alternative form (the same (q - zp) * scale). Not with
    g_idx, where ONNX Runtime reads packed zero points as absent."""
    inputs = node.inputs
    if zero_points.dtype != np.uint8 or (len(inputs) > 4 and inputs[4]):
        return zero_points
    n, k, bits = node.attrs["N"], node.attrs["K"], node.attrs.get("bits", 4)
    n_blocks = -(-k // node.attrs["block_size"])
    try:
        check_zero_points(zero_points.shape, True, n=n, n_blocks=n_blocks, bits=bits)
    except ValueError as e:
        raise ModelLoadError(f"{node.label}: {e}") from None
    packed = np.asarray(zero_points).reshape(n, -1)
    return unpack_bits(np, packed, bits)[:, :n_blocks].astype(np.float32)


def unpack_bits_f32(xp, packed, bits):
    """uint8 bytes (..., n) or their uint32 words (packed_words) -> f32 (..., n * 8 // bits),
    the same values as unpack_bits.

    Why not ``astype``: XLA's CPU emitter converts uint8 to float one scalar at a time (no
    vector instruction widens bytes to floats in its lowering), which made int4 decoding 4x
    slower than onnxruntime. Here each field of a uint32 word is shifted and masked in 32-bit
    lanes and OR-ed into the mantissa of 2^23; subtracting 2^23 gives the value exactly. Every
    step vectorizes, and XLA fuses it into the matmul."""
    n = packed.shape[-1] * (4 if xp.dtype_of(packed) == np.uint32 else 1)
    words = packed_words(xp, packed)
    lead = tuple(words.shape[:-1])
    shifts = xp.asarray(np.arange(0, 32, bits, dtype=np.uint32))
    fields = ((xp.expand_dims(words, -1) >> shifts) & np.uint32((1 << bits) - 1)) | _MAGIC
    vals = xp.bitcast(fields, np.float32) - _TWO23
    return xp.reshape(vals, lead + (-1,))[..., :n * 8 // bits]


def _block_params(xp, scales, zero_points, n, n_blocks, bits):
    """scales -> f32 (N, n_blocks); zero points -> f32 (N, n_blocks), packed or float."""
    scales = xp.reshape(f32(xp, scales), (n, n_blocks))
    if zero_points is None:
        zp = xp.full((n, n_blocks), np.float32(1 << (bits - 1)))
    elif xp.dtype_of(zero_points) == np.uint8:
        zp = unpack_bits_f32(xp, xp.reshape(zero_points, (n, -1)), bits)[:, :n_blocks]
    else:  # float zero points: w = (q - zp) * scale with zp in the scale type
        zp = xp.reshape(f32(xp, zero_points), (n, n_blocks))
    return scales, zp


def dequantize_nbits(xp, b, scales, zero_points, g_idx, *, k, n, bits, block_size):
    """MatMulNBits' B (N, n_blocks, blob) -> f32 W (N, K)."""
    n_blocks = (k + block_size - 1) // block_size
    if g_idx is not None and zero_points is not None and xp.dtype_of(zero_points) == np.uint8:
        # ONNX Runtime's CPU kernel reads packed zero points as absent when g_idx is given
        # (measured against onnxruntime 1.32): follow it.
        zero_points = None
    q = unpack_bits_f32(xp, xp.reshape(b, (n, -1)), bits)  # (N, n_blocks * block_size)
    scales, zp = _block_params(xp, scales, zero_points, n, n_blocks, bits)
    if g_idx is None:
        q = xp.reshape(q[:, :n_blocks * block_size], (n, n_blocks, block_size))
        w = (q - zp[:, :, None]) * scales[:, :, None]
        return xp.reshape(w, (n, n_blocks * block_size))[:, :k]
    g = xp.astype(xp.reshape(g_idx, (-1,))[:k], np.int64)
    return (q[:, :k] - xp.take(zp, g, axis=1)) * xp.take(scales, g, axis=1)


# Up to this many rows of A, each row is its own matrix-vector product. XLA's CPU compiler fuses
# the dequantization into a vector-matrix dot (reading packed bytes, no f32 matrix in memory) but
# not into a matrix-matrix one: there it writes the whole f32 matrix first, which for a 16384 x 512
# lm_head cost 15x the fused row products at 4 rows and 2x at 16 (measured on 2 CPU cores; at 16
# rows and small N the single dot wins). Larger M (a prompt) amortizes the f32 matrix.
ROWWISE_MAX_M = 8


def _rows(a):
    return int(np.prod(a.shape[:-1], dtype=np.int64))


# ... and only for weights past this many elements: a decoder layer's (576 x 1536) f32 matrix is
# cheaper written once than dequantized again for each row (8 rows: 0.52 -> 0.41 ms alone; the
# SmolLM2-shaped q4 step at batch 8 744 -> 681 ms, on 2 busy CPU cores); the lm_head's is not.
ROWWISE_MIN_WEIGHTS = 1 << 20


def nbits_product(xp, a, w, rowwise=True):
    """f32 A (..., K) @ W (N, K)^T, row by row when A has few rows (see ROWWISE_MAX_M) and
    ``rowwise`` (the whole weight, of which ``w`` may be a chunk, is large)."""
    lead, k = tuple(a.shape[:-1]), a.shape[-1]
    m = _rows(a)
    wt = xp.transpose(w)
    if m < 2 or m > ROWWISE_MAX_M or not rowwise:
        return xp.matmul(a, wt)
    rows = xp.reshape(a, (m, k))
    y = xp.concatenate([xp.matmul(rows[i:i + 1], wt) for i in range(m)], axis=0)
    return xp.reshape(y, lead + (w.shape[0],))


# Weights dequantized at once, at most (4 MB of f32). For a prompt (many rows) XLA writes the f32
# matrix before its dot; whole, a 16384 x 512 lm_head's 33 MB buffer is mapped fresh on every
# call, and the page faults cost more than the dot (64 rows: 142 ms whole, 60 ms in 4 MB pieces,
# measured on 2 CPU cores). One row never writes it (see ROWWISE_MAX_M); this changes nothing there.
CHUNK_WEIGHTS = 1 << 20


def _dequantized_chunks(xp, b, scales, zero_points, g_idx, *, k, n, bits, block_size):
    """W (N, K) in f32 as row blocks of at most CHUNK_WEIGHTS weights, each dequantized from its
    own rows of B, scales and zero points."""
    rows = max(1, CHUNK_WEIGHTS // k)
    if n <= rows:
        return [dequantize_nbits(xp, b, scales, zero_points, g_idx, k=k, n=n, bits=bits,
                                 block_size=block_size)]
    b = xp.reshape(b, (n, -1))
    scales = xp.reshape(scales, (n, -1))
    zero_points = None if zero_points is None else xp.reshape(zero_points, (n, -1))
    return [dequantize_nbits(xp, b[s:s + rows], scales[s:s + rows],
                             None if zero_points is None else zero_points[s:s + rows], g_idx,
                             k=k, n=min(rows, n - s), bits=bits, block_size=block_size)
            for s in range(0, n, rows)]


# The layouts a namespace's packed kernel takes (MLX's affine quantized_matmul): MLX packs
# elements lowest bits first into little-endian uint32 words, which is ORT's byte order read four
# bytes at a time, so B needs no repacking, only a view.
NATIVE_BITS = (2, 4, 8)
NATIVE_GROUPS = (32, 64, 128)


def native_nbits(xp, a, b, scales, zero_points, g_idx, *, k, n, bits, block_size):
    """A @ W^T through the namespace's packed kernel, or None where there is none (JAX, NumPy)
    or the layout does not fit it (g_idx, a partial last block, other bits or block sizes).
    MLX dequantizes as scale * q + bias, so bias = -scale * zero_point (ORT's (q - zp) * scale;
    the two differ by one f32 rounding of scale * zp)."""
    kernel = getattr(xp, "quantized_matmul", None)
    if (kernel is None or g_idx is not None or bits not in NATIVE_BITS
            or block_size not in NATIVE_GROUPS or k % block_size):
        return None
    if 0 in tuple(a.shape):
        # MLX's kernel divides by the row count: an empty batch or sequence is SIGFPE
        return xp.zeros(tuple(a.shape[:-1]) + (n,), np.float32)
    n_blocks = k // block_size
    words = packed_words(xp, xp.reshape(b, (n, -1)))
    scales, zp = _block_params(xp, scales, zero_points, n, n_blocks, bits)
    return kernel(f32(xp, a), words, scales, -scales * zp, transpose=True, group_size=block_size,
                  bits=bits)


def int8_blocks(xp, a, block_size):
    """A as onnxruntime's accuracy_level 4 sees it (MLAS QuantizeARow_CompInt8): per block of K,
    scale max|a| / 127 and values round(a * (127 / max|a|)) (to nearest even), here times the
    scale again, in f32. Each product of an int8 value and a dequantized weight is then exact,
    so the f32 dot equals MLAS's int32 one up to the order of its sums. A NaN or inf makes its
    block NaN. Gradients pass straight through (the rounding has none)."""
    k = a.shape[-1]
    n_blocks = -(-k // block_size)
    lead = tuple(a.shape[:-1])
    af = f32(xp, a)
    blocks = xp.pad(af, [(0, 0)] * len(lead) + [(0, n_blocks * block_size - k)])
    blocks = xp.reshape(blocks, lead + (n_blocks, block_size))
    amax = xp.max(xp.abs(blocks), axis=-1, keepdims=True)
    inverse = xp.where(amax > 0, xp.asarray(np.float32(127)) / xp.where(amax > 0, amax, 1),
                       np.float32(0))
    q = xp.clip(xp.round(blocks * inverse), -128, 127) * (amax / np.float32(127))
    q = xp.reshape(q, lead + (n_blocks * block_size,))[..., :k]
    # exactly q (x - x is 0), with A's gradient passed straight through (none through q)
    return xp.stop_gradient(q) + (af - xp.stop_gradient(af))


def xla_nbits(xp, a, b, scales, zero_points, *, g_idx, k, n, bits, block_size, accuracy_level=0):
    """A @ W^T in f32 as array operations: the reference of the native kernel and its fallback.
    W is dequantized to f32; at accuracy_level 4, A is quantized to int8 as onnxruntime does."""
    if accuracy_level == 4:
        a = int8_blocks(xp, a, block_size)
    if _rows(a) > ROWWISE_MAX_M:
        # dequantize each weight when its input is ready: else XLA dequantized a prompt's
        # weights all at once, first (a 12-layer model's 230 MB of f32, in pages mapped
        # fresh on every call: 46,000 page faults, prompt of 64 tokens 255 -> 206 ms)
        b = xp.after(b, a)
    rowwise = n * k >= ROWWISE_MIN_WEIGHTS
    return xp.concatenate([nbits_product(xp, f32(xp, a), w, rowwise) for w in _dequantized_chunks(
        xp, b, scales, zero_points, g_idx, k=k, n=n, bits=bits, block_size=block_size)], axis=-1)


def check_zero_points(shape, packed, *, n, n_blocks, bits):
    """Packed (uint8) zero points hold ceil(n_blocks * bits / 8) bytes per row, float ones
    n_blocks values, in one of ONNX Runtime's two layouts (matmul_nbits.cc PrePack; fuzz
    20261202:9053: B given again as zero points was read as 32 zero points a row)."""
    per_row = -(-n_blocks * bits // 8) if packed else n_blocks
    if tuple(shape) not in ((n * per_row,), (n, per_row)):
        raise ValueError(f"MatMulNBits zero_points of shape {list(shape)} must be "
                         f"[{n * per_row}] or [{n}, {per_row}] (N={n}, n_blocks={n_blocks}, "
                         f"bits={bits})")


def _check_nbits_weights(b, scales, words, *, k, n, bits, block_size):
    """B is exactly [N, ceil(K / block_size), block_size * bits / 8] bytes (as uint8, or the
    uint32 words of as_words, which divide the last axis by 4) and scales N * n_blocks values,
    as ONNX Runtime requires (PrePack for an initializer, the kernel otherwise): another
    layout was read as broadcast garbage, and one of the same bytes in another rank (fuzz
    20261203:4604, B [32, 1, 16, 1]) was run where ONNX Runtime refuses it."""
    if bits not in (2, 4, 8) or block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"MatMulNBits bits={bits}, block_size={block_size}: bits must be 2, 4 "
                         "or 8 and block_size a power of two >= 16")
    n_blocks = -(-k // block_size)
    want = (n, n_blocks, block_size * bits // 8)
    shape = tuple(b.shape)
    if words and shape:
        shape = shape[:-1] + (shape[-1] * 4,)
    if shape != want:
        raise ValueError(f"MatMulNBits B of shape {list(shape)} does not match N={n}, K={k}, "
                         f"bits={bits}, block_size={block_size}: it must be "
                         f"[{n}, {n_blocks}, {want[2]}] bytes")
    # ONNX Runtime's PrePack takes these two layouts only (matmul_nbits.cc; fuzz 20261202:442)
    if tuple(scales.shape) not in ((n * n_blocks,), (n, n_blocks)):
        raise ValueError(f"MatMulNBits scales of shape {list(scales.shape)} must be "
                         f"[{n * n_blocks}] or [{n}, {n_blocks}] (N={n}, n_blocks={n_blocks})")


@op("MatMulNBits", 1, domain=MS, weights={1: as_words, 3: as_float_zero_points},
    dequantizes=True)
def matmul_nbits(xp, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits=4,
                 block_size, accuracy_level=0):
    if not a.shape or a.shape[-1] != K:
        raise ValueError(f"MatMulNBits: input A has shape {list(a.shape)}, whose last axis "
                         f"must be K = {K}")
    _check_nbits_weights(b, scales, xp.dtype_of(b) == np.uint32, k=K, n=N, bits=bits,
                         block_size=block_size)
    if zero_points is not None:
        check_zero_points(zero_points.shape, xp.dtype_of(zero_points) == np.uint8, n=N,
                          n_blocks=-(-K // block_size), bits=bits)
    sizes = dict(k=K, n=N, bits=bits, block_size=block_size)
    level = 4 if accuracy_level == 4 else 0  # 1-3 compute in f32 on CPUs, as 0
    y = None
    if getattr(xp, "quantized_matmul", None) is not None:  # MLX's packed kernel
        y = native_nbits(xp, int8_blocks(xp, a, block_size) if level == 4 else a, b, scales,
                         zero_points, g_idx, **sizes)
    kernel = getattr(xp, "nbits_kernel", None)
    if y is None and kernel is not None and g_idx is None:
        # the backward pass differentiates the f32 product (straight through A's rounding)
        y = kernel(a, b, scales, zero_points, functools.partial(xla_nbits, xp, g_idx=None, **sizes),
                   accuracy_level=level, **sizes)
    if y is None:
        y = xla_nbits(xp, a, b, scales, zero_points, g_idx=g_idx, accuracy_level=level, **sizes)
    if bias is not None:
        y = y + f32(xp, bias)
    return xp.astype(y, xp.dtype_of(a))


@op("GatherBlockQuantized", 1, domain=MS, indices={1: Along(attr="gather_axis")})
def gather_block_quantized(xp, data, indices, scales, zero_points=None, *, bits=4,
                           block_size=128, gather_axis=0, quantize_axis=1):
    """Gather rows, then dequantize only those: (q - zp) * scale per block along quantize_axis.
    uint8 data packs 8 // bits values per byte (default zero point 2^(bits-1)); int4/uint4 data
    (one value per element after NumPy conversion) has zero point 0 by default."""
    nd = data.ndim
    gather_axis %= nd
    quantize_axis %= nd
    if quantize_axis != nd - 1 or gather_axis >= quantize_axis:
        raise NotImplementedError("GatherBlockQuantized with quantize_axis before the last axis "
                                  "or gather_axis after it")
    packed = xp.dtype_of(data) == np.uint8
    _check_block_shapes(data, scales, zero_points, packed, bits=bits, block_size=block_size,
                        axis=quantize_axis)
    indices, valid = _rows_in_range(xp, indices, data.shape[gather_axis])
    rows = xp.take(data, indices, axis=gather_axis)
    srows = xp.take(scales, indices, axis=gather_axis)
    if packed:
        q = xp.astype(unpack_bits(xp, rows, bits), np.float32)
        default_zp = float(1 << (bits - 1))
    else:
        signed = np.dtype(xp.dtype_of(data)).name.startswith("int")
        q = xp.astype(xp.astype(rows, np.int8 if signed else np.uint8), np.float32)
        default_zp = 0.0
    k = q.shape[-1]
    n_blocks = srows.shape[-1]
    lead = q.shape[:-1]
    if zero_points is None:
        zp = np.float32(default_zp)
    else:
        zrows = xp.take(zero_points, indices, axis=gather_axis)
        if xp.dtype_of(zero_points) == np.uint8 and packed:
            zp = xp.astype(unpack_bits(xp, zrows, bits)[..., :n_blocks], np.float32)
        else:
            zp = f32(xp, xp.astype(zrows, np.float32) if not xp.is_float(zrows) else zrows)
        zp = xp.reshape(zp, lead + (n_blocks, 1))
    pad = n_blocks * block_size - k
    if pad > 0:
        q = xp.pad(q, [(0, 0)] * (q.ndim - 1) + [(0, pad)])
    q = xp.reshape(q, lead + (n_blocks, block_size))
    w = (q - zp) * xp.reshape(f32(xp, srows), lead + (n_blocks, 1))
    w = xp.reshape(w, lead + (n_blocks * block_size,))[..., :k]
    if valid is not None:
        w = xp.where(xp.reshape(valid, (1,) * gather_axis + tuple(valid.shape) + (1,) * (
            nd - gather_axis - 1)), w, np.float32(0))
    return xp.astype(w, xp.dtype_of(scales))


def _check_block_shapes(data, scales, zero_points, packed, *, bits, block_size, axis):
    """The shapes ONNX Runtime's GatherBlockQuantized inference takes: scales are the data's
    shape with ceil(K / block_size) blocks along the quantize axis, zero points the scales'
    shape (packed into ceil(n_blocks * bits / 8) bytes there for uint8 data). Another shape
    was read as broadcast garbage (fuzz 20261203:5376: the packed table given again as zero
    points)."""
    k = data.shape[axis] * (8 // bits if packed else 1)
    n_blocks = -(-k // block_size)
    want = tuple(data.shape[:axis]) + (n_blocks,) + tuple(data.shape[axis + 1:])
    if tuple(scales.shape) != want:
        raise ValueError(f"GatherBlockQuantized scales of shape {list(scales.shape)} must be "
                         f"{list(want)} (data {list(data.shape)}, block_size={block_size})")
    if zero_points is None:
        return
    per = -(-n_blocks * bits // 8) if packed else n_blocks
    want = want[:axis] + (per,) + want[axis + 1:]
    if tuple(zero_points.shape) != want:
        raise ValueError(f"GatherBlockQuantized zero_points of shape {list(zero_points.shape)} "
                         f"must be {list(want)} (scales {list(scales.shape)}, bits={bits})")


def _rows_in_range(xp, indices, size):
    """(indices made safe to take, where each was in [-size, size - 1]): an index past the axis
    gives a row of zeros, as in ONNX Runtime's kernel. Indices known on the host were refused
    before (engine/checks/indices.py); computed ones must not read past the buffer (MLX crashes)."""
    if isinstance(indices, (np.ndarray, np.generic)):
        return indices, None
    valid = (indices >= -size) & (indices < size)
    indices = xp.where(indices < 0, indices + size, indices)
    return xp.where(valid, indices, xp.zeros((), xp.dtype_of(indices))), valid


_NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0], np.float32)
_FP4 = np.array([0.0, 0.0052083333, 0.6666667, 1.0, 0.33333334, 0.5, 0.16666667, 0.25,
                 -0.0, -0.0052083333, -0.6666667, -1.0, -0.33333334, -0.5, -0.16666667,
                 -0.25], np.float32)


@op("MatMulBnb4", 1, domain=MS)
def matmul_bnb4(xp, a, b, absmax, *, K, N, block_size, quant_type, training_mode=0, transB=1):
    """bitsandbytes 4-bit: W (N, K) flattened, two codes per byte (high nibble first), each code
    a table entry (FP4 or NF4) times its block's absmax. ``training_mode`` changes nothing in
    inference (ORT's CPU kernel ignores it)."""
    if quant_type not in (0, 1):
        raise ValueError(f"MatMulBnb4 quant_type={quant_type}: 0 (FP4) or 1 (NF4)")
    if not transB:
        # ORT's CPU kernel swaps only the GEMM sizes and reads rows of K values from an N*K
        # buffer K times (past its end: zeros or garbage); its CUDA kernel rejects it.
        raise NotImplementedError("MatMulBnb4 with transB=0: ONNX Runtime has no defined result "
                                  "for it; export the weight as (N, K) with transB=1")
    table = xp.asarray(_NF4 if quant_type == 1 else _FP4)
    flat = xp.reshape(b, (-1,))
    codes = xp.reshape(xp.stack([flat >> np.uint8(4), flat & np.uint8(15)], axis=-1), (-1,))
    vals = xp.take(table, xp.astype(codes, np.int32), axis=0)
    n_blocks = absmax.shape[0]
    vals = xp.pad(vals, [(0, n_blocks * block_size - vals.shape[0])]) if (
        n_blocks * block_size > vals.shape[0]) else vals[:n_blocks * block_size]
    w = xp.reshape(xp.reshape(vals, (n_blocks, block_size)) * xp.reshape(
        f32(xp, absmax), (n_blocks, 1)), (-1,))[:N * K]
    y = nbits_product(xp, f32(xp, a), xp.reshape(w, (N, K)))
    return xp.astype(y, xp.dtype_of(a))


def _dequant_int_matmul(xp, aq, a_zp, bq, b_zp, scale, bias, out_dtype):
    """(A - a_zp) @ (B - b_zp) in int32, then times the combined scale (per tensor or per
    column of B), plus bias."""
    a = xp.astype(aq, np.int32)
    if a_zp is not None:
        a = a - xp.astype(a_zp, np.int32)
    b = xp.astype(bq, np.int32)
    if b_zp is not None:
        b = b - xp.astype(b_zp, np.int32)
    y = xp.astype(int_matmul(xp, a, b), np.float32) * scale
    if bias is not None:
        y = y + f32(xp, bias)
    return xp.astype(y, out_dtype)


@op("DynamicQuantizeMatMul", 1, domain=MS)
def dynamic_quantize_matmul(xp, a, b, b_scale, b_zero_point=None, bias=None):
    """A is quantized as DynamicQuantizeLinear does (uint8, asymmetric, range including 0)."""
    af = f32(xp, a)
    lo = xp.minimum(xp.min(af), np.float32(0))
    hi = xp.maximum(xp.max(af), np.float32(0))
    a_scale = (hi - lo) / np.float32(255)
    safe = xp.where(a_scale == 0, np.float32(1), a_scale)
    a_zp = xp.clip(xp.round(-lo / safe), 0, 255)
    aq = xp.clip(xp.round(af / safe) + a_zp, 0, 255)
    return _dequant_int_matmul(xp, aq, a_zp, b, b_zero_point, a_scale * f32(xp, b_scale), bias,
                               xp.dtype_of(a))


@op("MatMulIntegerToFloat", 1, domain=MS)
def matmul_integer_to_float(xp, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None,
                            bias=None):
    return _dequant_int_matmul(xp, a, a_zero_point, b, b_zero_point,
                               f32(xp, a_scale) * f32(xp, b_scale), bias, xp.dtype_of(a_scale))


@op("MatMulInteger16", 1, domain=MS)
def matmul_integer16(xp, a, b):
    """16-bit integers multiplied and summed in 32 bits (ORT's CPU kernel: int16 operands, int32
    Y); unsigned operands give uint32. Sums past 32 bits wrap in ORT, not here."""
    out = np.uint32 if xp.dtype_of(a) == np.uint16 and xp.dtype_of(b) == np.uint16 else np.int32
    return xp.matmul(xp.astype(a, out), xp.astype(b, out))
