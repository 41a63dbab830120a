"""``pipe.warmup(examples)``: compile the shapes a workload will meet before it comes, so that a
service or a Docker image build pays the compiles once (JAX's persistent compilation cache
keeps them for the next process: docs/compile-cache.md).

    pipe = transmuter.pipeline("text-embedding", "sentence-transformers/all-MiniLM-L6-v2")
    pipe.warmup(["a sentence like the ones to come"], max_length=128)  # rows x length buckets

Which shapes: each row count a call pads a batch to (buckets.pow2: 1, 2, 4, ... up to
``batch_size``; ``batch_sizes=`` narrows it, [32] for a stream: buckets.py's streams) times
- text pipelines (a tokenizer pads the batches): every length bucket up to ``max_length``
  (default: the bucket of the longest example), made by padding an example, so one example
  covers them all;
- every other task (images, audio, generation): the examples themselves, each run alone at each
  row count, with the call options given (``max_new_tokens=`` runs a decode through the cache
  buffers it will meet).
A progress bar counts the shapes; the labels of those compiled come back."""

from .. import buckets
from ..errors import PipelineError
from .featurizers import TextFeaturizer


def warmup(pipe, examples, batch_sizes=None, max_length=None, progress=True, plain_feed=True,
           **options):
    """The shapes ``pipe`` compiled (labels such as "32x128"), see above; ``plain_feed``: its
    batches are Pipeline._feed's."""
    examples = [examples] if pipe._is_single(examples) else list(examples)
    rows = _rows(pipe.batch_size, batch_sizes)
    if _pads_text(pipe, plain_feed):
        plans = _text_shapes(pipe, examples, rows, max_length, options)
    else:
        if not examples:
            raise PipelineError(f"warmup of {pipe.task} needs example inputs (what the workload "
                                "will send): their shapes are the ones compiled")
        if max_length is not None:
            raise PipelineError(f"max_length= sizes a text pipeline's length buckets; "
                                f"{pipe.task} compiles the examples' own shapes")
        plans = [(f"{r} x example {i}", _run_example(pipe, x, r, options))
                 for r in rows for i, x in enumerate(examples)]
    done = []
    bar = _bar(len(plans), f"warmup {pipe.task}") if progress else None
    for label, call in plans:
        if bar is not None:
            bar.set_postfix_str(f"compiling {label}")
        call()
        done.append(label)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return done


def _rows(batch_size, given):
    if given is None:
        rows = {buckets.pow2(n, batch_size) for n in range(1, batch_size + 1)}
    else:
        given = [given] if isinstance(given, int) else list(given)
        if not given or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                            for b in given):
            raise PipelineError(f"batch_sizes must be a positive int or a list of them, got "
                                f"{given!r}")
        rows = {buckets.pow2(n, batch_size) for n in given}
    return sorted(rows, reverse=True)


def _pads_text(pipe, plain_feed):
    """A pipeline whose calls are its tokenizer's padded batches of independent rows (not a
    generator's prompts, not GLiNER's words: ``plain_feed``, Pipeline._feed), run by its own
    ``_forward``."""
    return isinstance(pipe.featurizer, TextFeaturizer) and not pipe.generates and plain_feed


def _text_shapes(pipe, examples, rows, max_length, options):
    """One call per (rows, length): rows of an example's first chunk, its encoding replaced by
    one of the bucket's length (the example repeated, truncated there)."""
    featurizer, tokenizer = pipe.featurizer, pipe.featurizer.tokenizer
    pre, fwd, _ = pipe._sanitize_parameters(**{**pipe._defaults, **options})
    chunks = [c for x in examples or ["warm up"] for c in pipe.preprocess(x, **pre)]
    if max_length is not None:
        top = buckets.lengths(max_length, featurizer.lengths[-1], "max_length")[-1]
    elif examples:
        top = max(featurizer.size(c[featurizer.key]) for c in chunks)
    else:
        top = featurizer.lengths[-1]
    least = min(featurizer.bucket(c[featurizer.key]) for c in chunks)
    top = buckets.length(top, featurizer.lengths)
    lengths = sorted({n for n in featurizer.lengths if least <= n <= top} | {least},
                     reverse=True)
    text = " ".join(["warm up"] * max(lengths))

    def call(r, n):
        def run():
            chunk = dict(chunks[0], **{featurizer.key: tokenizer.encode(text, max_length=n)})
            pipe._rows_cap, pipe._rows_least = pipe.batch_size, 1
            pipe._forward([chunk] * r, **fwd)
            pipe._new_shapes([(pipe._rows(r), n)])  # compiled: its rows pad to it no longer
        return run

    return [(f"{r}x{n}", call(r, n)) for n in lengths for r in rows]


def _run_example(pipe, example, rows, options):
    return lambda: pipe([example] * rows, batch_size=rows, progress=False, **options)


def _bar(total, desc):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="shape")

