"""Ray Data: run a Transmuter pipeline over a dataset, one pipeline per actor.

    import ray
    from transmuter.integrations.ray import TransmuterPredictor

    ds = ray.data.read_text("docs/", include_paths=True)          # columns "text", "path"
    ds = ds.map_batches(TransmuterPredictor,
                        fn_constructor_kwargs=dict(task="text-embedding", model="/models/minilm"),
                        compute=ray.data.ActorPoolStrategy(size=2),  # or concurrency=2
                        batch_size=1024)                              # + num_gpus=1 per actor
    ds.write_parquet("out/")                                       # + column "embedding"

Ray constructs the class once per actor: the pipeline is built and each padded shape compiles
once in that actor; JAX's persistent compilation cache (docs/compile-cache.md, on by default in
``~/.cache/transmuter/jax``) is shared by the actors of a node, so the second actor reads what
the first compiled. Batches are dicts of NumPy arrays or pandas DataFrames (Ray's
``batch_format``); each comes back in its own format with the result columns added
(``transmuter.integrations.columns`` names them). This module does not import Ray: the class is
a plain callable, also usable on a batch by hand.

The input column is ``column=``; by default "text" for text tasks (``read_text``),
"image" for image tasks (``read_images``: HWC uint8 arrays), "bytes" for audio tasks
(``read_binary_files``: the encoded file, decoded by ``preprocess.audio``). A "path" column,
when the batch has one, is named in row errors.

Errors: a model the actor cannot build is a PipelineError naming the model and the host (Ray
fails the job with it: a folder must exist on every node, at an absolute path, since workers do
not run in the driver's working directory). A missing column or a column of the wrong type is a
PipelineError naming it and the columns present. A row that fails is, with ``on_error="raise"``
(the default), a PipelineError naming its index in the batch and its path; with
``on_error="column"``, an ``error`` column holds its message (None where the row is fine) and its
results are null.
"""

import os
import socket

from ..errors import TransmuterError
from ..pipelines import PipelineError
from . import columns as cols

ON_ERROR = ("raise", "column")
ERROR_COLUMN = "error"


class TransmuterPredictor:
    """``map_batches``' callable class: ``transmuter.pipeline(task, model, **options)`` built once,
    then each batch mapped to itself plus the result columns (``prefix`` before their names)."""

    def __init__(self, task, model, *, column=None, on_error="raise", prefix="", **options):
        if on_error not in ON_ERROR:
            raise PipelineError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        if not isinstance(prefix, str):
            raise PipelineError(f"prefix must be a str, got {prefix!r}")
        from ..pipelines import pipeline

        try:
            self.pipeline = pipeline(task, model, **options)
        except TransmuterError as e:
            raise PipelineError(
                f"Cannot build the {task!r} pipeline from {_name(model)!r} on host "
                f"{socket.gethostname()} (process {os.getpid()}, working directory "
                f"{os.getcwd()!r}): {e}\nA model folder must exist on every Ray node at an "
                "absolute path; a Hub id needs the Hub (or its cache) on every node.") from None
        self.task, self.kind = task, cols.modality(self.pipeline)
        self.column = cols.DEFAULT_COLUMN[self.kind] if column is None else column
        self.on_error, self.prefix = on_error, prefix

    def __repr__(self):
        return f"TransmuterPredictor({self.task!r}, column={self.column!r})"

    def __call__(self, batch):
        columns, rebuild = cols.read_batch(batch)
        values = cols.row_values(columns, self.column, self.kind, self.task)
        paths = list(columns["path"]) if "path" in columns else None
        results, errors = self._run(values, paths)
        new = cols.result_columns(results, self.task, self.prefix, taken=columns)
        if self.on_error == "column":
            name = self.prefix + ERROR_COLUMN
            if name in columns:
                raise PipelineError(f"The error column {name!r} would overwrite the batch's "
                                    "column of that name: pass prefix= to the predictor")
            new[name] = cols.column(errors)
        return rebuild(new)

    def _run(self, values, paths):
        """(results, errors), one of each per row: a failed row has result None and its message.
        The rows run as one batch, where a row that cannot be prepared (a corrupt file) gets its
        error in its result's place (the pipeline's on_error="return"); only when the batch
        itself fails are the rows run one by one to find the rows at fault (then the others run
        again as one batch, so their padding, hence their numbers, are those of a batch)."""
        errors = [None if cols.accepts(v, self.kind) else
                  f"{type(v).__name__} value, not {cols.describe(self.kind)}" for v in values]
        for i in range(len(values)):
            if errors[i] is not None:
                self._fail(i, values, paths, errors)
        todo = [i for i, e in enumerate(errors) if e is None]
        try:
            outputs = self.pipeline([values[i] for i in todo], on_error="return")
        except Exception:  # noqa: BLE001 -- any failure: find the row, else raise as it was
            found = False
            for i in todo:
                try:
                    self.pipeline([values[i]])
                except Exception as e:  # noqa: BLE001 -- reported with its row
                    errors[i], found = f"{type(e).__name__}: {e}", True
                    self._fail(i, values, paths, errors)
            if not found:
                raise
            todo = [i for i, e in enumerate(errors) if e is None]
            return self._scatter(todo, self.pipeline([values[i] for i in todo]), errors)
        for i, out in zip(todo, outputs):
            if isinstance(out, TransmuterError):
                errors[i] = f"{type(out).__name__}: {out}"
                self._fail(i, values, paths, errors)
        return self._scatter(todo, outputs, errors)

    def _fail(self, i, values, paths, errors):
        """Raise row ``i``'s error (on_error="raise"), else keep it for the error column."""
        path = f", path {_plain(paths[i])!r}" if paths is not None else ""
        value = f", {self.column}={values[i]!r:.60}" if isinstance(values[i], str) else ""
        errors[i] = f"row {i} of the batch{path}{value}: {errors[i]}"
        if self.on_error == "raise":
            raise PipelineError(f"The {self.task} pipeline failed on {errors[i]} (pass "
                                "on_error='column' to get an error column instead)")

    @staticmethod
    def _scatter(todo, outputs, errors):
        results = [None] * len(errors)
        for i, out in zip(todo, outputs):
            if errors[i] is None:
                results[i] = out
        return results, errors


def _name(model):
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else model


def _plain(value):
    return value.item() if hasattr(value, "item") else value
