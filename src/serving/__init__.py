"""Serving: a worker thread that owns a pipeline and batches the calls of many callers.
``pipeline.serve()`` makes the server (``Server``: dynamic batching; text-generation's
``ContinuousServer`` lives beside its pipeline, pipelines/text/continuous.py)."""

from .server import Server, Worker

__all__ = ["Server", "Worker"]
