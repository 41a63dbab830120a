"""The coverage matrix: which of the Hub's most downloaded ONNX exports run in Transmuter, and
match onnxruntime (docs/coverage.md).

    transmuter coverage select --tasks text-classification --per-task 5   # cases.json
    transmuter coverage record        # downloads; onnxruntime's outputs on each task's input
    transmuter coverage run           # Transmuter, compiled, against the records
    transmuter coverage matrix        # Markdown: task x model x variant, the tested models

Each step reads and writes files in one folder (``--dir``, default ``coverage``), so a step can
run on another machine: select and record where the Hub is reachable, run anywhere
(``--offline`` reads huggingface_hub's cache only).
"""

from .cases import TASKS, select
from .check import check
from .matrix import matrix
from .record import record

__all__ = ["TASKS", "check", "matrix", "record", "select"]
