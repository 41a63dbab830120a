"""Continuous batching: many text-generation requests decoding together, each in its own row.

    server = transmuter.pipeline("text-generation", "onnx-community/Qwen3-0.6B-ONNX").serve(
        max_batch_size=8)
    server(messages, max_new_tokens=64)            # from any thread: what pipe(messages, ...) gives
    await server.acall("Once upon", seed=3, do_sample=True)
    for chunk in server.stream(messages): ...      # text chunks as the row makes them
    async for chunk in server.astream(messages): ...

One worker thread owns ``max_batch_size`` rows of one fixed-capacity KV cache (the
GroupQueryAttention and position_ids modes of cache.py; rows.py). Requests that find free rows
are prefilled together (a steppers.FixedCache over their prompts, as the pipeline runs a batch,
into a buffer as long as the rows') and their caches copied into free rows; they join the next
decode step, which runs every busy row at its own position. A row that ends (eos, its token
budget, a stop string) is free for the next request at once. Each row keeps its request's
settings (processors, warpers, a sampler keyed by its request's seed and drawing once per own
step: Sampler.split), so its tokens are those of the request run alone through the pipeline.
The buffer grows (a new compiled step shape) when a request needs more positions than it has,
unless ``cache_length`` sized it. Growing-cache decoders and beam search are refused.
``token_summary=True``'s padding counts what the row ran: its prefill group's prompt width
(padded to a power of two), as a batch's does in ``pipe(list)``.
"""

import asyncio
import collections
import concurrent.futures
import queue

import numpy as np

from ...backends.numpy import XP as HOST
from ...errors import PipelineError
from ...options import positive_int
from ...serving.server import STOP, Worker
from ...generation.loop import token_summary
from ...generation.processors import State, build as build_processors
from ...generation.sampling import Sampler, build_warpers
from ...generation.rows import Rows
from ...generation.steppers import cache_capacity
from ...generation.stopping import StopStrings, finished
from ...generation.streaming import FinalItem, TextStreamer

_END = object()  # a stream's last item
COMPILED_SHAPES = 64  # the decode graph's compiled shapes kept while a server runs


class ContinuousServer(Worker):
    """A thread-safe text-generation server (module docstring). ``max_batch_size``: rows decoded
    together (default: the pipeline's ``batch_size``); ``cache_length``: positions each row's
    buffer holds from the start (default: as the requests need, growing); ``call_options``:
    defaults of every request, which its own options override (``server(x, max_new_tokens=8)``)."""

    def __init__(self, pipeline, max_batch_size=None, batch_timeout_ms=None, *,
                 cache_length=None, **call_options):
        gen = pipeline.generator
        if gen.layout.mode == "grow":
            raise PipelineError(
                f"This decoder's cache grows each step ({gen.layout.mode!r} mode: a merged "
                "decoder without position_ids), so its rows cannot share one fixed buffer: "
                "continuous batching needs a GroupQueryAttention or position_ids export. Call "
                "the pipeline on a list (batch_size=) instead.")
        if batch_timeout_ms is not None:
            raise PipelineError("batch_timeout_ms does not apply to generation: a request joins "
                                "the running decode at its next step. Drop batch_timeout_ms.")
        self.rows = positive_int(pipeline.batch_size if max_batch_size is None
                                  else max_batch_size, "max_batch_size")
        self.call_options = dict(call_options)
        self._request(pipeline, "x", {})  # bad defaults (num_beams=2) fail here, not per call
        self.stats = {"requests": 0, "steps": 0, "largest_batch": 0, "joined": 0}
        self._batch = Rows(gen, self.rows)
        # prefill groups of 1, 2, 4, ... rows at each prompt width (each chunk size, concat) add
        # to the lone calls' shapes: past the generator's 16 they were compiled again and again
        gen.fn.cache_size = gen.first_fn.cache_size = max(gen.fn.cache_size, COMPILED_SHAPES)
        if cache_length is not None:  # sized now: no step shape compiled while serving
            self._batch.grow(cache_capacity(positive_int(cache_length, "cache_length")))
        self._start(pipeline)

    def __repr__(self):
        return (f"ContinuousServer({self.pipeline!r}, max_batch_size={self.rows}, "
                f"{'closed' if self._closed else 'open'})")

    # --- callers -------------------------------------------------------------------------------

    def submit(self, inputs, **options):
        """Queue one request; a ``concurrent.futures.Future`` of ``pipe(inputs, **options)``'s
        result. ``finish_reason=True`` adds each record's "stop" / "length" (as a stream's
        summary says it). Cancelling the future before its prefill drops the request."""
        future = concurrent.futures.Future()
        request = self._request(self.pipeline, inputs, options, future.set_result)
        request.future, future.request = future, request
        self._put(request)
        return future

    def __call__(self, inputs, *, timeout=None, **options):
        """The result, as ``pipeline(inputs, **options)`` gives it; blocks. ``timeout``
        (seconds) raises TimeoutError and frees the request's row."""
        future = self.submit(inputs, **options)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            future.request.cancelled = True
            raise

    async def acall(self, inputs, **options):
        """``await server.acall(x, **options)``: the result without blocking the event loop."""
        future = self.submit(inputs, **options)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.request.cancelled = True
            raise

    def stream(self, inputs, **options):
        """Iterator of new-text chunks (TextStreamer rule) as the row makes them, as
        ``pipe(inputs, stream=True, **options)`` yields them (``token_summary=True``: its final
        dict). Closing the iterator early frees the row."""
        chunks = queue.SimpleQueue()
        request = self._request(self.pipeline, inputs, options, None, chunks.put)
        self._put(request)
        return _chunks(request, chunks.get)

    def astream(self, inputs, **options):
        """``async for chunk in server.astream(x)``: stream() for asyncio."""
        loop, chunks = asyncio.get_running_loop(), asyncio.Queue()
        request = self._request(self.pipeline, inputs, options, None,
                                lambda item: loop.call_soon_threadsafe(chunks.put_nowait, item))
        self._put(request)
        return _async_chunks(request, chunks.get)

    def _request(self, pipeline, inputs, options, done=None, emit=None):
        """A checked request: one input, options merged and sanitized as pipe(...) does."""
        if not pipeline._is_single(inputs):
            raise PipelineError(
                f"A server takes one input per call ({pipeline._input_kind()}); got "
                f"{type(inputs).__name__}: {inputs!r:.80}. Call it once per input (from several "
                "threads or tasks: they share the running batch).")
        options = {**self.call_options, **options}
        reason = bool(options.pop("finish_reason", False))
        for name in ("batch_size", "stream", "progress"):
            if name in options:
                raise PipelineError(f"A server call takes no {name}= (rows are serve's "
                                    "max_batch_size=; streaming is server.stream(x))")
        pre, fwd, post = pipeline._sanitize_parameters(**{**pipeline._defaults, **options})
        config = fwd["config"]
        if config.num_beams > 1:
            raise PipelineError("Beam search (num_beams > 1) is not served by continuous "
                                "batching: call the pipeline for it, or use num_beams=1")
        if config.num_return_sequences > self.rows:
            raise PipelineError(f"num_return_sequences={config.num_return_sequences} needs as "
                                f"many rows; this server has max_batch_size={self.rows}")
        if emit is not None and config.num_return_sequences > 1:
            raise PipelineError("A stream is one sequence: num_return_sequences must be 1")
        return _Request(inputs, pre, config, post, reason, done, emit)

    # --- the worker ----------------------------------------------------------------------------

    def _work(self):
        waiting, stopping = collections.deque(), False
        with self.pipeline.model.backend.scope():
            while not (stopping and not waiting and not self._batch.busy()):
                idle = not waiting and not self._batch.busy() and not stopping
                stopping |= self._take(waiting, block=idle)
                self._admit(waiting)
                if self._batch.busy():
                    self._step()

    def _take(self, waiting, block):
        """Queued requests into ``waiting`` (blocking for the first when idle); whether close()
        was reached."""
        while True:
            try:
                item = self._queue.get() if block else self._queue.get_nowait()
            except queue.Empty:
                return False
            block = False
            if item is STOP:
                return True
            waiting.append(item)

    def _admit(self, waiting):
        """Prefill waiting requests, oldest first, while there are rows for them: those taken
        together run as one prefill call."""
        running, taken, rows = self._batch.busy(), [], self._batch.free()
        while waiting and waiting[0].config.num_return_sequences <= rows:
            request = waiting.popleft()
            if request.start() and self._prepare(request):
                taken.append(request)
                rows -= request.config.num_return_sequences
        if not taken:
            return
        try:
            logits = self._batch.prefill(taken)
            for request, row_logits in zip(taken, logits):
                for seq in request.sequences:
                    self._advance(seq, row_logits)
        except Exception as error:  # noqa: BLE001 -- these requests' error, not the server's
            for request in taken:
                self._batch.release(request)
                request.fail(error)
        self.stats["requests"] += len(taken)
        self.stats["joined"] += len(taken) if running else 0

    def _prepare(self, request):
        """Its prompt ids and sequences; whether it needs a row (False: it failed, or has no
        token budget and is answered already)."""
        pipe = self.pipeline
        try:
            chunk = next(iter(pipe.preprocess(request.inputs, **request.pre)))
            request.chunk, config = chunk, request.config
            n, budget = pipe.generator._lengths([chunk["ids"]], config)
            request.budget = int(budget[0])
            decode = lambda ids: pipe._decode(ids, None)  # noqa: E731
            request.sequences = [_Sequence(request, chunk["ids"], s, decode)
                                 for s in Sampler(config.do_sample, config.seed,
                                                  config.num_return_sequences).split()]
            if request.budget > 0:
                return True
            request.finish(pipe)  # as generate: no step, no token
        except Exception as error:  # noqa: BLE001 -- this request's own error
            request.fail(error)
        return False

    def _step(self):
        batch = self._batch
        for row, seq in enumerate(batch.owner):
            if seq is not None and seq.request.cancelled:
                batch.release(seq.request)
        busy = [(row, seq) for row, seq in enumerate(batch.owner) if seq is not None]
        if not busy:
            return
        self.stats["steps"] += 1
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(busy))
        try:
            logits = batch.step()
        except Exception as error:  # noqa: BLE001 -- a failed step fails the rows it ran
            for _, seq in busy:
                batch.release(seq.request)
                seq.request.fail(error)
            return
        for row, seq in busy:
            if batch.owner[row] is seq:
                try:
                    self._advance(seq, logits[row])
                except Exception as error:  # noqa: BLE001 -- its request's error
                    batch.release(seq.request)
                    seq.request.fail(error)

    def _advance(self, seq, logits):
        """The sequence's next token from its logits; frees its row when it ends."""
        request = seq.request
        if seq.choose(logits):
            self._batch.free_row(seq)
            if all(s.ended for s in request.sequences):
                request.finish(self.pipeline)


class _Request:
    """One call: its input and sanitized options, its sequences, and how it answers (a future's
    ``done`` or a stream's ``emit``)."""

    def __init__(self, inputs, pre, config, post, finish_reason, done, emit):
        self.inputs, self.pre, self.config, self.post = inputs, pre, config, post
        self.finish_reason, self.done, self.emit = finish_reason, done, emit
        self.processors = [*build_processors(config), *build_warpers(config)]
        self.future, self.cancelled, self.sequences = None, False, []
        self.streamer = None

    def start(self):
        """Whether to run it (a cancelled future is dropped)."""
        if self.future is not None:
            return self.future.set_running_or_notify_cancel()
        return not self.cancelled

    def fail(self, error):
        if self.future is not None:
            if not self.future.done():
                self.future.set_exception(error)
        else:
            self._send(error)

    def token(self, seq, token):
        if self.emit is not None:
            if self.streamer is None:
                self.streamer = TextStreamer(seq.decode)
            chunk = self.streamer.put([token])
            if chunk:
                self._send(chunk)

    def _send(self, item):
        try:
            self.emit(item)
        except RuntimeError:  # the consumer's event loop is closed: nobody reads the stream
            self.cancelled = True

    def finish(self, pipe):
        """The pipeline's result (or the stream's end) from the sequences' tokens."""
        new = [s.generated for s in self.sequences]
        n = len(self.chunk["ids"])
        summaries = [token_summary(n, len(s.generated), len(s.generated), s.padding)
                     for s in self.sequences]
        if self.emit is not None:
            rest = self.streamer.end() if self.streamer else ""
            if rest:
                self._send(rest)
            if self.post["summary"]:
                self._send(FinalItem({"token_summary": summaries[0],
                                   "finish_reason": self._reason(new[0])}))
            self._send(_END)
            return
        records = pipe.postprocess([dict(self.chunk, new_ids=new, summaries=summaries)],
                                   **self.post)
        if self.finish_reason:
            records = [dict(r, finish_reason=self._reason(ids)) for r, ids in zip(records, new)]
        self.done(records)

    def _reason(self, ids):
        """"stop" (an eos or a stop string ended it) or "length" (the budget), as the
        pipeline's stream summary decides."""
        ended = bool(ids) and ids[-1] in (self.config.eos_token_id or [])
        return "stop" if ended or len(ids) < self.budget else "length"


class _Sequence:
    """One row's host state: its tokens, processors' State, sampler and stop check, as
    Generator._run keeps them for a row."""

    def __init__(self, request, prompt, sampler, decode):
        n, budget = len(prompt), request.config.new_tokens(len(prompt))
        ids = np.zeros((1, n + max(budget, 0)), np.int64)
        ids[0, :n] = prompt
        self.state = State(ids, np.array([n]), np.array([n]), np.array([n + budget]))
        self.request, self.sampler, self.decode = request, sampler, decode
        strings = request.config.stop_strings
        self.stop = StopStrings(strings, decode) if strings else None
        self.generated, self.ended, self.padding, self.row = [], False, 0, None

    @property
    def position(self):
        """Where the token fed next sits: the last one generated."""
        return int(self.state.lengths[0]) - 1

    def choose(self, logits):
        """Append the next token (processors, warpers, the row's own noise); whether it ended."""
        config, state = self.request.config, self.state
        scores = logits[None].astype(np.float32)
        for proc in self.request.processors:
            scores = proc(HOST, state, scores)
        if config.do_sample:
            token = int(Sampler.choose(HOST, scores, self.sampler.noise(1, scores.shape[-1]))[0])
        else:
            token = int(np.argmax(scores[0]))
        state.ids[0, state.lengths[0]] = token
        self.generated.append(token)
        state.lengths[0] += 1
        ended = finished(np.array([token]), state.lengths, state.max_lengths,
                         config.eos_token_id)[0]
        if self.stop is not None:
            ended |= self.stop([self.generated])[0]
        self.ended = bool(ended)
        if self is self.request.sequences[0]:
            self.request.token(self, token)
        return self.ended


def _item(request, item):
    """A stream item for the consumer: a chunk, the final dict, or raise its error."""
    if isinstance(item, BaseException):
        raise item
    return item.value if isinstance(item, FinalItem) else item


def _chunks(request, get):
    try:
        while (item := get()) is not _END:
            yield _item(request, item)
    finally:  # the consumer stopped early (or the stream ended): its row is not needed
        request.cancelled = True


async def _async_chunks(request, get):
    try:
        while (item := await get()) is not _END:
            yield _item(request, item)
    finally:
        request.cancelled = True
