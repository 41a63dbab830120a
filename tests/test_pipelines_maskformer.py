"""image-segmentation over MaskFormer-family heads (class_queries_logits and masks_queries_logits:
the mask2former fixture, Mask2FormerImageProcessor's post-processing; the maskformer fixture,
MaskFormerImageProcessor's) against transformers' pipeline on the PyTorch model
(references/segmentation.json and segmentation_masks.npz, recorded by
tests/support/record_maskformer.py on scikit-image photos of four sizes), on JAX and MLX: subtasks
panoptic, instance and semantic, threshold options, the defaults; label_ids_to_fuse against the
image processor's post_process_panoptic_segmentation; a batch equals one by one."""

import functools
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

FIXTURES = ["mask2former", "maskformer"]


@functools.lru_cache(maxsize=None)
def refs(name):
    """(segmentation.json, segmentation_masks.npz, fuse.npz) of fixture ``name``."""
    folder = ROOT / name / "references"
    return (json.loads((folder / "segmentation.json").read_text()),
            np.load(folder / "segmentation_masks.npz"), np.load(folder / "fuse.npz"))


# Scores are softmax maxima (panoptic) or softmax times a mean of sigmoids over ~10^5 pixels
# (instance) of the same logits: XLA / MLX sum in another order than PyTorch. Measured: at most
# 8e-6 (mask2former on MLX; JAX 5e-6; maskformer 2e-6; after transformers' rounding to 6
# decimals); the design's bound is 1e-4.
SCORE_TOL = 1e-4
# Mask pixels may differ where two queries' score-weighted mask probabilities (panoptic), or two
# classes' summed probabilities (semantic), tie to within float noise, so the argmax flips; or
# where a mask logit is within noise of 0 (instance: the mask is logit > 0). Our mask logits differ
# from PyTorch's by ~1.5e-5. Measured: at most 3.8e-5 of a photo's pixels (mask2former, JAX
# semantic; its panoptic and instance 8e-6 on both backends; maskformer 7.4e-6); the bound 2e-4
# (DETR's) leaves 5x headroom.
FLIP_FRACTION = 2e-4
_PIPES = {}


def pipe(name, backend):
    if (name, backend) not in _PIPES:
        _PIPES[name, backend] = transmuter.pipeline("image-segmentation", ROOT / name,
                                                    backend=backend)
    return _PIPES[name, backend]


def photos(name):
    return [image_cases.make(photo).convert("RGB") for photo in refs(name)[0]["inputs"]["photos"]]


def want_mask(name, key):
    masks = refs(name)[1]
    h, w = masks[f"{key}/shape"]
    return np.unpackbits(masks[f"{key}/bits"])[: h * w].reshape(h, w).astype(bool)


def check(name, got, want, where):
    assert [r["label"] for r in got] == [r["label"] for r in want], where
    worst = 0
    for g, w in zip(got, want):
        if w["score"] is None:
            assert g["score"] is None, where
        else:
            assert abs(g["score"] - w["score"]) <= SCORE_TOL, (where, g["score"], w["score"])
        mask, expected = np.asarray(g["mask"]), want_mask(name, w["mask"])
        assert g["mask"].mode == "L" and mask.shape == expected.shape, where
        assert set(np.unique(mask)) <= {0, 255}, where
        flipped = int(((mask > 0) != expected).sum())
        assert flipped <= FLIP_FRACTION * expected.size, (where, w["label"], flipped)
        worst = max(worst, flipped / expected.size)
    return worst


@pytest.mark.parametrize("name", FIXTURES)
def test_references_discriminate(name):
    """Several segments and labels per call, masks distinct (a fixture whose queries all gave one
    label or one mask would pass anything)."""
    ref = refs(name)[0]
    for call in ref["calls"]:
        outputs = call["outputs"]
        assert max(len(o) for o in outputs) >= 2, call["call_kwargs"]
        assert len({r["label"] for o in outputs for r in o}) >= 2, call["call_kwargs"]
    for o in ref["calls"][0]["outputs"]:
        masks = [want_mask(name, r["mask"]).tobytes() for r in o]
        assert len(set(masks)) == len(masks)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("name", FIXTURES)
def test_matches_transformers(name, backend):
    """Every recorded call on every photo (the JAX runs are in conftest.SLOW_TESTS: compiling
    takes ~30 s per graph and size on 2 cores)."""
    p = pipe(name, backend)
    images = photos(name)
    for ref in refs(name)[0]["calls"]:
        for i, (image, want) in enumerate(zip(images, ref["outputs"])):
            where = f"{name} {ref['call_kwargs']} photo {i}"
            check(name, p(image, **ref["call_kwargs"]), want, where)


def fuse_cases():
    return [pytest.param(name, case, id=f"{name}-photo{case['photo']}")
            for name in FIXTURES for case in refs(name)[0]["fuse"]["cases"]]


@pytest.mark.parametrize("name,case", fuse_cases())
def test_label_ids_to_fuse_matches_the_image_processor(name, case):
    """post_process_panoptic_segmentation(label_ids_to_fuse=...) on PyTorch's own outputs: the
    segments (ids reused as transformers reuses them) and the segmentation map. Our resize runs
    in float64 where torch's runs in float32, so a tie could flip a pixel: the same bound as
    above (measured: no pixel differs, scores within 1e-6)."""
    ref, _, arrays = refs(name)
    fuse, i = ref["fuse"], case["photo"]
    config = json.loads((ROOT / name / "preprocessor_config.json").read_text())
    masks = resized_masks(arrays[f"{i}/masks_queries_logits"], config["image_processor_type"])
    segmentation, segments = query_segments(
        arrays[f"{i}/class_queries_logits"], masks, tuple(case["size"]), fuse["threshold"],
        fuse["mask_threshold"], fuse["overlap_mask_area_threshold"], set(case["label_ids_to_fuse"]))
    want = case["segments_info"]
    assert [(s["id"], s["label_id"], s["was_fused"]) for s in segments] == \
           [(s["id"], s["label_id"], s["was_fused"]) for s in want]
    assert all(abs(s["score"] - w["score"]) <= SCORE_TOL for s, w in zip(segments, want))
    flipped = int((segmentation != arrays[f"{i}/segmentation"]).sum())
    assert flipped <= FLIP_FRACTION * segmentation.size, flipped


@pytest.mark.parametrize("name,subtask", [("maskformer", "panoptic"), ("mask2former", "instance")])
def test_batch_equals_one_by_one(name, subtask):
    """maskformer's photos come in several sizes: a batch groups them by size."""
    p = pipe(name, "mlx")
    images = photos(name)[:2] * 2
    kwargs = {**refs(name)[0]["calls"][0]["call_kwargs"], "subtask": subtask}
    one = [p(x, **kwargs) for x in images]
    for got, want in zip(p(images, batch_size=4, **kwargs), one):
        assert [(r["label"], r["score"], r["mask"].tobytes()) for r in got] == \
               [(r["label"], r["score"], r["mask"].tobytes()) for r in want]


def test_bad_options_are_clear_errors():
    p = pipe("maskformer", "mlx")
    image = photos("maskformer")[0]
    with pytest.raises(PipelineError, match="subtask must be one of"):
        p(image, subtask="amodal")
    with pytest.raises(PipelineError, match="mask_threshold must be a number"):
        p(image, subtask="instance", mask_threshold=None)
    semantic_only = transmuter.pipeline("image-segmentation", ROOT / "segformer", backend="mlx")
    with pytest.raises(PipelineError, match="class_queries_logits and masks_queries_logits"):
        semantic_only(image, subtask="instance")
