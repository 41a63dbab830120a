"""zero-shot-object-detection (OWL-ViT, OWLv2) against the transformers pipeline outputs recorded
with the fixtures (references/pipeline_zero-shot-object-detection.json, on
references/image_*.png), on JAX and MLX; a batch equals one by one; bad inputs are clear errors."""

import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference, pipeline_references
from .test_pipelines_text import assert_close
from .test_pipelines_vision import calls, images
from .test_pipelines_vision import pipe as vision_pipe

TASK = "zero-shot-object-detection"
# OWL-ViT / OWLv2 fixtures: Grounding DINO's own rules (one prompt per label run alone, phrase
# labels) are tests/test_pipelines_grounding_dino.py's
CASES = [f for f, _ in pipeline_references({TASK}) if f != "grounding-dino"]
# Tiny random models: XLA's float32 sums in another order than PyTorch's move scores by ~1e-7
# (and transformers runs each label alone where we run an image's labels together); the design's
# bound of 1e-4 leaves headroom. Labels and integer boxes must be identical: the references' scores
# are at least 2e-5 apart, so no near-tie can reorder them.
TOL = 1e-4


def pipe(fixture, backend="jax"):
    return vision_pipe(fixture, TASK, backend)


def test_both_families_are_recorded():
    assert set(CASES) >= {"owlvit", "owlv2"}


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture", CASES)
def test_matches_recorded_pipeline(fixture, backend):
    ref = pipeline_reference(fixture, TASK)
    p = pipe(fixture, backend)
    for kwargs, outputs in calls(ref):
        for i, (image, want) in enumerate(zip(images(fixture, ref), outputs)):
            assert_close(p(image, **kwargs), want, TOL, where=f"{kwargs} image {i}")


@pytest.mark.parametrize("fixture", CASES)
def test_batch_equals_one_by_one(fixture):
    ref = pipeline_reference(fixture, TASK)
    p = pipe(fixture)
    inputs = images(fixture, ref) * 2
    kwargs = calls(ref)[0][0]
    one = [p(x, **kwargs) for x in inputs]
    assert_close(p(inputs, batch_size=4, **kwargs), one, 1e-5)
    assert_close(list(p(iter(inputs), batch_size=3, **kwargs)), one, 1e-5)
    labels = kwargs["candidate_labels"]
    dicts = [{"image": x, "candidate_labels": labels} for x in inputs]
    rest = {k: v for k, v in kwargs.items() if k != "candidate_labels"}
    assert_close(p(dicts, batch_size=4, **rest), one, 1e-5)


@pytest.mark.parametrize("fixture", CASES)
def test_each_image_its_own_labels(fixture):
    """A batch mixing label sets (dicts, or one label list per image as transformers zips them)
    gives what each image gives alone."""
    p = pipe(fixture)
    a, b = (str(ROOT / fixture / f"references/image_{i}.png") for i in range(2))
    first, second = ["a cat", "a dog"], ["the red square"]
    want = [p(a, candidate_labels=first, threshold=0.0), p(b, candidate_labels=second,
                                                           threshold=0.0)]
    got = p([{"image": a, "candidate_labels": first}, {"image": b, "candidate_labels": second}],
            threshold=0.0, batch_size=2)
    assert_close(got, want, 1e-5)
    assert_close(p([a, b], candidate_labels=[first, second], threshold=0.0), want, 1e-5)
    assert {r["label"] for r in want[1]} == {"the red square"}


@pytest.mark.parametrize("fixture", CASES)
def test_labels_together_equal_labels_alone(fixture):
    """transformers runs each label as its own forward; one forward with all the labels as text
    queries (padded to the longest) gives the same boxes and scores."""
    p = pipe(fixture)
    image = str(ROOT / fixture / "references/image_0.png")
    labels = ["a cat", "the red square", "dog"]
    alone = sorted((r for x in labels for r in p(image, candidate_labels=[x], threshold=0.0)),
                   key=lambda r: -r["score"])
    assert_close(p(image, candidate_labels=labels, threshold=0.0), alone, 1e-5)


def test_threshold_top_k_and_label_string():
    p = pipe("owlvit")
    image = str(ROOT / "owlvit/references/image_0.png")
    every = p(image, candidate_labels=["a cat", "a dog"], threshold=0.0)
    assert len(every) == 2 * 16 and [r["score"] for r in every] == sorted(
        (r["score"] for r in every), reverse=True)
    assert p(image, candidate_labels=["a cat", "a dog"], threshold=0.0, top_k=3) == every[:3]
    assert p(image, candidate_labels=["a cat", "a dog"], threshold=0.0, top_k=0) == every
    assert p(image, candidate_labels=["a cat", "a dog"], threshold=0.5) == [
        r for r in every if r["score"] > 0.5]
    # transformers splits a string on commas (without stripping) and takes text_queries= too
    assert p(image, candidate_labels="a cat,a dog", threshold=0.0) == every
    assert p(image, text_queries=["a cat", "a dog"], threshold=0.0) == every
    assert p({"image": image, "candidate_labels": ["a cat", "a dog"]}, threshold=0.0) == every
    assert all(isinstance(v, int) for r in every for v in r["box"].values())


@pytest.mark.parametrize("call,match", [
    (lambda p, x: p(x), "candidate_labels"),
    (lambda p, x: p({"image": x}), "candidate_labels"),
    (lambda p, x: p(x, candidate_labels=[]), "candidate_labels"),
    (lambda p, x: p(x, candidate_labels=["a", 3]), "candidate_labels"),
    (lambda p, x: p({"picture": x, "candidate_labels": ["a"]}), "'image'"),
    (lambda p, x: p(12, candidate_labels=["a"]), "int"),
    (lambda p, x: p({"image": 12, "candidate_labels": ["a"]}), "int"),
    (lambda p, x: p(b"not an image", candidate_labels=["a"]), "bytes"),
    (lambda p, x: p("no/such/file.png", candidate_labels=["a"]), "file"),
    (lambda p, x: p(x, candidate_labels=["a"], threshold="high"), "threshold"),
    (lambda p, x: p(x, candidate_labels=["a"], top_k=-1), "top_k"),
    (lambda p, x: p(x, candidate_labels=["a"], nms=0.3), "nms"),
    (lambda p, x: p([x, x], candidate_labels=[["a"]]), "label lists"),
    (lambda p, x: p(x, candidate_labels=["cat " * 20]), "tokens"),
], ids=["no-labels", "dict-no-labels", "empty-labels", "non-string-label", "dict-no-image",
        "int", "dict-int", "bytes", "missing-file", "threshold", "top_k", "unknown-option",
        "label-lists-count", "long-label"])
def test_bad_inputs_are_clear_errors(call, match):
    image = str(ROOT / "owlvit/references/image_0.png")
    with pytest.raises((InputError, PipelineError), match=match):
        call(pipe("owlvit"), image)


def test_a_detr_graph_is_refused():
    with pytest.raises(PipelineError, match="OWL-ViT"):
        transmuter.pipeline(TASK, ROOT / "detr", tokenizer=ROOT / "owlvit")
