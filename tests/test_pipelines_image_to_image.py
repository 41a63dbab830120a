"""image-to-image (Swin2SR) against transformers' ImageToImagePipeline outputs recorded with the
fixtures (references/pipeline_image-to-image.json and its output PNGs,
tests/support/families_vision_sr.py), on JAX and MLX: each output image is compared pixel by
pixel with the recorded PNG; a batch equals one by one; bad inputs are clear errors."""

import numpy as np
import pytest
from PIL import Image

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference, pipeline_references
from .test_pipelines_vision import images
from .test_pipelines_vision import pipe as vision_pipe

TASK = "image-to-image"
CASES = pipeline_references({TASK})
# Pixels may differ by 1: the pipeline rounds reconstruction * 255 in float32 before the uint8
# conversion, and XLA / MLX sum the convolutions in another order than PyTorch (~1e-6 apart), which
# can move a value across .5. Measured on the swin2sr fixture: 1 value of 15,360 differs on JAX
# (image 0, 46.499985 here vs 46.500053 in PyTorch), none of 9,216 on image 1, none on MLX.
PIXEL_TOL = 1
# ... and only a few values do: a wrong model, padding or clamp moves thousands.
MAX_DIFFERING = 0.001  # fraction of the image's values


def pipe(fixture, backend="jax"):
    return vision_pipe(fixture, TASK, backend)


def assert_same_image(got, want, where=""):
    assert isinstance(got, Image.Image), f"{where}: got {type(got).__name__}, not a PIL image"
    assert (got.mode, got.size) == (want.mode, want.size), \
        f"{where}: {got.mode} {got.size} != {want.mode} {want.size}"
    a, b = np.asarray(got).astype(np.int64), np.asarray(want).astype(np.int64)
    diff = np.abs(a - b)
    assert diff.max() <= PIXEL_TOL, f"{where}: a pixel differs by {diff.max()}"
    assert (diff > 0).mean() <= MAX_DIFFERING, f"{where}: {(diff > 0).sum()} of {diff.size} differ"


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture,task", CASES, ids=[f"{t}-{f}" for f, t in CASES])
def test_matches_recorded_pipeline(fixture, task, backend):
    ref = pipeline_reference(fixture, task)
    p = pipe(fixture, backend)
    for i, (image, summary, png) in enumerate(zip(images(fixture, ref), ref["outputs"],
                                                  ref["output_pngs"])):
        want = Image.open(ROOT / fixture / png)
        want.load()
        got = p(image, **ref["call_kwargs"])
        assert_same_image(got, want, f"{backend} image {i}")
        # the PNG is the image the JSON summarises (mode, size and pixel sum)
        info = summary["pil_image"]
        assert (info["mode"], info["size"]) == (want.mode, list(want.size))
        assert int(np.asarray(want).astype(np.int64).sum()) == info["sum"]


@pytest.mark.parametrize("fixture,task", CASES, ids=[f"{t}-{f}" for f, t in CASES])
def test_output_is_the_padded_size_times_the_upscale(fixture, task):
    """transformers does not crop the processor's padding (to the next multiple of size_divisor,
    plus a block): the output is that padded size times config.upscale."""
    ref = pipeline_reference(fixture, task)
    p = pipe(fixture)
    scale, s = p.config["upscale"], p.image_processor.size_divisor
    for image, spec in zip(images(fixture, ref), ref["inputs"]["specs"]):
        h, w = spec["height"], spec["width"]
        assert h % s and w % s, "the fixture's inputs should not be multiples of the pad size"
        padded = ((h // s + 1) * s, (w // s + 1) * s)
        assert p(image).size == (padded[1] * scale, padded[0] * scale)


@pytest.mark.parametrize("fixture,task", CASES, ids=[f"{t}-{f}" for f, t in CASES])
def test_batch_equals_one_by_one(fixture, task):
    ref = pipeline_reference(fixture, task)
    p = pipe(fixture)
    inputs = images(fixture, ref) * 2  # two sizes, interleaved: each size runs as its own batch
    one = [np.asarray(p(x)) for x in inputs]
    for got in (p(inputs, batch_size=4), list(p(iter(inputs), batch_size=3))):
        assert len(got) == len(one)
        for i, (g, o) in enumerate(zip(got, one)):
            assert g.size == (o.shape[1], o.shape[0]), i
            np.testing.assert_array_equal(np.asarray(g), o, err_msg=f"input {i}")


def test_image_kinds_give_the_same_result():
    fixture, task = CASES[0]
    path = ROOT / fixture / pipeline_reference(fixture, task)["inputs"]["images"][0]
    image = Image.open(path)
    want = np.asarray(pipe(fixture)(str(path)))
    for given in (path, image, path.read_bytes(), np.asarray(image.convert("RGB"))):
        np.testing.assert_array_equal(np.asarray(pipe(fixture)(given)), want,
                                      err_msg=type(given).__name__)


@pytest.mark.parametrize("bad,match", [(b"not an image", "bytes"), ("no/such/file.png", "file"),
                                       (12, "int")])
def test_bad_images_are_clear_errors(bad, match):
    with pytest.raises((InputError, PipelineError), match=match):
        pipe(CASES[0][0])(bad)


def test_unknown_option_is_an_error():
    with pytest.raises(PipelineError, match="upscale"):
        pipe(CASES[0][0])(str(ROOT / CASES[0][0] / "references/image_0.png"), upscale=4)


def test_a_model_without_reconstruction_is_refused():
    with pytest.raises(PipelineError, match="reconstruction"):
        transmuter.pipeline(TASK, ROOT / "vit", variant="fp32")
