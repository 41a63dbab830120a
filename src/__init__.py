"""Transmuter: run Hugging Face ONNX exports on JAX and MLX.

    import transmuter
    model = transmuter.load("model.onnx")
    outputs = transmuter.run(model, {"input_ids": ids, "attention_mask": mask})
    fn = transmuter.compile(model, example_inputs)
"""

from .compiled import compile
from .errors import (HubError, InputError, ModelLoadError, OpError, StaticInputError,
                     TransmuterError, UnsupportedOperatorError)
from .model import Model, load
from .run import run

__all__ = ["load", "run", "compile", "Model", "TransmuterError", "ModelLoadError",
           "UnsupportedOperatorError", "InputError", "StaticInputError", "OpError", "HubError"]
