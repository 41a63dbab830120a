"""Warpers (temperature, top-k, top-p, min-p) and token choice: greedy or seeded sampling.

Warpers have the processors' signature, ``warp(xp, state, scores) -> scores`` (they ignore the
state), with no Python branch on values.
Sampling uses the Gumbel-max trick: ``argmax(log_softmax(scores) + g)`` with ``g`` Gumbel noise
draws a token with probability ``softmax(scores)``; the noise of draw ``t`` of a row comes from
JAX's counter-based generator (threefry), keyed by ``seed`` and the row, so a seed repeats the
same text on every backend, a row samples the same tokens whatever batch it shares, and the
device loop (device_loop.py), which draws inside a ``lax.while_loop``, draws the same numbers as
the host loop. (transformers draws from torch's generator, so sampled text equals transformers'
only in distribution, never token for token.)
"""

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import InputError

NEG_INF = -np.inf


class Temperature:
    def __init__(self, temperature):
        if not isinstance(temperature, (int, float)) or temperature <= 0:
            raise InputError(f"temperature must be a positive number, got {temperature!r}")
        self.temperature = float(temperature)

    def __call__(self, xp, state, scores):
        return scores / xp.asarray(self.temperature, dtype=scores.dtype)


class TopK:
    """Keep the ``top_k`` highest scores (ties with the k-th kept too, as transformers does)."""

    def __init__(self, top_k, min_tokens_to_keep=1):
        if not isinstance(top_k, int) or top_k < 1:
            raise InputError(f"top_k must be a positive int, got {top_k!r}")
        self.top_k = max(top_k, min_tokens_to_keep)

    def __call__(self, xp, state, scores):
        k = min(self.top_k, scores.shape[-1])
        kth = xp.sort(scores, axis=-1)[:, scores.shape[-1] - k][:, None]
        return xp.where(scores < kth, xp.asarray(NEG_INF, dtype=scores.dtype), scores)


class TopP:
    """Keep the smallest set of highest-probability tokens whose mass exceeds ``top_p``."""

    def __init__(self, top_p, min_tokens_to_keep=1):
        if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {top_p!r}")
        self.top_p, self.keep = float(top_p), min_tokens_to_keep

    def __call__(self, xp, state, scores):
        ascending = xp.sort(scores, axis=-1)
        cumulative = xp.cumsum(xp.softmax(ascending, axis=-1), axis=-1)
        # transformers removes sorted tokens whose cumulative mass is <= 1 - top_p; the rest
        # (and always the last ``keep``) stay: the threshold is the smallest kept score
        v = scores.shape[-1]
        removed = (cumulative <= 1 - self.top_p) & (xp.arange(v)[None, :] < v - self.keep)
        first_kept = xp.sum(xp.astype(removed, np.int64), axis=-1, keepdims=True)
        threshold = xp.take_along_axis(ascending, first_kept, axis=-1)
        return xp.where(scores < threshold, xp.asarray(NEG_INF, dtype=scores.dtype), scores)


class MinP:
    """Drop tokens whose probability is below ``min_p`` times the top token's."""

    def __init__(self, min_p, min_tokens_to_keep=1):
        if not isinstance(min_p, (int, float)) or not 0 <= min_p <= 1:
            raise InputError(f"min_p must be in [0, 1], got {min_p!r}")
        self.min_p = float(min_p)

    def __call__(self, xp, state, scores):
        probs = xp.softmax(scores, axis=-1)
        low = probs < self.min_p * xp.max(probs, axis=-1, keepdims=True)
        return xp.where(low, xp.asarray(NEG_INF, dtype=scores.dtype), scores)


def build_warpers(config):
    """The warpers of ``config`` in transformers' order; none unless ``do_sample``."""
    if not config.do_sample:
        return []
    warpers = []
    if config.temperature != 1.0:
        warpers.append(Temperature(config.temperature))
    if config.top_k:
        warpers.append(TopK(config.top_k))
    if config.top_p < 1.0:
        warpers.append(TopP(config.top_p))
    if config.min_p is not None:
        warpers.append(MinP(config.min_p))
    return warpers


class Sampler:
    """Chooses each row's next token: argmax, or a seeded Gumbel-max draw."""

    def __init__(self, do_sample, seed, rows):
        self.do_sample = do_sample
        self.keys = row_keys(seed, rows) if do_sample else None
        self.draws = 0

    def split(self):
        """One-row samplers, the i-th drawing what row i of this one draws: a row generated apart
        from the others (continuous batching serves each row in whatever batch is running)."""
        rows = []
        for keys in [None] if self.keys is None else np.split(self.keys, len(self.keys)):
            one = Sampler(False, None, 0)
            one.do_sample, one.keys, one.draws = self.do_sample, keys, self.draws
            rows.append(one)
        return rows

    def noise(self, rows, vocab):
        """float32 [rows, vocab] Gumbel noise (zeros when greedy); a fresh draw per call."""
        if not self.do_sample:
            return np.zeros((rows, vocab), np.float32)
        g = _gumbel_jit(self.keys[:rows], np.uint32(self.draws), vocab)
        self.draws += 1
        return np.asarray(g)

    @staticmethod
    def choose(xp, scores, noise):
        """int64 [B]: argmax of the log-probabilities plus the noise (greedy with zero noise)."""
        logp = xp.log_softmax(scores, axis=-1)
        return xp.astype(xp.argmax(logp + xp.astype(noise, logp.dtype), axis=-1), np.int64)


def row_keys(seed, rows):
    """uint32 [rows, 2]: each row's threefry key, from ``seed`` (any int; None: fresh entropy)
    and the row's index alone (so a row draws the same noise in any batch)."""
    if seed is None:
        seed = np.random.SeedSequence().entropy
    s = int(seed) % 2**64
    base = jax.random.fold_in(jax.random.PRNGKey(np.uint32(s & 0xFFFFFFFF)), np.uint32(s >> 32))
    return np.asarray(jax.vmap(lambda b: jax.random.fold_in(base, b))(
        jnp.arange(rows, dtype=jnp.uint32)))


def gumbel(keys, draw, vocab):
    """float32 [rows, vocab]: Gumbel noise of draw number ``draw`` (a uint32, traced or not) for
    rows of ``keys`` (row_keys); pure JAX, so the host loop and a compiled loop agree."""
    def row(key):
        u = jax.random.uniform(jax.random.fold_in(key, draw), (vocab,), jnp.float32,
                               minval=1e-20, maxval=1.0)
        return -jnp.log(-jnp.log(jnp.minimum(u, 1.0 - 1e-7)))

    return jax.vmap(row)(keys)


_gumbel_jit = jax.jit(gumbel, static_argnums=2)
