"""com.microsoft GroupQueryAttention, as ONNX Runtime's CPU kernel computes it.

Per batch entry b, ``seqlens_k[b] + 1`` is the number of valid tokens once this step's S tokens are
in the cache, so the step's tokens start at ``past_b = seqlens_k[b] + 1 - S`` (0 on the first
prompt, when S == total_sequence_length > 1). The present buffers are
``max(total_sequence_length, past buffer length)`` long: the past buffer with the new rows written
at [past_b, past_b + S). Query row i sits at absolute position past_b + i: the causal
mask, ``local_window_size`` and the rotary angles (without ``position_ids``) use that position.
Scores, softmax and the weighted sum run in f32."""

import numpy as np

from ..attention import (apply_softcap, block, f32, grouped_scores, grouped_values,
                         merge_heads, safe_softmax, smooth_softmax)
from ..registry import op
from ..transformer_blocks import rotate_partial


def write_cache(xp, past, new, start, length):
    """(B, H, L, D) buffer: ``past`` (cut or zero-padded to L rows) with ``new`` (B, H, S, D)
    written at rows [start[b], start[b] + S), as ONNX Runtime writes a buffer that past and
    present share (rows past the valid ones are never attended). A scatter: the offsets may be
    traced values, and only the new rows are computed (a select over the whole buffer would
    recompute them, rotary and all, for every element)."""
    b, h, s, d = new.shape
    if past is None or past.shape[2] == 0:
        base = xp.zeros((b, h, length, d), xp.dtype_of(new))
    else:
        p = past.shape[2]
        base = past[:, :, :length] if p >= length else xp.pad(
            past, [(0, 0), (0, 0), (0, length - p), (0, 0)])
    rows = xp.reshape(xp.arange(b, dtype=np.int64), (b, 1, 1))
    heads = xp.reshape(xp.arange(h, dtype=np.int64), (1, h, 1))
    at = xp.reshape(start, (b, 1, 1)) + xp.reshape(xp.arange(s, dtype=np.int64), (1, 1, s))
    return xp.index_update(base, (rows, heads, xp.clip(at, 0, length - 1)), new)


def rotary_positions(xp, position_ids, past_b, batch, s, first_prompt):
    steps = xp.reshape(xp.arange(s, dtype=np.int64), (1, s))
    if position_ids is not None:
        position_ids = xp.astype(position_ids, np.int64)
        if first_prompt:  # ORT reads only the first element on the first prompt
            return xp.broadcast_to(position_ids[:1, :1] + steps, (batch, s))
        return position_ids
    return xp.broadcast_to(xp.reshape(past_b, (-1, 1)) + steps, (batch, s))


def rope_heads(xp, x, cos_cache, sin_cache, pos, interleaved):
    """x (B, S, H, D) rotated at positions pos (B, S) by caches (max_len, rot/2)."""
    pos = xp.clip(pos, 0, cos_cache.shape[0] - 1)
    cos = xp.expand_dims(xp.take(cos_cache, pos, axis=0), 2)
    sin = xp.expand_dims(xp.take(sin_cache, pos, axis=0), 2)
    return rotate_partial(xp, x, cos, sin, interleaved, 2 * cos_cache.shape[-1])


def attend(xp, q, k, v, allowed, *, scale, softcap, bias=None, smooth=False, sink=None):
    """q (B, Hq, S, D), k/v (B, Hkv, L, D), ``allowed`` broadcastable to (B, Hq, S, L).
    ORT order: scale, softcap, + bias, mask, softmax. Returns f32 output, scores, probs."""
    scores = grouped_scores(xp, f32(xp, q), f32(xp, k)) * np.float32(scale)
    scores = apply_softcap(xp, scores, softcap)
    if bias is not None:
        scores = scores + f32(xp, bias)
    masked = scores + block(xp, allowed)
    if smooth or sink is not None:
        sink = None if sink is None else xp.reshape(f32(xp, sink), (1, -1, 1, 1))
        probs = smooth_softmax(xp, masked, sink)
    else:
        probs = safe_softmax(xp, masked)
    probs = xp.where(allowed, probs, np.float32(0))
    return grouped_values(xp, probs, f32(xp, v)), scores, probs


def _heads(xp, x, n):
    b, s, hidden = x.shape
    return xp.reshape(x, (b, s, n, hidden // n))


@op("GroupQueryAttention", 1, domain="com.microsoft", static=(6,), context=True)
def group_query_attention(xp, query, key=None, value=None, past_key=None, past_value=None,
                          seqlens_k=None, total_sequence_length=None, cos_cache=None,
                          sin_cache=None, position_ids=None, attention_bias=None,
                          head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads,
                          scale=0.0, softcap=0.0, do_rotary=0, rotary_interleaved=0,
                          local_window_size=-1, smooth_softmax=0, causal=1, qk_output=0,
                          sliding_window_cache=0, k_quant_type="NONE", v_quant_type="NONE",
                          kv_cache_bit_width=0, qk_norm_epsilon=1e-6, q_norm_epsilon=None,
                          k_norm_epsilon=None, ctx=None):
    if (k_scale is not None or v_scale is not None or k_quant_type != "NONE"
            or v_quant_type != "NONE"):
        raise NotImplementedError("GroupQueryAttention with a quantized KV cache")
    if sliding_window_cache or query_seqlens is not None or q_norm_weight is not None:
        raise NotImplementedError(
            "GroupQueryAttention with sliding_window_cache, query_seqlens or q/k_norm_weight "
            "(ONNX Runtime's CPU kernel rejects the norm weights too)")
    dt = xp.dtype_of(query)
    batch, s = query.shape[:2]
    if key is None:  # packed QKV: (B, S, (Hq + 2 Hkv) * D)
        d = query.shape[2] // (num_heads + 2 * kv_num_heads)
        qkv = _heads(xp, query, num_heads + 2 * kv_num_heads)
        q, k, v = (qkv[:, :, :num_heads], qkv[:, :, num_heads:num_heads + kv_num_heads],
                   qkv[:, :, num_heads + kv_num_heads:])
    else:
        q, k, v = _heads(xp, query, num_heads), _heads(xp, key, kv_num_heads), _heads(
            xp, value, kv_num_heads)
        d = q.shape[3]
    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    first_prompt = s > 1 and s == total
    seqlens = xp.astype(xp.reshape(seqlens_k, (-1,)), np.int64)
    valid = seqlens + 1
    past_b = xp.zeros_like(seqlens) if first_prompt else valid - s
    if do_rotary:
        pos = rotary_positions(xp, position_ids, past_b, batch, s, first_prompt)
        q = rope_heads(xp, q, cos_cache, sin_cache, pos, rotary_interleaved)
        k = rope_heads(xp, k, cos_cache, sin_cache, pos, rotary_interleaved)
    q, k, v = (xp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))  # BNSH
    past_len = 0 if past_key is None else past_key.shape[2]
    length = max(total, past_len)
    present_k = write_cache(xp, past_key, k, past_b, length)
    present_v = write_cache(xp, past_value, v, past_b, length)

    i = xp.reshape(xp.arange(s, dtype=np.int64), (1, 1, s, 1))
    j = xp.reshape(xp.arange(length, dtype=np.int64), (1, 1, 1, length))
    here = xp.reshape(past_b, (-1, 1, 1, 1)) + i  # absolute position of each query row
    allowed = j < xp.reshape(valid, (-1, 1, 1, 1))
    if causal:
        allowed = allowed & (j <= here)
        if local_window_size > 0:
            allowed = allowed & (j > here - local_window_size)
    bias = None
    if attention_bias is not None:
        pad = length - attention_bias.shape[-1]
        bias = attention_bias if pad == 0 else xp.pad(
            attention_bias, [(0, 0)] * 3 + [(0, pad)]) if pad > 0 else attention_bias[..., :length]
    out, scores, probs = attend(
        xp, q, present_k, present_v, allowed, scale=scale or 1 / np.sqrt(d), softcap=softcap,
        bias=bias, smooth=bool(smooth_softmax), sink=head_sink)
    outputs = (xp.astype(merge_heads(xp, out), dt), present_k, present_v)
    if ctx.n_outputs > 3:
        qk = probs if qk_output == 2 else xp.where(allowed, scores, np.float32(0))
        outputs += (xp.astype(qk[..., :total], dt),)
    return outputs[:ctx.n_outputs]
