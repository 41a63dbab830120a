"""Rent or buy a length bucket (buckets.pad_or_compile): rows of a bucket this pipeline has not
compiled pad to a longer compiled length until that padding would cost a compile, then their
bucket compiles. A first call on mixed sentences compiles fewer shapes, a service's short
requests after a long one pad a few times and then compile, and the results are those of the
rows run alone."""

import itertools
import math

import numpy as np
import pytest

import transmuter
from transmuter import buckets
from transmuter.pipelines import shared

from .fixtures import ROOT

WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()
# 40 sentences of 1 to 60 words: 5 length buckets among the first rows of 5 sorted batches of 8
TEXTS = [" ".join(itertools.islice(itertools.cycle(WORDS[i % 5:]), 1 + (i * 13) % 60))
         for i in range(40)]


def test_a_first_window_compiles_fewer_lengths_than_its_buckets():
    sizes = [64] * 3 + [48] * 2 + [32] * 4 + [16] * 5
    runs, waste = buckets.pad_or_compile(sizes, (), {}, 200)
    # 64 compiles (nothing holds it). The rest, in padded tokens: all pad to 64, 2 x 16 + 4 x 32
    # + 5 x 48 = 400; 16 compiles, 32 + 128 + 200 = 360; 32 compiles and 16 pads to it,
    # 32 + 200 + 5 x 16 = 312 (the least); 48 compiles, 200 + 4 x 16 + 5 x 32 = 424
    assert runs == {64: 64, 48: 64, 32: 32, 16: 32}
    assert waste == {48: 32, 16: 80}  # what the rows that padded cost
    # per bucket, the same window would have compiled 16 (5 x 48 >= 200) and padded 32 to 64
    # a length bought earlier in the window holds the shorter rows: 16 pads to 32, not 64
    runs, _ = buckets.pad_or_compile([32] * 4 + [16] * 2, {64}, {}, 100)
    assert runs == {32: 32, 16: 32}


def test_the_window_plan_costs_least():
    """Against every choice of lengths to compile, on random windows."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = list(rng.choice([16, 20, 24, 32, 48, 64, 96, 128], rng.integers(1, 30)))
        compiled = set(rng.choice([16, 32, 64, 128], rng.integers(0, 3), replace=False))
        waste = {int(s): int(rng.integers(0, 150)) for s in set(sizes) if rng.random() < 0.3}
        cost = int(rng.integers(1, 400))
        runs, _ = buckets.pad_or_compile(sizes, compiled, waste, cost)
        buckets_met = sorted(set(sizes))

        def tokens(bought):
            have = compiled | set(bought)
            if any(not [n for n in have if n >= s] for s in buckets_met):
                return math.inf  # a longest bucket nothing holds must compile
            pad = sum(min(n for n in have if n >= s) - s for s in sizes)
            return pad + sum(max(cost - waste.get(s, 0), 0) for s in bought
                             if s not in compiled)

        best = min(tokens(c) for r in range(len(buckets_met) + 1)
                   for c in itertools.combinations(buckets_met, r))
        bought = {s for s, n in runs.items() if n == s}
        assert all(runs[s] == min(n for n in compiled | bought if n >= s) for s in runs)
        assert tokens(bought) == best


def test_compiled_lengths_cost_nothing():
    runs, waste = buckets.pad_or_compile([16] * 100 + [128], {16, 128}, {20: 7}, 10)
    assert runs == {16: 16, 128: 128} and waste == {20: 7}
    # nothing compiled holds the longest: it compiles, whatever the cost
    assert buckets.pad_or_compile([256], {128}, {}, 1e9)[0] == {256: 256}


@pytest.mark.parametrize("cost", [100, 500, 3900])
def test_one_row_calls_of_a_short_bucket_pad_until_it_would_cost_a_compile(cost):
    compiled, waste, padded = {128}, {}, 0
    for call in range(60):
        runs, waste = buckets.pad_or_compile([16], compiled, waste, cost)
        if runs[16] == 16:
            compiled.add(16)
            break
        assert runs[16] == 128
        padded += 1
        assert waste == {16: 112 * padded}  # the waste adds up over calls
    # each call pads 112 tokens: it pads while 112 x calls stays below the cost
    assert padded == math.ceil(cost / 112) - 1
    # ski rental: padding then compiling costs under twice the better of always padding the
    # 60 calls and compiling at once
    assert padded * 112 + cost <= 2 * min(60 * 112, cost)


def _counted(pipe):
    """The (rows, length) of each graph call ``pipe`` makes."""
    shapes, feed = [], pipe.batch_feed

    def batch_feed(items, rows):
        out = feed(items, rows)
        shapes.append(out["input_ids"].shape)
        return out

    pipe.batch_feed = batch_feed
    return shapes


def compiles(pipe):
    return shared.of(pipe.model)["compiled"].cache_info().misses


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_first_call_on_mixed_sentences_compiles_one_length(backend):
    if backend == "mlx":
        pytest.importorskip("mlx.core")
    pipe = transmuter.pipeline("feature-extraction", ROOT / "bert", batch_size=8,
                               compile_cache=False, backend=backend)
    shapes = _counted(pipe)
    out = pipe(TEXTS)
    # each sorted batch of 8 padded to its first row's bucket: 5 shapes before; the tiny
    # model's compile (745,000 tokens) costs more than any padding here: one length
    buckets_met = {pipe.featurizer.bucket(pipe.tokenizer.encode(t)) for t in TEXTS}
    assert len(buckets_met) > 5 and set(shapes) == {(8, max(buckets_met))}
    if backend == "jax":
        assert compiles(pipe) == 1
    # rows run alone (one row each, padded to the compiled length too) give the same: the
    # padded positions are masked; float32 sums over the same tokens, ~1e-7
    for i in (0, 7, 21, 39):
        np.testing.assert_allclose(np.array(out[i]), np.array(pipe(TEXTS[i])),
                                   rtol=1e-5, atol=1e-6)


def test_a_length_compiled_at_other_rows_is_not_rented():
    """One sentence after a batch: 1 x its bucket, not 1 x the batch's length (which would
    compile as well, and pad)."""
    pipe = transmuter.pipeline("feature-extraction", ROOT / "bert", batch_size=8,
                               compile_cache=False)
    shapes = _counted(pipe)
    pipe(TEXTS[:8])
    assert len(set(shapes)) == 1 and shapes[0][0] == 8
    pipe("hi")
    assert shapes[-1] == (1, 16) and shapes[0][1] > 16


def test_user_buckets_are_kept():
    pipe = transmuter.pipeline("feature-extraction", ROOT / "bert", batch_size=8,
                               sequence_length=[16, 32, 64, 128, 256])
    shapes = _counted(pipe)
    pipe(TEXTS)
    assert len({length for _, length in shapes}) > 1  # each batch at its own bucket


def test_a_service_pads_short_requests_a_few_times_then_compiles_them(monkeypatch):
    monkeypatch.setattr(buckets, "COMPILE_COST_NODE_WEIGHT_TOKENS", 1e4)
    pipe = transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification")
    cost = pipe._compile_cost()
    shapes = _counted(pipe)
    long = " ".join(WORDS * 4)
    pipe(long)
    top = shapes[-1][1]
    short = top - 16  # "hi" is 16 tokens' bucket: each padded call wastes this many
    assert 0 < cost < 10 * short
    calls = [pipe("hi") for _ in range(math.ceil(cost / short) + 2)]
    padded = math.ceil(cost / short) - 1
    assert [s[1] for s in shapes[1:]] == [top] * padded + [16] * (len(calls) - padded)
    assert all(c == calls[0] for c in calls)  # the same label at 16 as padded to ``top``


def test_a_warmed_pipeline_runs_each_bucket_at_its_own_length():
    pipe = transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification",
                               batch_size=2)
    long = " ".join(WORDS)  # 34 tokens: bucket 40
    pipe.warmup(["hi", long], batch_sizes=[1], progress=False)  # 1 x 16, 20, ... 40
    shapes, before = _counted(pipe), compiles(pipe)
    pipe(long)
    pipe("hi")  # warmup compiled 16: it is not padded to the longer length just run
    top = pipe.featurizer.bucket(pipe.tokenizer.encode(long))
    assert [length for _, length in shapes] == [top, 16] and top > 16
    assert compiles(pipe) == before
