"""Attention (ai.onnx 23, 24, 25), FlexAttention (ai.onnx.preview 1) and the scaled-dot-product
core the contrib attention ops share.

Scores, masks and softmax run in f32 for half inputs; the outputs come back in the input dtype.
Grouped-query attention never repeats K/V: query heads are grouped as (kv_heads, group) and the
matmuls broadcast over the group axis (query head h reads KV head h // group, as ONNX and ORT do)."""

import numpy as np

from .. import dtypes
from .registry import op

NEG_INF = -np.inf


def f32(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) else x


def split_heads(xp, x, num_heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return xp.transpose(xp.reshape(x, (b, s, num_heads, hidden // num_heads)), (0, 2, 1, 3))


def merge_heads(xp, x):
    """(B, H, S, D) -> (B, S, H*D)."""
    b, h, s, d = x.shape
    return xp.reshape(xp.transpose(x, (0, 2, 1, 3)), (b, s, h * d))


def grouped_scores(xp, q, k):
    """q (B, Hq, S, D) @ k (B, Hkv, T, D)^T -> (B, Hq, S, T), Hq a multiple of Hkv."""
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    if hq == hkv:
        return xp.matmul(q, xp.swapaxes(k, -1, -2))
    qg = xp.reshape(q, (b, hkv, hq // hkv, s, d))
    scores = xp.matmul(qg, xp.expand_dims(xp.swapaxes(k, -1, -2), 2))
    return xp.reshape(scores, (b, hq, s, k.shape[2]))


def grouped_values(xp, probs, v):
    """probs (B, Hq, S, T) @ v (B, Hkv, T, Dv) -> (B, Hq, S, Dv)."""
    b, hq, s, t = probs.shape
    hkv = v.shape[1]
    if hq == hkv:
        return xp.matmul(probs, v)
    pg = xp.reshape(probs, (b, hkv, hq // hkv, s, t))
    return xp.reshape(xp.matmul(pg, xp.expand_dims(v, 2)), (b, hq, s, v.shape[3]))


def apply_softcap(xp, scores, softcap):
    if softcap and softcap > 0:
        return xp.tanh(scores / np.float32(softcap)) * np.float32(softcap)
    return scores


def safe_softmax(xp, x, axis=-1):
    """Softmax that maps an all -inf row to zeros instead of NaN."""
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isneginf(m), xp.zeros((), xp.dtype_of(x)), m)
    e = xp.exp(x - m)
    s = xp.sum(e, axis=axis, keepdims=True)
    return e / xp.where(s == 0, xp.ones((), xp.dtype_of(x)), s)


def smooth_softmax(xp, x, sink=None, axis=-1):
    """Softmax with an extra logit (0, or a per-head ``sink``) in the denominator only."""
    if sink is None:
        sink = xp.zeros((), xp.dtype_of(x))
    m = xp.maximum(xp.max(x, axis=axis, keepdims=True), sink)
    e = xp.exp(x - m)
    return e / (xp.sum(e, axis=axis, keepdims=True) + xp.exp(sink - m))


def positions(xp, s, t):
    return (xp.reshape(xp.arange(s, dtype=np.int64), (s, 1)),
            xp.reshape(xp.arange(t, dtype=np.int64), (1, t)))


def block(xp, allowed):
    """Boolean 'may attend' -> additive f32 bias (0 / -inf)."""
    return xp.where(allowed, np.float32(0), np.float32(NEG_INF))


def _offset_grid(xp, s, t, offset):
    """(i + offset) - j, with ``offset`` an int or a (B,) array (then shaped (B, 1, S, T))."""
    i, j = positions(xp, s, t)
    if isinstance(offset, (int, np.integer)):
        return i + int(offset) - j
    return xp.reshape(xp.astype(offset, np.int64), (-1, 1, 1, 1)) + i - j


def _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, *, scale,
               is_causal, q_num_heads, kv_num_heads, softcap, qk_matmul_output_mode,
               left_window_size=-1, right_window_size=-1, n_outputs=1):
    dt = xp.dtype_of(q)
    rank3 = q.ndim == 3
    if rank3:
        q, k, v = (split_heads(xp, q, q_num_heads), split_heads(xp, k, kv_num_heads),
                   split_heads(xp, v, kv_num_heads))
    if past_key is not None:
        k = xp.concatenate([past_key, k], axis=2)
        v = xp.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    s, t = q.shape[2], k.shape[2]
    if scale is None:
        scale = 1 / np.sqrt(q.shape[3])
    # Like the spec's function body: both Q and K are scaled by sqrt(scale) in the input type.
    root = xp.asarray(np.sqrt(scale), dt)
    scores = grouped_scores(xp, f32(xp, q * root), f32(xp, k * root))
    scores = apply_softcap(xp, scores, softcap)

    bias = xp.zeros((s, t), np.float32)
    if attn_mask is not None:
        pad = t - attn_mask.shape[-1]
        is_bool = xp.dtype_of(attn_mask) == np.bool_
        if pad > 0:
            attn_mask = xp.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)],
                               constant_values=False if is_bool else NEG_INF)
        bias = bias + (block(xp, attn_mask) if is_bool else xp.astype(attn_mask, np.float32))
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = nonpad_kv_seqlen - s
    else:
        offset = 0
    if is_causal:
        bias = bias + block(xp, _offset_grid(xp, s, t, offset) >= 0)
    if left_window_size >= 0 or right_window_size >= 0:
        diff = _offset_grid(xp, s, t, offset)
        allowed = xp.ones(diff.shape, bool)
        if left_window_size >= 0:
            allowed = allowed & (diff <= left_window_size)
        if right_window_size >= 0:
            allowed = allowed & (-diff <= right_window_size)
        bias = bias + block(xp, allowed)
    if nonpad_kv_seqlen is not None:
        valid = xp.reshape(xp.arange(t, dtype=np.int64), (1, t)) < xp.reshape(
            xp.astype(nonpad_kv_seqlen, np.int64), (-1, 1))
        bias = bias + xp.reshape(block(xp, valid), (-1, 1, 1, t))

    biased = scores + bias
    probs = safe_softmax(xp, biased)
    # A row whose bias masks every key gives zeros (decided on the bias, not the scores).
    probs = xp.where(xp.isneginf(xp.max(bias, axis=-1, keepdims=True)), np.float32(0), probs)
    y = grouped_values(xp, f32(xp, xp.astype(probs, dt)), f32(xp, v))
    y = xp.astype(y, dt)
    if rank3:
        y = merge_heads(xp, y)
    outputs = (y, present_k, present_v)
    if n_outputs > 3:
        debug = {2: biased, 3: probs}.get(qk_matmul_output_mode, scores)
        outputs += (xp.astype(debug, dt),)
    return outputs[:max(n_outputs, 1)]


@op("Attention", 23, context=True)
def attention_v23(xp, q, k, v, attn_mask=None, past_key=None, past_value=None, *, is_causal=0,
                  kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
                  softcap=0.0, softmax_precision=None, ctx=None):
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, None, scale=scale,
                      is_causal=is_causal, q_num_heads=q_num_heads, kv_num_heads=kv_num_heads,
                      softcap=softcap, qk_matmul_output_mode=qk_matmul_output_mode,
                      n_outputs=ctx.n_outputs)


@op("Attention", 24, context=True)
def attention_v24(xp, q, k, v, attn_mask=None, past_key=None, past_value=None,
                  nonpad_kv_seqlen=None, *, is_causal=0, kv_num_heads=None, q_num_heads=None,
                  qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None,
                  ctx=None):
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen,
                      scale=scale, is_causal=is_causal, q_num_heads=q_num_heads,
                      kv_num_heads=kv_num_heads, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode, n_outputs=ctx.n_outputs)


@op("Attention", 25, context=True)
def attention_v25(xp, q, k, v, attn_mask=None, past_key=None, past_value=None,
                  nonpad_kv_seqlen=None, *, is_causal=0, kv_num_heads=None, q_num_heads=None,
                  qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None,
                  left_window_size=-1, right_window_size=-1, ctx=None):
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen,
                      scale=scale, is_causal=is_causal, q_num_heads=q_num_heads,
                      kv_num_heads=kv_num_heads, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode,
                      left_window_size=left_window_size, right_window_size=right_window_size,
                      n_outputs=ctx.n_outputs)


# -- FlexAttention (ai.onnx.preview 1) -------------------------------------------------------------

_PRECISIONS = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _flex_dtype(dt, softmax_precision):
    """The spec's element type of scores, probs and the modifier graphs: softmax_precision when
    given, else float64 for double inputs and float32 for the rest (so half stays f32, §3)."""
    if softmax_precision is None:
        return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)
    if softmax_precision not in _PRECISIONS:
        raise ValueError(f"softmax_precision {softmax_precision} is not one of FLOAT (1), "
                         "FLOAT16 (10), DOUBLE (11), BFLOAT16 (16)")
    return dtypes.to_numpy(softmax_precision)


def _modify(xp, mod, x, name):
    """Run a modifier subgraph (one rank-4 input, one output of the same shape)."""
    if mod is None:
        return x
    out = mod(x)
    if len(out) != 1 or tuple(out[0].shape) != tuple(x.shape):
        raise ValueError(f"{name} must give one output of shape {tuple(x.shape)}, got "
                         f"{[tuple(o.shape) for o in out]}")
    return xp.astype(xp.asarray(out[0]), xp.dtype_of(x))


@op("FlexAttention", 1, domain="ai.onnx.preview")
def flex_attention(xp, q, k, v, *, scale=None, score_mod=None, prob_mod=None,
                   softmax_precision=None):
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"FlexAttention takes rank-4 Q, K, V (B, H, S, D); got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] % k.shape[1] or k.shape[1] != v.shape[1]:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of the key/value heads "
                         f"({k.shape[1]}, {v.shape[1]})")
    dt = xp.dtype_of(q)
    compute = _flex_dtype(dt, softmax_precision)
    if scale is None:
        scale = 1 / np.sqrt(q.shape[3])
    # As the reference: Q and K each scaled by sqrt(scale) (computed in f32) in the input type.
    root = xp.asarray(np.sqrt(np.float32(scale)), dt)
    scores = grouped_scores(xp, xp.astype(q * root, compute), xp.astype(k * root, compute))
    scores = _modify(xp, score_mod, scores, "score_mod")
    probs = _modify(xp, prob_mod, xp.softmax(scores, axis=-1), "prob_mod")
    return xp.astype(grouped_values(xp, probs, xp.astype(v, compute)), xp.dtype_of(v))
