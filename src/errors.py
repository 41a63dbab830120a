"""The error types users see. Each message names the thing at fault and what to do about it."""


class TransmuterError(Exception):
    """Base class of every error Transmuter raises on purpose."""


class ModelLoadError(TransmuterError):
    """The ONNX file cannot be read or is not a valid model."""


class UnsupportedOperatorError(TransmuterError):
    """The model uses operators that have no implementation (all of them are listed)."""

    def __init__(self, missing):
        self.missing = sorted(missing)
        lines = "\n".join(f"  - {d or 'ai.onnx'}::{op} (opset {v})" for d, op, v in self.missing)
        super().__init__(
            f"The model uses {len(self.missing)} operator(s) Transmuter does not implement:\n{lines}\n"
            "Please open an issue with the model id, or re-export with a different opset."
        )


class InputError(TransmuterError, ValueError):
    """An input given at call time does not match what the graph declares."""


class StaticInputError(TransmuterError):
    """An operator needs a value on the host, but it was only known inside a compiled function."""


class OpError(TransmuterError):
    """An operator failed; the message carries the node's name, op, inputs and attributes."""


class HubError(TransmuterError):
    """A Hub repo or local folder cannot be resolved, or lacks a file."""


class PipelineError(TransmuterError, ValueError):
    """A pipeline was given an input or option it cannot use, or a model it cannot run."""
