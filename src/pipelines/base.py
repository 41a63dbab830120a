"""The Pipeline contract: ``_sanitize_parameters`` -> ``preprocess`` -> ``_forward`` -> ``postprocess``.

    pipe = transmuter.pipeline("fill-mask", "tests/fixtures/bert-fill-mask")
    pipe("Paris is the [MASK] of France.")       # one input: one result
    pipe(["...", "..."])                          # a list: a list of results
    for result in pipe(texts_from_files()):       # any other iterable: a lazy iterator
        ...

This layer knows no modality. ``preprocess`` runs on the host and yields one or more *chunks* per
input (QA windows, zero-shot labels); a chunk holds its *item* (an encoding, an image's
features) under the key of the pipeline's *featurizer*, which says how big an item is and pads a
batch of items to a compiled shape (``buckets``). ``_forward`` is the only code that touches the
model; ``postprocess`` turns the chunks of one input back into transformers' output (plain dicts,
lists, floats). Chunks of several inputs share a batch, so ``batch_size`` counts rows.
"""

import itertools

import numpy as np

from ..errors import PipelineError, TransmuterError
from ..options import positive_int
from ..serving import Server
from ..engine.sharding import row_multiple
from .. import buckets
from ..engine.compiled import compile
from ..engine import compile_notice
from . import prefetch, shared, warmup
from .compile_progress import CompileProgress


class Pipeline:
    """Base class: a task sets ``task`` and ``featurizer`` (what pads its batches), and gives
    ``_sanitize_parameters``, ``preprocess`` and ``postprocess`` (and ``_forward`` when the
    model's outputs need more than slicing rows). ``featurizers`` names what the factory loads
    for it and passes by keyword: "tokenizer", "image_processor"."""

    task = None
    featurizers = ()
    # Chunks are read ahead (this many batches) and sorted by size before batching: padding then
    # costs little; results still come in input order, each after its window ran. A list is
    # wholly in memory and returns at once: it is read further ahead (2,000 mixed sentences at
    # batch 32: padded tokens 1.89x -> 1.76x the real ones with [32, 128, 256]).
    lookahead_batches = 16
    list_lookahead_batches = 64
    # Whether inputs are preprocessed by background threads a batch ahead of the model
    # (prefetch.py): where preprocessing reads and decodes files (images, audio), not text's.
    prefetch = False

    def __init__(self, model, config=None, *, repo=None, batch_size=8, progress=False,
                 cache_size=buckets.COMPILED_CACHE_SIZE, **defaults):
        self.model, self.repo = model, repo
        self.config = dict(config or {})
        self.batch_size = positive_int(batch_size, "batch_size")
        self.cache_size = positive_int(cache_size, "cache_size")
        self.progress = progress
        self._inputs = {v.name: v for v in model.inputs}
        self._defaults = defaults
        self._sanitize_parameters(**defaults)  # bad options fail at construction, not first call

    def __repr__(self):
        return f"{type(self).__name__}(task={self.task!r}, batch_size={self.batch_size})"

    # --- what a task gives ---------------------------------------------------------------------

    featurizer = None  # set by the task (a featurizers.* object) before batches are made

    def _sanitize_parameters(self, **kwargs):
        """Split call options into (preprocess, forward, postprocess) keyword dicts."""
        if kwargs:
            raise PipelineError(f"{self.task} takes no option(s) {sorted(kwargs)}")
        return {}, {}, {}

    def preprocess(self, inputs, **params):
        """Yield the chunks (dicts holding the featurizer's item) of one input."""
        raise NotImplementedError

    def postprocess(self, outputs, **params):
        """The result of one input from its chunks' outputs (chunk dict + graph outputs)."""
        raise NotImplementedError

    def _is_single(self, inputs):
        return isinstance(inputs, (str, dict))

    def _input_kind(self):
        return "a string"

    # --- calling -------------------------------------------------------------------------------

    def __call__(self, inputs, *, batch_size=None, progress=None, on_error="raise", **kwargs):
        """``on_error="return"``: an input that cannot be read or prepared (a corrupt file, a
        wrong type) gets its error (a TransmuterError naming it) in its result's place, and the
        others run on; "raise" (the default) raises it at its turn."""
        params = self._sanitize_parameters(**{**self._defaults, **kwargs})
        batch_size = self.batch_size if batch_size is None else positive_int(batch_size,
                                                                              "batch_size")
        progress = self.progress if progress is None else progress
        if on_error not in ON_ERROR:
            raise PipelineError(f"on_error must be 'raise' or 'return' (each failed input's "
                                f"error in its result's place), got {on_error!r}")
        keep_going = on_error == "return"
        if self._is_single(inputs):
            return next(self._iterate([inputs], params, batch_size, False, keep_going))
        if isinstance(inputs, (list, tuple)):
            return list(self._iterate(inputs, params, batch_size, progress, keep_going,
                                      self.list_lookahead_batches))
        if hasattr(inputs, "__iter__") and not isinstance(inputs, (bytes, np.ndarray)):
            return self._iterate(inputs, params, batch_size, progress, keep_going)
        if hasattr(inputs, "__getitem__") and hasattr(inputs, "__len__"):
            # a torch-style Dataset (transformers' KeyDataset over a datasets column): no
            # __iter__, items by index
            return self._iterate(_Indexed(inputs), params, batch_size, progress, keep_going)
        raise PipelineError(f"{self.task} takes {self._input_kind()}, a list of them, or an "
                            f"iterable of them; got {type(inputs).__name__}: {inputs!r:.80}")

    def warmup(self, examples=(), *, batch_sizes=None, max_length=None, progress=True,
               **call_options):
        """Compile now the shapes a workload like ``examples`` will meet, into JAX's persistent
        cache too (a service's start, a Docker image build): each row count a batch pads to
        (``batch_sizes``: default all up to ``batch_size``) times, for text, every length bucket
        up to ``max_length`` (default: the longest example's), else the examples' own shapes
        (pipelines/warmup.py). Returns the shapes' labels ("32x128")."""
        return warmup.warmup(self, examples, batch_sizes, max_length, progress,
                             type(self)._feed is Pipeline._feed, **call_options)

    def serve(self, max_batch_size=None, batch_timeout_ms=None, **call_options):
        """A ``transmuter.serving.Server``: callable from many threads (and ``await
        server.acall(x)``), one input per call; calls arriving within ``batch_timeout_ms``
        (default 5) run as one call on a list of up to ``max_batch_size`` (default
        ``batch_size``) inputs. text-generation gets a ``ContinuousServer`` instead
        (pipelines/text/continuous.py: ``max_batch_size`` rows of one running decode)."""
        if self.generates:
            raise PipelineError(
                f"{self.task} generates (a decoding loop per input): pipeline.serve() batches "
                "non-generating tasks, and text-generation by continuous batching; this task's "
                "decoder (an encoder-decoder or speech model) is not served. Call the pipeline "
                "on a list (batch_size=) instead.")
        return Server(self, max_batch_size, 5 if batch_timeout_ms is None else batch_timeout_ms,
                      **call_options)

    @property
    def generates(self):
        """Whether a call runs a decoding loop: the pipeline's or its ASR head's generator, or
        SpeechT5's step graph (such tasks are not served by dynamic batching)."""
        parts = (self, getattr(self, "head", None), getattr(self, "speech", None))
        return any(getattr(p, "generator", None) is not None or hasattr(p, "step") for p in parts)

    def _iterate(self, inputs, params, batch_size, progress, keep_going=False, lookahead=None):
        """Results in input order. Preprocess reads ahead ``lookahead`` (default
        ``lookahead_batches``) batches of chunks; those are run largest first, so each batch pads
        to sizes close to its own (as sentence-transformers' ``encode`` sorts its input), then
        each input's result (``keep_going``: or its error) is yielded."""
        lookahead = self.lookahead_batches if lookahead is None else lookahead
        results = self._results(iter(inputs), *params, keep_going, batch_size, lookahead)
        self._bar = None  # where compiles are announced (compile_progress.py)
        if progress:
            from tqdm.auto import tqdm
            total = len(inputs) if hasattr(inputs, "__len__") else None
            self._bar = tqdm(results, total=total, desc=self.task, unit="input")
            results = iter(self._bar)
        return results

    def _results(self, items, pre, fwd, post, keep_going, batch_size, lookahead):
        """Each input's result (``keep_going``: or its error), in input order."""
        window, windows = batch_size, 0
        pending, queued = [], 0
        for chunks in self._preprocessed(items, pre, batch_size, keep_going):
            if not queued and _ran(chunks) and chunks and self._sortable(chunks[0]):
                window = batch_size * lookahead
            pending.append(chunks)
            queued += len(chunks) if _ran(chunks) else 0
            if queued >= window:
                yield from self._flush(pending, fwd, post, batch_size, keep_going, True)
                pending, queued, windows = [], 0, windows + 1
        if pending:  # the rest of a stream that filled windows runs in full rows as they did
            yield from self._flush(pending, fwd, post, batch_size, keep_going, windows > 0)

    def _preprocessed(self, items, pre, ahead, keep_going):
        """Each input's chunks (``keep_going``: or the TransmuterError that preparing it raised),
        in input order: made by background threads up to ``ahead`` inputs before the one being
        batched, where the task preprocesses files (``prefetch``)."""
        def chunks(item):
            try:
                return list(self.preprocess(item, **pre))
            except TransmuterError as e:
                if not keep_going:
                    raise
                return e

        if not self.prefetch:
            return map(chunks, items)
        return prefetch.ordered(chunks, items, ahead)

    def _flush(self, pending, fwd, post, batch_size, keep_going, full=False):
        """Run and postprocess a read-ahead window; ``full``: a stream's window, whose calls
        all take ``batch_size`` rows (buckets.py: streams)."""
        flat = list(itertools.chain.from_iterable(c for c in pending if _ran(c)))
        self._rows_cap = batch_size  # rows of a batch are padded to a power of two, up to this
        self._rows_least = batch_size if full else 1
        order = list(range(len(flat)))
        if all(self._sortable(c) for c in flat):  # largest first; stable: ties keep input order
            key = self.featurizer.key
            order.sort(key=lambda i: self.featurizer.size(flat[i][key]), reverse=True)
        self._choose_lengths(flat, batch_size)
        try:
            outputs = self._run_window(flat, order, batch_size, fwd)
        finally:
            if getattr(self.featurizer, "runs_at", None):
                self.featurizer.runs_at = {}  # the window's choice; other callers pad to buckets
        at = 0
        for chunks in pending:
            if not _ran(chunks):
                yield chunks
                continue
            try:
                yield self.postprocess(outputs[at:at + len(chunks)], **post)
            except TransmuterError as e:
                if not keep_going:
                    raise
                yield e
            at += len(chunks)

    def _run_window(self, flat, order, batch_size, fwd):
        """Each row's output, by the window's graph calls over ``order``."""
        outputs = [None] * len(flat)
        groups = self._groups(flat, order, batch_size)
        shapes = self._group_shapes(flat, groups)
        ahead = self._first_new(shapes)
        progress = CompileProgress(self, self._new_shapes(shapes))
        with compile_notice.reporting(progress):
            for n, rows in enumerate(groups):
                while ahead and ahead[0] <= n:
                    ahead.pop(0)
                if ahead:  # the window's next new shape compiles while this batch runs
                    self._compile_ahead([flat[i] for i in groups[ahead.pop(0)]])
                for i, out in zip(rows, self._forward([flat[i] for i in rows], **fwd)):
                    outputs[i] = out
        progress.done()
        return outputs

    def _choose_lengths(self, flat, batch_size):
        """The window's featurizer ``runs_at``: each length bucket its rows meet runs at its own
        length or, until that padding would cost a compile, at a longer one this pipeline has
        compiled at the window's row count (buckets.pad_or_compile), where the featurizer
        coarsens (text's default buckets) and the calls are its batches (``_feed``'s; not
        GLiNER's, not a reranker's prompts). A length compiled only at other row counts is no
        cheaper: one sentence after a batch of 8 would compile 1 x 96 and pad to it as well."""
        featurizer = self.featurizer
        if not (getattr(featurizer, "coarsens", False) and self.feeds_model()
                and type(self)._feed is Pipeline._feed and all(map(self._sortable, flat))):
            return
        sizes = [featurizer.bucket(c[featurizer.key]) for c in flat]
        rows = self._rows(min(len(flat), batch_size))
        compiled = {n for r, n in self.__dict__.get("_shapes_run", ()) if r == rows}
        featurizer.runs_at, self._padding_waste = buckets.pad_or_compile(
            sizes, compiled, self.__dict__.get("_padding_waste", {}), self._compile_cost())

    def _groups(self, flat, order, batch_size):
        """The rows (indices of ``flat``, in ``order``) of each graph call: ``batch_size`` at a
        time, or, where the featurizer knows each row's padded size and the rows are sorted, the
        grouping that pads least for what a call costs (buckets.row_groups: a batch where half
        the rows pad to 64 tokens and half to 16 runs as two calls on a model whose tokens cost
        more than its calls, all-MiniLM-L6-v2; the tiny fixtures keep one call)."""
        padded = getattr(self.featurizer, "padded", None)
        if padded is None or not all(self._sortable(flat[i]) for i in order):
            return [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
        key = self.featurizer.key
        sizes = [padded(flat[i][key]) for i in order]
        cost = self._call_cost() + buckets.SPLIT_SHAPE_COST * batch_size * sizes[0]
        least = getattr(self, "_rows_least", 1)
        return [order[a:b] for a, b in buckets.row_groups(sizes, batch_size, cost, least)]

    def _group_shapes(self, flat, groups):
        """The (rows, length) shape of each group's call (None where the featurizer knows no
        padded size)."""
        padded = getattr(self.featurizer, "padded", None)
        if padded is None or not all(self._sortable(c) for c in flat):
            return None
        return [(self._rows(len(g)), padded(flat[g[0]][self.featurizer.key])) for g in groups]

    def _new_shapes(self, shapes):
        """How many of ``shapes`` this pipeline has not run (None where they are unknown): what
        a compile announcement counts to."""
        if shapes is None:
            return None
        seen = self.__dict__.setdefault("_shapes_run", set())
        new = len(set(shapes) - seen)
        seen |= set(shapes)
        return new

    def _first_new(self, shapes):
        """Indices of the groups whose shape this pipeline has not run and no earlier group of
        the window runs: the window's new shapes, in the order its calls meet them (before
        _new_shapes records them)."""
        if shapes is None:
            return []
        seen = set(self.__dict__.get("_shapes_run", ()))
        first = []
        for n, shape in enumerate(shapes):
            if shape not in seen:
                seen.add(shape)
                first.append(n)
        return first

    def _compile_ahead(self, chunks):
        """Compile the call on ``chunks`` in the background (engine/compile_ahead.py), where
        ``_forward`` runs the model on ``_feed(chunks)``: a stream's next length bucket, known
        from its read-ahead window, while the current batch runs."""
        if self.feeds_model() and type(self)._run_model is Pipeline._run_model:
            self._compiled(self.model).compile_ahead(self._feed(chunks))

    def feeds_model(self):
        """Whether ``_forward`` runs ``self.model`` on ``self._feed(chunks)`` (its shapes can
        then compile ahead); a class whose own ``_forward`` does says so."""
        return type(self)._forward is Pipeline._forward

    def _call_cost(self):
        """A graph call's fixed cost in padded tokens of this model (buckets.py)."""
        if "_call_tokens" not in self.__dict__:
            self._call_tokens = buckets.CALL_COST_WEIGHT_TOKENS / max(self._weights(), 1)
        return self._call_tokens

    def _compile_cost(self):
        """A new length's compile in padded tokens of this model (buckets.compile_tokens)."""
        if "_compile_tokens" not in self.__dict__:
            self._compile_tokens = buckets.compile_tokens(len(self.model.graph.nodes),
                                                          self._weights())
        return self._compile_tokens

    def _weights(self):
        return sum(int(np.prod(v.shape)) for v in self.model.params.values())

    def _sortable(self, chunk):
        """Chunks holding a featurizer item are rows that do not depend on each other, so they
        may be batched in any order; generation chunks are not (a seeded sampler draws per row)."""
        return self.featurizer is not None and self.featurizer.key in chunk

    # --- the model -----------------------------------------------------------------------------

    def model_feed(self, inputs, **kwargs):
        """The feed (name -> array) this pipeline gives ``self.model`` for one input: its first
        chunk, one row, made by the task's own preprocessing (``transmuter diff --task`` and
        ``transmuter coverage`` run the graph on it)."""
        pre = self._sanitize_parameters(**{**self._defaults, **kwargs})[0]
        chunks = list(self.preprocess(inputs, **pre))
        if not chunks or self.featurizer is None:
            raise PipelineError(f"{self.task} makes no model feed for {inputs!r:.80}")
        return self._feed(chunks[:1])

    def _forward(self, chunks, **params):
        """Run the graph on the padded chunks; each chunk's dict gains its rows of the outputs."""
        out = self._run_model(self._feed(chunks))
        return [dict(chunk, **{k: v[i] for k, v in out.items()}) for i, chunk in enumerate(chunks)]

    def _rows(self, n):
        """Rows of a batch of ``n`` chunks: a power of two, at most the batch size, rounded up to
        a multiple of the model's devices (devices=: each gets an equal share of the rows)."""
        rows = buckets.pow2(n, getattr(self, "_rows_cap", self.batch_size),
                            getattr(self, "_rows_least", 1))
        return buckets.multiple(rows, row_multiple(self.model))

    def _feed(self, chunks):
        items = [c[self.featurizer.key] for c in chunks]
        return self.batch_feed(items, self._rows(len(items)))

    def batch_feed(self, items, rows):
        """The model's feed of featurizer ``items`` padded to ``rows`` rows, in the dtypes of the
        model's inputs (inference batches and training.batches both make theirs with it)."""
        feed = self.featurizer.batch(items, rows, self._inputs, self.task)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _run_model(self, feed, model=None, rng_seed=None):
        """The graph's outputs (NumPy) for ``feed``; the first call compiles (engine/compiled.py),
        later ones reuse the compiled function, which compiles each new padded shape once. The
        function is shared per model (shared.py), so pipelines over one model share it and it
        dies with the model."""
        model = self.model if model is None else model
        fn = self._compiled(model)
        return {k: np.asarray(v) for k, v in fn(feed, rng_seed=rng_seed).items()}

    def _compiled(self, model):
        # made empty, not with an example, which would run this batch once more
        return shared.per_model(model, "compiled",
                                lambda: compile(model, cache_size=self.cache_size))

    def output(self, outputs, *names):
        """The first graph output present among ``names``, else the graph's first output."""
        for name in names:
            if name in outputs:
                return outputs[name]
        return outputs[self.model.outputs[0].name]

    def label(self, index):
        """config.json's id2label name of class ``index`` (keys are strings in the file)."""
        id2label = self.config.get("id2label") or {}
        return id2label.get(str(int(index)), id2label.get(int(index), f"LABEL_{int(index)}"))


def generation_options(generate_kwargs, max_new_tokens, options):
    """transformers' image pipelines' options for generate: ``generate_kwargs`` merged with
    ``max_new_tokens`` and the keyword options; one given twice is refused, as transformers
    refuses it."""
    if generate_kwargs is not None and not isinstance(generate_kwargs, dict):
        raise PipelineError(f"generate_kwargs must be a dict, got {generate_kwargs!r:.80}")
    given = dict(generate_kwargs or {})
    if max_new_tokens is not None:
        if "max_new_tokens" in given:  # transformers' own refusal
            raise PipelineError("max_new_tokens is given both as an argument and inside "
                                "generate_kwargs: give it once")
        given["max_new_tokens"] = max_new_tokens
    twice = sorted(set(given) & set(options))
    if twice:
        raise PipelineError(f"{twice} given both as keywords and inside generate_kwargs: "
                            "give each once")
    return {**given, **options}


ON_ERROR = ("raise", "return")


class _Indexed:
    """Iterates ``items[0]``, ``items[1]``, ... ``items[len - 1]``; has their length (for the
    progress bar)."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return (self.items[i] for i in range(len(self.items)))


def _ran(chunks):
    """Whether an input's preprocessing gave chunks (else it gave its error: on_error="return")."""
    return not isinstance(chunks, TransmuterError)

