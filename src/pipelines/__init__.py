"""Task pipelines over the engine: ``transmuter.pipeline(task, model, **options)``."""

from .base import Pipeline
from ..errors import PipelineError
from .factory import pipeline
from .registry import supported as supported_tasks

__all__ = ["pipeline", "Pipeline", "PipelineError", "supported_tasks"]
