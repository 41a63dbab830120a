"""The weight table: where each initializer came from and what load did to it, for write-back.

Load turns initializers into arrays and sometimes rewrites them for their reader: half weights
upcast by ``compute_type="f32"`` (engine/passes/precision.py), packed weights stored as the op prefers them (an
op's ``weights``: MatMulNBits' bytes as uint32 words, its zero points unpacked to float). The
table records, per top-level initializer, its source type and dims, how it was stored (inline raw
bytes, external data with file / offset / length, typed fields, sparse) and that transform, so
``save`` can write every weight back in the source's own bytes.

Beside it the table keeps a *skeleton*: the ModelProto with the raw bytes of those initializers
left out (graph, attributes, metadata, small typed-field tensors stay), so the model's weights are
not held twice in host memory (once parsed, once in the proto)."""

import dataclasses

import numpy as np
import onnx

from ... import dtypes

RAW, EXTERNAL, FIELDS, SPARSE = "raw", "external", "fields", "sparse"
# Load transforms: UPCAST a half weight computed in float32 (cast back exactly); VIEW the same
# bytes read as another dtype or shape (packed words); KEPT rewritten for its reader in a way
# that cannot be undone byte for byte (unpacked zero points): the source bytes are kept.
UPCAST, VIEW, KEPT = "upcast", "view", "kept"
_PACKED = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
           if hasattr(onnx.TensorProto, n)}


@dataclasses.dataclass
class Entry:
    """One top-level initializer as the source file held it."""

    name: str
    data_type: int  # onnx.TensorProto element type
    dims: tuple
    storage: str  # RAW, EXTERNAL, FIELDS or SPARSE
    external: tuple | None = None  # (location, offset, length) in the source's data files
    transform: str = ""  # "", UPCAST, VIEW or KEPT
    stored: str = ""  # the name the model keeps it under (engine/passes/precision.py renames half outputs)
    kept: bytes | None = None  # the source bytes of a KEPT entry

    @property
    def dtype(self) -> np.dtype:
        return dtypes.to_numpy(self.data_type)


class WeightTable:
    """``entries``: name -> Entry for every top-level initializer; ``skeleton``: the ModelProto
    without their raw bytes (see the module docstring)."""

    def __init__(self, proto: onnx.ModelProto, external=None):
        """``external``: name -> (location, offset, length) of the tensors the source file kept
        in external data files (onnx_file.read_onnx records it; the proto has them inline)."""
        external = external or {}
        self.entries = {}
        for tensor in proto.graph.initializer:
            storage = (EXTERNAL if tensor.name in external else RAW) \
                if tensor.HasField("raw_data") else FIELDS
            self.entries[tensor.name] = Entry(tensor.name, tensor.data_type, tuple(tensor.dims),
                                              storage, external.get(tensor.name),
                                              stored=tensor.name)
        for sparse in proto.graph.sparse_initializer:
            values = sparse.values
            self.entries[values.name] = Entry(values.name, values.data_type, tuple(sparse.dims),
                                              SPARSE, stored=values.name)
        self.skeleton = _skeleton(proto, {n for n, e in self.entries.items()
                                          if e.storage in (RAW, EXTERNAL)})

    def record(self, loaded: dict, prepared: dict):
        """Note what load did: ``loaded`` maps names to the arrays as parsed (after any upcast),
        ``prepared`` to the arrays the model keeps (after its ops' ``weights`` rewrites)."""
        for name, entry in self.entries.items():
            if name not in prepared and name + "::f32" in prepared:  # precision.upcast_half
                entry.stored = name + "::f32"
            before, after = loaded.get(entry.stored), prepared.get(entry.stored)
            if after is None:
                continue
            if after is not before:
                same = _same_bytes(before, after)
                entry.transform = VIEW if same else KEPT
                if not same:
                    entry.kept = array_bytes(entry, before)
            elif isinstance(after, np.ndarray) and after.dtype != entry.dtype:
                entry.transform = UPCAST

    @property
    def locations(self) -> list:
        """The source's external data files, in the order tensors first name them."""
        seen = {}
        for entry in self.entries.values():
            if entry.external:
                seen.setdefault(entry.external[0], None)
        return list(seen)


def source_bytes(entry: Entry, value) -> bytes:
    """The raw bytes of ``value`` (a host array: the model's own, or new params) as the source
    stored ``entry``, its load transform undone."""
    if entry.transform == KEPT:
        return entry.kept
    if entry.transform == VIEW:
        return np.ascontiguousarray(value).tobytes()
    return array_bytes(entry, value)


def array_bytes(entry: Entry, value) -> bytes:
    """``value`` in ``entry``'s source type and dims: little-endian, sub-byte types packed."""
    value, want = np.asarray(value), entry.dtype
    if value.dtype != want:
        value = value.astype(want)
    if tuple(value.shape) != entry.dims:
        value = value.reshape(entry.dims)
    if entry.data_type in _PACKED:
        return onnx.numpy_helper.from_array(value, entry.name).raw_data
    return np.ascontiguousarray(value).astype(want.newbyteorder("<"), copy=False).tobytes()


def _same_bytes(before, after) -> bool:
    """Whether ``after`` reads the very bytes of ``before`` (a view as another dtype or shape)."""
    if not (isinstance(before, np.ndarray) and isinstance(after, np.ndarray)):
        return False
    if before.nbytes != after.nbytes:
        return False
    if before.flags.c_contiguous and after.flags.c_contiguous and \
            before.__array_interface__["data"][0] == after.__array_interface__["data"][0]:
        return True
    return np.array_equal(np.ascontiguousarray(before).view(np.uint8).ravel(),
                          np.ascontiguousarray(after).view(np.uint8).ravel())


def _skeleton(proto, stripped) -> onnx.ModelProto:
    """A copy of ``proto`` whose top-level initializers named in ``stripped`` have no raw data;
    the bytes are never copied (a copy of the whole proto would hold every weight once more)."""
    skeleton = onnx.ModelProto()
    _copy_fields(proto, skeleton, skip={"graph"})
    _copy_fields(proto.graph, skeleton.graph, skip={"initializer"})
    for tensor in proto.graph.initializer:
        copy = skeleton.graph.initializer.add()
        if tensor.name in stripped:
            _copy_fields(tensor, copy, skip={"raw_data"})
        else:
            copy.CopyFrom(tensor)
    return skeleton


def _copy_fields(src, dst, skip=()):
    for field, value in _set_fields(src, skip):
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.cpp_type == field.CPPTYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        elif isinstance(value, bytes) and field.type == field.TYPE_STRING:
            dst.MergeFromString(_length_delimited(field.number, value))
        else:
            setattr(dst, field.name, value)


def _set_fields(src, skip):
    """(field, value) of each field set in ``src`` but those named in ``skip``, which are never
    read: ListFields hands every value over, a weight's raw bytes copied out of the message too
    (SmolLM2-135M's 540 MB of weights: 0.11 s of its 1.1 s load)."""
    for field in src.DESCRIPTOR.fields:
        if field.name in skip:
            continue
        if field.is_repeated:
            value = getattr(src, field.name)
            if len(value):
                yield field, value
        elif src.HasField(field.name):
            yield field, getattr(src, field.name)


def _length_delimited(number, data):
    """One string field on the wire. protobuf hands a proto2 string that is not UTF-8 back as
    bytes and refuses to set it (a damaged producer_name: fuzz 20261206:5911); onnxruntime never
    reads it, so it is copied as it came."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _varint(n):
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
