"""Transmuter: run Hugging Face ONNX exports on JAX and MLX.

    import transmuter
    model = transmuter.load("model.onnx")
    outputs = transmuter.run(model, {"input_ids": ids, "attention_mask": mask})
    fn = transmuter.compile(model, example_inputs)
    classify = transmuter.pipeline("text-classification", "org/name-or-folder")
    transmuter.save(model, "tuned.onnx", params=trained)   # fine-tuned weights, same graph
"""

from .compiled import compile
from .errors import (HubError, InputError, ModelLoadError, OpError, StaticInputError,
                     TransmuterError, UnsupportedOperatorError)
from .model import Model, load
from .pipelines import pipeline
from .run import run
from .save import save, save_pretrained

__all__ = ["load", "run", "compile", "pipeline", "save", "save_pretrained", "Model",
           "TransmuterError", "ModelLoadError", "UnsupportedOperatorError", "InputError",
           "StaticInputError", "OpError", "HubError"]
