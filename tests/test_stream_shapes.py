"""A stream meets a bounded, known set of shapes (buckets.py: streams): after its first windows
it compiles nothing more, however long it runs, and its results equal one-by-one calls."""

import itertools

import numpy as np

import transmuter
from transmuter.pipelines import shared

from .fixtures import ROOT

WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()


def sentences(n):
    """``n`` sentences of 1 to 24 words, every length in each 24 in a row (so the first
    window meets every length bucket the stream will)."""
    for i in range(n):
        k = 1 + (i * 7) % 24
        yield " ".join(itertools.islice(itertools.cycle(WORDS[i % 5:]), k))


def compiles(pipe):
    return shared.of(pipe.model)["compiled"].cache_info().misses


def test_a_stream_compiles_nothing_after_its_first_windows():
    # batch 8, 16 batches read ahead: a window of 128 inputs. 150 inputs end on 22 (a 6-row
    # call, 8 rows as powers of two), 1,500 on 92 (a 4-row one: a new shape, before)
    pipe = transmuter.pipeline("text-embedding", ROOT / "bert-sentence-transformers",
                               batch_size=8)
    short = list(pipe(sentences(150)))
    after_short = compiles(pipe)
    long = list(pipe(sentences(1500)))
    assert compiles(pipe) == after_short
    assert len(long) == 1500
    # the padded rows change no row's result: float32 sums over the same tokens
    alone = [pipe(s) for s in itertools.islice(sentences(150), 0, 150, 37)]
    np.testing.assert_allclose(np.array(short[::37]), np.array(alone), rtol=1e-5, atol=1e-6)
