"""Transmuter: run Hugging Face ONNX exports on JAX and MLX.

    import transmuter
    model = transmuter.load("model.onnx")
    outputs = transmuter.run(model, {"input_ids": ids, "attention_mask": mask})
    fn = transmuter.compile(model, example_inputs)
    classify = transmuter.pipeline("text-classification", "org/name-or-folder")
    transmuter.save(model, "tuned.onnx", params=trained)   # fine-tuned weights, same graph

The layers, bottom up, are folders (docs/architecture.md): backends, ops, engine, hub, debug,
preprocess, generation, serving, pipelines, training, integrations.
"""

from . import debug  # noqa: F401  (transmuter.debug.first_divergence, without an import)
from .engine.compiled import compile
from .engine.model import Model
from .engine.run import run
from .errors import (HubError, InputError, ModelLoadError, OpError, PipelineError,
                     StaticInputError, TransmuterError, UnsupportedOperatorError)
from .hub.load import load
from .hub.save import save, save_pretrained
from .pipelines import pipeline

__all__ = ["load", "run", "compile", "pipeline", "save", "save_pretrained", "Model",
           "TransmuterError", "ModelLoadError", "UnsupportedOperatorError", "InputError",
           "StaticInputError", "OpError", "HubError", "PipelineError"]
