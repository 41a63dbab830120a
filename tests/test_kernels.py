"""The native CPU kernels (src/kernels, backends/jax_kernels.py) against onnxruntime at the same
accuracy_level and against the pure-JAX path, on random shapes and edge values; their build and
their fallback.

Tolerances: the kernel and onnxruntime compute the same integers (level 4: int8 activations times
4/8-bit codes, exact in int32) or the same f32 products (levels 0-3); what differs is the order
of the f32 sums over K <= 1000 terms and of the per-block scaling: ~1e-6 of the output's scale
(measured 1.4e-7..3.4e-7), asserted at 1e-5."""

import ctypes
import logging
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter
from transmuter import kernels
from transmuter.backends.jax import JaxNamespace
from transmuter.kernels import build
from transmuter.ops.contrib.quantized_matmul import (as_float_zero_points, as_words,
                                                     matmul_nbits, xla_nbits)

# The checks of numerics run either way (without the kernel they check the pure-JAX path, which
# computes the same accuracy_level semantics); those of the kernel itself need it built.
needs_kernels = pytest.mark.skipif(kernels.library() is None,
                                   reason=f"native kernels off here: {kernels.why_off()}")
TOL = 1e-5
P, I = ctypes.c_void_p, ctypes.c_int64  # the kernels' pointer and int64 arguments


def nbits_case(rows, k, n, bits, block, zp, seed):
    rng = np.random.default_rng(seed)
    n_blocks = -(-k // block)
    b = rng.integers(0, 256, (n, n_blocks, block * bits // 8), dtype=np.uint8)
    scales = (rng.random((n, n_blocks)) * 0.05 + 0.001).astype(np.float32)
    z = rng.integers(0, 256, (n, -(-n_blocks * bits // 8)), dtype=np.uint8) if zp else None
    a = rng.standard_normal((rows, k)).astype(np.float32) * 3
    return a, b, scales, z


def ort_nbits(a, b, scales, z, *, k, n, bits, block, level):
    names = ["A", "B", "scales"] + (["zp"] if z is not None else [])
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales.ravel(), "scales")]
    if z is not None:
        inits.append(numpy_helper.from_array(z.ravel(), "zp"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=block, accuracy_level=level)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT,
                                                                      list(a.shape))],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]


class Node:  # what the load-time weight transforms read
    def __init__(self, k, n, bits, block):
        self.attrs = dict(K=k, N=n, bits=bits, block_size=block)
        self.inputs, self.label = ["A", "B", "scales", "zp"], "MatMulNBits"


def ours(a, b, scales, z, *, k, n, bits, block, level, kernel=True):
    """The op as the engine runs it: weights transformed at load, the op under jax.jit; with
    ``kernel`` False, the pure-JAX path (the reference and fallback)."""
    node = Node(k, n, bits, block)
    words = jnp.asarray(as_words(b, node))
    zf = None if z is None else jnp.asarray(as_float_zero_points(z, node))
    xp = JaxNamespace()
    if kernel:
        fn = lambda x: matmul_nbits(xp, x, words, jnp.asarray(scales), zf,  # noqa: E731
                                    K=k, N=n, bits=bits, block_size=block, accuracy_level=level)
    else:
        fn = lambda x: xla_nbits(xp, x, words, jnp.asarray(scales), zf, g_idx=None,  # noqa: E731
                                 k=k, n=n, bits=bits, block_size=block, accuracy_level=level)
    with jax.enable_x64(True):
        return np.asarray(jax.jit(fn)(a))


def rel(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


CASES = [  # rows, K, N, bits, block, zero points
    (1, 576, 96, 4, 32, True), (4, 576, 64, 4, 32, False), (17, 100, 70, 4, 16, True),
    (3, 48, 5, 4, 16, False), (32, 200, 33, 4, 64, True), (2, 130, 20, 4, 128, True),
    (5, 300, 9, 4, 256, False), (1, 96, 33, 8, 32, False), (6, 200, 37, 8, 16, True),
    (9, 520, 13, 8, 128, True), (2, 1000, 130, 4, 32, True), (33, 64, 1, 4, 32, True),
    (6, 96, 12, 4, 32, True),  # an odd count of 32-blocks: a column ends in half a span
]


@pytest.mark.parametrize("level", [4, 0])
@pytest.mark.parametrize("rows,k,n,bits,block,zp", CASES)
def test_matmul_nbits_kernel(rows, k, n, bits, block, zp, level):
    sizes = dict(k=k, n=n, bits=bits, block=block, level=level)
    a, b, scales, z = nbits_case(rows, k, n, bits, block, zp, seed=rows * 1000 + k)
    want = ort_nbits(a, b, scales, z, **sizes)
    got = ours(a, b, scales, z, **sizes)
    assert rel(got, want) < TOL
    assert rel(ours(a, b, scales, z, kernel=False, **sizes), want) < TOL  # the reference too


def test_level_4_is_int8_activations():
    """Level 4 is not level 0: the difference is A's int8 rounding, which the kernel follows
    (it would pass a level-0 check only if it ignored the level)."""
    sizes = dict(k=576, n=64, bits=4, block=32)
    a, b, scales, z = nbits_case(2, 576, 64, 4, 32, True, seed=7)
    level0 = ort_nbits(a, b, scales, z, level=0, **sizes)
    got = ours(a, b, scales, z, level=4, **sizes)
    assert rel(got, level0) > 100 * TOL
    assert rel(got, ort_nbits(a, b, scales, z, level=4, **sizes)) < TOL


@pytest.mark.parametrize("level", [4, 0])
def test_nan_and_inf_rows(level):
    """A row holding NaN or inf gives NaN or inf where f32 arithmetic does (onnxruntime's int8
    path turns them into arbitrary int8 codes: no reference there); the other rows are exact."""
    sizes = dict(k=64, n=8, bits=4, block=32, level=level)
    a, b, scales, z = nbits_case(4, 64, 8, 4, 32, True, seed=3)
    a[1, 5], a[2, 40] = np.nan, np.inf
    got = ours(a, b, scales, z, **sizes)
    assert np.isnan(got[1]).all() and not np.isfinite(got[2]).any()
    clean = a[[0, 3]]
    assert rel(got[[0, 3]], ort_nbits(clean, b, scales, z, **sizes)) < TOL


def test_zero_rows_and_empty_batch():
    sizes = dict(k=64, n=8, bits=4, block=32, level=4)
    a, b, scales, z = nbits_case(2, 64, 8, 4, 32, True, seed=4)
    a[0] = 0
    got = ours(a, b, scales, z, **sizes)
    np.testing.assert_array_equal(got[0], 0)  # scale 0: every product 0, as in onnxruntime
    assert ours(a[:0], b, scales, z, **sizes).shape == (0, 8)


def test_gradient_is_the_reference_one():
    """jax.grad through the kernel: the f32 product's gradient (straight through A's rounding)."""
    a, b, scales, z = nbits_case(3, 96, 16, 4, 32, True, seed=5)
    node = Node(96, 16, 4, 32)
    words, zf = jnp.asarray(as_words(b, node)), jnp.asarray(as_float_zero_points(z, node))
    xp = JaxNamespace()

    def loss(x, level, kernel):
        if kernel:
            y = matmul_nbits(xp, x, words, jnp.asarray(scales), zf, K=96, N=16, bits=4,
                             block_size=32, accuracy_level=level)
        else:
            y = xla_nbits(xp, x, words, jnp.asarray(scales), zf, g_idx=None, k=96, n=16,
                          bits=4, block_size=32)
        return jnp.sum(y * jnp.arange(16, dtype=jnp.float32))

    with jax.enable_x64(True):
        want = jax.grad(loss)(a, 0, False)
        for level in (0, 4):
            got = jax.grad(loss)(a, level, True)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_off_by_environment(monkeypatch):
    monkeypatch.setenv("TRANSMUTER_KERNELS", "0")
    kernels.reset()
    try:
        assert kernels.library() is None and kernels.why_off() == "TRANSMUTER_KERNELS=0"
        a, b, scales, z = nbits_case(2, 64, 8, 4, 32, True, seed=6)
        sizes = dict(k=64, n=8, bits=4, block=32, level=4)
        xp = JaxNamespace()
        assert xp.nbits_kernel(jnp.asarray(a), None, None, None, None, k=64, n=8, bits=4,
                               block_size=32, accuracy_level=4) is None
        assert rel(ours(a, b, scales, z, **sizes), ort_nbits(a, b, scales, z, **sizes)) < TOL
    finally:
        monkeypatch.delenv("TRANSMUTER_KERNELS")
        kernels.reset()


def test_no_compiler_falls_back_with_one_line(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setenv("TRANSMUTER_CACHE", str(tmp_path))
    kernels.reset()
    try:
        with caplog.at_level(logging.WARNING, logger="transmuter"):
            assert kernels.library() is None
        assert "no C compiler: 'no-such-cc' is not on PATH" in kernels.why_off()
        assert [r.getMessage() for r in caplog.records if "kernels off" in r.getMessage()]
    finally:
        kernels.reset()


@needs_kernels
def test_kernel_is_used():
    """The compiled op calls the FFI target (not only an equal result: the XLA path has it)."""
    xp = JaxNamespace()
    a, b, scales, _ = nbits_case(2, 64, 8, 4, 32, False, seed=8)
    fn = jax.jit(lambda x: matmul_nbits(xp, x, jnp.asarray(b), jnp.asarray(scales), K=64, N=8,
                                        bits=4, block_size=32, accuracy_level=4))
    with jax.enable_x64(True):
        assert "transmuter_matmul_nbits" in fn.lower(a).as_text()


@needs_kernels
def test_concurrent_builds_share_one_library(tmp_path):
    """Two processes building into an empty cache at once: one builds, the other waits on the
    lock and loads the same file."""
    script = "from transmuter.kernels import build; print(build.build())"
    env = dict(os.environ, TRANSMUTER_CACHE=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    paths = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(paths) == 1
    assert len(list((tmp_path / "kernels").glob("*/*.so"))) == 1


@needs_kernels
@pytest.mark.slow
def test_sanitizers(tmp_path):
    """The kernels built with -fsanitize=address,undefined and run on the cases above
    (MatMulNBits' at levels 4 and 0, MatMulInteger's and the int8 weight's): any out-of-bounds
    read (the short last span of B, half a span, the last column tile), overflow or misaligned
    access aborts."""
    lib = build.build(extra_c=["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                               "-g", "-O1"], extra_cxx=["-fsanitize=address,undefined"],
                      tag="-asan")
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    script = textwrap.dedent(f"""
        import ctypes, numpy as np
        lib = ctypes.CDLL({str(lib)!r})
        P, I = ctypes.c_void_p, ctypes.c_int64
        for isa in ("_avx2", "_avxvnni", "_avx512vnni"):
            prep = getattr(lib, "tm_nbits_prepare_int8" + isa)
            prep.argtypes = [P, I, I, ctypes.c_int, P, P, P]
            cols = getattr(lib, "tm_nbits_columns_int8" + isa)
            cols.argtypes = [P, P, P, I, I, P, P, P, P, I, I, I, ctypes.c_int, I, I]
            prep_f32 = getattr(lib, "tm_nbits_prepare_f32" + isa)
            prep_f32.argtypes = [P, I, ctypes.c_int, P]
            cols_f32 = getattr(lib, "tm_nbits_columns_f32" + isa)
            cols_f32.argtypes = [P, I, I, P, P, P, P, I, I, I, ctypes.c_int, I, I]
            for rows, k, n, bits, block in {[c[:5] for c in CASES]!r}:
                nb = -(-k // block)
                stride = (nb * block + 63) // 64 * 64
                rng = np.random.default_rng(0)
                b = rng.integers(0, 256, n * nb * block * bits // 8, dtype=np.uint8)
                s = rng.random(n * nb, dtype=np.float32); z = np.full(n * nb, 8, np.float32)
                a = rng.standard_normal((rows, k)).astype(np.float32)
                xq = np.zeros((rows, stride), np.int8)
                asc = np.zeros((rows, nb), np.float32); bs = np.zeros((rows, nb), np.float32)
                y = np.zeros((rows, n), np.float32)
                for r in range(rows):
                    prep(a[r].ctypes.data, k, block, bits, xq[r].ctypes.data,
                         asc[r].ctypes.data, bs[r].ctypes.data)
                cols(xq.ctypes.data, asc.ctypes.data, bs.ctypes.data, stride, rows,
                     b.ctypes.data, s.ctypes.data, z.ctypes.data, y.ctypes.data, n, k, block,
                     bits, 0, n)
                xp = np.zeros((rows, stride), np.float32)  # levels 0-3
                for r in range(rows):
                    prep_f32(a[r].ctypes.data, k, bits, xp[r].ctypes.data)
                cols_f32(xp.ctypes.data, stride, rows, b.ctypes.data, s.ctypes.data,
                         z.ctypes.data, y.ctypes.data, n, k, block, bits, 0, n)
            prep = getattr(lib, "tm_int8_prepare" + isa)
            prep.argtypes = [P, I, P]
            cols = getattr(lib, "tm_int8_columns" + isa)
            cols.argtypes = [P, I, I, P, ctypes.c_int, P, P, I, I, I, I]
            for rows, k, n in {[c[:3] for c in INT8_CASES]!r}:
                rng = np.random.default_rng(1)
                a = rng.integers(-255, 256, (rows, k), dtype=np.int32)
                b = rng.integers(0, 256, (k, n), dtype=np.uint8)  # exactly k * n bytes
                zb = rng.integers(-128, 128, n, dtype=np.int32)
                stride = (k + 1) // 2
                pairs = np.zeros((rows, stride), np.uint32)
                y = np.zeros((rows, n), np.int32)
                for r in range(rows):
                    prep(a[r].ctypes.data, k, pairs[r].ctypes.data)
                for signed in (0, 1):
                    cols(pairs.ctypes.data, stride, rows, b.ctypes.data, signed, zb.ctypes.data,
                         y.ctypes.data, n, k, 0, n)
            cols = getattr(lib, "tm_w8_columns" + isa)
            cols.argtypes = [P, I, P, ctypes.c_int, P, P, P, I, I, I, I]
            for shape, k, n in {[(c[0], c[1], c[2]) for c in W8_CASES]!r}:
                rng = np.random.default_rng(2)
                a = rng.standard_normal(shape).astype(np.float32).reshape(-1, k)
                b = rng.integers(0, 256, (k, n), dtype=np.uint8)  # exactly k * n bytes
                zb = rng.integers(-128, 128, n, dtype=np.int32)
                s = rng.random(n, dtype=np.float32)
                y = np.zeros((a.shape[0], n), np.float32)
                for signed in (0, 1):
                    cols(a.ctypes.data, a.shape[0], b.ctypes.data, signed, zb.ctypes.data,
                         s.ctypes.data, y.ctypes.data, n, k, 0, n)
        print("clean")
    """)
    env = dict(os.environ, LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr[-3000:]


def test_compiled_model_matches_level_4(tmp_path):
    """Through the public API: a one-node file compiled by transmuter equals onnxruntime at
    accuracy_level 4 (Transmuter used to compute level 0: 5e-3 away)."""
    k, n = 576, 48
    a, b, scales, z = nbits_case(3, k, n, 4, 32, True, seed=9)
    want = ort_nbits(a, b, scales, z, k=k, n=n, bits=4, block=32, level=4)
    names = ["A", "B", "scales", "zp"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=32, accuracy_level=4)
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", n])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales.ravel(), "scales"),
         numpy_helper.from_array(z.ravel(), "zp")])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]).SerializeToString())
    got = np.asarray(transmuter.compile(transmuter.load(path))({"A": a})["Y"])
    assert rel(got, want) < TOL


def isa_copy(suffix):
    """The built library, to call its ``suffix`` copy (``_avx2``, ...) directly; the test is
    skipped where the CPU cannot run that copy."""
    flag = {"_avx2": "avx2", "_avxvnni": "avx_vnni", "_avx512vnni": "avx512_vnni"}[suffix]
    with open("/proc/cpuinfo") as f:
        if flag not in f.read().split():
            pytest.skip(f"this CPU has no {flag}")
    return kernels.library()


@needs_kernels
@pytest.mark.parametrize("suffix", ["_avx2", "_avxvnni", "_avx512vnni"])
@pytest.mark.parametrize("rows,k,n,bits,block,zp", [CASES[0], CASES[2], CASES[4], CASES[8]])
@pytest.mark.parametrize("level", [4, 0])
def test_each_instruction_set(suffix, rows, k, n, bits, block, zp, level):
    """Every compiled copy, not only the one this CPU picks, against onnxruntime at levels 4 and
    0 (skipped for a copy the CPU cannot run)."""
    lib = isa_copy(suffix)
    a, b, scales, z = nbits_case(rows, k, n, bits, block, zp, seed=11)
    node = Node(k, n, bits, block)
    zf = None if z is None else np.ascontiguousarray(as_float_zero_points(z, node))
    n_blocks = -(-k // block)
    stride = (n_blocks * block + 63) // 64 * 64  # as ffi.cc lays the rows out
    y = np.zeros((rows, n), np.float32)
    zf_data = None if zf is None else zf.ctypes.data
    if level == 4:
        prep = getattr(lib, "tm_nbits_prepare_int8" + suffix)
        prep.argtypes = [P, I, I, ctypes.c_int, P, P, P]
        cols = getattr(lib, "tm_nbits_columns_int8" + suffix)
        cols.argtypes = [P, P, P, I, I, P, P, P, P, I, I, I, ctypes.c_int, I, I]
        xq = np.zeros((rows, stride), np.int8)
        ascale, blksum = np.zeros((2, rows, n_blocks), np.float32)
        for r in range(rows):
            prep(a[r].ctypes.data, k, block, bits, xq[r].ctypes.data, ascale[r].ctypes.data,
                 blksum[r].ctypes.data)
        cols(xq.ctypes.data, ascale.ctypes.data, blksum.ctypes.data, stride, rows, b.ctypes.data,
             scales.ctypes.data, zf_data, y.ctypes.data, n, k, block, bits, 0, n)
    else:
        prep = getattr(lib, "tm_nbits_prepare_f32" + suffix)
        prep.argtypes = [P, I, ctypes.c_int, P]
        cols = getattr(lib, "tm_nbits_columns_f32" + suffix)
        cols.argtypes = [P, I, I, P, P, P, P, I, I, I, ctypes.c_int, I, I]
        xp = np.zeros((rows, stride), np.float32)
        for r in range(rows):
            prep(a[r].ctypes.data, k, bits, xp[r].ctypes.data)
        cols(xp.ctypes.data, stride, rows, b.ctypes.data, scales.ctypes.data, zf_data,
             y.ctypes.data, n, k, block, bits, 0, n)
    want = ort_nbits(a, b, scales, z, k=k, n=n, bits=bits, block=block, level=level)
    assert rel(y, want) < TOL


# MatMulInteger (kernels/matmul_integer.c): exact int32, so every comparison is equality.

INT8_CASES = [  # rows, K, N, A's type, B's type, B's zero point per column
    (1, 384, 1536, np.uint8, np.int8, False), (1, 7, 5, np.uint8, np.int8, True),
    (3, 129, 40, np.uint8, np.uint8, True), (4, 1536, 48, np.int8, np.int8, False),
    (5, 64, 16, np.uint8, np.uint8, False), (32, 200, 33, np.uint8, np.int8, True),
    (2, 1, 17, np.int8, np.uint8, True), (33, 96, 20, np.uint8, np.int8, False),  # past the rows
]


def int8_case(rows, k, n, a_type, b_type, per_column, seed):
    rng = np.random.default_rng(seed)
    ia, ib = np.iinfo(a_type), np.iinfo(b_type)
    a = rng.integers(ia.min, ia.max, (rows, k), dtype=a_type, endpoint=True)
    b = rng.integers(ib.min, ib.max, (k, n), dtype=b_type, endpoint=True)
    a[0], b[:, 0] = ia.max, ib.min  # the largest products, all of one sign
    za = np.array(ia.min, a_type)
    zb = (rng.integers(ib.min, ib.max, (n,), dtype=b_type, endpoint=True) if per_column
          else np.array(ib.max, b_type))
    return a, b, za, zb


def ort_matmul_integer(a, b, za, zb):
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "za", "zb"], ["Y"])], "g",
        [helper.make_tensor_value_info("A", helper.np_dtype_to_tensor_dtype(a.dtype),
                                       list(a.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(za, "za"),
         numpy_helper.from_array(zb, "zb")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]


def ours_integer(a, b, za, zb, kernel=True):
    from transmuter.ops.qlinear import int_matmul, matmul_integer
    xp = JaxNamespace()
    if kernel:
        fn = lambda x: matmul_integer(xp, x, jnp.asarray(b), za, jnp.asarray(zb))  # noqa: E731
    else:
        centered = (b.astype(np.int32) - zb.astype(np.int32))
        fn = lambda x: int_matmul(xp, x.astype(jnp.int32) - za.astype(np.int32),  # noqa: E731
                                  jnp.asarray(centered))
    return np.asarray(jax.jit(fn)(a))


@pytest.mark.parametrize("rows,k,n,a_type,b_type,per_column", INT8_CASES)
def test_matmul_integer_kernel(rows, k, n, a_type, b_type, per_column):
    a, b, za, zb = int8_case(rows, k, n, a_type, b_type, per_column, seed=rows * 100 + k)
    want = ort_matmul_integer(a, b, za, zb)
    np.testing.assert_array_equal(ours_integer(a, b, za, zb), want)
    np.testing.assert_array_equal(ours_integer(a, b, za, zb, kernel=False), want)


@needs_kernels
def test_matmul_integer_kernel_is_used():
    from transmuter.ops.qlinear import matmul_integer
    a, b, za, zb = int8_case(2, 64, 20, np.uint8, np.int8, False, seed=12)
    fn = jax.jit(lambda x: matmul_integer(JaxNamespace(), x, jnp.asarray(b), za, zb))
    assert "transmuter_matmul_integer" in fn.lower(a).as_text()
    many = np.zeros((40, 64), np.uint8)  # past INT8_MAX_ROWS: the float32 digits
    assert "transmuter_matmul_integer" not in fn.lower(many).as_text()


@needs_kernels
@pytest.mark.parametrize("suffix", ["_avx2", "_avxvnni", "_avx512vnni"])
def test_matmul_integer_each_instruction_set(suffix):
    """Every compiled copy of the int8 kernel, called directly, against onnxruntime."""
    lib = isa_copy(suffix)
    prep = getattr(lib, "tm_int8_prepare" + suffix)
    prep.argtypes = [P, I, P]
    cols = getattr(lib, "tm_int8_columns" + suffix)
    cols.argtypes = [P, I, I, P, ctypes.c_int, P, P, I, I, I, I]
    for rows, k, n, a_type, b_type, per_column in INT8_CASES:
        a, b, za, zb = int8_case(rows, k, n, a_type, b_type, per_column, seed=13)
        centered = a.astype(np.int32) - np.int32(za)
        stride = (k + 1) // 2
        pairs = np.zeros((rows, stride), np.uint32)
        for r in range(rows):
            prep(centered[r].ctypes.data, k, pairs[r].ctypes.data)
        zb32 = np.ascontiguousarray(np.broadcast_to(zb.astype(np.int32), (n,)))
        y = np.zeros((rows, n), np.int32)
        cols(pairs.ctypes.data, stride, rows, b.ctypes.data, int(b.dtype == np.int8),
             zb32.ctypes.data, y.ctypes.data, n, k, 0, n)
        np.testing.assert_array_equal(y, ort_matmul_integer(a, b, za, zb), err_msg=str(rows))


# A float32 MatMul by a weight-only int8 weight (kernels/matmul_int8_weight.c, fused at load by
# engine/passes/fusion.py). onnxruntime folds Cast * scale (and DequantizeLinear of a constant) to
# the same float32 weights at load; what differs is the order of the f32 sums: TOL above.

W8_CASES = [  # A's shape, K, N, B's type, the dequantization, scale (and zero point) per column
    ((1, 16, 384), 384, 1536, np.int8, "mul", True), ((384,), 384, 40, np.int8, "mul", True),
    ((3, 129), 129, 40, np.uint8, "dq", True), ((64, 200), 200, 33, np.int8, "dq", False),
    ((5, 1), 1, 17, np.uint8, "mul", False), ((2, 4, 70), 70, 16, np.int8, "dq", True),
    ((129, 96), 96, 20, np.int8, "mul", True),  # past W8_MAX_ROWS: XLA's path
]


def w8_case(shape, k, n, b_type, form, per_column, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32)
    info = np.iinfo(b_type)
    q = rng.integers(info.min, info.max, (k, n), dtype=b_type, endpoint=True)
    q[:, 0] = info.min  # the extreme codes
    shape = ((1, n) if form == "mul" else (n,)) if per_column else ()
    scale = (rng.random(shape) * 0.02 + 1e-3).astype(np.float32)
    zp = rng.integers(info.min, info.max, shape, dtype=b_type, endpoint=True)
    return a, q, scale, np.asarray(zp, b_type)


def w8_model(shape, q, scale, zp, form, axis=1):
    """MatMul(A, Cast(Q) * S) or MatMul(A, DequantizeLinear(Q, S, Z)), Q and S initializers."""
    if form == "mul":
        nodes = [helper.make_node("Cast", ["Q"], ["Qf"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["Qf", "S"], ["W"])]
        weights = [q, scale]
    else:
        nodes = [helper.make_node("DequantizeLinear", ["Q", "S", "Z"], ["W"], axis=axis)]
        weights = [q, scale, zp]
    nodes.append(helper.make_node("MatMul", ["A", "W"], ["Y"]))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, name) for w, name in zip(weights, "QSZ")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def ort_run(model, feed):
    """onnxruntime at ORT_ENABLE_BASIC: its constant folding (the float32 weights it computes at
    every level) but not its EXTENDED rewrite of DequantizeLinear + MatMul into a MatMulNBits
    that quantizes A to int8 (0.4-0.7% away from the graph's float32 product on these cases).
    Transmuter computes what the graph says, as for MatMulNBits' own accuracy_level 0."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]


@pytest.mark.parametrize("shape,k,n,b_type,form,per_column", W8_CASES)
def test_int8_weight_matmul(shape, k, n, b_type, form, per_column, tmp_path):
    """Through the public API, against onnxruntime on the same file; the kernel is used up to
    W8_MAX_ROWS rows (where it is built), XLA's path past them."""
    from transmuter.backends.jax_kernels import W8_MAX_ROWS
    a, q, scale, zp = w8_case(shape, k, n, b_type, form, per_column, seed=k + n)
    model = w8_model(shape, q, scale, zp, form)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    loaded = transmuter.load(path)
    assert [node.op_type for node in loaded.graph.nodes] == ["DequantizedMatMul"]
    fn = transmuter.compile(loaded, {"A": a})
    assert rel(np.asarray(fn({"A": a})["Y"]), ort_run(model, {"A": a})) < TOL
    if kernels.library() is not None:
        rows = int(np.prod(shape[:-1]))
        text = jax.jit(lambda x: fn({"A": x})["Y"]).lower(a).as_text()
        assert ("transmuter_matmul_int8_weight" in text) == (rows <= W8_MAX_ROWS)


def test_int8_weight_nan_inf_and_fallbacks(tmp_path):
    """NaN and inf in A give onnxruntime's NaN and inf; scales per row of the weight (K, 1) or a
    DequantizeLinear along axis 0 are not the kernel's: they run the graph's own nodes."""
    a, q, scale, zp = w8_case((4, 64), 64, 24, np.int8, "mul", False, seed=3)
    a[1, 5], a[2, 7] = np.nan, np.inf
    model = w8_model(a.shape, q, scale, zp, "mul")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    got = np.asarray(transmuter.compile(transmuter.load(path))({"A": a})["Y"])
    np.testing.assert_allclose(got, ort_run(model, {"A": a}), rtol=TOL, atol=TOL, equal_nan=True)
    a = np.nan_to_num(a, posinf=1.0)
    per_row = np.linspace(0.005, 0.02, 64, dtype=np.float32)
    for model in (w8_model(a.shape, q, per_row[:, None], zp, "mul"),
                  w8_model(a.shape, q, per_row, np.full(64, 3, np.int8), "dq", axis=0)):
        path.write_bytes(model.SerializeToString())
        fn = transmuter.compile(transmuter.load(path), {"A": a})
        assert rel(np.asarray(fn({"A": a})["Y"]), ort_run(model, {"A": a})) < TOL
        assert "transmuter_matmul_int8_weight" not in \
            jax.jit(lambda x: fn({"A": x})["Y"]).lower(a).as_text()


@needs_kernels
def test_int8_weight_gradient_is_the_reference_one():
    from transmuter.backends.jax_kernels import matmul_int8_weight
    a, q, scale, _ = w8_case((3, 40), 40, 20, np.int8, "mul", False, seed=4)
    def reference(a, q, z, s):
        return a @ ((q.astype(jnp.int32) - z).astype(jnp.float32) * s)

    loss = lambda fn: lambda a, s: jnp.sum(jnp.sin(fn(a, q, 0, s)))  # noqa: E731
    kernel = lambda a, q, z, s: matmul_int8_weight(a, q, z, s, reference)  # noqa: E731
    got = jax.grad(loss(kernel), argnums=(0, 1))(a, scale.ravel())
    want = jax.grad(loss(reference), argnums=(0, 1))(a, scale.ravel())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("suffix", ["_avx2", "_avxvnni", "_avx512vnni"])
def test_int8_weight_each_instruction_set(suffix):
    """Every compiled copy of the int8-weight kernel, called directly, against onnxruntime."""
    lib = isa_copy(suffix)
    cols = getattr(lib, "tm_w8_columns" + suffix)
    cols.argtypes = [P, I, P, ctypes.c_int, P, P, P, I, I, I, I]
    for shape, k, n, b_type, form, per_column in W8_CASES:
        a, q, scale, zp = w8_case(shape, k, n, b_type, form, per_column, seed=14)
        a2 = np.ascontiguousarray(a.reshape(-1, k))
        zb = np.ascontiguousarray(np.broadcast_to(zp.astype(np.int32).ravel(), (n,))) \
            if form == "dq" else np.zeros(n, np.int32)
        s = np.ascontiguousarray(np.broadcast_to(scale.ravel(), (n,)))
        y = np.zeros((a2.shape[0], n), np.float32)
        cols(a2.ctypes.data, a2.shape[0], q.ctypes.data, int(b_type == np.int8), zb.ctypes.data,
             s.ctypes.data, y.ctypes.data, n, k, 0, n)
        want = ort_run(w8_model(shape, q, scale, zp, form), {"A": a}).reshape(-1, n)
        assert rel(y, want) < TOL, (shape, k, n)


def test_matmul_integer_with_no_k_is_zeros():
    """K = 0: every product is an empty sum, 0, as ONNX defines MatMulInteger (NumPy's integer
    product of the centered operands is the reference: onnxruntime 1.32 leaves its output
    unwritten there, garbage). The kernel, which would too, is not called."""
    a, b, za, zb = int8_case(4, 0, 20, np.uint8, np.int8, True, seed=15)
    want = (a.astype(np.int32) - np.int32(za)) @ (b.astype(np.int32) - zb.astype(np.int32))
    assert want.shape == (4, 20) and not want.any()
    for _ in range(3):  # an unwritten buffer shows as garbage on some call, not always the first
        np.testing.assert_array_equal(ours_integer(a, b, za, zb), want)
