"""The bytes a run holds at once, counted from the shapes of the values its nodes make, and
refused past the limit one array has (ops/bounds.max_array_bytes) before the backend runs out.

One array past the machine's memory is caught where it is made (bounds.check_allocation); this
catches the sum: a batch of 100,000 through an encoder makes no one array past any bound, but its
intermediate values together are past the memory the process has, and the backend then fails deep
inside (MLX segfaults, XLA raises RESOURCE_EXHAUSTED). The shapes are known as each node runs,
eager or traced, so the count costs a few integer products per node, and nothing on a compiled
function's call once traced. It is an estimate: a compiled segment frees each value after its
last reader (XLA and MLX do, and fuse more), while an eager run holds every value until it
returns; what a backend keeps besides (scratch buffers, its own caches) is not counted."""

import numpy as np

from ..errors import OpError
from .graph import node_reads
from ..ops.bounds import max_array_bytes


def nbytes(value):
    """The bytes of a backend or host array (a list: their sum); 0 for anything else."""
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return 0
    count = 1
    for d in shape:
        count *= int(d)
    try:
        size = np.dtype(dtype).itemsize
    except TypeError:  # an MLX dtype
        size = getattr(dtype, "size", 4)
    return count * size


def last_reads(nodes):
    """{node index: the names whose last reader (or, unread, maker) that node is}."""
    last = {}
    for index, node in enumerate(nodes):
        for name in node_reads(node) | {n for n in node.outputs if n}:
            last[name] = index
    ends = {}
    for name, index in last.items():
        ends.setdefault(index, []).append(name)
    return ends


class LiveBytes:
    """A running count of the bytes the nodes of one run have made. ``ends`` (last_reads of the
    graph's nodes) frees a value after its last reader; None keeps every value (eager). The
    graph's outputs are never freed: ``keep`` names them."""

    def __init__(self, ends=None, keep=()):
        self.ends, self.keep = ends, frozenset(keep)
        self.limit = max_array_bytes()
        self.held, self.total = {}, 0

    def count(self, index, node, env):
        """Add what ``node`` (node ``index``) made to the count; raise OpError past the limit.
        Return the names freed after it (none when ``ends`` is None)."""
        for name in node.outputs:
            if name and name not in self.held:
                size = nbytes(env.get(name))
                self.held[name] = size
                self.total += size
        if self.total > self.limit:
            raise OpError(
                f"{node.label}: the values live after it would take {_size(self.total)} "
                f"together, past the {_size(self.limit)} this process may use "
                "(the machine's memory, or what its address-space limit leaves; "
                "TRANSMUTER_MAX_ARRAY_BYTES moves the limit): give a smaller batch or sequence")
        freed = []
        if self.ends is not None:
            for name in self.ends.get(index, ()):
                if name not in self.keep:
                    self.total -= self.held.pop(name, 0)
                    freed.append(name)
        return freed


def _size(n):
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.2f} MiB"
