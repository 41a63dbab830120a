"""sentence-transformers modules that follow pooling, run with NumPy: ``Dense`` (a linear layer
and an activation, its weights in the module folder) and ``Normalize``.

Dense weights come from the folder's ``model.safetensors`` or ``pytorch_model.bin``, read by
hub/weight_files.py (NumPy only: no safetensors nor torch).
"""

import math
import posixpath

import numpy as np

from ...errors import PipelineError
from ...hub.weight_files import read_module_weights

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
    weights = read_module_weights(repo, path, name)
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


# sentence-transformers' encode(precision=...) values
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def quantize(embeddings, precision):
    """``embeddings`` [n, d] (float) at ``precision``, as sentence_transformers'
    quantize_embeddings computes it without given ranges: int8/uint8 cut each dimension's range
    over these n rows into 255 steps (a step of 0 counts as 1), int8 shifted by -128; binary and
    ubinary pack the signs (> 0) 8 to a byte, binary shifted by -128 into int8."""
    embeddings = np.asarray(embeddings)
    if precision == "float32":
        return embeddings.astype(np.float32, copy=False)
    if precision in ("int8", "uint8"):
        low, high = embeddings.min(axis=0), embeddings.max(axis=0)
        steps = (high - low) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((embeddings - low) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    packed = np.packbits(embeddings > 0, axis=-1).reshape(embeddings.shape[0], -1)
    return packed if precision == "ubinary" else (packed - 128).astype(np.int8)
