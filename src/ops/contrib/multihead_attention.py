"""com.microsoft Attention (fused QKV projection), QAttention (its int8 form, which ONNX Runtime's
quantizer writes for Attention), MultiHeadAttention and RotaryEmbedding, as ONNX Runtime's CPU
kernels compute them, and RelativePositionBias (T5's, as its T5 optimizer writes it; CUDA only in
ORT).

Masks follow ORT's PrepareMask: a masked key (mask 0, past a 1-D key length, or in the future of
a unidirectional query) adds ``mask_filter_value`` (-10000 by default) to the score, additively,
so fully masked rows stay finite. Scores and softmax run in f32."""

import numpy as np

from ..attention import f32, grouped_values, merge_heads, split_heads
from ..qlinear import matmul_integer
from ..registry import op
from ..transformer_blocks import rotate_partial

MS = "com.microsoft"


def _mask_bias(xp, mask, batch, s, t, filter_value):
    """ORT mask_index / key_padding_mask forms -> additive f32 bias broadcastable to (B,1,S,T)."""
    if mask is None:
        return None
    fv = np.float32(filter_value)
    if mask.ndim == 1:
        if mask.shape[0] != batch:
            raise NotImplementedError("1-D mask_index with start positions ((2|3)*batch form)")
        keep = xp.reshape(xp.arange(t, dtype=np.int64), (1, t)) < xp.reshape(
            xp.astype(mask, np.int64), (batch, 1))
        return xp.reshape(xp.where(keep, np.float32(0), fv), (batch, 1, 1, t))
    keep = mask != 0
    if mask.ndim == 2:
        return xp.reshape(xp.where(keep, np.float32(0), fv), (batch, 1, 1, t))
    if mask.ndim == 3:
        return xp.reshape(xp.where(keep, np.float32(0), fv), (batch, 1, s, t))
    raise NotImplementedError(f"a {mask.ndim}-D attention mask")


def _sdpa(xp, q, k, v, *, scale, mask=None, bias=None, past_len=0, unidirectional=0,
          filter_value=-10000.0):
    """q (B, N, S, H), k/v (B, N, T, H) -> f32 output (B, N, S, Hv) and probs."""
    batch, _, s, d = q.shape
    t = k.shape[2]
    scores = xp.matmul(f32(xp, q), xp.swapaxes(f32(xp, k), -1, -2)) * np.float32(
        scale or 1 / np.sqrt(d))
    extra = _mask_bias(xp, mask, batch, s, t, filter_value)
    if unidirectional:
        i = xp.reshape(xp.arange(s, dtype=np.int64), (s, 1))
        j = xp.reshape(xp.arange(t, dtype=np.int64), (1, t))
        causal = xp.where(j > i + past_len, np.float32(filter_value), np.float32(0))
        extra = causal if extra is None else extra + causal
    if extra is not None:
        scores = scores + extra
    if bias is not None:
        scores = scores + f32(xp, bias)
    probs = xp.softmax(scores, axis=-1)
    return grouped_values(xp, probs, f32(xp, v)), probs


@op("Attention", 1, domain=MS, context=True)
def attention(xp, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads, qkv_hidden_sizes=None, scale=0.0,
              mask_filter_value=-10000.0, unidirectional=0, do_rotary=0,
              past_present_share_buffer=0, rotary_embedding_dim=0, ctx=None):
    qkv = xp.matmul(f32(xp, x), f32(xp, weights))
    if bias is not None:
        qkv = qkv + f32(xp, bias)
    return attend(xp, qkv, xp.dtype_of(x), mask_index, past, attention_bias,
                  num_heads=num_heads, qkv_hidden_sizes=qkv_hidden_sizes, scale=scale,
                  mask_filter_value=mask_filter_value, unidirectional=unidirectional,
                  do_rotary=do_rotary, past_present_share_buffer=past_present_share_buffer,
                  n_outputs=ctx.n_outputs)


@op("QAttention", 1, domain=MS, context=True)
def qattention(xp, x, weight, bias, input_scale, weight_scale, mask_index=None,
               input_zero_point=None, weight_zero_point=None, past=None, *, num_heads,
               unidirectional=0, scale=0.0, mask_filter_value=-10000.0, do_rotary=0,
               past_present_share_buffer=0, ctx=None):
    """Attention on the projection (X - x_zp) @ (W - w_zp), exact in int32, times input_scale *
    weight_scale (the weight's per column when it is [3 * hidden]) plus bias: ORT's CPU kernel
    (quantization/attention_quant.cc) takes it through MLAS's scale-and-bias output step."""
    for name, v in (("input_scale", input_scale), ("input_zero_point", input_zero_point)):
        if v is not None and v.size != 1:
            raise ValueError(f"{name} of shape {list(v.shape)} must be a scalar (per tensor)")
    for name, v in (("weight_scale", weight_scale), ("weight_zero_point", weight_zero_point)):
        if v is not None and (v.ndim > 1 or v.size not in (1, weight.shape[-1])):
            raise ValueError(f"{name} of shape {list(v.shape)} must be a scalar or "
                             f"[{weight.shape[-1]}] (per column of the weight)")
    x_zp = None if input_zero_point is None else xp.reshape(input_zero_point, ())
    acc = matmul_integer(xp, x, weight, x_zp, weight_zero_point)
    qkv = (xp.astype(acc, np.float32) * (xp.reshape(f32(xp, input_scale), ())
                                         * f32(xp, weight_scale)) + f32(xp, bias))
    return attend(xp, qkv, xp.dtype_of(bias), mask_index, past, None, num_heads=num_heads,
                  qkv_hidden_sizes=None, scale=scale, mask_filter_value=mask_filter_value,
                  unidirectional=unidirectional, do_rotary=do_rotary,
                  past_present_share_buffer=past_present_share_buffer, n_outputs=ctx.n_outputs)


def attend(xp, qkv, dt, mask_index, past, attention_bias, *, num_heads, qkv_hidden_sizes,
           scale, mask_filter_value, unidirectional, do_rotary, past_present_share_buffer,
           n_outputs):
    """Attention's heads from its f32 projection ``qkv`` (B, S, Q + K + V): the output in ``dt``
    and, with a second output, present = stack(K, V) after the past."""
    if do_rotary or past_present_share_buffer:
        raise NotImplementedError("contrib Attention with do_rotary or past_present_share_buffer")
    hq, hk, hv = qkv_hidden_sizes or [qkv.shape[-1] // 3] * 3
    q = split_heads(xp, qkv[..., :hq], num_heads)
    k = split_heads(xp, qkv[..., hq:hq + hk], num_heads)
    v = split_heads(xp, qkv[..., hq + hk:hq + hk + hv], num_heads)
    k, v = xp.astype(k, dt), xp.astype(v, dt)
    past_len = 0
    if past is not None:
        past_len = past.shape[3]
        k = xp.concatenate([past[0], k], axis=2)
        v = xp.concatenate([past[1], v], axis=2)
    out, _ = _sdpa(xp, q, k, v, scale=scale, mask=mask_index, bias=attention_bias,
                   past_len=past_len, unidirectional=unidirectional,
                   filter_value=mask_filter_value)
    y = xp.astype(merge_heads(xp, out), dt)
    return (y, xp.stack([k, v])) if n_outputs > 1 else y


@op("MultiHeadAttention", 1, domain=MS, context=True)
def multihead_attention(xp, query, key=None, value=None, bias=None, key_padding_mask=None,
                        attention_bias=None, past_key=None, past_value=None,
                        past_sequence_length=None, cache_indirection=None, *, num_heads,
                        scale=0.0, mask_filter_value=-10000.0, unidirectional=0, ctx=None):
    if cache_indirection is not None or past_sequence_length is not None:
        raise NotImplementedError("MultiHeadAttention with buffer sharing or cache_indirection")
    dt = xp.dtype_of(query)
    if query.ndim == 5:  # packed QKV (B, S, N, 3, H)
        q, k, v = (xp.transpose(query[:, :, :, i], (0, 2, 1, 3)) for i in range(3))
    else:
        hidden = query.shape[2]
        q = query if bias is None else query + bias[:hidden]
        q = split_heads(xp, q, num_heads)
        if key is not None and key.ndim == 5:  # packed KV (B, L, N, 2, H)
            k, v = (xp.transpose(key[:, :, :, i], (0, 2, 1, 3)) for i in range(2))
        elif key is not None and key.ndim == 4:  # already BNSH (cross attention cache)
            k, v = key, value
        else:
            kh = key.shape[2]
            if bias is not None:
                key = key + bias[hidden:hidden + kh]
                value = value + bias[hidden + kh:]
            k, v = split_heads(xp, key, num_heads), split_heads(xp, value, num_heads)
    past_len = 0
    if past_key is not None:
        past_len = past_key.shape[2]
        k = xp.concatenate([past_key, k], axis=2)
        v = xp.concatenate([past_value, v], axis=2)
    out, probs = _sdpa(xp, q, k, v, scale=scale, mask=key_padding_mask, bias=attention_bias,
                       past_len=past_len, unidirectional=unidirectional,
                       filter_value=mask_filter_value)
    outputs = (xp.astype(merge_heads(xp, out), dt), k, v, xp.astype(probs, dt))
    return outputs[:max(ctx.n_outputs, 1)]


@op("RelativePositionBias", 1, domain=MS, static=(1, 2))
def relative_position_bias(xp, bias_table, query_length, key_length, *, max_distance,
                           is_bidirectional=0):
    """T5's bucketed relative position bias, (1, heads, L, L) for L = query_length, as ORT's CUDA
    kernel computes it (relative_attn_bias_impl.cu): key - query position, halved buckets by sign
    when bidirectional, else only the past; exact below max_exact = buckets / 2, then
    int(logf(d / max_exact) / logf(max_distance / max_exact) * (buckets - max_exact)), capped.
    The table's data is (heads, buckets) under its declared (buckets, heads) shape (ORT's
    optimizer writes the transposed weight: "COL-major")."""
    length = int(np.asarray(query_length).reshape(-1)[0])
    if int(np.asarray(key_length).reshape(-1)[0]) != length:
        raise ValueError(f"query_length {length} and key_length "
                         f"{int(np.asarray(key_length).reshape(-1)[0])} must be equal "
                         "(ONNX Runtime's kernel computes self-attention's square bias)")
    n_buckets, n_heads = bias_table.shape
    position = np.arange(length)
    relative = position[None, :] - position[:, None]
    buckets, offset = n_buckets, np.zeros_like(relative)
    if is_bidirectional:
        buckets //= 2
        offset = np.where(relative > 0, buckets, 0)
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    exact = buckets // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(relative.astype(np.float32) / np.float32(exact))
                         / np.log(np.float32(max_distance) / np.float32(exact))
                         * np.float32(buckets - exact))
    large = np.minimum(np.where(relative < exact, 0, large).astype(np.int64), buckets - 1)
    index = offset + np.where(relative < exact, relative, large)
    table = xp.reshape(bias_table, (n_heads, n_buckets))
    return xp.reshape(xp.take(table, xp.asarray(index.reshape(-1)), axis=1),
                      (1, n_heads, length, length))


@op("RotaryEmbedding", 1, domain=MS)
def rotary_embedding(xp, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    shape = x.shape
    if x.ndim == 4:  # (B, N, S, H) -> (B, S, N, H)
        x = xp.transpose(x, (0, 2, 1, 3))
    else:
        heads = num_heads or shape[2] // (2 * cos_cache.shape[1])
        x = xp.reshape(x, shape[:2] + (heads, shape[2] // heads))
    batch, s = x.shape[:2]
    pos = xp.astype(position_ids, np.int64)
    if pos.ndim == 1 or pos.size == 1:  # an offset: positions start there
        pos = xp.reshape(pos, (-1,))[0] + xp.reshape(xp.arange(s, dtype=np.int64), (1, s))
    pos = xp.broadcast_to(pos, (batch, s))
    cos = xp.expand_dims(xp.take(cos_cache, pos, axis=0), 2)
    sin = xp.expand_dims(xp.take(sin_cache, pos, axis=0), 2)
    y = rotate_partial(xp, x, cos, sin, interleaved, rotary_embedding_dim or 2 * cos_cache.shape[1])
    if len(shape) == 4:
        return xp.transpose(y, (0, 2, 1, 3))
    return xp.reshape(y, shape)
