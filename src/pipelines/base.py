"""The Pipeline contract: ``_sanitize_parameters`` -> ``preprocess`` -> ``_forward`` -> ``postprocess``.

    pipe = transmuter.pipeline("fill-mask", "tests/fixtures/bert-fill-mask")
    pipe("Paris is the [MASK] of France.")       # one input: one result
    pipe(["...", "..."])                          # a list: a list of results
    for result in pipe(texts_from_files()):       # any other iterable: a lazy iterator
        ...

``preprocess`` runs on the host (NumPy, the tokenizer) and yields one or more *chunks* per input
(QA windows, zero-shot labels); ``_forward`` is the only code that touches the model: it pads the
chunks of a batch to a few compiled lengths (``sequence_length`` buckets) and row counts, and calls
the compiled graph; ``postprocess`` turns the chunks of one input back into transformers' output
(plain dicts, lists, floats). Chunks of several inputs share a batch, so ``batch_size`` counts rows.
"""

import itertools
import weakref

import numpy as np

from ..errors import InputError, TransmuterError

DEFAULT_SEQUENCE_LENGTHS = (32, 128, 512)
# Model types whose position ids start after the padding index (RoBERTa's create_position_ids):
# max_position_embeddings counts pad_token_id + 1 positions no token can use.
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer", "mpnet", "data2vec-text",
                     "xlm-roberta-xl", "roberta-prelayernorm", "bart", "mbart", "ibert"}
# One compiled function per loaded model, shared by every pipeline over it (e.g. a cross-encoder
# used for text-ranking and text-classification compiles each shape once).
_COMPILED = weakref.WeakKeyDictionary()


class PipelineError(TransmuterError, ValueError):
    """A pipeline was given an input or option it cannot use, or a model it cannot run."""


class Pipeline:
    """Base class: a task sets ``task``, and gives ``_sanitize_parameters``, ``preprocess`` and
    ``postprocess`` (and ``_forward`` when the model's outputs need more than slicing rows)."""

    task = None
    # Encoder chunks are read ahead (this many batches) and sorted by length before batching:
    # padding then costs little; results still come in input order, each after its window ran.
    # A list is wholly in memory and returns at once: it is read further ahead (2,000 mixed
    # sentences at batch 32: padded tokens 1.89x -> 1.76x the real ones with [32, 128, 256]).
    lookahead_batches = 16
    list_lookahead_batches = 64

    def __init__(self, model, tokenizer, config=None, *, repo=None, batch_size=8,
                 sequence_length=None, progress=False, **defaults):
        self.model, self.tokenizer, self.repo = model, tokenizer, repo
        self.config = dict(config or {})
        if not isinstance(batch_size, int) or batch_size < 1:
            raise PipelineError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size, self.progress = batch_size, progress
        self.max_length = self._max_length()
        self.sequence_lengths = _buckets(sequence_length, self.max_length)
        self._inputs = {v.name: v for v in model.inputs}
        self._fn = None
        self._defaults = defaults
        self._sanitize_parameters(**defaults)  # bad options fail at construction, not first call

    def __repr__(self):
        return (f"{type(self).__name__}(task={self.task!r}, batch_size={self.batch_size}, "
                f"sequence_lengths={list(self.sequence_lengths)})")

    # --- what a task gives ---------------------------------------------------------------------

    def _sanitize_parameters(self, **kwargs):
        """Split call options into (preprocess, forward, postprocess) keyword dicts."""
        if kwargs:
            raise PipelineError(f"{self.task} takes no option(s) {sorted(kwargs)}")
        return {}, {}, {}

    def preprocess(self, inputs, **params):
        """Yield the chunks (dicts with an ``encoding``) of one input."""
        raise NotImplementedError

    def postprocess(self, outputs, **params):
        """The result of one input from its chunks' outputs (chunk dict + graph outputs)."""
        raise NotImplementedError

    def _is_single(self, inputs):
        return isinstance(inputs, (str, dict))

    # --- calling -------------------------------------------------------------------------------

    def __call__(self, inputs, *, batch_size=None, progress=None, **kwargs):
        params = self._sanitize_parameters(**{**self._defaults, **kwargs})
        batch_size = self.batch_size if batch_size is None else batch_size
        progress = self.progress if progress is None else progress
        if self._is_single(inputs):
            return next(self._iterate([inputs], params, batch_size, False))
        if isinstance(inputs, (list, tuple)):
            return list(self._iterate(inputs, params, batch_size, progress,
                                      self.list_lookahead_batches))
        if hasattr(inputs, "__iter__") and not isinstance(inputs, (bytes, np.ndarray)):
            return self._iterate(inputs, params, batch_size, progress)
        raise PipelineError(f"{self.task} takes {self._input_kind()}, a list of them, or an "
                            f"iterable of them; got {type(inputs).__name__}: {inputs!r:.80}")

    def _input_kind(self):
        return "a string"

    def _iterate(self, inputs, params, batch_size, progress, lookahead=None):
        """Results in input order. Preprocess reads ahead ``lookahead`` (default
        ``lookahead_batches``) batches of chunks; those are run longest first, so each batch pads
        to lengths close to its own (as sentence-transformers' ``encode`` sorts its input), then
        each input's result is yielded."""
        pre, fwd, post = params
        lookahead = self.lookahead_batches if lookahead is None else lookahead
        results = self._results(iter(inputs), pre, fwd, post, batch_size, lookahead)
        if progress:
            from tqdm.auto import tqdm
            total = len(inputs) if hasattr(inputs, "__len__") else None
            results = iter(tqdm(results, total=total, desc=self.task, unit="input"))
        return results

    def _results(self, items, pre, fwd, post, batch_size, lookahead):
        window = batch_size
        pending, queued = [], 0
        for item in items:
            chunks = list(self.preprocess(item, **pre))
            if not pending and chunks and _sortable(chunks[0]):
                window = batch_size * lookahead
            pending.append(chunks)
            queued += len(chunks)
            if queued >= window:
                yield from self._flush(pending, fwd, post, batch_size)
                pending, queued = [], 0
        if pending:
            yield from self._flush(pending, fwd, post, batch_size)

    def _flush(self, pending, fwd, post, batch_size):
        flat = list(itertools.chain.from_iterable(pending))
        self._rows_cap = batch_size  # rows of a batch are padded to a power of two, up to this
        order = list(range(len(flat)))
        if all(_sortable(c) for c in flat):  # longest first; stable, so ties keep input order
            order.sort(key=lambda i: -len(flat[i]["encoding"].ids))
        outputs = [None] * len(flat)
        for start in range(0, len(flat), batch_size):
            rows = order[start:start + batch_size]
            for i, out in zip(rows, self._forward([flat[i] for i in rows], **fwd)):
                outputs[i] = out
        at = 0
        for chunks in pending:
            yield self.postprocess(outputs[at:at + len(chunks)], **post)
            at += len(chunks)

    # --- the model -----------------------------------------------------------------------------

    def _forward(self, chunks, **params):
        """Run the graph on the padded chunks; each chunk's dict gains its rows of the outputs."""
        out = self._run_model(self._feed([c["encoding"] for c in chunks]))
        return [dict(chunk, **{k: v[i] for k, v in out.items()}) for i, chunk in enumerate(chunks)]

    def _feed(self, encodings):
        longest = max(len(e.ids) for e in encodings)
        length = next((b for b in self.sequence_lengths if b >= longest), longest)
        cap = max(len(encodings), getattr(self, "_rows_cap", self.batch_size))
        rows = min(1 << (len(encodings) - 1).bit_length(), cap)
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in self._inputs]
        missing = [n for n in self._inputs if n not in names]
        if missing:
            raise PipelineError(f"The model takes input(s) {missing} that a {self.task} pipeline "
                                "does not make; it needs input_ids, attention_mask, "
                                "token_type_ids")
        feed = self.tokenizer.pad(encodings, length, names, rows=rows)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _run_model(self, feed):
        """The graph's outputs (NumPy) for ``feed``; the first call compiles (transmuter.compile),
        later ones reuse the compiled function, which compiles each new padded shape once."""
        from .. import compile as compile_model
        if self._fn is None:
            self._fn = _COMPILED.get(self.model)
        if self._fn is None:
            self._fn = _COMPILED[self.model] = compile_model(self.model, feed, cache_size=32)
        return {k: np.asarray(v) for k, v in self._fn(feed).items()}

    def output(self, outputs, *names):
        """The first graph output present among ``names``, else the graph's first output."""
        for name in names:
            if name in outputs:
                return outputs[name]
        return outputs[self.model.outputs[0].name]

    def _max_length(self):
        """Longest sequence the model takes: tokenizer's model_max_length, capped by the
        position embeddings of config.json."""
        limits = [self.tokenizer.model_max_length]
        positions = self.config.get("max_position_embeddings")
        if positions:
            if self.config.get("model_type") in _OFFSET_POSITIONS:
                positions -= (self.config.get("pad_token_id") or 0) + 1
            limits.append(positions)
        limits = [x for x in limits if x]
        return min(limits) if limits else max(DEFAULT_SEQUENCE_LENGTHS)

    def label(self, index):
        """config.json's id2label name of class ``index`` (keys are strings in the file)."""
        id2label = self.config.get("id2label") or {}
        return id2label.get(str(int(index)), id2label.get(int(index), f"LABEL_{int(index)}"))


def _buckets(sequence_length, max_length):
    """Sorted padded lengths: the given ones (an int or a list), capped at ``max_length``."""
    given = DEFAULT_SEQUENCE_LENGTHS if sequence_length is None else sequence_length
    given = [given] if isinstance(given, int) else list(given)
    if not given or any(not isinstance(b, int) or b < 1 for b in given):
        raise PipelineError(f"sequence_length must be a positive int or a list of them, got "
                            f"{sequence_length!r}")
    return tuple(sorted({min(b, max_length) for b in given}))


def _sortable(chunk):
    """Encoder chunks (a tokenized ``encoding``) are rows that do not depend on each other, so
    they may be batched in any order; generation chunks are not (a seeded sampler draws per row)."""
    return "encoding" in chunk


def check_text(text, what="input"):
    """A clear error for a non-string or an empty string (before the tokenizer sees it)."""
    if not isinstance(text, str):
        raise InputError(f"The {what} must be a string, got {type(text).__name__}: {text!r:.80}")
    if not text.strip():
        raise InputError(f"The {what} is an empty string; give some text")
    return text


def softmax(x, axis=-1):
    x = np.asarray(x, np.float64 if np.asarray(x).dtype == np.float64 else np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x)))
