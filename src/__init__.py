"""Transmuter: run Hugging Face ONNX exports on JAX and MLX.

    import transmuter
    model = transmuter.load("model.onnx")
    outputs = transmuter.run(model, {"input_ids": ids, "attention_mask": mask})
    fn = transmuter.compile(model, example_inputs)
    classify = transmuter.pipeline("text-classification", "org/name-or-folder")
"""

from .compiled import compile
from .errors import (HubError, InputError, ModelLoadError, OpError, StaticInputError,
                     TransmuterError, UnsupportedOperatorError)
from .model import Model, load
from .pipelines import pipeline
from .run import run

__all__ = ["load", "run", "compile", "pipeline", "Model", "TransmuterError", "ModelLoadError",
           "UnsupportedOperatorError", "InputError", "StaticInputError", "OpError", "HubError"]
