"""zero-shot-entity-recognition on the tiny GLiNER fixtures (tests/support/families_gliner.py)
against what the gliner package's ``predict_entities`` gave on the PyTorch model, recorded in
references/pipeline_zero-shot-entity-recognition.json; plus batching and bad inputs.

The graph itself is checked against onnxruntime by tests/test_models.py (manifest.json)."""

import json

import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError

from .fixtures import ROOT

FIXTURES = ["gliner-span", "gliner-token"]
TASK = "zero-shot-entity-recognition"
# The graph runs in float32 under XLA with another order of sums than PyTorch; on these models
# the logits move by ~1e-5 (they are scaled up so the scores spread over (0, 1)), a score by
# ~2e-6: 1e-4 (the design's bound) leaves headroom. The generator checked that the recorded spans
# do not change when the logits move by 1e-4, so the spans and labels must match exactly.
TOL = 1e-4
# Batched vs one-by-one: the same graph with other rows beside (rows never mix).
BATCH_TOL = 1e-5
KEYS = ["start", "end", "text", "label", "score"]  # gliner's entity dict, in its order


@pytest.fixture(scope="module")
def pipes():
    made = {}

    def get(fixture):
        if fixture not in made:
            folder = ROOT / fixture
            # one padded length and batches of two: every call below shares a few shapes, so
            # the graph compiles a few times only (each batch shape breaks into ~8 segments)
            made[fixture] = transmuter.pipeline(TASK, folder, batch_size=2, sequence_length=96)
        return made[fixture]

    return get


def reference(fixture):
    return json.loads((ROOT / fixture / "references" / f"pipeline_{TASK}.json").read_text())


def assert_entities(got, want, tol, where):
    assert isinstance(got, list), f"{where}: {type(got).__name__} is not a list"
    spans = [(e["start"], e["end"], e["text"], e["label"]) for e in got]
    assert spans == [(e["start"], e["end"], e["text"], e["label"]) for e in want], where
    for g, w in zip(got, want):
        assert list(g) == KEYS, f"{where}: keys {list(g)}"
        assert isinstance(g["score"], float)
        assert abs(g["score"] - w["score"]) <= tol, f"{where}: {g} vs {w}"


@pytest.mark.parametrize("fixture", FIXTURES)
def test_matches_gliner(pipes, fixture):
    pipe = pipes(fixture)
    calls = reference(fixture)["calls"]
    assert any(out for c in calls for out in c["outputs"]), "the references hold no entity"
    for n, call in enumerate(calls):
        got = pipe(call["inputs"], **call["call_kwargs"])  # batched, as a list
        for i, (g, w) in enumerate(zip(got, call["outputs"], strict=True)):
            assert_entities(g, w, TOL, f"{fixture} call {n} {call['call_kwargs']} input {i}")


@pytest.mark.parametrize("fixture", FIXTURES)
def test_batched_equals_one_by_one(pipes, fixture):
    pipe = pipes(fixture)
    call = reference(fixture)["calls"]
    texts = call[0]["inputs"][:3]
    label_sets = [call[0]["call_kwargs"]["labels"], ["city", "date"], ["person"]]
    one = [pipe(t, labels=ls, threshold=0.3) for t, ls in zip(texts, label_sets)]
    batched = pipe(texts, labels=label_sets, threshold=0.3)  # gliner's per-text label lists
    dicts = pipe([{"text": t, "labels": ls} for t, ls in zip(texts, label_sets)], threshold=0.3,
                 batch_size=1)
    lazy = pipe(iter([{"text": t, "labels": ls} for t, ls in zip(texts, label_sets)]),
                threshold=0.3)
    assert not isinstance(lazy, list)
    for other in (batched, dicts, list(lazy)):
        for i, (g, w) in enumerate(zip(other, one, strict=True)):
            assert_entities(g, w, BATCH_TOL, f"{fixture} input {i}")
    assert any(one), "no entity to compare"
    assert pipe([], labels=["person"]) == []


def test_exact_sizes(pipes):
    """A padded length shorter than the word bucket leaves no room for the balancing row: the
    batch then runs at the graph's own sizes, with the same result."""
    pipe = transmuter.pipeline(TASK, pipes("gliner-span").model, config=ROOT / "gliner-span",
                               sequence_length=16)
    call = reference("gliner-span")["calls"][7]
    text, want = call["inputs"][1], call["outputs"][1]
    chunks = list(pipe.preprocess(text, labels=call["call_kwargs"]["labels"]))
    feed = pipe._feed_gliner(chunks)
    assert feed["text_lengths"].tolist() == [[chunks[0]["num_words"]]]  # no balancing row
    assert want
    assert_entities(pipe(text, **call["call_kwargs"]), want, TOL, "gliner-span unbalanced")


def test_bad_inputs(pipes):
    pipe = pipes("gliner-span")
    text = "My name is Sarah and I live in London."
    with pytest.raises(PipelineError, match="needs labels"):
        pipe(text)
    with pytest.raises(PipelineError, match="labels is empty"):
        pipe(text, labels=[])
    with pytest.raises(PipelineError, match="non-empty string"):
        pipe(text, labels=["person", ""])
    with pytest.raises(PipelineError, match="non-empty string"):
        pipe(text, labels=["person", 3])
    with pytest.raises(InputError, match="empty string"):
        pipe("  ", labels=["person"])
    with pytest.raises(InputError, match="must be a string"):
        pipe([text, 42], labels=["person"])
    with pytest.raises(PipelineError, match="threshold"):
        pipe(text, labels=["person"], threshold=1.5)
    with pytest.raises(PipelineError, match="one per input"):
        pipe([text], labels=[["person"], ["city"]])
    with pytest.raises(PipelineError, match="'text' key"):
        pipe({"labels": ["person"]})
    with pytest.raises(PipelineError, match="no option"):
        pipe(text, labels=["person"], top_k=3)


def test_needs_a_gliner_model():
    with pytest.raises(PipelineError, match="gliner_config.json"):
        transmuter.pipeline(TASK, ROOT / "bert")
