"""Which input of an op indexes another, and over what range: the ``indices=`` metadata of
Gather, GatherElements, GatherND, ScatterND and their kin.

ONNX Runtime refuses an index past its axis; a compiled gather cannot raise (JAX reads NaN or
clamps, MLX reads past the buffer), so the checks happen on the host, where the values are known
(index_checks.py): static indices when their node runs, the caller's inputs before each call.

    @op("Gather", 1, indices={1: Along(data=0)})        # indices pick along data's ``axis``
    @op("GatherND", 11, indices={1: Leading(data=0, batch="batch_dims")})
"""

import dataclasses


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
