"""object-detection on D-FINE (the d-fine fixture) against transformers' pipeline on the PyTorch
model, recorded by tests/support/families_vision_dfine.py on scikit-image photos
(references/photos.json: thresholds 0.0, 0.7 and the default; the float boxes of
post_process_object_detection for exact_boxes=True), on JAX and MLX. The synthetic-image reference
(pipeline_object-detection.json) and a batch against one by one run in test_pipelines_vision.py."""

import json
import math

import numpy as np
import pytest

import transmuter

from .fixtures import ROOT
from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

FX = ROOT / "d-fine"
REF = json.loads((FX / "references" / "photos.json").read_text())
# Scores are sigmoids of the same logits: float32 sums in another order than PyTorch's move them
# (measured: 3.4e-5 JAX, 4.0e-5 MLX; onnxruntime vs PyTorch: logits within 3.1e-4 on one query of
# coffee_tall, the perturbed weights amplify float32 noise); the design's bound is 1e-4.
SCORE_TOL = 1e-4
# pred_boxes agree to ~1e-5 (normalized); times a photo's 512 px that is ~1e-2 px (measured:
# 0.012 px JAX, 0.007 MLX). A truncated box coordinate may then flip to the next integer only where the exact
# value lies that close to one (none did).
PIXEL_TOL = 0.05
_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("object-detection", FX, backend=backend)
    return _PIPES[backend]


def photos():
    images = [image_cases.make(name).convert("RGB") for name in REF["inputs"]["photos"]]
    assert [image_cases.pixels_digest(im) for im in images] == REF["inputs"]["digests"]
    return images


def check(got, want, where, exact=None):
    assert [r["label"] for r in got] == [r["label"] for r in want], where
    for i, (g, w) in enumerate(zip(got, want)):
        assert list(g) == ["score", "label", "box"] and list(g["box"]) == list(w["box"]), where
        assert math.isclose(g["score"], w["score"], abs_tol=SCORE_TOL), (where, i, g, w)
        for k, (value, recorded) in enumerate(zip(g["box"].values(), w["box"].values())):
            assert type(value) is int, where
            if value != recorded:  # only where the exact coordinate lies within noise of an integer
                near = exact[i][k] if exact else recorded
                assert abs(near - round(near)) < PIXEL_TOL, (where, i, value, recorded, near)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_recorded_pipeline(backend):
    images = photos()
    for call in REF["calls"]:
        kwargs, exact = call["call_kwargs"], call.get("exact_boxes")
        for i, (image, want) in enumerate(zip(images, call["outputs"])):
            check(pipe(backend)(image, **kwargs), want, f"{backend} {kwargs} photo {i}",
                  exact[i] if exact else None)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_exact_boxes_are_post_process_object_detection(backend):
    call = REF["calls"][0]
    worst = 0.0
    for image, want, boxes in zip(photos(), call["outputs"], call["exact_boxes"]):
        got = pipe(backend)(image, exact_boxes=True, **call["call_kwargs"])
        assert [r["label"] for r in got] == [r["label"] for r in want]
        values = np.array([list(r["box"].values()) for r in got])
        assert all(type(v) is float for r in got for v in r["box"].values())
        worst = max(worst, float(np.abs(values - np.array(boxes)).max()))
    assert worst <= PIXEL_TOL, worst

