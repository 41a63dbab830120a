"""Pipelines and compiled functions called from many threads at once: every result equals the
sequential one (shared compiled caches, tokenizers, generators and label embeddings are used
concurrently by 8 threads over mixed inputs and options)."""

import concurrent.futures

import numpy as np
import pytest

import transmuter

from .fixtures import ROOT

THREADS = 8


def _pipe(task, fixture, **options):
    return transmuter.pipeline(task, ROOT / fixture, **options)


def _image(i):
    return str(ROOT / f"vit/references/image_{i % 2}.png")


# (name, make the callable, the inputs, options per call); each input runs with each option set
SCENARIOS = {
    "embedding, mixed lengths": (
        lambda: _pipe("feature-extraction", "bert"),
        ["a cat", "a much longer sentence about a dog and its ball " * 3, "x"], [{}]),
    "classification, top_k varies": (
        lambda: _pipe("text-classification", "bert-sequence-classification"),
        ["I love it", "I hate it", "meh"], [{}, {"top_k": None}, {"top_k": 2}]),
    "token classification, aggregation varies": (
        lambda: _pipe("token-classification", "bert-token-classification"),
        ["Anna lives in Paris", "Bob"], [{}, {"aggregation_strategy": "simple"}]),
    "question answering": (
        lambda: _pipe("question-answering", "bert-question-answering"),
        [{"question": "Who?", "context": "Anna went home."},
         {"question": "Where?", "context": "Bob lives in a small town by the sea."}], [{}]),
    "zero-shot classification, labels vary": (
        lambda: _pipe("zero-shot-classification", "bert-nli"),
        ["the match was great"], [{"candidate_labels": ["sport", "food"]},
                                  {"candidate_labels": ["politics", "music", "art"]}]),
    "image classification": (
        lambda: _pipe("image-classification", "vit"), [_image(0), _image(1)], [{}, {"top_k": 1}]),
    "greedy generation, lengths vary": (
        lambda: _pipe("text-generation", "gpt2"),
        ["Hello", "Once upon a time there"], [{"max_new_tokens": 3}, {"max_new_tokens": 5}]),
    "seeded sampling": (
        lambda: _pipe("text-generation", "gpt2"), ["Hello"],
        [{"max_new_tokens": 4, "do_sample": True, "seed": s} for s in (1, 2)]),
}


def _plain(value):
    """Results as comparable plain values (arrays to nested lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return np.asarray(value).tolist()
    return value


@pytest.mark.parametrize("name", SCENARIOS)
def test_threads_give_the_sequential_results(name):
    make, inputs, options = SCENARIOS[name]
    pipe = make()
    calls = [(x, o) for x in inputs for o in options] * 3  # each call several times
    want = [_plain(pipe(x, **o)) for x, o in calls]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(lambda call: _plain(pipe(call[0], **call[1])), calls))
    # exact: the same compiled shapes on the same inputs give the same bits in any thread
    assert got == want


def test_one_compiled_function_from_threads():
    model = transmuter.load(str(ROOT / "bert/onnx/model.onnx"))
    feeds = [{"input_ids": np.full((1, n), 101 + n, np.int64),
              "attention_mask": np.ones((1, n), np.int64),
              "token_type_ids": np.zeros((1, n), np.int64)} for n in (3, 5, 8, 3, 5)]
    fn = transmuter.compile(model, feeds[0], cache_size=2)  # evictions while threads compile
    want = [_plain(fn(f)) for f in feeds]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(lambda f: _plain(fn(f)), feeds * 4))
    assert got == want * 4
