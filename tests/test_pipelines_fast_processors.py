"""Pipelines on the committed fixtures with their preprocessor config's image_processor_type set to
the `*Fast` class (issue 13): the factory picks the Fast processor, the pipeline runs through it and
answers in the slow run's shape, and a batch equals one by one.

What this does not check: the Fast pipelines' numbers against transformers' Fast pipelines (no
reference is recorded for them; the Fast processors' pixel_values are checked against
transformers in tests/test_fast_image_processor.py, and the model and post-processing are the
slow pipelines', tested against their references).
"""

import json

import numpy as np
import pytest

import transmuter

from .fixtures import ROOT
from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

# fixture, task, call options
CASES = {
    "detr": ("object-detection", {"threshold": 0.0}),
    "yolos": ("object-detection", {"threshold": 0.0}),
    "rt-detr": ("object-detection", {"threshold": 0.0}),
    "dpt": ("depth-estimation", {}),
    "swin2sr": ("image-to-image", {}),
    "mask2former": ("image-segmentation", {"subtask": "instance", "threshold": 0.0}),
    "owlv2": ("zero-shot-object-detection", {"candidate_labels": ["a cat", "a cup"],
                                             "threshold": 0.0}),
    "sam": ("mask-generation", {"input_points": [[[30, 40]]]}),
}


def fast_pipe(name, backend="jax"):
    task, _ = CASES[name]
    config = json.loads((ROOT / name / "preprocessor_config.json").read_text())
    config["image_processor_type"] += "Fast"
    return transmuter.pipeline(task, ROOT / name, image_processor=config, backend=backend)


def photos():
    return [image_cases.make(n).convert("RGB") for n in ("coffee_tall", "astronaut_48x64")]


def shape_of(result):
    """Keys and types, recursively: what must not change with the processor."""
    if isinstance(result, dict):
        return {k: shape_of(v) for k, v in result.items()}
    if isinstance(result, list):
        return [shape_of(v) for v in result[:1]]
    return type(result).__name__


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "size") and hasattr(a, "mode"):  # PIL images (depth, image-to-image)
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, np.ndarray):
        return np.allclose(a, b, rtol=0, atol=1e-5)
    if isinstance(a, float):
        return abs(a - b) <= 1e-5
    return a == b


# the answer's keys and types, as the slow pipelines give them (their tests check them)
SHAPES = {
    "object-detection": [{"score": "float", "label": "str",
                          "box": {"xmin": "int", "ymin": "int", "xmax": "int", "ymax": "int"}}],
    "depth-estimation": {"predicted_depth": "ndarray", "depth": "Image"},
    "image-to-image": "Image",
    "image-segmentation": [{"score": "float", "label": "str", "mask": "Image"}],
    "zero-shot-object-detection": [{"score": "float", "label": "str",
                                    "box": {"xmin": "int", "ymin": "int", "xmax": "int",
                                            "ymax": "int"}}],
    "mask-generation": {"masks": "ndarray", "iou_scores": "ndarray"},  # prompt mode
}


@pytest.mark.parametrize("name", list(CASES))
def test_fast_type_runs_the_pipeline(name):
    task, kwargs = CASES[name]
    pipe = fast_pipe(name)
    assert pipe.image_processor.name in type(pipe.image_processor).names  # the Fast class serves it
    assert pipe.image_processor.name.endswith("Fast")
    assert shape_of(pipe(photos()[0], **kwargs)) == SHAPES[task]


@pytest.mark.parametrize("name", ["detr", "yolos"])
def test_fast_batch_equals_one_by_one(name):
    # the families whose Fast processor pads a batch (with a pixel mask)
    _, kwargs = CASES[name]
    pipe, images = fast_pipe(name), photos()
    assert same(pipe(images, batch_size=2, **kwargs), [pipe(im, **kwargs) for im in images])


def test_fast_type_on_mlx():
    pipe = fast_pipe("detr", backend="mlx")
    jax_pipe = fast_pipe("detr")
    image = photos()[0]
    got, want = pipe(image, threshold=0.0), jax_pipe(image, threshold=0.0)
    assert [r["label"] for r in got] == [r["label"] for r in want]
    assert all(abs(g["score"] - w["score"]) <= 1e-4 for g, w in zip(got, want))
