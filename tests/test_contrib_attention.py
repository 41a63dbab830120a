"""com.microsoft GroupQueryAttention, MultiHeadAttention, Attention and RotaryEmbedding against
onnxruntime (optimizations off) over their attribute variants.

GroupQueryAttention's present buffers are compared on their valid rows (seqlens_k + 1 per batch
entry): past those, ONNX Runtime zeroes a present it allocates itself and leaves a buffer it
shares with the past as it was; we do the latter (the buffer is written in place, no pass over
it), and no one reads those rows.

Tolerances: f32 scores over head_size <= 16 terms and softmax over <= 8 keys differ from ORT only
in summation order: atol 2e-5. fp16: ORT converts to f32 for scores and softmax as we do; the
output rounds once to fp16 (1 ulp ~ 1e-3 at |y| ~ 1), so atol 2e-3."""

import numpy as np
import pytest

from tests.contrib_graphs import BACKENDS, check, single_node

RNG = np.random.default_rng(0)
F32 = np.float32
B, HQ, HKV, D = 2, 4, 2, 16


def caches(half, dtype, length=32):
    angles = np.arange(length)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def gqa_inputs(s, past, total, seqlens, *, packed=False, rotary=0, dtype=F32, batch=B,
               **extra):
    """``batch`` 1: the JAX backend writes the cache as one slice, not a scatter."""
    def r(*shape):
        return RNG.standard_normal(shape).astype(dtype)

    q, k, v = r(batch, s, HQ * D), r(batch, s, HKV * D), r(batch, s, HKV * D)
    inputs = ({"query": np.concatenate([q, k, v], -1), "key": None, "value": None} if packed
              else {"query": q, "key": k, "value": v})
    inputs.update(past_key=r(batch, HKV, past, D), past_value=r(batch, HKV, past, D),
                  seqlens_k=np.array(seqlens, np.int32),
                  total_sequence_length=np.array(total, np.int32))
    cos, sin = caches(rotary, dtype) if rotary else (None, None)
    inputs.update(cos_cache=cos, sin_cache=sin)
    inputs.update(extra)
    return inputs


GQA_CASES = {
    "prompt": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {}),
    "prompt_padded_batch": (dict(s=5, past=0, total=5, seqlens=[4, 2]), {}),
    "decode_growing": (dict(s=1, past=5, total=6, seqlens=[5, 5]), {}),
    "decode_shared_buffer_ragged": (dict(s=1, past=8, total=8, seqlens=[5, 3]), {}),
    "decode_one_entry": (dict(s=1, past=5, total=6, seqlens=[5], batch=1), {}),
    "decode_shared_buffer_one_entry": (dict(s=1, past=8, total=8, seqlens=[3], batch=1), {}),
    "prompt_chunk_one_entry": (dict(s=3, past=8, total=8, seqlens=[6], batch=1), {}),
    "prompt_packed_rotary": (dict(s=5, past=0, total=5, seqlens=[4, 4], packed=True,
                                  rotary=D // 2), {"do_rotary": 1}),
    "decode_rotary": (dict(s=1, past=5, total=6, seqlens=[5, 5], rotary=D // 2),
                      {"do_rotary": 1}),
    "decode_rotary_interleaved": (dict(s=1, past=8, total=8, seqlens=[5, 3], rotary=D // 2),
                                  {"do_rotary": 1, "rotary_interleaved": 1}),
    "local_window": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {"local_window_size": 2}),
    "local_window_decode": (dict(s=1, past=8, total=8, seqlens=[7, 5]),
                            {"local_window_size": 3}),
    "softcap": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {"softcap": 2.0}),
    "smooth_softmax": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {"smooth_softmax": 1}),
    "scale_qk_before_softmax": (dict(s=5, past=0, total=5, seqlens=[4, 4]),
                                {"scale": 0.3, "qk_output": 1}),
    "qk_after_softmax": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {"qk_output": 2}),
    "bidirectional": (dict(s=5, past=0, total=5, seqlens=[4, 4]), {"causal": 0}),
}


def _run_gqa(backend, inputs, attrs, dtype=F32, atol=2e-5):
    outputs = {"output": dtype, "present_key": dtype, "present_value": dtype}
    if attrs.get("qk_output"):
        outputs["output_qk"] = dtype
    model = single_node("GroupQueryAttention", inputs, outputs,
                        constants={"total_sequence_length"}, num_heads=HQ, kv_num_heads=HKV,
                        **attrs)
    got, want = check(model, inputs, backend, atol=atol, skip={"present_key", "present_value"})
    for name in ("present_key", "present_value"):
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
        for b, valid in enumerate(np.asarray(inputs["seqlens_k"]) + 1):
            np.testing.assert_allclose(got[name][b, :, :valid].astype(np.float64),
                                       want[name][b, :, :valid].astype(np.float64), atol=atol,
                                       rtol=0, err_msg=f"{name}[{b}]")
    return got, want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(GQA_CASES))
def test_group_query_attention(backend, case):
    shape, attrs = GQA_CASES[case]
    _run_gqa(backend, gqa_inputs(**shape), attrs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gqa_bias_sink_softcap(backend):
    extra = dict(position_ids=None, attention_bias=3 * RNG.standard_normal(
        (1, HQ, 5, 5)).astype(F32), head_sink=RNG.standard_normal(HQ).astype(F32))
    _run_gqa(backend, gqa_inputs(5, 0, 5, [4, 4], **extra), {"softcap": 1.0})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("s,past,total", [(5, 0, 5), (1, 5, 6)])
def test_gqa_position_ids(backend, s, past, total):
    pos = np.array([[3, 4, 5, 6, 7], [1, 2, 3, 4, 5]])[:, :s] if s > 1 else np.array([[9], [2]])
    inputs = gqa_inputs(s, past, total, [total - 1] * B, rotary=D // 2,
                        position_ids=pos.astype(np.int64))
    _run_gqa(backend, inputs, {"do_rotary": 1})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("s,past,total,seqlens", [(5, 0, 5, [4, 4]), (1, 8, 8, [5, 3])])
def test_gqa_fp16(backend, s, past, total, seqlens):
    inputs = gqa_inputs(s, past, total, seqlens, rotary=D // 2, dtype=np.float16)
    _run_gqa(backend, inputs, {"do_rotary": 1}, dtype=np.float16, atol=2e-3)


def r(*shape):
    return RNG.standard_normal(shape).astype(F32)


N, H = 2, 16
S, L = 5, 7


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["plain", "bias_mask2d", "mask1d", "past_causal_bias",
                                     "bnsh_kv"])
def test_multihead_attention(backend, variant):
    q, k, v = r(B, S, N * H), r(B, L, N * H), r(B, L, N * H)
    inputs = {"query": q, "key": k, "value": v}
    outputs = {"output": F32}
    attrs = {}
    if variant == "bias_mask2d":
        inputs.update(bias=r(3 * N * H), key_padding_mask=np.array(
            [[1] * L, [1] * 4 + [0] * 3], np.int32))
    elif variant == "mask1d":
        inputs.update(bias=None, key_padding_mask=np.array([L, 4], np.int32))
    elif variant == "past_causal_bias":
        inputs.update(key=r(B, S, N * H), value=r(B, S, N * H), bias=None,
                      key_padding_mask=None, attention_bias=r(1, N, S, S + 3),
                      past_key=r(B, N, 3, H), past_value=r(B, N, 3, H))
        outputs.update(present_key=F32, present_value=F32)
        attrs["unidirectional"] = 1
    elif variant == "bnsh_kv":
        inputs.update(key=r(B, N, L, H), value=r(B, N, L, H))
    check(single_node("MultiHeadAttention", inputs, outputs, num_heads=N, **attrs), inputs,
          backend, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["plain", "mask2d_unidirectional", "mask1d", "past",
                                     "qkv_hidden_sizes"])
def test_attention(backend, variant):
    hidden = N * H
    w, bias = (r(hidden, 3 * hidden) * 0.2), r(3 * hidden)
    inputs = {"input": r(B, S, hidden), "weights": w, "bias": bias}
    outputs = {"output": F32}
    attrs = {}
    if variant == "mask2d_unidirectional":
        inputs["mask_index"] = np.array([[1] * 5, [1] * 3 + [0] * 2], np.int32)
        outputs["present"] = F32
        attrs["unidirectional"] = 1
    elif variant == "mask1d":
        inputs["mask_index"] = np.array([5, 3], np.int32)
    elif variant == "past":
        inputs.update(mask_index=np.ones((B, S + 3), np.int32), past=r(2, B, N, 3, H))
        outputs["present"] = F32
        attrs["unidirectional"] = 1
    elif variant == "qkv_hidden_sizes":
        inputs.update(weights=w[:, :2 * hidden + 16], bias=bias[:2 * hidden + 16])
        attrs["qkv_hidden_sizes"] = [hidden, hidden, 16]
    check(single_node("Attention", inputs, outputs, num_heads=N, **attrs), inputs, backend,
          atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["3d", "3d_offset_interleaved", "4d", "partial"])
def test_rotary_embedding(backend, variant):
    cos, sin = caches(8, F32)
    pos = np.array([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]], np.int64)
    x = r(B, S, N * H)
    attrs = {}
    if variant == "3d_offset_interleaved":
        pos = np.array([3], np.int64)
        attrs["interleaved"] = 1
    elif variant == "4d":
        x = r(B, N, S, H)
    elif variant == "partial":
        cos, sin = cos[:, :4], sin[:, :4]
        attrs.update(num_heads=N, rotary_embedding_dim=8)
    inputs = {"input": x, "position_ids": pos, "cos_cache": cos, "sin_cache": sin}
    check(single_node("RotaryEmbedding", inputs, {"output": F32}, **attrs), inputs, backend,
          atol=1e-5)


# issue 14 (fuzz 20261201:9 and kin): inputs onnxruntime's GroupQueryAttention refuses ran,
# broadcast or clamped. Each is refused by onnxruntime (asserted) and by us, naming what is wrong.
GQA_BAD = {
    "past_value of another length": (
        dict(s=1, past=5, total=6, seqlens=[5, 5]),
        lambda i: i.update(past_value=i["past_value"][:, :, :3]), "one past_length"),
    "past_key of another batch": (
        dict(s=1, past=5, total=6, seqlens=[5, 5]),
        lambda i: i.update(past_key=np.concatenate([i["past_key"]] * 2)), "past_key must be"),
    "past_value of another head size": (
        dict(s=1, past=5, total=6, seqlens=[5, 5]),
        lambda i: i.update(past_value=i["past_value"][..., :8]), "past_value must be"),
    "total length past the past and the step": (
        dict(s=1, past=5, total=9, seqlens=[5, 5]), lambda i: None,
        "total_sequence_length 9 must be past length 5"),
    "seqlens_k past the buffer": (
        dict(s=5, past=0, total=5, seqlens=[4, 9]), lambda i: None,
        r"seqlens_k\[1\] = 9 is out of range \[0, 5\)"),
    "seqlens_k negative": (
        dict(s=5, past=0, total=5, seqlens=[-1, 4]), lambda i: None,
        r"seqlens_k\[0\] = -1 is out of range"),
    "seqlens_k of another batch": (
        dict(s=5, past=0, total=5, seqlens=[4, 4, 4]), lambda i: None,
        r"seqlens_k must be \(batch,\)"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(GQA_BAD))
def test_gqa_refuses_what_onnxruntime_refuses(backend, case):
    import transmuter
    from tests.contrib_graphs import feeds, run_ort
    from transmuter.errors import TransmuterError
    shape, edit, match = GQA_BAD[case]
    inputs = gqa_inputs(**shape)
    edit(inputs)
    model = single_node("GroupQueryAttention", inputs, {"output": F32},
                        constants={"total_sequence_length"}, num_heads=HQ, kv_num_heads=HKV)
    with pytest.raises(Exception, match="INVALID_ARGUMENT"):
        run_ort(model, inputs)
    m = transmuter.load(model, backend=backend)
    with pytest.raises(TransmuterError, match=match):  # eager: OpError naming the node
        transmuter.run(m, feeds(model, inputs))
    with pytest.raises(TransmuterError, match=match):  # compiled: checked before the call
        m(**feeds(model, inputs))


@pytest.mark.parametrize("attrs,match", [
    ({"do_rotary": 7}, "'do_rotary' is 7, where GroupQueryAttention takes 0 or 1"),
    ({"rotary_interleaved": -2}, "'rotary_interleaved' is -2"),
    ({"local_window_size": -2**63}, "'local_window_size' is -9223372036854775808"),
    ({"scale": float("inf")}, "'scale' is inf"),
    ({"kv_num_heads": 3}, "num_heads 4 is not a multiple of kv_num_heads 3")])
def test_gqa_attributes_onnxruntime_reads_otherwise_are_refused_at_load(attrs, match):
    # onnxruntime reads do_rotary / rotary_interleaved == 1 as on and anything else as off,
    # and a local_window_size of int64 min as 0 (its int cast): values no exporter writes, read
    # silently otherwise than the attribute says; kv_num_heads 3 onnxruntime refuses itself.
    import transmuter
    from transmuter.errors import ModelLoadError
    inputs = gqa_inputs(s=5, past=0, total=5, seqlens=[4, 4])
    model = single_node("GroupQueryAttention", inputs, {"output": F32},
                        constants={"total_sequence_length"}, **{"num_heads": HQ,
                                                                "kv_num_heads": HKV, **attrs})
    with pytest.raises(ModelLoadError, match=match):
        transmuter.load(model)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rotary", [0, D // 2])
def test_gqa_nan_past_the_attended_rows(backend, rotary):
    """NaN in a padded token's rows (past seqlens_k + 1): ONNX Runtime's softmax reads only the
    allowed scores and its weighted sum only the first seqlens_k + 1 value rows, so the NaN stays
    in the padded rows; ours masks by a select (NaN + -inf is NaN) and zeroes the value rows past
    them (0 * NaN is NaN). The fuzzer found it: a NaN in the rotary cache at a padded position
    made every logit NaN. (A NaN in an attended row is not compared: onnxruntime's softmax then
    gives 0 or NaN depending on where in the row it sits; tests/fuzz/known.py.)"""
    inputs = gqa_inputs(5, 0, 5, [4, 2], rotary=rotary)
    for name in ("query", "key", "value"):
        inputs[name] = inputs[name].copy()
        inputs[name][1, 3:] = np.nan  # batch 1's padded tokens (seqlens_k 2: 3 valid)
    attrs = {"do_rotary": 1} if rotary else {}
    got, want = _run_gqa(backend, inputs, attrs)
    assert np.isfinite(want["output"][1, :3]).all() and np.isnan(want["output"][1, 3:]).all()
    if rotary:  # a NaN in the cos cache at the padded positions of both entries
        inputs = gqa_inputs(5, 0, 5, [2, 2], rotary=rotary)
        inputs["cos_cache"] = inputs["cos_cache"].copy()
        inputs["cos_cache"][3:5] = np.nan
        got, want = _run_gqa(backend, inputs, attrs)
        assert np.isfinite(want["output"][:, :3]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("variant", ["plain", "per_column_mask", "past_unidirectional"])
def test_qattention(backend, x_type, w_type, variant):
    # The projection is exact in int32 on both sides; what differs is the f32 attention after it
    # (summation order, exp): Attention's 2e-5.
    hidden = N * H
    rng = np.random.default_rng(7)

    def q(shape, dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)

    inputs = {"input": q((B, S, hidden), x_type), "weight": q((hidden, 3 * hidden), w_type),
              "bias": r(3 * hidden), "input_scale": np.array(0.02, F32),
              "weight_scale": np.array(0.0031, F32), "mask_index": None,
              "input_zero_point": np.array(121, x_type),
              "weight_zero_point": np.array(3, w_type)}
    outputs, attrs = {"output": F32}, {}
    if variant == "per_column_mask":
        inputs["weight_scale"] = (rng.random(3 * hidden) * 0.003 + 0.001).astype(F32)
        inputs["weight_zero_point"] = rng.integers(0, 9, 3 * hidden).astype(w_type)
        inputs["mask_index"] = np.array([[1] * 5, [1] * 3 + [0] * 2], np.int32)
    elif variant == "past_unidirectional":
        inputs["past"] = r(2, B, N, 3, H)
        outputs["present"] = F32
        attrs["unidirectional"] = 1
    model = single_node("QAttention", inputs, outputs, num_heads=N,
                        constants={"weight", "input_scale", "weight_scale", "input_zero_point",
                                   "weight_zero_point"}, **attrs)
    check(model, inputs, backend, atol=2e-5, rtol=1e-5)
