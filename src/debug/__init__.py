"""Tools for when a model does not match onnxruntime (docs/debugging.md).

    report = transmuter.debug.first_divergence("model.onnx", {"input_ids": ids})
    print(report)          # the first node whose outputs differ, its inputs, the path to it
"""

from .divergence import first_divergence
from .report import Divergence, Report, Value

__all__ = ["Divergence", "Report", "Value", "first_divergence"]
