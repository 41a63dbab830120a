"""Bounds an op's inputs must keep: which input of an op indexes another, and over what range
(the ``indices=`` metadata of Gather, GatherElements, GatherND, ScatterND and their kin), and how
large an array an op whose output size a value decides may make (``check_allocation``: Expand,
Tile, ConstantOfShape, Range, Pad, OneHot, Resize, refused before they allocate).

ONNX Runtime refuses an index past its axis; a compiled gather cannot raise (JAX reads NaN or
clamps, MLX reads past the buffer), so the checks happen on the host, where the values are known
(engine/checks/indices.py): static indices when their node runs, the caller's inputs before each call.

    @op("Gather", 1, indices={1: Along(data=0)})        # indices pick along data's ``axis``
    @op("GatherND", 11, indices={1: Leading(data=0, batch="batch_dims")})
"""

import dataclasses
import os

import numpy as np

from ..errors import InputError


@dataclasses.dataclass(frozen=True)
class Along:
    """Each index picks a position along one axis of input ``data``: the ``attr`` attribute
    (default ``default``), or always ``default`` when ``attr`` is None."""

    data: int = 0
    attr: str | None = "axis"
    default: int = 0
    columns = False  # one limit for every element

    def limits(self, data_shape, index_shape, attrs):
        """The size of the indexed axis, or None when the axis is not valid (the op says so)."""
        axis = attrs.get(self.attr, self.default) if self.attr else self.default
        rank = len(data_shape)
        if not -rank <= axis < rank:
            return None
        return (axis % rank, data_shape[axis % rank])


@dataclasses.dataclass(frozen=True)
class Leading:
    """Column ``i`` of the indices' last axis picks along axis ``b + i`` of input ``data``, ``b``
    being the ``batch`` attribute (GatherND's batch_dims; ScatterND has none)."""

    data: int = 0
    batch: str | None = None
    columns = True  # a limit per column of the last axis

    def limits(self, data_shape, index_shape, attrs):
        """((axis, size) per column), or None when the shapes do not fit (the op says so)."""
        if not index_shape:
            return None
        b = attrs.get(self.batch, 0) if self.batch else 0
        k = index_shape[-1]
        if b < 0 or b + k > len(data_shape):
            return None
        return tuple((b + i, data_shape[b + i]) for i in range(k))


class TooLarge(MemoryError):
    """An op would make an array past ``max_array_bytes()``: refused before it allocates (the
    runner names the node)."""


def max_array_bytes():
    """The largest array an op may make, and the most a run's live values may take together
    (engine/live_bytes.py): TRANSMUTER_MAX_ARRAY_BYTES, else the machine's memory or, when the process
    has an address-space limit (RLIMIT_AS), what is left of it: more is a shape gone wrong or a
    batch that cannot fit, refused with its size before the backend fails on it."""
    given = os.environ.get("TRANSMUTER_MAX_ARRAY_BYTES")
    if given:
        return int(given)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): 64 GiB
        memory = 64 << 30
    return min(memory, _address_space_left())


def _address_space_left():
    """RLIMIT_AS less the address space already mapped (/proc/self/statm); unbounded without
    a limit (the usual case) or where neither can be read."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return float("inf")
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(limit - mapped, 0)
    except (ImportError, OSError, ValueError):
        return float("inf")


def check_allocation(shape, dtype, what="the output"):
    """Raise TooLarge when an array of ``shape`` and ``dtype`` would pass max_array_bytes()."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # an MLX dtype: mlx.core.float32
        dtype = np.dtype(str(dtype).split(".")[-1])
    count = 1
    for d in shape:
        count *= max(int(d), 0)  # Python ints: 2**62 * 2**62 does not wrap
    size = count * dtype.itemsize
    limit = max_array_bytes()
    if size > limit:
        raise TooLarge(f"{what} would be {list(int(d) for d in shape)} of "
                       f"{dtype.name}: {size / 2**30:,.1f} GiB, past the "
                       f"{limit / 2**30:,.1f} GiB an array may take (the machine's memory, or "
                       "what its address-space limit leaves; TRANSMUTER_MAX_ARRAY_BYTES moves "
                       "the limit)")


def check_input(name, shape, dtype):
    """Raise InputError when input ``name`` would pass max_array_bytes() once copied to the
    device: a zero-stride view (np.broadcast_to) of 2^31 rows costs nothing on the host, and
    its copy ran out of memory (MemoryError, RESOURCE_EXHAUSTED) instead of naming it."""
    try:
        check_allocation(shape, dtype, what=f"Input {name!r}")
    except TooLarge as e:
        raise InputError(f"{e}: give a smaller batch or sequence") from None
