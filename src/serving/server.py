"""Dynamic batching: many callers, one input each, one pipeline call per batch.

    server = transmuter.pipeline("text-embedding", "Xenova/all-MiniLM-L6-v2").serve()
    server("a sentence")                      # from any number of threads: blocks, one result
    await server.acall("a sentence")          # from asyncio tasks
    server.close()                            # or `with pipe.serve() as server: ...`

One background thread owns the pipeline. Calls that arrive within ``batch_timeout_ms`` of the
first one waiting (or until ``max_batch_size`` are waiting) run as one pipeline call on a list,
so they share the compiled batch shapes, and each caller gets exactly what ``pipe(input)`` gives.
If that call raises, its inputs are run again one by one: each caller gets its own result or its
own error, and one bad input never fails the others. Options are fixed when the server is made
(``pipe.serve(top_k=None)``): calls that share a batch must share them. ``text-generation`` on a
fixed-cache decoder is served by continuous batching instead (pipelines/text/continuous.py: a new
request joins the running decode in a free row, on this module's Worker); other generating tasks
are refused (``Pipeline.serve``).
"""

import asyncio
import concurrent.futures
import math
import queue
import threading
import time

from ..errors import PipelineError
from ..options import positive_int

STOP = object()  # queued by close(): everything queued before it is served first


class Worker:
    """What the servers share: one daemon thread owning the pipeline, fed by a queue, and
    close() (queued work finished first, new work refused)."""

    def _start(self, pipeline):
        self.pipeline = pipeline
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()  # orders _put() against close(): none lands after STOP
        self._closed = False
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name=f"transmuter-serve-{pipeline.task}")
        self._thread.start()

    def _put(self, item):
        with self._lock:
            if self._closed:
                raise PipelineError(f"This {self.pipeline.task} server is closed: it takes no "
                                    "new calls. Make a new one with pipeline.serve().")
            self._queue.put(item)

    def close(self):
        """Refuse new calls, finish the queued ones, join the worker. Closing again is a no-op."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Server(Worker):
    """A thread-safe callable over one non-generating pipeline (see the module docstring).

    ``max_batch_size``: most inputs per pipeline call (default: the pipeline's ``batch_size``);
    ``batch_timeout_ms``: how long the first waiting input waits for others (0: take only those
    already queued); ``call_options``: the pipeline's call options, for every call."""

    def __init__(self, pipeline, max_batch_size=None, batch_timeout_ms=5, **call_options):
        if pipeline.generates:
            raise PipelineError(
                f"{pipeline.task} generates (a decoding loop per input): dynamic batching serves "
                "non-generating tasks only; text-generation is served by continuous batching "
                "(pipeline.serve() gives a generation.continuous.ContinuousServer).")
        self.max_batch_size = positive_int(
            pipeline.batch_size if max_batch_size is None else max_batch_size, "max_batch_size")
        self.batch_timeout = _timeout_s(batch_timeout_ms)
        self.call_options = _checked_options(pipeline, call_options)
        self.stats = {"requests": 0, "batches": 0, "largest_batch": 0, "reruns": 0}
        self._start(pipeline)

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return (f"Server({self.pipeline!r}, max_batch_size={self.max_batch_size}, "
                f"batch_timeout_ms={self.batch_timeout * 1000:g}, {state})")

    # --- callers -------------------------------------------------------------------------------

    def submit(self, inputs):
        """Queue one input; a ``concurrent.futures.Future`` of its result. Cancelling it before
        its batch starts drops it from the batch."""
        if not self.pipeline._is_single(inputs):
            raise PipelineError(
                f"A server takes one input per call ({self.pipeline._input_kind()}); got "
                f"{type(inputs).__name__}: {inputs!r:.80}. Call it once per input (from several "
                "threads or tasks: they are batched), or call the pipeline on a list.")
        future = concurrent.futures.Future()
        self._put((inputs, future))
        return future

    def __call__(self, inputs, *, timeout=None):
        """The result of ``inputs``, as ``pipeline(inputs, **call_options)`` gives it; blocks.
        ``timeout`` (seconds) raises TimeoutError and drops the input if it has not started."""
        future = self.submit(inputs)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def acall(self, inputs):
        """``await server.acall(x)``: the result without blocking the event loop."""
        return await asyncio.wrap_future(self.submit(inputs))

    # --- the worker ----------------------------------------------------------------------------

    def _work(self):
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is STOP:
                return
            batch, stopping = self._collect([first])
            batch = [(x, f) for x, f in batch if f.set_running_or_notify_cancel()]
            try:
                self._run(batch)
            except BaseException as error:  # noqa: BLE001 -- a bug here must not hang callers
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)

    def _collect(self, batch):
        """More queued inputs, until the batch is full or ``batch_timeout`` has passed since
        its first one was taken; (batch, whether close() was reached)."""
        deadline = time.monotonic() + self.batch_timeout
        while len(batch) < self.max_batch_size:
            try:
                wait = deadline - time.monotonic()
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is STOP:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self, batch):
        """One pipeline call on the batch's inputs; if it raises, each input alone."""
        if not batch:
            return
        stats = self.stats
        stats["requests"] += len(batch)
        stats["batches"] += 1
        stats["largest_batch"] = max(stats["largest_batch"], len(batch))
        if len(batch) > 1:
            try:
                results = self.pipeline([x for x, _ in batch], **self.call_options)
            except Exception:  # noqa: BLE001 -- whose input failed is found by running them alone
                stats["reruns"] += 1
            else:
                for (x, future), result in zip(batch, results, strict=True):
                    future.set_result(_as_called_alone(self.pipeline, x, result))
                return
        for x, future in batch:
            _settle(future, lambda x=x: self.pipeline(x, **self.call_options))


def _settle(future, call):
    """The future gets call()'s result or its exception (any: the caller gets what pipe(x)
    raises, unchanged; the worker goes on)."""
    try:
        future.set_result(call())
    except BaseException as error:  # noqa: BLE001
        future.set_exception(error)


def _as_called_alone(pipeline, inputs, result):
    """What ``pipeline(inputs)`` gives, from what the list call gave for ``inputs``: they differ
    only where a task's ``__call__`` reshapes a lone input's result. text-classification (its
    ``__call__``, as transformers') wraps a lone string's top-1 dict in a list."""
    if pipeline.task == "text-classification" and isinstance(inputs, str) \
            and isinstance(result, dict):
        return [result]
    return result


def _timeout_s(batch_timeout_ms):
    ok = isinstance(batch_timeout_ms, (int, float)) and not isinstance(batch_timeout_ms, bool) \
        and math.isfinite(batch_timeout_ms) and batch_timeout_ms >= 0
    if not ok:
        raise PipelineError(f"batch_timeout_ms must be a finite number >= 0 (milliseconds the "
                            f"first waiting call waits for others), got {batch_timeout_ms!r}")
    return batch_timeout_ms / 1000


def _checked_options(pipeline, options):
    """The call options, checked now (a bad one fails serve(), not every call)."""
    options = dict(options)
    if "progress" in options:
        raise PipelineError("A server shows no progress bar: drop progress=")
    if "batch_size" in options:  # rows per graph call within one batch, as pipe(list, batch_size=)
        positive_int(options["batch_size"], "batch_size")
    rest = {k: v for k, v in options.items() if k != "batch_size"}
    pipeline._sanitize_parameters(**{**pipeline._defaults, **rest})
    return options
