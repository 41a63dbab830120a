"""com.microsoft normalizations: (Skip)SimplifiedLayerNormalization (RMS norm; genai writes the
plain one in the default domain too), SkipLayerNormalization, EmbedLayerNormalization, the
contrib LayerNormalization that ONNX Runtime runs for opsets before 17, QEmbedLayerNormalization
(its 8-bit tables, as ORT's quantizer writes it), and GroupNorm /
SkipGroupNorm (channels-last, as onnxruntime.transformers' Stable Diffusion optimizer writes them).

Statistics run in f32 for half inputs; the mean / inv_std_var outputs are f32 (ORT's stash type)."""

import numpy as np

from ..attention import f32
from ..bounds import Along
from ..nn import layer_normalization as layer_normalization_17, normalized_axis
from ..quantize import dequantize
from ..registry import op

MS = "com.microsoft"


def _rms(xp, x, scale, axis, epsilon):
    # an axis past the rank normalized no axis (fuzz 20261203:3282, :9780, :11782: axis 7 or
    # 2^31 - 1 on a rank-3 input); onnxruntime's shape inference refuses it
    axis = normalized_axis(axis, x)
    xf = f32(xp, x)
    ms = xp.mean(xf * xf, axis=tuple(range(axis, x.ndim)), keepdims=True)
    inv = 1 / xp.sqrt(ms + np.float32(epsilon))
    return xp.astype(xf * inv * f32(xp, scale), xp.dtype_of(x)), inv


def _layer_norm(xp, x, gamma, beta, epsilon):
    xf = f32(xp, x)
    mean = xp.mean(xf, axis=-1, keepdims=True)
    centered = xf - mean
    inv = 1 / xp.sqrt(xp.mean(centered * centered, axis=-1, keepdims=True) + np.float32(epsilon))
    y = centered * inv * f32(xp, gamma)
    if beta is not None:
        y = y + f32(xp, beta)
    return xp.astype(y, xp.dtype_of(x)), mean, inv


@op("SimplifiedLayerNormalization", 1)
@op("SimplifiedLayerNormalization", 1, domain=MS)
def simplified_layer_normalization(xp, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return _rms(xp, x, scale, axis, epsilon)


def _check_skip(x, skip, *vectors):
    """The shapes ONNX Runtime's skip_layer_norm_helper takes (anything else broadcast into
    garbage here; fuzz: a 3-d gamma): input and skip of rank 2 or 3, skip the input's shape or
    its [1,] S, H; gamma, beta and bias 1-d of the hidden size."""
    hidden = x.shape[-1] if x.ndim else None
    if x.ndim not in (2, 3) or skip.ndim not in (2, 3):
        raise ValueError(f"input {list(x.shape)} and skip {list(skip.shape)} must have rank 2 "
                         "or 3")
    fits = tuple(skip.shape[-2:]) == tuple(x.shape[-2:]) and (skip.ndim == 2 or skip.shape[0] == 1)
    if tuple(skip.shape) != tuple(x.shape) and not fits:
        raise ValueError(f"skip {list(skip.shape)} must be the input's shape {list(x.shape)} "
                         f"or [1, {', '.join(map(str, x.shape[-2:]))}]")
    for name, v in vectors:
        if v is not None and tuple(v.shape) != (hidden,):
            raise ValueError(f"{name} of shape {list(v.shape)} must be [{hidden}], the input's "
                             "hidden size")


def _skip_sum(xp, x, skip, bias):
    s = x + skip
    return s + bias if bias is not None else s


@op("SkipSimplifiedLayerNormalization", 1, domain=MS)
def skip_simplified_layer_normalization(xp, x, skip, gamma, bias=None, *, epsilon=1e-12):
    _check_skip(x, skip, ("gamma", gamma), ("bias", bias))
    total = _skip_sum(xp, x, skip, bias)
    y, inv = _rms(xp, total, gamma, -1, epsilon)
    return y, xp.zeros_like(inv), inv, total


@op("SkipLayerNormalization", 1, domain=MS)
def skip_layer_normalization(xp, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    _check_skip(x, skip, ("gamma", gamma), ("beta", beta), ("bias", bias))
    total = _skip_sum(xp, x, skip, bias)
    y, mean, inv = _layer_norm(xp, total, gamma, beta, epsilon)
    return y, mean, inv, total


@op("LayerNormalization", 1)
@op("LayerNormalization", 1, domain=MS)
def layer_normalization_contrib(xp, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    return layer_normalization_17(xp, x, scale, bias, axis=axis, epsilon=epsilon,
                                   stash_type=stash_type)


# word, segment and position ids index their tables (rows)
@op("EmbedLayerNormalization", 1, domain=MS,
    indices={0: Along(data=2, attr=None), 1: Along(data=4, attr=None),
             8: Along(data=3, attr=None)})
def embed_layer_normalization(xp, input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None,
                              position_ids=None, *, epsilon=1e-12, mask_index_type=1):
    b, s = input_ids.shape
    if position_ids is None:
        position_ids = xp.broadcast_to(xp.reshape(xp.arange(s, dtype=np.int64), (1, s)), (b, s))
    elif position_ids.shape[0] != b:
        position_ids = xp.broadcast_to(position_ids, (b, s))
    emb = xp.take(word_embedding, input_ids, axis=0) + xp.take(position_embedding, position_ids,
                                                               axis=0)
    if segment_embedding is not None and segment_ids is not None:
        emb = emb + xp.take(segment_embedding, segment_ids, axis=0)
    y, _, _ = _layer_norm(xp, emb, gamma, beta, epsilon)
    if mask is not None and mask_index_type == 1:
        mask_index = xp.astype(xp.sum(xp.astype(mask, np.int32), axis=-1), np.int32)
    else:
        mask_index = xp.zeros((b,), np.int32)
    return y, mask_index, emb


@op("QEmbedLayerNormalization", 1, domain=MS,
    indices={0: Along(data=2, attr=None), 1: Along(data=4, attr=None)})
def qembed_layer_normalization(xp, input_ids, segment_ids, word_embedding, position_embedding,
                               segment_embedding, gamma, beta, mask, word_scale, position_scale,
                               segment_scale, gamma_scale, beta_scale, word_zero_point,
                               position_zero_point, segment_zero_point, gamma_zero_point,
                               beta_zero_point, *, epsilon=1e-12):
    """EmbedLayerNormalization over the tables dequantized per tensor ((q - zero point) * scale,
    ORT's CPU kernel); positions are 0..S-1; mask_index counts the mask's ones."""
    def real(q, scale, zero_point):
        return None if q is None else dequantize(xp, q, xp.astype(scale, np.float32), zero_point)

    if mask is not None:
        mask = xp.astype(mask == 1, np.int32)
    return embed_layer_normalization(
        xp, input_ids, segment_ids, real(word_embedding, word_scale, word_zero_point),
        real(position_embedding, position_scale, position_zero_point),
        real(segment_embedding, segment_scale, segment_zero_point) if segment_ids is not None
        else None, real(gamma, gamma_scale, gamma_zero_point),
        real(beta, beta_scale, beta_zero_point), mask, epsilon=epsilon)[:2]


def _channels(x, channels_last):
    if x.ndim != 4:
        raise ValueError(f"input {list(x.shape)} must have rank 4 (N, H, W, C with "
                         "channels_last=1, else N, C, H, W)")
    return x.shape[3] if channels_last else x.shape[1]


def _group_norm(xp, x, gamma, beta, *, groups, activation, epsilon, channels_last):
    """ONNX Runtime's CUDA kernel (contrib_ops/cuda/diffusion/group_norm_impl_kernel.cuh; it has
    no CPU one): per (batch, group) the f32 sum and sum of squares, var = E[x^2] - mean^2,
    y = (x - mean) * rsqrt(var + eps) * gamma + beta, then x * sigmoid(x) for activation 1,
    rounded once to x's type."""
    c = _channels(x, channels_last)
    if activation not in (0, 1):
        raise ValueError(f"activation {activation}: 0 (none) or 1 (SiLU)")
    if groups <= 0 or c % groups:
        raise ValueError(f"groups {groups} must divide the {c} channels")
    for name, v in (("gamma", gamma), ("beta", beta)):
        if tuple(v.shape) != (c,):
            raise ValueError(f"{name} of shape {list(v.shape)} must be [{c}], the channels")
    xf = f32(xp, x)
    n = x.shape[0]
    grouped = (xp.reshape(xf, (n, -1, groups, c // groups)) if channels_last
               else xp.reshape(xf, (n, groups, -1)))
    axes = (1, 3) if channels_last else (2,)
    mean = xp.mean(grouped, axis=axes, keepdims=True)
    var = xp.mean(grouped * grouped, axis=axes, keepdims=True) - mean * mean
    normed = xp.reshape((grouped - mean) / xp.sqrt(var + np.float32(epsilon)), x.shape)
    affine = (c,) if channels_last else (c, 1, 1)
    y = (normed * xp.reshape(xp.astype(gamma, np.float32), affine)
         + xp.reshape(xp.astype(beta, np.float32), affine))
    if activation:
        y = y * (1 / (1 + xp.exp(-y)))
    return xp.astype(y, xp.dtype_of(x))


@op("GroupNorm", 1, domain=MS)
def group_norm(xp, x, gamma, beta, *, activation, groups, channels_last=1, epsilon=1e-5):
    return _group_norm(xp, x, gamma, beta, groups=groups, activation=activation,
                       epsilon=epsilon, channels_last=channels_last)


@op("SkipGroupNorm", 1, domain=MS)
def skip_group_norm(xp, x, gamma, beta, skip, bias=None, *, activation, groups,
                    channels_last=1, epsilon=1e-5):
    """S = X + bias + skip in X's type (the half kernel's order), then GroupNorm of S; skip is
    X's shape, or (N, 1, 1, C) or (N, C), broadcast over the pixels."""
    n, c = x.shape[0], _channels(x, channels_last)
    pixel = (n, 1, 1, c) if channels_last else (n, c, 1, 1)
    if tuple(skip.shape) == (n, c):
        skip = xp.reshape(skip, pixel)
    elif tuple(skip.shape) not in (tuple(x.shape), pixel):
        raise ValueError(f"skip of shape {list(skip.shape)} must be the input's "
                         f"{list(x.shape)}, {list(pixel)} or [{n}, {c}]")
    total = x
    if bias is not None:
        if tuple(bias.shape) != (c,):
            raise ValueError(f"bias of shape {list(bias.shape)} must be [{c}], the channels")
        total = total + (bias if channels_last else xp.reshape(bias, (c, 1, 1)))
    total = total + skip
    return _group_norm(xp, total, gamma, beta, groups=groups, activation=activation,
                       epsilon=epsilon, channels_last=channels_last), total
