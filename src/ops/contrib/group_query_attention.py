"""com.microsoft GroupQueryAttention, as ONNX Runtime's CPU kernel computes it.

Per batch entry b, ``seqlens_k[b] + 1`` is the number of valid tokens once this step's S tokens are
in the cache, so the step's tokens start at ``past_b = seqlens_k[b] + 1 - S`` (0 on the first
prompt, when S == total_sequence_length > 1). The present buffers are
``max(total_sequence_length, past buffer length)`` long: the past buffer with the new rows written
at [past_b, past_b + S). Query row i sits at absolute position past_b + i: the causal
mask, ``local_window_size`` and the rotary angles (without ``position_ids``) use that position.
Scores, softmax and the weighted sum run in f32."""

import numpy as np

from ..attention import (NEG_INF, apply_softcap, f32, grouped_scores, grouped_values, merge_heads, safe_softmax, smooth_softmax)
from ..registry import op
from ..transformer_blocks import rotate_partial


def write_cache(xp, past, new, start, length):
    """(B, H, L, D) buffer: ``past`` (cut or zero-padded to L rows) with ``new`` (B, H, S, D)
    written at rows [start[b], start[b] + S), as ONNX Runtime writes a buffer that past and
    present share (rows past the valid ones are never attended). Only the new rows are written
    (the offsets may be traced values; a select over the whole buffer would recompute them,
    rotary and all, for every element)."""
    b, h, _, d = new.shape
    if past is None or past.shape[2] == 0:
        base = xp.zeros((b, h, length, d), xp.dtype_of(new))
    else:
        p = past.shape[2]
        base = past[:, :, :length] if p >= length else xp.pad(
            past, [(0, 0), (0, 0), (0, length - p), (0, 0)])
    return xp.update_rows(base, new, start, axis=2)


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


def attend(xp, q, k, v, allowed, *, scale, softcap, bias=None, smooth=False, sink=None,
           valid=None):
    """q (B, Hq, S, D), k/v (B, Hkv, L, D), ``allowed`` broadcastable to (B, Hq, S, L).
    ORT order: scale, softcap, + bias, mask, softmax. Returns f32 output, scores, probs.
    ONNX Runtime's softmax reads only the allowed columns, and its weighted sum only the first
    ``valid[b]`` value rows: a NaN in a key or value past them (a padded row's) stays out.
    So the mask is a select, not an added -inf (NaN + -inf is NaN), and value rows past
    ``valid`` are zeroed (0 * NaN is NaN)."""
    scores = grouped_scores(xp, f32(xp, q), f32(xp, k)) * np.float32(scale)
    scores = apply_softcap(xp, scores, softcap)
    if bias is not None:
        scores = scores + f32(xp, bias)
    masked = xp.where(allowed, scores, np.float32(NEG_INF))
    v = f32(xp, v)
    if valid is not None:
        rows = xp.reshape(xp.arange(v.shape[2], dtype=np.int64), (1, 1, -1, 1))
        v = xp.where(rows < xp.reshape(valid, (-1, 1, 1, 1)), v, np.float32(0))
    if smooth or sink is not None:
        sink = None if sink is None else xp.reshape(f32(xp, sink), (1, -1, 1, 1))
        probs = smooth_softmax(xp, masked, sink)
    else:
        probs = safe_softmax(xp, masked)
    probs = xp.where(allowed, probs, np.float32(0))
    return grouped_values(xp, probs, v), scores, probs


def _heads(xp, x, n):
    b, s, hidden = x.shape
    return xp.reshape(x, (b, s, n, hidden // n))


def check_shapes(query, key, value, past_key, past_value, cos_cache, sin_cache, seqlens_k,
                 total, *, num_heads, kv_num_heads):
    """Raise ValueError where ONNX Runtime's GroupQueryAttention refuses the shapes: else a
    wrong past buffer or head size broadcasts, or writes rows nobody reads. Returns head_size."""
    if num_heads <= 0 or kv_num_heads <= 0 or num_heads % kv_num_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a positive multiple of kv_num_heads "
                         f"({kv_num_heads})")
    if query.ndim != 3:
        raise ValueError(f"query must be (batch, sequence, hidden), got shape {list(query.shape)}")
    batch, s, hidden = query.shape
    heads = num_heads if key is not None else num_heads + 2 * kv_num_heads
    if hidden % heads:
        raise ValueError(f"query's hidden size {hidden} is not a multiple of its {heads} heads")
    d = hidden // heads
    if (key is None) != (value is None):
        raise ValueError("key and value must both be given, or both left out (packed QKV)")
    if key is not None:
        for name, x in (("key", key), ("value", value)):
            if x.ndim != 3 or tuple(x.shape) != (batch, s, kv_num_heads * d):
                raise ValueError(f"{name} must be (batch, sequence, kv_num_heads * head_size) = "
                                 f"{[batch, s, kv_num_heads * d]}, got {list(x.shape)}")
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must both be given, or both left out")
    if past_key is not None:
        for name, x in (("past_key", past_key), ("past_value", past_value)):
            want = (batch, kv_num_heads, past_key.shape[2] if past_key.ndim == 4 else -1, d)
            if x.ndim != 4 or tuple(x.shape) != want:
                raise ValueError(
                    f"{name} must be (batch, kv_num_heads, past_length, head_size) = "
                    f"{[batch, kv_num_heads, 'past_length', d]} with one past_length for key and "
                    f"value, got {list(x.shape)} (past_key {list(past_key.shape)})")
    if int(np.prod(seqlens_k.shape)) != batch or seqlens_k.ndim > 1:
        raise ValueError(f"seqlens_k must be (batch,) = [{batch}], got {list(seqlens_k.shape)}")
    if np.size(total) != 1:
        raise ValueError("total_sequence_length must hold one value")
    past_len = 0 if past_key is None else past_key.shape[2]
    total = int(np.asarray(total).reshape(-1)[0])
    if s > 1 and s != total and batch != 1:
        raise ValueError("with past context, a step of more than one token needs batch 1")
    if total != past_len + s and total > past_len:
        raise ValueError(f"total_sequence_length {total} must be past length {past_len} + "
                         f"sequence {s} (a cache that grows) or at most {past_len} (a fixed one)")
    if (cos_cache is None) != (sin_cache is None):
        raise ValueError("cos_cache and sin_cache must both be given, or both left out")
    if cos_cache is not None:
        if cos_cache.ndim != 2 or tuple(cos_cache.shape) != tuple(sin_cache.shape) \
                or 2 * cos_cache.shape[1] > d or cos_cache.shape[0] < total:
            raise ValueError(f"cos_cache {list(cos_cache.shape)} and sin_cache "
                             f"{list(sin_cache.shape)} must be one (max_length >= {total}, "
                             f"rotary_dim / 2 <= {d // 2}) shape")
    return d


def check_seqlens(seqlens, *, present, rotary_rows=None):
    """Raise ValueError when a host ``seqlens_k`` value is outside what ONNX Runtime takes:
    [0, present) rows of the KV buffer and, with rotary, of the cos/sin cache. Each comes from
    an attention_mask's row sum minus one."""
    seqlens = np.asarray(seqlens).reshape(-1)
    limit = present if rotary_rows is None else min(present, rotary_rows)
    bad = np.flatnonzero((seqlens < 0) | (seqlens >= limit))
    if bad.size:
        b = int(bad[0])
        raise ValueError(
            f"seqlens_k[{b}] = {int(seqlens[b])} is out of range [0, {limit}) (the KV buffer "
            f"has {present} rows{'' if rotary_rows is None else f', the rotary cache {rotary_rows}'}"
            f"): attention_mask row {b} must hold 0s and 1s, at least one 1, and no more 1s "
            "than its length")


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
    check_shapes(query, key, value, past_key, past_value, cos_cache if do_rotary else None,
                 sin_cache if do_rotary else None, seqlens_k, total_sequence_length,
                 num_heads=num_heads, kv_num_heads=kv_num_heads)
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
    past_len = 0 if past_key is None else past_key.shape[2]
    if xp.is_concrete(seqlens):  # eager: read on the host (compiled: checked before the call)
        check_seqlens(np.asarray(seqlens), present=max(total, past_len),
                      rotary_rows=cos_cache.shape[0] if do_rotary else None)
    if do_rotary:
        pos = rotary_positions(xp, position_ids, past_b, batch, s, first_prompt)
        q = rope_heads(xp, q, cos_cache, sin_cache, pos, rotary_interleaved)
        k = rope_heads(xp, k, cos_cache, sin_cache, pos, rotary_interleaved)
    q, k, v = (xp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))  # BNSH
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
        bias=bias, smooth=bool(smooth_softmax), sink=head_sink, valid=valid)
    outputs = (xp.astype(merge_heads(xp, out), dt), present_k, present_v)
    if ctx.n_outputs > 3:
        qk = probs if qk_output == 2 else xp.where(allowed, scores, np.float32(0))
        outputs += (xp.astype(qk[..., :total], dt),)
    return outputs[:ctx.n_outputs]
