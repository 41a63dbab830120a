"""image-segmentation over DETR's mask head (the detr-panoptic fixture) against transformers'
pipeline on the PyTorch model (references/panoptic.json and panoptic_masks.npz, recorded by
tests/support/record_detr_panoptic.py on scikit-image photos), on JAX and MLX: subtasks panoptic,
instance and semantic, threshold options, the defaults; a batch equals one by one; bad options are
clear errors."""

import json

import numpy as np
import pytest

import transmuter
from transmuter.pipelines.base import PipelineError

from .fixtures import ROOT
from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

FX = ROOT / "detr-panoptic"
REF = json.loads((FX / "references" / "panoptic.json").read_text())
MASKS = np.load(FX / "references" / "panoptic_masks.npz")
# Scores are softmax maxima of the same logits: XLA's float32 sums in another order than PyTorch's
# move them by ~1e-6; the design's bound is 1e-4.
SCORE_TOL = 1e-4
# Mask pixels may differ where two queries' score-weighted mask probabilities tie to within float
# noise (the argmax that assigns the pixel flips). The fixture's mask head amplifies float32 noise
# (families_detr_panoptic.separate_queries: onnxruntime and PyTorch differ by up to 8e-4 in the mask
# logits), so a few pixels on segment borders flip. Measured: at most 7 pixels of a 400x600 photo
# (2.9e-5 of it, MLX; JAX 2.2e-5); the bound 2e-4 leaves ~7x headroom.
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


def test_references_discriminate():
    """The recorded masks differ between segments and several segments occur (a fixture whose
    queries all gave one full-image mask would pass anything)."""
    outputs = REF["calls"][0]["outputs"]
    assert max(len(o) for o in outputs) >= 3
    for o in outputs:
        masks = [want_mask(r["mask"]).tobytes() for r in o]
        assert len(set(masks)) == len(masks)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("call", range(len(REF["calls"])),
                         ids=[json.dumps(c["call_kwargs"]) for c in REF["calls"]])
def test_matches_transformers(backend, call):
    ref = REF["calls"][call]
    p = pipe(backend)
    for i, (image, want) in enumerate(zip(photos(), ref["outputs"])):
        check(p(image, **ref["call_kwargs"]), want, f"{ref['call_kwargs']} photo {i}")


def test_batch_equals_one_by_one():
    p = pipe("jax")
    kwargs = REF["calls"][0]["call_kwargs"]
    images = photos()[:3] * 2
    one = [p(x, **kwargs) for x in images]
    for got, want in zip(p(images, batch_size=4, **kwargs), one):
        assert [(r["label"], r["score"], r["mask"].tobytes()) for r in got] == \
               [(r["label"], r["score"], r["mask"].tobytes()) for r in want]


def test_bad_options_are_clear_errors():
    p = pipe("jax")
    image = photos()[0]
    with pytest.raises(PipelineError, match="subtask must be one of"):
        p(image, subtask="amodal")
    with pytest.raises(PipelineError, match="threshold must be a number"):
        p(image, threshold="high")
    semantic_only = transmuter.pipeline("image-segmentation", ROOT / "segformer")
    with pytest.raises(PipelineError, match="pred_masks"):
        semantic_only(image, subtask="panoptic")
