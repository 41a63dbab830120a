"""Checks of the inputs a call gives against what the graph declares: names, dtypes, ranks and
shapes (``check_value``), and the host forms a graph takes (``host_input``: lists in the declared
dtype, native byte order; ragged lists and masked arrays refused). Model and CompiledFunction
both check through here."""

import numpy as np

from .. import dtypes
from ..errors import InputError
from ..ops.bounds import check_input


def check_value(info, value):
    if not isinstance(info.dtype, np.dtype):
        return
    dtype = getattr(value, "dtype", None)
    try:
        dtype = np.dtype(dtype) if dtype is not None else np.asarray(value).dtype
    except TypeError:  # an MLX dtype
        dtype = np.dtype(str(dtype).split(".")[-1])
    if dtype != info.dtype and not (info.dtype == object and dtype.kind in "OUS") \
            and not narrowed_by_jax(value, dtype, info.dtype):
        raise InputError(f"Input {info.name!r} has dtype {dtypes.name(dtype)}, but the graph "
                         f"declares {dtypes.name(info.dtype)}: convert it (e.g. "
                         f"np.asarray(x, dtype=np.{dtypes.name(info.dtype)}))")
    shape = tuple(np.shape(value)) if not hasattr(value, "shape") else tuple(value.shape)
    check_input(info.name, shape, dtype)
    if info.shape is None:
        return
    if len(shape) != len(info.shape):
        raise InputError(f"Input {info.name!r} has rank {len(shape)} (shape {list(shape)}), but "
                         f"the graph declares rank {len(info.shape)} ({info!r})")
    for got, want in zip(shape, info.shape):  # a declared 0 too (ONNX Runtime refuses 1 there)
        if isinstance(want, int) and want >= 0 and got != want:
            raise InputError(f"Input {info.name!r} has shape {list(shape)}, but the graph "
                             f"declares {info!r}")


def narrowed_by_jax(value, dtype, declared):
    """An int32 (uint32) JAX array or tracer where the graph declares int64 (uint64), made
    while JAX's x64 mode is off: a NumPy int64 batch handed to the user's own ``jax.jit``
    (a training step) arrives so, and JAX cannot hold it wider. Its values are those of the
    batch; the graph's integer ops take it as it is. Floats are never accepted narrowed."""
    if declared.kind not in "iu" or declared.itemsize != 8 or dtype.kind != declared.kind \
            or dtype.itemsize != 4 or not type(value).__module__.startswith("jax"):
        return False
    import jax
    return not jax.config.jax_enable_x64


def host_input(info, name, value):
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(f"Input {name!r} is a masked array: an ONNX graph takes no mask; give "
                         "x.filled(value), or the mask as the model's own input (attention_mask)")
    if not isinstance(getattr(info, "dtype", None), np.dtype):
        return value  # a sequence or optional input: lists and None are its values
    if isinstance(value, (list, tuple, int, float, bool)):
        try:
            array = np.asarray(value)
        except ValueError:
            array = None
        if array is None or array.dtype == object:
            raise InputError(f"Input {name!r} is a ragged list (rows of different lengths): pad "
                             "it to a rectangle, e.g. with the attention_mask the model takes")
        want = getattr(info, "dtype", None)
        if isinstance(want, np.dtype) and array.dtype.kind in "biuf" and want.kind in "biuf" \
                and np.can_cast(array.dtype, want, "same_kind"):
            array = array.astype(want)
        return array
    dtype = getattr(value, "dtype", None)
    if isinstance(value, np.ndarray) and not dtype.isnative:
        return value.astype(dtype.newbyteorder("="))
    return value
