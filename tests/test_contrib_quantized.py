"""com.microsoft quantized ops against onnxruntime (optimizations off) on one-node graphs.

Tolerances: the weights are dequantized exactly (small integers times an f32 scale), so the only
difference from ORT is the f32 summation order of a K-long dot product: K <= 256 terms of size
~1 give ~1e-5; the int8 ops accumulate exactly in int32 and differ only in the final scaling."""

import numpy as np
import pytest
from onnx import helper

import transmuter

from tests.contrib_graphs import BACKENDS, check, run_ort, run_ours, single_node
from transmuter.ops.contrib import quantized_matmul

RNG = np.random.default_rng(0)


def nbits_inputs(k, n, bits, block, zp, g_idx=False, bias=False, dtype=np.float32, m=3, lead=2):
    n_blocks = (k + block - 1) // block
    blob = block * bits // 8
    inputs = {
        "A": RNG.standard_normal((lead, m, k)).astype(dtype),
        "B": RNG.integers(0, 256, (n, n_blocks, blob), dtype=np.uint8),
        "scales": (RNG.random((n * n_blocks,)) * 0.1 + 0.01).astype(dtype),
    }
    if zp == "packed":
        inputs["zero_points"] = RNG.integers(
            0, 256, (n * ((n_blocks * bits + 7) // 8),), dtype=np.uint8)
    elif zp == "float":
        inputs["zero_points"] = (RNG.random((n * n_blocks,)) * (1 << bits)).astype(dtype)
    else:
        inputs["zero_points"] = None
    if g_idx:
        inputs["g_idx"] = (RNG.permutation(k) // block).astype(np.int32)
    else:
        inputs["g_idx"] = None
    inputs["bias"] = RNG.standard_normal((n,)).astype(dtype) if bias else None
    return inputs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits,block,zp,k", [
    (4, 32, None, 64), (4, 32, "packed", 96), (4, 16, "packed", 48), (4, 128, None, 256),
    (4, 256, "packed", 256), (4, 32, "float", 64), (8, 32, None, 64), (8, 64, "packed", 128),
    (2, 32, None, 64), (2, 16, "packed", 64), (4, 32, "packed", 80)])
def test_matmul_nbits(backend, bits, block, zp, k):
    inputs = nbits_inputs(k, 24, bits, block, zp, bias=True)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=k, N=24, bits=bits,
                        block_size=block)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lead,m", [(1, 1), (1, 8), (3, 5)])
@pytest.mark.parametrize("rowwise", [False, True])
def test_matmul_nbits_rows(backend, lead, m, rowwise, monkeypatch):
    # One row (XLA's fused vector-matrix dot), up to ROWWISE_MAX_M rows (one product per row
    # when the weight is past ROWWISE_MIN_WEIGHTS, made small here), more rows (one matrix
    # product): the same math in three layouts.
    if rowwise:
        monkeypatch.setattr(quantized_matmul, "ROWWISE_MIN_WEIGHTS", 0)
    inputs = nbits_inputs(64, 24, 4, 32, "packed", bias=True, m=m, lead=lead)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=24, bits=4,
                        block_size=32)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
def test_after_keeps_the_weights_whatever_the_input(dtype):
    # MatMulNBits ties its packed weights to A (xp.after) past ROWWISE_MAX_M rows: any bits of A
    # (NaN, infinities, -0.0, the sign bit) must leave every weight bit as it was.
    import jax

    from transmuter.backends.jax import JaxNamespace

    x = RNG.integers(0, np.iinfo(dtype).max, (24, 8), dtype=dtype, endpoint=True)
    for first in (np.nan, np.inf, -np.inf, -0.0, -3.5, 2.0):
        y = np.array([[first, 1.0]], np.float32)
        got = jax.jit(JaxNamespace().after)(x, y)
        np.testing.assert_array_equal(np.asarray(got), x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("zp", [None, "packed", "float"])
def test_matmul_nbits_row_blocks(backend, zp, monkeypatch):
    # W dequantized in row blocks (CHUNK_WEIGHTS; 5 rows here, the last block 4 rows), each from
    # its own rows of B, scales and zero points.
    from transmuter.ops.contrib import quantized_matmul

    monkeypatch.setattr(quantized_matmul, "CHUNK_WEIGHTS", 64 * 5)
    inputs = nbits_inputs(64, 24, 4, 32, zp, bias=True, m=10)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=24, bits=4,
                        block_size=32)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("bits,block,zp,native", [
    (4, 32, "packed", True), (8, 64, None, True), (2, 128, "float", True),
    (4, 16, None, False), (4, 256, None, False)])
def test_matmul_nbits_mlx_native_kernel(bits, block, zp, native, monkeypatch):
    # On MLX the layouts mx.quantized_matmul takes (bits 2/4/8, groups 32/64/128, whole blocks)
    # go through it, the others through the generic dequantization; both match onnxruntime.
    import mlx.core as mx

    calls, kernel = [], mx.quantized_matmul
    monkeypatch.setattr(mx, "quantized_matmul", lambda *a, **k: calls.append(k) or kernel(*a, **k))
    k = 256
    inputs = nbits_inputs(k, 16, bits, block, zp)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=k, N=16, bits=bits,
                        block_size=block)
    check(model, inputs, "mlx", atol=2e-5, rtol=1e-5)
    assert bool(calls) == native


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_g_idx(backend):
    inputs = nbits_inputs(64, 16, 4, 32, "packed", g_idx=True)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=16, bits=4,
                        block_size=32)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_fp16(backend):
    # fp16 output: ORT rounds its f32 result once to fp16, as we do; 1 fp16 ulp at |y| ~ 2.
    inputs = nbits_inputs(64, 16, 4, 32, "packed", dtype=np.float16)
    model = single_node("MatMulNBits", inputs, {"Y": np.float16}, K=64, N=16, bits=4,
                        block_size=32)
    check(model, inputs, backend, atol=4e-3, rtol=2e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("zp", [False, True])
def test_gather_block_quantized(backend, zp):
    k, block, n = 64, 32, 10
    inputs = {"data": RNG.integers(0, 256, (n, k // 2), dtype=np.uint8),
              "indices": np.array([[3, 0, 9], [1, 1, 2]], np.int64),
              "scales": (RNG.random((n, k // block)) * 0.1).astype(np.float32),
              "zero_points": RNG.integers(0, 256, (n, 1), dtype=np.uint8) if zp else None}
    model = single_node("GatherBlockQuantized", inputs, {"out": np.float32},
                        constants={"data", "scales", "zero_points"}, bits=4, block_size=block,
                        gather_axis=0, quantize_axis=1)
    check(model, inputs, backend, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("what,shape,match", [
    ("zero_points", "data", r"zero_points of shape \[10, 32\] must be \[10, 1\]"),
    ("zero_points", (10, 2), r"zero_points of shape \[10, 2\] must be \[10, 1\]"),
    ("zero_points", (10,), r"zero_points of shape \[10\] must be \[10, 1\]"),
    ("scales", (10, 1), r"scales of shape \[10, 1\] must be \[10, 2\]"),
    ("scales", (20,), r"scales of shape \[20\] must be \[10, 2\]")])
def test_gather_block_quantized_refuses_block_params_of_another_shape(backend, what, shape,
                                                                      match):
    # issue 14 (fuzz 20261203:5376: llama q4's packed embedding table given again as zero
    # points, read as broadcast garbage); onnxruntime refuses each ("zero points shape and
    # scales shape do not match", "data shape and scales shape do not match", ...)
    from transmuter.errors import OpError
    k, block, n = 64, 32, 10
    inputs = {"data": RNG.integers(0, 256, (n, k // 2), dtype=np.uint8),
              "indices": np.array([[3, 0, 9]], np.int64),
              "scales": (RNG.random((n, k // block)) * 0.1).astype(np.float32),
              "zero_points": RNG.integers(0, 256, (n, 1), dtype=np.uint8)}
    inputs[what] = inputs["data"] if shape == "data" else (
        RNG.random(shape).astype(inputs[what].dtype) if what == "scales" else
        RNG.integers(0, 256, shape, dtype=np.uint8))
    model = single_node("GatherBlockQuantized", inputs, {"out": np.float32},
                        constants={"data", "scales", "zero_points"}, bits=4, block_size=block,
                        gather_axis=0, quantize_axis=1)
    with pytest.raises(Exception, match="shape|rank"):
        run_ort(model, inputs)
    with pytest.raises(OpError, match=match):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("quant_type,k,n,block,a_shape,attrs", [
    (0, 64, 16, 32, (3, 64), {}), (1, 64, 16, 32, (3, 64), {}),
    (1, 96, 24, 64, (2, 3, 96), {}),  # batched A; 96 * 24 / 64 blocks
    (1, 40, 10, 16, (1, 40), {"training_mode": 1})])  # K * N not a whole number of blocks
def test_matmul_bnb4(backend, quant_type, k, n, block, a_shape, attrs):
    inputs = {"A": RNG.standard_normal(a_shape).astype(np.float32),
              "B": RNG.integers(0, 256, ((n * k + 1) // 2,), dtype=np.uint8),
              "absmax": (RNG.random(((n * k + block - 1) // block,)) + 0.5).astype(np.float32)}
    model = single_node("MatMulBnb4", inputs, {"Y": np.float32}, K=k, N=n, block_size=block,
                        quant_type=quant_type, **attrs)
    # Table values times absmax are exact in f32; the rest is K-long f32 sums, |terms| <= 1.5.
    check(model, inputs, backend, atol=5e-5, rtol=1e-5)


def test_matmul_bnb4_trans_b_zero_is_an_error():
    inputs = {"A": np.ones((2, 16), np.float32), "B": np.zeros((512,), np.uint8),
              "absmax": np.ones((32,), np.float32)}
    model = single_node("MatMulBnb4", inputs, {"Y": np.float32}, K=64, N=16, block_size=32,
                        quant_type=1, transB=0)
    with pytest.raises(Exception, match="transB=0"):
        run_ours(model, inputs, "jax")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul(backend, per_column):
    k, n = 32, 8
    shape = (n,) if per_column else ()
    inputs = {"A": RNG.standard_normal((2, 5, k)).astype(np.float32),
              # 7-bit weights: ORT's x86 u8s8 kernel (pmaddubsw) saturates int16 pair sums
              # for full-range int8 weights, a hardware artefact we do not reproduce.
              "B": RNG.integers(-64, 64, (k, n), dtype=np.int8),
              "b_scale": (RNG.random(shape) * 0.05 + 0.01).astype(np.float32),
              "b_zero_point": np.zeros(shape, np.int8),
              "bias": RNG.standard_normal((n,)).astype(np.float32)}
    model = single_node("DynamicQuantizeMatMul", inputs, {"Y": np.float32},
                        constants={"B", "b_scale", "b_zero_point"})
    # Exact int32 accumulation on both sides; the f32 scale product rounds differently.
    check(model, inputs, backend, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_integer_to_float(backend):
    k, n = 32, 8
    inputs = {"A": RNG.integers(0, 256, (4, k), dtype=np.uint8),
              "B": RNG.integers(-64, 64, (k, n), dtype=np.int8),  # 7-bit, as above
              "a_scale": np.array(0.02, np.float32),
              "b_scale": (RNG.random((n,)) * 0.05).astype(np.float32),
              "a_zero_point": np.array(128, np.uint8),
              "b_zero_point": np.zeros((n,), np.int8),
              "bias": RNG.standard_normal((n,)).astype(np.float32)}
    model = single_node("MatMulIntegerToFloat", inputs, {"Y": np.float32},
                        constants={"B", "b_scale", "b_zero_point"})
    check(model, inputs, backend, atol=1e-5, rtol=1e-5)


def _gather_reshaped_table(n=10, k=64, block=32):
    """A q4 embedding as onnxruntime-genai writes it: GatherBlockQuantized over a Reshape (to a
    constant target) of the lm_head's packed MatMulNBits weight, input_ids a graph input."""
    from onnx import TensorProto, helper, numpy_helper
    weight = RNG.integers(0, 256, (n, k // block, block // 2), dtype=np.uint8)
    inits = [numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(np.array([n, k // 2], np.int64), "target"),
             numpy_helper.from_array((RNG.random((n, k // block)) * 0.1).astype(np.float32),
                                     "scales")]
    nodes = [helper.make_node("Reshape", ["w", "target"], ["table"]),
             helper.make_node("GatherBlockQuantized", ["table", "input_ids", "scales"], ["out"],
                              domain="com.microsoft", bits=4, block_size=block, gather_axis=0,
                              quantize_axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [10, 2**31, -11, -2**63])
def test_gather_block_quantized_ids_past_a_reshaped_table(backend, bad):
    """issue 14 (fuzz 20261201:2049): MLX segfaulted, JAX gave NaN. onnxruntime gives a row of
    zeros for an index past the table: input_ids are refused before the call, as Gather's are,
    and with checks=False (or indices computed in the graph) the op gives onnxruntime's zeros."""
    from transmuter.errors import InputError
    model = _gather_reshaped_table()
    feed = {"input_ids": np.array([[1, bad, -10]], np.int64)}
    m = transmuter.load(model, backend=backend)
    with pytest.raises(InputError, match=rf"'input_ids' holds {bad} at \[0, 1\].*\[-10, 9\]"):
        transmuter.run(m, feed)
    want = run_ort(model, feed)["out"]
    got = transmuter.run(transmuter.load(model, backend=backend, checks=False), feed)["out"]
    assert not want[0, 1].any()
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_shape", [(0, 64), (2, 0, 64)])
def test_matmul_nbits_empty_rows(backend, a_shape):
    # issue 14 (fuzz 20261201:2283): an empty batch or sequence killed MLX (SIGFPE in its
    # packed kernel); onnxruntime gives an empty output
    inputs = nbits_inputs(64, 16, 4, 32, zp="packed", m=1, lead=1)
    inputs["A"] = np.zeros(a_shape, np.float32)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=16, bits=4,
                        block_size=32, constants={"B", "scales", "zero_points"})
    got, _ = check(model, inputs, backend, atol=0)
    assert got["Y"].shape == a_shape[:-1] + (16,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_refuses_a_b_that_does_not_match_its_attributes(backend):
    # issue 14 (fuzz 20261201:71): B [16, 2, 1024] for N=1024 was read as broadcast garbage;
    # onnxruntime refuses it at load (PrePack), we when the node runs
    from transmuter.errors import OpError
    inputs = nbits_inputs(64, 16, 4, 32, zp=None)
    inputs["B"] = inputs["B"].reshape(8, 4, 16)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=16, bits=4,
                        block_size=32, constants={"B", "scales"})
    with pytest.raises(Exception, match="does not match"):
        run_ort(model, inputs)
    with pytest.raises(OpError, match=r"B of shape \[8, 4, \d+\].*must be \[16, 2, 16\] bytes"):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(16, 2, 16, 1), (16, 32), (16, 2, 4, 4)])
def test_matmul_nbits_refuses_b_of_its_bytes_in_another_rank(backend, shape):
    # issue 14 (fuzz 20261203:4604, :11810, :5279): B [32, 1, 16, 1] holds the right bytes
    # for its N, K and block_size and was run; onnxruntime's PrePack takes [N, n_blocks, blob]
    # only. [16, 2, 4, 4] is viewed as uint32 words at load (as_words): refused as well.
    from transmuter.errors import OpError
    inputs = nbits_inputs(64, 16, 4, 32, zp=None)
    inputs["B"] = inputs["B"].reshape(shape)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=16, bits=4,
                        block_size=32, constants={"B", "scales"})
    with pytest.raises(Exception, match="does not match attribute-derived shape"):
        run_ort(model, inputs)
    with pytest.raises(OpError, match=r"B of shape \[16, .*\] does not match N=16, K=64.*"
                                      r"must be \[16, 2, 16\] bytes"):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_refuses_scales_of_another_layout(backend):
    # issue 14 (fuzz 20261202:442): scales [1, 32] hold N * n_blocks values, but onnxruntime's
    # PrePack takes only [N * n_blocks] or [N, n_blocks]; we broadcast them
    from transmuter.errors import OpError
    inputs = nbits_inputs(64, 16, 4, 32, zp=None)
    inputs["scales"] = inputs["scales"].reshape(1, 32)
    model = single_node("MatMulNBits", inputs, {"Y": np.float32}, K=64, N=16, bits=4,
                        block_size=32, constants={"B", "scales"})
    with pytest.raises(Exception, match="does not match attribute-derived shape"):
        run_ort(model, inputs)
    with pytest.raises(OpError, match=r"scales of shape \[1, 32\] must be \[32\] or \[16, 2\]"):
        run_ours(model, inputs, backend)


def _tied_embedding(k=64, n=24, block=32):
    """genai's q4 tied embedding: one packed (N, n_blocks, blob) weight read by a Reshape into
    GatherBlockQuantized's table and by the MatMulNBits lm_head."""
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(RNG.integers(0, 256, (n, k // block, block // 2),
                                                  dtype=np.uint8), "w"),
             numpy_helper.from_array(np.array([n, k // 2], np.int64), "target"),
             numpy_helper.from_array((RNG.random((n, k // block)) * 0.1).astype(np.float32),
                                     "scales")]
    nodes = [helper.make_node("Reshape", ["w", "target"], ["table"]),
             helper.make_node("GatherBlockQuantized", ["table", "input_ids", "scales"], ["emb"],
                              domain="com.microsoft", bits=4, block_size=block, gather_axis=0,
                              quantize_axis=1),
             helper.make_node("MatMulNBits", ["emb", "w", "scales"], ["logits"],
                              domain="com.microsoft", K=k, N=n, bits=4, block_size=block)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("emb", "logits")],
        inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_embedding_lm_head_gets_its_own_words(backend):
    # The lm_head's B is shared with the embedding's Reshape: MatMulNBits gets a uint32-word
    # copy (read raw it was rebuilt into words every call), the Reshape keeps the bytes; both
    # outputs equal onnxruntime's (tolerance of test_matmul_nbits: f32 sums over K = 64)
    model = _tied_embedding()
    feed = {"input_ids": np.array([[3, 0, 23]], np.int64)}
    m = transmuter.load(model, backend=backend)
    stored = {**m.constants, **m.params}
    assert str(stored["w::prepared"].dtype).endswith("uint32")
    assert str(stored["w"].dtype).endswith("uint8")
    want = run_ort(model, feed)
    for got in (transmuter.run(m, feed), transmuter.compile(m, feed)(feed)):
        for name in ("emb", "logits"):
            np.testing.assert_allclose(np.asarray(got[name]), want[name], atol=2e-5, rtol=1e-5,
                                       err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_type,w_type,channels,group,kernel", [
    (np.uint8, np.int8, 8, 8, (3, 3)),  # depthwise, as quantize_dynamic makes of MobileNet
    (np.uint8, np.uint8, 6, 3, (3, 3)),
    (np.int8, np.int8, 4, 1, (1, 1)),
    (np.uint8, np.int8, 256, 1, (3, 3)),  # K = 2304: x split into three 4-bit digits
    (np.uint8, np.int8, 512, 1, (5,)),  # Kokoro's text encoder
])
def test_conv_integer_is_exact(backend, x_type, w_type, channels, group, kernel):
    # issue 40: grouped ConvInteger failed on MLX (its float64 convolution refuses groups);
    # the int32 result must equal onnxruntime's exactly, extremes included.
    lo_x, hi_x = np.iinfo(x_type).min, np.iinfo(x_type).max
    lo_w, hi_w = np.iinfo(w_type).min, np.iinfo(w_type).max
    spatial = (7, 6)[:len(kernel)]
    x = RNG.integers(lo_x, hi_x, (2, channels) + spatial, dtype=x_type, endpoint=True)
    out = 2 * group if group > 1 else 4
    w = RNG.integers(lo_w, hi_w, (out, channels // group) + kernel, dtype=w_type, endpoint=True)
    x[0], w[0] = hi_x, lo_w  # the largest products, all of one sign
    inputs = {"x": x, "w": w, "x_zero_point": np.array(lo_x, x_type),
              "w_zero_point": np.array(hi_w, w_type)}  # ORT: per-tensor only
    model = single_node("ConvInteger", inputs, {"y": np.int32}, domain="", opset=10,
                        constants={"w", "w_zero_point"}, group=group,
                        pads=[k // 2 for k in kernel] * 2)
    check(model, inputs, backend, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_type,b_type,a_shape,n", [
    (np.uint8, np.int8, (3, 5, 384), 64),  # quantize_dynamic's encoders: two 7-bit digits
    (np.uint8, np.int8, (1, 2048), 40),  # K = 2048: 5-bit digits
    (np.int8, np.uint8, (4, 31), 7),  # one digit
    (np.uint8, np.uint8, (96,), 9),  # a vector A: one row
])
def test_matmul_integer_is_exact(backend, a_type, b_type, a_shape, n):
    # MatMulInteger runs as float32 products of A's digits (ops/qlinear.py _exact); the int32
    # result must equal onnxruntime's exactly, the largest products of one sign included.
    lo_a, hi_a = np.iinfo(a_type).min, np.iinfo(a_type).max
    lo_b, hi_b = np.iinfo(b_type).min, np.iinfo(b_type).max
    a = RNG.integers(lo_a, hi_a, a_shape, dtype=a_type, endpoint=True)
    b = RNG.integers(lo_b, hi_b, (a_shape[-1], n), dtype=b_type, endpoint=True)
    a.reshape(-1, a_shape[-1])[0], b[:, 0] = hi_a, lo_b
    inputs = {"a": a, "b": b, "a_zero_point": np.array(lo_a, a_type),
              "b_zero_point": np.array(hi_b, b_type)}
    model = single_node("MatMulInteger", inputs, {"y": np.int32}, domain="", opset=10,
                        constants={"b", "b_zero_point"})
    check(model, inputs, backend, atol=0)


def _q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _within_one_step(model, inputs, backend):
    """ORT's kernels reach the quantized result by lookup tables or fixed-point multipliers: a
    float result near a rounding tie may land one step away; no more, and rarely."""
    got, want = run_ours(model, inputs, backend), run_ort(model, inputs)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
        assert diff.max() <= 1 and diff.mean() < 0.02, (name, diff.max(), diff.mean())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(backend, dtype, op_type):
    # Scales with no simple ratio: 0.05 against 0.08 would put a rounding tie on every eighth
    # value, which ORT's fixed-point kernel and a float computation split differently.
    inputs = {"A": _q((2, 3, 40), dtype), "A_scale": np.array(0.0517, np.float32),
              "A_zero_point": np.array(3, dtype), "B": _q((3, 40), dtype),
              "B_scale": np.array(0.0213, np.float32), "B_zero_point": np.array(-2 if dtype ==
                                                                               np.int8 else 7,
                                                                               dtype),
              "C_scale": np.array(0.0791 if op_type == "QLinearAdd" else 0.3071, np.float32),
              "C_zero_point": np.array(5, dtype)}
    model = single_node(op_type, inputs, {"C": dtype},
                        constants={k for k in inputs if "scale" in k or "zero" in k})
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type,attrs", [("QLinearSigmoid", {}),
                                           ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_unary(backend, dtype, op_type, attrs):
    inputs = {"X": _q((4, 64), dtype), "X_scale": np.array(0.05, np.float32),
              "X_zero_point": np.array(10, dtype), "Y_scale": np.array(0.004 if op_type ==
                                                                       "QLinearSigmoid" else 0.04,
                                                                       np.float32),
              "Y_zero_point": np.array(-100 if dtype == np.int8 else 20, dtype)}
    model = single_node(op_type, inputs, {"Y": dtype},
                        constants={k for k in inputs if k != "X"}, **attrs)
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(backend, channels_last):
    shape = (2, 5, 6, 8) if channels_last else (2, 8, 5, 6)
    inputs = {"X": _q(shape, np.uint8), "x_scale": np.array(0.05, np.float32),
              "x_zero_point": np.array(128, np.uint8), "y_scale": np.array(0.0213, np.float32),
              "y_zero_point": np.array(120, np.uint8)}
    model = single_node("QLinearGlobalAveragePool", inputs, {"Y": np.uint8},
                        constants={k for k in inputs if k != "X"}, channels_last=channels_last)
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_qlinear_concat(backend):
    inputs = {"Y_scale": np.array(0.05, np.float32), "Y_zero_point": np.array(100, np.uint8),
              "x0": _q((2, 3, 4), np.uint8), "s0": np.array(0.04, np.float32),
              "z0": np.array(90, np.uint8), "x1": _q((2, 5, 4), np.uint8),
              "s1": np.array(0.07, np.float32), "z1": np.array(130, np.uint8)}
    model = single_node("QLinearConcat", inputs, {"Y": np.uint8},
                        constants={"Y_scale", "Y_zero_point", "s0", "z0", "s1", "z1"}, axis=1)
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint8])
def test_contrib_quantize_dequantize_linear(backend, dtype):
    # The contrib-domain Q/DQ pair ORT's quantizer writes (16-bit types before opset 21).
    info = np.iinfo(dtype)
    inputs = {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32) * 3,
              "scale": (RNG.random(4) * 0.01 + 1e-3).astype(np.float32),
              "zero_point": RNG.integers(info.min // 2, info.max // 2, (4,), dtype=dtype)}
    q = single_node("QuantizeLinear", inputs, {"y": dtype}, constants={"scale", "zero_point"},
                    axis=1)
    check(q, inputs, backend, atol=0)
    dq_inputs = {**inputs, "x": run_ort(q, inputs)["y"]}
    dq = single_node("DequantizeLinear", dq_inputs, {"y": np.float32},
                     constants={"scale", "zero_point"}, axis=1)
    check(dq, dq_inputs, backend, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last,attrs", [
    (0, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
    (1, {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 0, 1],
         "count_include_pad": 1})])
def test_qlinear_average_pool(backend, dtype, channels_last, attrs):
    shape = (2, 6, 7, 5) if channels_last else (2, 5, 6, 7)
    inputs = {"X": _q(shape, dtype), "x_scale": np.array(0.0517, np.float32),
              "x_zero_point": np.array(3, dtype), "y_scale": np.array(0.0373, np.float32),
              "y_zero_point": np.array(-7 if dtype == np.int8 else 121, dtype)}
    model = single_node("QLinearAveragePool", inputs, {"Y": dtype},
                        constants={k for k in inputs if k != "X"}, channels_last=channels_last,
                        **attrs)
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_where(backend, dtype):
    inputs = {"condition": RNG.random((3, 1, 40)) < 0.5, "X": _q((3, 4, 40), dtype),
              "x_scale": np.array(0.0517, np.float32), "x_zero_point": np.array(3, dtype),
              "Y": _q((4, 40), dtype), "y_scale": np.array(0.0213, np.float32),
              "y_zero_point": np.array(-2 if dtype == np.int8 else 7, dtype),
              "z_scale": np.array(0.0411, np.float32), "z_zero_point": np.array(5, dtype)}
    model = single_node("QLinearWhere", inputs, {"Z": dtype},
                        constants={k for k in inputs if "scale" in k or "zero" in k})
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype,y_zero_point,opset,axis,y_scale", [
    (np.uint8, 0, 13, -1, 1 / 256), (np.int8, -128, 13, 1, 1 / 255),
    (np.uint8, 0, 13, 1, 1 / 255), (np.int8, -128, 12, 1, 1 / 256),
    (np.uint8, 0, 12, None, 0.003)])
def test_qlinear_softmax(backend, dtype, y_zero_point, opset, axis, y_scale):
    # no axis: the schema's -1 at opset 12 too (the kernel's own default of 1 is never read);
    # y_scale 1/255: ORT multiplies by floor(1 / y_scale) = 254 (1 / f32(1/255) is 254.99998);
    # the int8 cases keep each value under 256 steps (ORT's int8 path wraps at 128, we saturate)
    x = _q((2, 3, 4, 7), dtype)
    x[0, 0, 0] = np.iinfo(dtype).max  # a row of one value: each exp is 1
    inputs = {"X": x, "X_scale": np.array(0.0625, np.float32),
              "x_zero_point": np.array(0, dtype), "y_scale": np.array(y_scale, np.float32),
              "y_zero_point": np.array(y_zero_point, dtype)}
    if dtype == np.int8:
        inputs["y_scale"] = np.array(max(y_scale, 1 / 255), np.float32)  # 254 steps at most
    model = single_node("QLinearSoftmax", inputs, {"Y": dtype},
                        constants={k for k in inputs if k != "X"},
                        **({} if axis is None else {"axis": axis}))
    # the attribute "opset" (the Softmax it stands for) is single_node's own keyword
    model.graph.node[0].attribute.append(helper.make_attribute("opset", opset))
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_type,b_type,out,per_column,trans", [
    (np.uint8, np.uint8, "float", False, (0, 0)), (np.uint8, np.int8, "float", True, (1, 0)),
    (np.uint8, np.int8, "quantized", True, (1, 1)), (np.int8, np.int8, "quantized", False, (0, 1)),
    (np.uint8, np.uint8, "quantized", True, (0, 0))])
def test_qgemm(backend, a_type, b_type, out, per_column, trans):
    m, k, n = 5, 37, 6
    b_zp = (RNG.integers(-3, 3, n) if per_column else np.array(1)).astype(b_type)
    b_scale = ((RNG.random(n) * 0.02 + 0.01) if per_column else np.array(0.0231)).astype(
        np.float32)
    inputs = {"A": _q((k, m) if trans[0] else (m, k), a_type),
              "a_scale": np.array(0.0517, np.float32), "a_zero_point": np.array(4, a_type),
              "B": _q((n, k) if trans[1] else (k, n), b_type), "b_scale": b_scale,
              "b_zero_point": b_zp, "C": RNG.integers(-500, 500, (n,)).astype(np.int32)}
    outputs = {"Y": np.float32}
    if out == "quantized":
        inputs.update(y_scale=np.array(0.731, np.float32), y_zero_point=np.array(9, a_type))
        outputs = {"Y": a_type}
    model = single_node("QGemm", inputs, outputs, constants={
        k for k in inputs if k not in ("A", "B")}, transA=trans[0], transB=trans[1], alpha=0.75)
    if out == "float":  # exact int32 sums times one f32 scale: an ulp of the f32 product
        check(model, inputs, backend, atol=1e-5, rtol=1e-6)
    else:
        _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_type,w_type,channels_last,group", [
    (np.uint8, np.int8, 0, 1), (np.int8, np.int8, 1, 1), (np.uint8, np.uint8, 1, 6),
    (np.uint8, np.int8, 1, 6)])
def test_contrib_qlinear_conv(backend, x_type, w_type, channels_last, group):
    c, m = 6, 12
    x = _q((2, 7, 8, c) if channels_last else (2, c, 7, 8), x_type)
    inputs = {"x": x, "x_scale": np.array(0.0517, np.float32),
              "x_zero_point": np.array(3, x_type), "w": _q((m, c // group, 3, 3), w_type),
              "w_scale": (RNG.random(m) * 0.01 + 0.002).astype(np.float32),
              "w_zero_point": np.zeros(m, w_type), "y_scale": np.array(0.613, np.float32),
              "y_zero_point": np.array(-5 if x_type == np.int8 else 117, x_type),
              "B": RNG.integers(-900, 900, m).astype(np.int32)}
    model = single_node("QLinearConv", inputs, {"y": x_type},
                        constants={k for k in inputs if k != "x"}, channels_last=channels_last,
                        group=group, kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[1, 2])
    _within_one_step(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_nhwc_max_pool(backend, dtype):
    inputs = {"x": _q((2, 7, 9, 5), dtype)}
    model = single_node("NhwcMaxPool", inputs, {"y": dtype}, kernel_shape=[3, 2],
                        pads=[1, 0, 1, 1], strides=[2, 1], dilations=[1, 2])
    check(model, inputs, backend, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_shape,b_shape", [((5, 300), (300, 7)), ((2, 3, 4, 64), (64, 5))])
def test_matmul_integer16(backend, a_shape, b_shape):
    # |values| <= 2000: sums of 300 products stay within int32 (past it ORT's int32 sums wrap,
    # garbage either way; JAX's integer dot saturates)
    inputs = {"A": RNG.integers(-2000, 2000, a_shape).astype(np.int16),
              "B": RNG.integers(-2000, 2000, b_shape).astype(np.int16)}
    inputs["A"].flat[0], inputs["B"].flat[0] = -2000, -2000
    check(single_node("MatMulInteger16", inputs, {"Y": np.int32}), inputs, backend, atol=0)
