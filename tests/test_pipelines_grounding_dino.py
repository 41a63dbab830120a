"""zero-shot-object-detection on Grounding DINO (the grounding-dino fixture) against what
tests/support/record_grounding_dino.py recorded on the PyTorch model, on JAX and MLX:
transformers' pipeline (each label its own prompt), the processor's grounded route
(text_threshold=: the labels joined into one prompt, phrases as labels), the processor's
outputs; a batch equals one by one; bad inputs are clear errors."""

import json

import numpy as np
import pytest

from transmuter import hub
from transmuter.pipelines import PipelineError
from transmuter.pipelines.vision.grounding_dino import joined
from transmuter.preprocess.image.load import load_image
from transmuter.preprocess.text.tokenizer import Tokenizer

from .fixtures import ROOT, pipeline_reference
from .test_pipelines_text import assert_close
from .test_pipelines_vision import images
from .test_pipelines_vision import pipe as vision_pipe

TASK = "zero-shot-object-detection"
FIXTURE = "grounding-dino"
HUB_FILES = ROOT.parents[2] / "shared" / "hub-files" / "IDEA-Research" / "grounding-dino-tiny"
# Scores: a tiny random model; XLA's and MLX's float32 sums in another order than PyTorch's move
# them by ~1e-6 (measured worst 1.8e-6); the design's bound of 1e-4 leaves headroom. Labels and
# integer boxes must be identical: the references' consecutive scores are at least 2.2e-4 apart,
# so no near-tie can reorder them.
TOL = 1e-4
# Float boxes, as a fraction of the image side they lie along: pred_boxes leave the decoder as
# sigmoid(inverse_sigmoid(reference) + delta) after two refinements over bilinear grid samples,
# and onnxruntime itself is 1.1e-5 (absolute, on the [0, 1] scale) from PyTorch there; 1e-3 of
# the side (a tenth of a pixel at 100 px) bounds that float32 drift, not a wrong box (measured
# on MLX: 2.7e-7 of the side).
BOX_TOL = 1e-3


def pipe(backend="jax"):
    return vision_pipe(FIXTURE, TASK, backend)


def grounded_reference():
    return json.loads((ROOT / FIXTURE / "references" / "grounded.json").read_text())


def unboxed(results):
    return [{"score": r["score"], "label": r["label"]} for r in results]


def assert_boxes_close(got, want, image, where):
    """Float boxes within BOX_TOL of the image's width (x) and height (y)."""
    height, width = np.asarray(load_image(image)).shape[:2]
    side = {"xmin": width, "xmax": width, "ymin": height, "ymax": height}
    for i, (g, w) in enumerate(zip(got, want)):
        for k, v in w.items():
            assert abs(g["box"][k] - v) <= BOX_TOL * side[k], f"{where} [{i}] {k}: {g} != {w}"


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_recorded_pipeline(backend):
    """transformers' pipeline: one prompt per label, candidate labels as labels, int boxes; and
    the same calls with exact_boxes=True against the pipeline's untruncated boxes."""
    ref = pipeline_reference(FIXTURE, TASK)
    p = pipe(backend)
    for call in ref["calls"]:
        kwargs = call["call_kwargs"]
        for i, (image, want, exact) in enumerate(zip(images(FIXTURE, ref), call["outputs"],
                                                     call["exact_outputs"])):
            where = f"{kwargs} image {i}"
            assert_close(p(image, **kwargs), want, TOL, where=where)
            got = p(image, exact_boxes=True, **kwargs)
            assert_close(unboxed(got), unboxed(exact), TOL, where=where)
            assert_boxes_close(got, [r["box"] for r in exact], image, where)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_grounded_matches_recorded_processor(backend):
    """text_threshold=: the joined prompt and post_process_grounded_object_detection's phrases."""
    ref = grounded_reference()
    p = pipe(backend)
    for call in ref["calls"]:
        kwargs = call["call_kwargs"]
        for i, (image, want) in enumerate(zip(images(FIXTURE, ref), call["outputs"])):
            where = f"{kwargs} image {i}"
            assert_close(p(image, **kwargs), [{k: r[k] for k in ("score", "label", "box")}
                                              for r in want], TOL, where=where)
            got = p(image, exact_boxes=True, **kwargs)
            assert_close(unboxed(got), unboxed(want), TOL, where=where)
            assert_boxes_close(got, [r["exact_box"] for r in want], image, where)
    assert {r["label"] for c in ref["calls"] for out in c["outputs"] for r in out} > {
        "remote control", "a cat. a remote control."}, "phrases should vary"


def test_recorded_prompts_are_the_joined_labels():
    ref = grounded_reference()
    assert [joined(c["call_kwargs"]["candidate_labels"]) for c in ref["calls"]] == ref["prompts"]
    assert joined([" A Cat ", "a Remote control"]) == "a cat. a remote control."
    assert joined(["a cat. a dog."]) == "a cat. a dog."  # one prompt, as given


def test_batch_equals_one_by_one():
    """On MLX (compiles in under a second; JAX takes ~30 s per new batch shape): a batch, a
    stream and dicts give what each image gives alone, and transformers' list of dicts."""
    ref = pipeline_reference(FIXTURE, TASK)
    p = pipe("mlx")
    inputs = images(FIXTURE, ref)
    batch = ref["batch"]
    labels, threshold = batch["candidate_labels"], batch["threshold"]
    dicts = [{"image": x, "candidate_labels": labels} for x in inputs]
    assert_close(p(dicts, threshold=threshold), batch["outputs"], TOL)
    one = [p(x, candidate_labels=labels, threshold=threshold) for x in inputs]
    assert_close(p(inputs * 2, candidate_labels=labels, threshold=threshold, batch_size=4),
                 one * 2, 1e-5)
    assert_close(list(p(iter(inputs), candidate_labels=labels, threshold=threshold,
                        batch_size=2)), one, 1e-5)
    grounded = [p(x, candidate_labels=labels, threshold=0.3, text_threshold=0.5) for x in inputs]
    assert_close(p(inputs, candidate_labels=labels, threshold=0.3, text_threshold=0.5,
                   batch_size=3), grounded, 1e-5)


def test_each_image_its_own_labels():
    p = pipe("mlx")
    a, b = (str(ROOT / FIXTURE / f"references/{n}.png") for n in ("chelsea", "coffee"))
    first, second = ["a cat", "a remote control"], ["coffee mug"]
    want = [p(a, candidate_labels=first, threshold=0.5), p(b, candidate_labels=second,
                                                          threshold=0.5)]
    assert_close(p([a, b], candidate_labels=[first, second], threshold=0.5), want, 1e-5)
    assert {r["label"] for r in want[1]} == {"coffee mug"}


def test_options():
    p = pipe("mlx")
    image = str(ROOT / FIXTURE / "references/chelsea.png")
    labels = ["a cat", "a remote control"]
    every = p(image, candidate_labels=labels, threshold=0.0)
    assert len(every) == 2 * 20 and [r["score"] for r in every] == sorted(
        (r["score"] for r in every), reverse=True)
    assert p(image, candidate_labels=labels, threshold=0.0, top_k=3) == every[:3]
    assert p(image, candidate_labels=labels, threshold=0.0, top_k=0) == every
    assert p(image, candidate_labels=labels, threshold=0.5) == [
        r for r in every if r["score"] > 0.5]
    assert p(image, candidate_labels="a cat,a remote control", threshold=0.0) == every
    assert p(image, text_queries=labels, threshold=0.0) == every
    assert all(isinstance(v, int) for r in every for v in r["box"].values())
    # a prompt given whole is the prompt the labels join into
    assert p(image, candidate_labels=["a cat. a remote control."], text_threshold=0.5) == p(
        image, candidate_labels=labels, text_threshold=0.5)


def test_processor_outputs_equal_transformers():
    """The fixture's image processor and tokenizer on chelsea.png and the joined prompt."""
    want = np.load(ROOT / FIXTURE / "references" / "processor.npz")
    p = pipe("mlx")
    features = p.image_processor(load_image(str(ROOT / FIXTURE / "references/chelsea.png")))
    np.testing.assert_allclose(features["pixel_values"], want["pixel_values"][0], atol=1e-5)
    np.testing.assert_array_equal(features["pixel_mask"], want["pixel_mask"][0])
    enc = p.tokenizer.encode(joined(["a cat", "a remote control"]))
    assert enc.ids == want["input_ids"][0].tolist()
    assert enc.type_ids == want["token_type_ids"][0].tolist()
    assert enc.attention_mask == want["attention_mask"][0].tolist()


def test_real_tokenizer_ids():
    """IDEA-Research/grounding-dino-tiny's own tokenizer files (../shared/hub-files)."""
    if not HUB_FILES.is_dir():
        pytest.skip("needs ../shared/hub-files/IDEA-Research/grounding-dino-tiny")
    want = json.loads((ROOT / FIXTURE / "references" / "real_tokenizer.json").read_text())
    tok = Tokenizer.from_repo(hub.resolve(HUB_FILES))
    for text, ids in want["input_ids"].items():
        assert tok.encode(text).ids == ids, text


@pytest.mark.parametrize("kwargs,match", [
    ({}, "candidate_labels"),
    ({"candidate_labels": []}, "candidate_labels"),
    ({"candidate_labels": ["a cat", ""]}, "empty label"),
    ({"candidate_labels": ["  "]}, "empty label"),
    ({"candidate_labels": ["a cat.", "a dog"], "text_threshold": 0.3}, "'.'"),
    ({"candidate_labels": ["a cat"], "text_threshold": "high"}, "text_threshold"),
    ({"candidate_labels": ["a cat"], "text_threshold": 1.5}, "text_threshold"),
    ({"candidate_labels": ["cat " * 40]}, "max_text_len"),
    ({"candidate_labels": ["cat"] * 20, "text_threshold": 0.3}, "max_text_len"),
    ({"candidate_labels": ["a cat"], "threshold": None}, "threshold"),
    ({"candidate_labels": ["a cat"], "box_threshold": 0.3}, "box_threshold"),
], ids=["no-labels", "empty-list", "empty-label", "blank-label", "dotted-labels",
        "text-threshold-string", "text-threshold-range", "long-label", "long-prompt",
        "threshold", "unknown-option"])
def test_bad_inputs_are_clear_errors(kwargs, match):
    image = str(ROOT / FIXTURE / "references/chelsea.png")
    with pytest.raises(PipelineError, match=match):
        pipe("mlx")(image, **kwargs)


def test_owl_models_take_no_text_threshold():
    with pytest.raises(PipelineError, match="text_threshold"):
        vision_pipe("owlvit", TASK)(str(ROOT / "owlvit/references/image_0.png"),
                                    candidate_labels=["a cat"], text_threshold=0.3)
