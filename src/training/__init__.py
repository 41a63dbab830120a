"""Fine-tuning with optax (above the pipelines: a pipeline implies its batches and its loss):
``training.batches``, ``training.step``, ``training.loss``, ``training.params``, ``training.lora``
(steps.py; losses.py, lora.py)."""

from .steps import IGNORE, LOSSES, Batch, Batches, Step, batches, loss, lora, params, step

__all__ = ["batches", "step", "loss", "params", "lora", "Batch", "Batches", "Step", "LOSSES",
           "IGNORE"]
