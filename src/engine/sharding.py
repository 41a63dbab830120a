"""Several devices on one host: each batch split over them with ``jax.sharding``.

    model = transmuter.load(path, devices=jax.devices())        # or a jax.sharding.Mesh
    pipe = transmuter.pipeline("text-embedding", repo, devices=jax.devices())

A ``Placement`` holds the mesh. The model's weights are replicated on every device of it once, at
load; each call's inputs are put with their batch axis (axis 0) split over all the mesh's devices
(every mesh axis together), so ``jax.jit`` runs one shard per device (XLA's SPMD partitioner) and
the outputs come back split the same way (``np.asarray`` gathers them in row order). Layout never
changes what ``jit`` computes, only where: an input whose first axis is not the graph's batch axis,
or whose rows the devices do not divide, is replicated (every device holds it whole) and the result
is the same. Pipelines round their row buckets up to a multiple of the device count so that every
device gets an equal share (``row_multiple``).
"""

import collections

import numpy as np

from ..errors import InputError


class Placement:
    """Where a model's arrays go: weights replicated over ``mesh``, batches split over it."""

    def __init__(self, mesh):
        from jax.sharding import NamedSharding, PartitionSpec

        self.mesh = mesh
        self.count = int(mesh.size)
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.batch = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))

    def __repr__(self):
        return f"Placement({self.count} devices: {', '.join(map(str, self.mesh.devices.flat))})"

    def put_weight(self, value):
        """A weight (a NumPy array) as one array with a copy on every device."""
        import jax

        return jax.device_put(value, self.replicated)

    def put_inputs(self, inputs, batched):
        """``inputs`` as device arrays: those named in ``batched`` (the graph's batch-axis inputs)
        split on axis 0 when the devices divide their rows, every other array replicated;
        sequences and None unchanged. Call inside the backend's scope (64-bit types kept)."""
        import jax

        out = {}
        for name, value in inputs.items():
            if isinstance(value, np.generic):
                value = np.asarray(value)
            if not _is_array(value):
                out[name] = value
                continue
            split = name in batched and value.ndim >= 1 and value.shape[0] % self.count == 0 \
                and value.shape[0] > 0
            out[name] = jax.device_put(value, self.batch if split else self.replicated)
        return out


def placement(devices, backend):
    """The Placement for ``load(devices=)``: None (one device, today's path) for None or the
    default device alone; else a Placement over the mesh given or one made of the devices."""
    if devices is None:
        return None
    if backend.name != "jax":
        raise InputError(f"devices= splits batches with jax.sharding, so it needs "
                         f"backend='jax' (got backend={backend.name!r}, which runs on its one "
                         "default device): leave devices= out")
    import jax
    from jax.sharding import Mesh

    if isinstance(devices, Mesh):
        return Placement(devices)
    if isinstance(devices, jax.Device):
        devices = [devices]
    devices = _device_list(devices)
    if len(devices) == 1 and devices[0] == jax.devices()[0]:
        return None
    return Placement(Mesh(np.array(devices), ("batch",)))


def _device_list(devices):
    """``devices`` as a list of distinct jax devices of one platform, or a clear error."""
    import jax

    try:
        devices = list(devices)
    except TypeError:
        raise InputError(f"devices= takes a list of jax devices (jax.devices()) or a "
                         f"jax.sharding.Mesh, got {type(devices).__name__}: {devices!r:.80}") \
            from None
    if not devices:
        raise InputError("devices= is an empty list: give jax.devices() (or some of them), or "
                         "leave it out for one device")
    for i, device in enumerate(devices):
        if not isinstance(device, jax.Device):
            raise InputError(f"devices[{i}] is {type(device).__name__} {device!r:.60}, not a jax "
                             "device: give jax.devices() or some of its items")
    platforms = sorted({d.platform for d in devices})
    if len(platforms) > 1:
        raise InputError(f"devices= mixes platforms {platforms}: one batch is split over devices "
                         "of one kind; give jax.devices('gpu') (or 'cpu', 'tpu') alone")
    repeated = [str(d) for d, n in collections.Counter(devices).items() if n > 1]
    if repeated:
        raise InputError(f"devices= names {', '.join(repeated)} more than once: give each "
                         "device once")
    return devices


def batch_inputs(model):
    """Names of the inputs whose axis 0 is the graph's batch axis: the symbolic name most inputs
    give their axis 0 ('batch_size' in optimum's exports, 'batch' in onnxruntime-genai's), and
    inputs of unknown shape. A fixed axis 0 or another name (a 'sequence_length' position
    vector) is no batch: such inputs are replicated."""
    names = collections.Counter(v.shape[0] for v in model.inputs
                                if v.shape and isinstance(v.shape[0], str))
    batch = names.most_common(1)[0][0] if names else None
    return frozenset(v.name for v in model.inputs
                     if v.shape is None or (v.shape and v.shape[0] == batch and batch))


def row_multiple(model):
    """The device count a pipeline's row buckets are rounded up to (1 without devices=)."""
    found = getattr(model, "placement", None)
    return 1 if found is None else found.count


def _is_array(value):
    import jax

    return (isinstance(value, np.ndarray) and value.dtype != object) or \
        isinstance(value, jax.Array)
