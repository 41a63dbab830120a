"""image-segmentation over Mask2Former's head (the mask2former fixture: class_queries_logits and
masks_queries_logits) against transformers' pipeline on the PyTorch model
(references/segmentation.json and segmentation_masks.npz, recorded by
tests/support/record_maskformer.py on scikit-image photos of four sizes), on JAX and MLX: subtasks
panoptic, instance and semantic, threshold options, the defaults; label_ids_to_fuse against the
image processor's post_process_panoptic_segmentation; a batch equals one by one."""

import json

import numpy as np
import pytest

import transmuter
from transmuter.pipelines.base import PipelineError
from transmuter.pipelines.vision.maskformer import resized_masks
from transmuter.pipelines.vision.panoptic import query_segments

from .fixtures import ROOT
from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

FX = ROOT / "mask2former"
REF = json.loads((FX / "references" / "segmentation.json").read_text())
MASKS = np.load(FX / "references" / "segmentation_masks.npz")
FUSE = np.load(FX / "references" / "fuse.npz")
# Scores are softmax maxima (panoptic) or softmax times a mean of sigmoids over ~10^5 pixels
# (instance) of the same logits: XLA / MLX sum in another order than PyTorch. Measured: at most
# 8e-6 (MLX; JAX 5e-6, both after transformers' rounding to 6 decimals); the design's bound is 1e-4.
SCORE_TOL = 1e-4
# Mask pixels may differ where two queries' score-weighted mask probabilities (panoptic), or two
# classes' summed probabilities (semantic), tie to within float noise, so the argmax flips; or
# where a mask logit is within noise of 0 (instance: the mask is logit > 0). Our mask logits differ
# from PyTorch's by ~1.5e-5. Measured: at most 3.8e-5 of a photo's pixels (JAX semantic; panoptic
# and instance 8e-6 on both backends); the bound 2e-4 (DETR's) leaves 5x headroom.
FLIP_FRACTION = 2e-4
_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("image-segmentation", FX, backend=backend)
    return _PIPES[backend]


def photos():
    return [image_cases.make(name).convert("RGB") for name in REF["inputs"]["photos"]]


def want_mask(key):
    h, w = MASKS[f"{key}/shape"]
    return np.unpackbits(MASKS[f"{key}/bits"])[: h * w].reshape(h, w).astype(bool)


def check(got, want, where):
    assert [r["label"] for r in got] == [r["label"] for r in want], where
    worst = 0
    for g, w in zip(got, want):
        if w["score"] is None:
            assert g["score"] is None, where
        else:
            assert abs(g["score"] - w["score"]) <= SCORE_TOL, (where, g["score"], w["score"])
        mask, expected = np.asarray(g["mask"]), want_mask(w["mask"])
        assert g["mask"].mode == "L" and mask.shape == expected.shape, where
        assert set(np.unique(mask)) <= {0, 255}, where
        flipped = int(((mask > 0) != expected).sum())
        assert flipped <= FLIP_FRACTION * expected.size, (where, w["label"], flipped)
        worst = max(worst, flipped / expected.size)
    return worst


def test_references_discriminate():
    """Several segments and labels per call, masks distinct (a fixture whose queries all gave one
    label or one mask would pass anything)."""
    for call in REF["calls"]:
        outputs = call["outputs"]
        assert max(len(o) for o in outputs) >= 2, call["call_kwargs"]
        assert len({r["label"] for o in outputs for r in o}) >= 2, call["call_kwargs"]
    for o in REF["calls"][0]["outputs"]:
        masks = [want_mask(r["mask"]).tobytes() for r in o]
        assert len(set(masks)) == len(masks)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_transformers(backend):
    """Every recorded call on every photo (the JAX run is in conftest.SLOW_TESTS: its compile
    takes ~30 s on 2 cores)."""
    p = pipe(backend)
    images = photos()
    for ref in REF["calls"]:
        for i, (image, want) in enumerate(zip(images, ref["outputs"])):
            check(p(image, **ref["call_kwargs"]), want, f"{ref['call_kwargs']} photo {i}")


@pytest.mark.parametrize("case", REF["fuse"]["cases"], ids=lambda c: f"photo{c['photo']}")
def test_label_ids_to_fuse_matches_the_image_processor(case):
    """post_process_panoptic_segmentation(label_ids_to_fuse=...) on PyTorch's own outputs: the
    segments (ids reused as transformers reuses them) and the segmentation map."""
    fuse, i = REF["fuse"], case["photo"]
    masks = resized_masks(FUSE[f"{i}/masks_queries_logits"], "Mask2FormerImageProcessor")
    segmentation, segments = query_segments(
        FUSE[f"{i}/class_queries_logits"], masks, tuple(case["size"]), fuse["threshold"],
        fuse["mask_threshold"], fuse["overlap_mask_area_threshold"], set(case["label_ids_to_fuse"]))
    want = case["segments_info"]
    assert [(s["id"], s["label_id"], s["was_fused"]) for s in segments] == \
           [(s["id"], s["label_id"], s["was_fused"]) for s in want]
    assert all(abs(s["score"] - w["score"]) <= SCORE_TOL for s, w in zip(segments, want))
    flipped = int((segmentation != FUSE[f"{i}/segmentation"]).sum())
    assert flipped <= FLIP_FRACTION * segmentation.size, flipped


def test_batch_equals_one_by_one():
    p = pipe("mlx")
    kwargs = REF["calls"][0]["call_kwargs"]
    images = photos()[:2] * 2
    for subtask in ("panoptic", "instance"):
        kwargs = {**kwargs, "subtask": subtask}
        one = [p(x, **kwargs) for x in images]
        for got, want in zip(p(images, batch_size=4, **kwargs), one):
            assert [(r["label"], r["score"], r["mask"].tobytes()) for r in got] == \
                   [(r["label"], r["score"], r["mask"].tobytes()) for r in want]


def test_bad_options_are_clear_errors():
    p = pipe("mlx")
    image = photos()[0]
    with pytest.raises(PipelineError, match="subtask must be one of"):
        p(image, subtask="amodal")
    with pytest.raises(PipelineError, match="mask_threshold must be a number"):
        p(image, subtask="instance", mask_threshold=None)
