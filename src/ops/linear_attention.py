"""LinearAttention (ai.onnx 27): the recurrent linear-attention family (linear, gated, delta,
gated_delta) of Mamba-2 / GLA / DeltaNet style models, as one scan over time.

The state (B, H_kv, d_k, d_v) and every product run in f32 whatever the activation type (the spec's
reference does the same); ``output`` comes back in the query's type and ``present_state`` in the
past state's (or, without one, the query's). Query heads read KV head h // (H_q / H_kv) through a
grouped matmul, never a repeated state."""

import numpy as np

from .registry import op

RULES = ("linear", "gated", "delta", "gated_delta")


def _time_major(xp, x, heads):
    """(B, T, H*D) -> (T, B, H, D) in f32: the scan walks the leading axis."""
    b, t, hd = x.shape
    if hd % heads:
        raise ValueError(f"last dimension {hd} of shape {tuple(x.shape)} is not divisible by "
                         f"{heads} heads")
    x = xp.reshape(xp.astype(x, np.float32), (b, t, heads, hd // heads))
    return xp.transpose(x, (1, 0, 2, 3))


def _check(update_rule, q_num_heads, kv_num_heads, decay, beta, query, key, value):
    if update_rule not in RULES:
        raise ValueError(f"update_rule {update_rule!r} is not one of {', '.join(RULES)}")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ValueError(f"q_num_heads ({q_num_heads}) must be a positive multiple of "
                         f"kv_num_heads ({kv_num_heads}); both attributes are required")
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if gated != (decay is not None):
        raise ValueError(f"update_rule {update_rule!r} {'needs' if gated else 'forbids'} the "
                         "decay input")
    if delta != (beta is not None):
        raise ValueError(f"update_rule {update_rule!r} {'needs' if delta else 'forbids'} the "
                         "beta input")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim != 3:
            raise ValueError(f"{name} must be rank 3 (B, T, H*D), got shape {tuple(x.shape)}")
    return gated, delta


def _step(xp, *, gated, delta, group, scale):
    """One token: decay the state, correct the value (delta rules), write k ⊗ v, read with q."""

    def step(state, xs):
        q, k, v = xs[:3]  # (B, Hq, dk), (B, Hkv, dk), (B, Hkv, dv)
        rest = list(xs[3:])
        if gated:
            state = state * xp.expand_dims(xp.exp(rest.pop(0)), -1)  # g: (B, Hkv, 1 or dk)
        if delta:
            # retrieved[b, h, m] = sum_d state[b, h, d, m] k[b, h, d], from the decayed state
            retrieved = xp.matmul(xp.expand_dims(k, -2), state)[..., 0, :]
            v = rest.pop(0) * (v - retrieved)
        state = state + xp.expand_dims(k, -1) * xp.expand_dims(v, -2)
        b, hkv, dk, dv = state.shape
        qg = xp.reshape(q, (b, hkv, group, dk))
        out = xp.reshape(xp.matmul(qg, state), (b, hkv * group, dv)) * np.float32(scale)
        return state, [out]

    return step


@op("LinearAttention", 27)
def linear_attention(xp, query, key, value, past_state=None, decay=None, beta=None, *,
                     chunk_size=64, kv_num_heads=None, q_num_heads=None, scale=0.0,
                     update_rule="gated_delta"):
    # chunk_size is a tuning hint for chunk-parallel kernels; the result is the recurrence's.
    gated, delta = _check(update_rule, q_num_heads, kv_num_heads, decay, beta, query, key, value)
    b, t, _ = query.shape
    dk, dv = query.shape[-1] // q_num_heads, value.shape[-1] // kv_num_heads
    xs = [_time_major(xp, query, q_num_heads), _time_major(xp, key, kv_num_heads),
          _time_major(xp, value, kv_num_heads)]
    if gated:
        if decay.ndim != 3 or decay.shape[-1] not in (kv_num_heads, kv_num_heads * dk):
            raise ValueError(f"decay must be (B, T, {kv_num_heads}) or (B, T, "
                             f"{kv_num_heads * dk}), got shape {tuple(decay.shape)}")
        xs.append(_time_major(xp, decay, kv_num_heads))  # (T, B, Hkv, 1 or dk)
    if delta:
        if beta.ndim != 3 or beta.shape[-1] not in (kv_num_heads, 1):
            raise ValueError(f"beta must be (B, T, {kv_num_heads}) or (B, T, 1), got shape "
                             f"{tuple(beta.shape)}")
        xs.append(_time_major(xp, beta, beta.shape[-1]))  # (T, B, Hkv or 1, 1)
    if past_state is not None:
        if tuple(past_state.shape) != (b, kv_num_heads, dk, dv):
            raise ValueError(f"past_state has shape {tuple(past_state.shape)}, expected "
                             f"{(b, kv_num_heads, dk, dv)}")
        state, state_dtype = xp.astype(past_state, np.float32), xp.dtype_of(past_state)
    else:
        state, state_dtype = xp.zeros((b, kv_num_heads, dk, dv), np.float32), xp.dtype_of(query)
    scale = scale if scale else 1 / np.sqrt(dk)
    step = _step(xp, gated=gated, delta=delta, group=q_num_heads // kv_num_heads, scale=scale)
    if t:
        state, (outs,) = xp.scan(step, state, xs, length=t)  # outs: (T, B, Hq, dv)
        output = xp.reshape(xp.transpose(outs, (1, 0, 2, 3)), (b, t, q_num_heads * dv))
    else:
        output = xp.zeros((b, 0, q_num_heads * dv), np.float32)
    return xp.astype(output, xp.dtype_of(query)), xp.astype(state, state_dtype)
