"""sentence-transformers modules that follow pooling, run with NumPy: ``Dense`` (a linear layer
and an activation, its weights in the module folder) and ``Normalize``.

Dense weights come from ``model.safetensors`` (read here: a JSON header and raw little-endian
buffers, no ``safetensors`` dependency) or ``pytorch_model.bin`` (torch's zip format, unpickled
with only the few torch names a state dict uses: no code from the file runs, no torch needed).
"""

import json
import math
import pickle
import posixpath
import struct
import zipfile

import ml_dtypes
import numpy as np

from ...errors import PipelineError

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32,
                       "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_TORCH_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64,
                   "HalfStorage": np.float16, "BFloat16Storage": ml_dtypes.bfloat16,
                   "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
                   "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
_erf = np.vectorize(math.erf, otypes=[np.float64])
# torch.nn activations by class name (sentence-transformers saves e.g.
# "torch.nn.modules.activation.Tanh"); GELU is torch's exact (erf) form, its default.
ACTIVATIONS = {
    "Identity": lambda x: x,
    "Tanh": np.tanh,
    "ReLU": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "GELU": lambda x: (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype),
    "SiLU": lambda x: x / (1 + np.exp(-x)),
}


class Dense:
    """sentence-transformers ``Dense``: ``activation(x @ weight.T + bias)`` over pooled
    embeddings [B, in_features], computed in float32. ``path``: its folder in the repo;
    ``kind``: the torch.nn activation's class name."""

    def __init__(self, weight, bias, kind, name, path=""):
        self.weight, self.bias, self.kind, self.name, self.path = weight, bias, kind, name, path
        self.activation = ACTIVATIONS[kind]

    def tensors(self):
        """{state-dict name: array}, as the module's weights file names them."""
        return {"linear.weight": self.weight,
                **({} if self.bias is None else {"linear.bias": self.bias})}

    def param_name(self, tensor):
        """The key of ``tensor`` (a state-dict name) in training.params: '2_Dense/linear.weight'."""
        return f"{self.path}/{tensor}"

    def __call__(self, x):
        if x.shape[-1] != self.weight.shape[1]:
            raise PipelineError(f"{self.name}: takes {self.weight.shape[1]} features, the "
                                f"embedding before it has {x.shape[-1]}; check modules.json")
        y = x @ self.weight.T
        return self.activation(y if self.bias is None else y + self.bias)


def normalize(x):
    """sentence-transformers ``Normalize`` (torch F.normalize, eps 1e-12)."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def load_dense(repo, path):
    """The Dense module in folder ``path`` of ``repo`` (its config.json and weights)."""
    name = f"{repo.label}: {path or '.'} (Dense)"
    config = repo.json(posixpath.join(path, "config.json"), {})
    kind = str(config.get("activation_function") or "torch.nn.modules.activation.Tanh")
    if kind.rsplit(".", 1)[-1] not in ACTIVATIONS or not kind.startswith("torch."):
        raise PipelineError(f"{name}: activation_function {kind!r} is not one Transmuter runs; "
                            f"known: torch.nn {', '.join(ACTIVATIONS)}")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, "sentence_embedding"):
            raise PipelineError(f"{name}: {key} {config[key]!r}: only a Dense over the "
                                "sentence embedding (after pooling) is run")
    weights = _read_module_weights(repo, path, name)
    weight, bias = weights.get("linear.weight"), weights.get("linear.bias")
    if weight is None or weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[:1]):
        raise PipelineError(f"{name}: the weights hold no linear.weight [out, in] (and "
                            f"linear.bias [out]); found {sorted(weights)}")
    expected = (config.get("out_features"), config.get("in_features"))
    if None not in expected and tuple(weight.shape) != expected:
        raise PipelineError(f"{name}: linear.weight is {list(weight.shape)}, config.json says "
                            f"out_features x in_features = {list(expected)}")
    if config.get("bias", True) and bias is None:
        raise PipelineError(f"{name}: config.json says bias, the weights hold no linear.bias")
    as32 = (lambda a: None if a is None else a.astype(np.float32))
    return Dense(as32(weight), as32(bias), kind.rsplit(".", 1)[-1], name, path)


def read_module_weights(repo, path):
    """{state-dict name: array} of the Dense module in folder ``path`` of ``repo``, as stored."""
    return _read_module_weights(repo, path, f"{repo.label}: {path or '.'} (Dense)")


def _read_module_weights(repo, path, name):
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
            import collections
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
