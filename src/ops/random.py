"""Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli,
Multinomial.

Draws come from the backend's ``random`` primitive. A node with a ``seed`` attribute draws from
the key of that seed: the same values on every call. Without one, each draw takes a fresh seed
from a process-wide counter (or is folded into ``ctx.rng`` when the runner threads a key through
the run). Note that a draw whose inputs are all host values is folded like any constant: inside a
compiled segment an unseeded generator then repeats its values on every call of that segment.

ONNX does not specify the generator, so no other runtime's values can be matched: tests check
shapes, dtypes and distributions instead."""

import itertools
import os
import zlib

import numpy as np

from .. import dtypes
from .registry import op

_FLOAT = 1  # TensorProto.FLOAT
_INT32 = 6  # TensorProto.INT32
# Unseeded draws: a per-process base plus a counter, so that each draw differs.
_BASE = int.from_bytes(os.urandom(4), "little")
_COUNTER = itertools.count()


def _seed(seed, ctx):
    """A uint32 seed: the bits of the float ``seed`` attribute, else a fresh one."""
    if seed is not None:
        return int(np.asarray(seed, np.float32).view(np.uint32))
    if ctx is not None and ctx.rng is not None:  # one key per run: fold in the node's name
        return zlib.crc32(ctx.node_name.encode())
    return (_BASE + next(_COUNTER)) & 0xFFFFFFFF


def draw(xp, kind, shape, dtype, seed, ctx):
    """Draws in ``dtype`` (half precision drawn in f32)."""
    dtype = np.dtype(dtype)
    if not dtypes.is_float(dtype):
        raise ValueError(f"random draws are floating point, not {dtypes.name(dtype)}")
    wide = np.dtype(np.float32) if dtypes.is_half(dtype) else dtype
    key = ctx.rng if ctx is not None and seed is None else None  # a seed alone decides the draw
    return xp.random(kind, tuple(int(d) for d in shape), wide, seed=_seed(seed, ctx), key=key)


def _like_dtype(xp, x, dtype):
    return dtypes.to_numpy(dtype) if dtype is not None else xp.dtype_of(x)


def _normal(xp, shape, dtype, mean, scale, seed, ctx):
    dtype = np.dtype(dtype)
    z = draw(xp, "normal", shape, dtype, seed, ctx)
    return xp.astype(z * scale + mean, dtype)


def _uniform(xp, shape, dtype, low, high, seed, ctx):
    dtype = np.dtype(dtype)
    u = draw(xp, "uniform", shape, dtype, seed, ctx)
    return xp.astype(u * (high - low) + low, dtype)


@op("RandomNormal", 1, context=True, random=True)
def random_normal(xp, *, shape, dtype=_FLOAT, mean=0.0, scale=1.0, seed=None, ctx=None):
    return _normal(xp, shape, dtypes.to_numpy(dtype), mean, scale, seed, ctx)


@op("RandomUniform", 1, context=True, random=True)
def random_uniform(xp, *, shape, dtype=_FLOAT, high=1.0, low=0.0, seed=None, ctx=None):
    return _uniform(xp, shape, dtypes.to_numpy(dtype), low, high, seed, ctx)


@op("RandomNormalLike", 1, context=True, random=True)
def random_normal_like(xp, x, *, dtype=None, mean=0.0, scale=1.0, seed=None, ctx=None):
    return _normal(xp, x.shape, _like_dtype(xp, x, dtype), mean, scale, seed, ctx)


@op("RandomUniformLike", 1, context=True, random=True)
def random_uniform_like(xp, x, *, dtype=None, high=1.0, low=0.0, seed=None, ctx=None):
    return _uniform(xp, x.shape, _like_dtype(xp, x, dtype), low, high, seed, ctx)


@op("Bernoulli", 15, context=True, random=True)
def bernoulli(xp, p, *, dtype=None, seed=None, ctx=None):
    """1 with probability p (elementwise), else 0, in ``dtype`` (default: p's)."""
    u = draw(xp, "uniform", p.shape, xp.dtype_of(p), seed, ctx)
    return xp.astype(u < xp.astype(p, xp.dtype_of(u)), _like_dtype(xp, p, dtype))


@op("Multinomial", 7, context=True, random=True)
def multinomial(xp, x, *, dtype=_INT32, sample_size=1, seed=None, ctx=None):
    """``sample_size`` class indices per row of unnormalized log-probabilities x (batch, C):
    inverse CDF sampling, one uniform draw per sample."""
    batch, classes = x.shape
    wide = np.float64 if xp.dtype_of(x) == np.float64 else np.float32
    cdf = xp.cumsum(xp.softmax(xp.astype(x, wide), axis=1), axis=1)
    u = draw(xp, "uniform", (batch, sample_size, 1), wide, seed, ctx)
    index = xp.sum(xp.astype(xp.expand_dims(cdf, 1) <= u, np.int32), axis=-1)
    return xp.astype(xp.minimum(index, classes - 1), dtypes.to_numpy(dtype))
