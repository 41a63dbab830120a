"""Framework weight files, read and written with NumPy: ``model.safetensors`` (a JSON header and
raw little-endian buffers, no ``safetensors`` dependency) and ``pytorch_model.bin`` (torch's zip
format, unpickled with only the few torch names a state dict uses: no code from the file runs, no
torch needed). The sentence-transformers Dense modules keep their weights in these
(pipelines/text/st_modules.py reads them; hub/save.py writes trained ones back)."""

import collections
import json
import math
import pickle
import posixpath
import struct
import zipfile

import ml_dtypes
import numpy as np

from ..errors import PipelineError

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32,
                       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_TORCH_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                   "HalfStorage": np.float16, "BFloat16Storage": ml_dtypes.bfloat16,
                   "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                   "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


def read_module_weights(repo, path, name):
    """{state-dict name: array} of the module in folder ``path`` of ``repo``, as stored: its
    ``model.safetensors``, else its ``pytorch_model.bin``. ``name`` labels the module in the
    PipelineError a missing or damaged file raises."""
    for file, reader in (("model.safetensors", read_safetensors), ("pytorch_model.bin", read_torch_bin)):
        if repo.has(posixpath.join(path, file)):
            local = repo.file(posixpath.join(path, file))
            try:
                return reader(local)
            except (OSError, ValueError, KeyError, TypeError, struct.error, zipfile.BadZipFile,
                    pickle.UnpicklingError, EOFError) as e:
                raise PipelineError(f"{name}: cannot read {file} ({e}); the file is damaged or "
                                    "not in the format its name says") from e
    raise PipelineError(f"{name}: the folder has no model.safetensors nor pytorch_model.bin")


def read_safetensors(path):
    """{name: array} of a .safetensors file: 8-byte little-endian header size, JSON header
    (dtype, shape, data_offsets into the buffer that follows), then the buffer."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise ValueError(f"header of {size} bytes in a {len(data)}-byte file")
    header = json.loads(data[8:8 + size])
    buffer = memoryview(data)[8 + size:]
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<")
        start, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if not 0 <= start <= end <= len(buffer) or end - start != count * dtype.itemsize:
            raise ValueError(f"tensor {key}: offsets {start}..{end} do not fit its shape/buffer")
        out[key] = np.frombuffer(buffer[start:end], dtype).reshape(info["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    """Write {name: array} as a .safetensors file (the layout read_safetensors reads; the header
    padded to 8 bytes, as the safetensors package writes it)."""
    names = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
    header, offset, buffers = {"__metadata__": {"format": "pt"}}, 0, []
    for key in sorted(tensors):
        array = np.ascontiguousarray(tensors[key])
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[key] = {"dtype": names[array.dtype], "shape": list(array.shape),
                       "data_offsets": [offset, offset + len(data)]}
        buffers.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for data in buffers:
            f.write(data)


def read_torch_bin(path):
    """{name: array} of a torch.save state dict (zip format, torch >= 1.6)."""
    if not zipfile.is_zipfile(path):
        raise ValueError("a legacy (pre-zip) torch file; re-save it with torch >= 1.6 or as "
                         "model.safetensors")
    with zipfile.ZipFile(path) as zf:
        pickles = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise ValueError("no data.pkl in the archive")
        prefix = pickles[0][:-len("data.pkl")]
        state = _StateDictUnpickler(zf, prefix).load()
    if not isinstance(state, dict):
        raise ValueError(f"holds a {type(state).__name__}, not a state dict")
    return dict(state)


class _StateDictUnpickler(pickle.Unpickler):
    """Unpickles only OrderedDicts of tensors: any other global is refused."""

    def __init__(self, zf, prefix):
        super().__init__(zf.open(prefix + "data.pkl"))
        self.zf, self.prefix, self.storages = zf, prefix, {}

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda tensor, requires_grad, hooks, *rest: tensor
        if module == "torch" and name in _TORCH_STORAGES:
            return np.dtype(_TORCH_STORAGES[name])
        raise pickle.UnpicklingError(f"refusing {module}.{name}: only tensors are read")

    def persistent_load(self, pid):
        kind, dtype, key, _location, _numel = pid
        if kind != "storage" or not isinstance(dtype, np.dtype):
            raise pickle.UnpicklingError(f"unexpected storage {pid[:2]!r}")
        if key not in self.storages:
            raw = self.zf.read(f"{self.prefix}data/{key}")
            self.storages[key] = np.frombuffer(raw, dtype.newbyteorder("<"))
        return self.storages[key]


def _rebuild_tensor(storage, offset, size, stride, *rest):
    item = storage.dtype.itemsize
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset
    if extent > storage.size:
        raise ValueError("a tensor reaches past its storage")
    view = np.lib.stride_tricks.as_strided(storage[offset:], tuple(size),
                                           tuple(s * item for s in stride))
    return view.copy()
