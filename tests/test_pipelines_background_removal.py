"""background-removal against transformers.js' own BackgroundRemovalPipeline (recorded by
tests/support/record_background_removal.mjs with transformers.js 4.3.2 / onnxruntime-node on the
rmbg, rmbg-logits and modnet fixtures' ONNX files: references/cutout_*.png, transformers_js.json),
on JAX and MLX; its Node resize (sharp's affine bilinear, references/sharp_resize.json); a batch equals
one by one; bad inputs and graphs are clear errors."""

import json

import numpy as np
import pytest
from PIL import Image

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines.base import PipelineError
from transmuter.preprocess.image.resize_sharp import sharp_bilinear

from .fixtures import ROOT

TASK = "background-removal"
# a graph ending in a sigmoid; one giving logits; the first under a MODNet-style processor
# (shortest_edge 48 to a multiple of 16, pad: each image at its own size)
FIXTURES = ["rmbg", "rmbg-logits", "modnet"]
# The cut-out's RGB is the input's bytes: equal. The mask is float32 probabilities * 255 truncated
# to uint8: where XLA's float32 sums differ from onnxruntime's by ~1e-6, a value lying that close
# to a whole level may truncate to the next one down. Measured: every pixel equal on both backends
# (both fixtures, 5 images); a flip moves a level by 1, on at most 0.5% of the pixels allowed.
MAX_LEVEL_DIFF = 1
MAX_FLIPPED = 0.005
_PIPES = {}


def pipe(fixture, backend="jax"):
    if (fixture, backend) not in _PIPES:
        _PIPES[fixture, backend] = transmuter.pipeline(TASK, ROOT / fixture, backend=backend)
    return _PIPES[fixture, backend]


def recorded(fixture):
    ref = json.loads((ROOT / fixture / "references" / "transformers_js.json").read_text())
    return [(ROOT / fixture / o["input"], np.asarray(Image.open(ROOT / fixture / o["cutout"])), o)
            for o in ref["outputs"]]


def check_cutout(got, want, where):
    assert got.mode == "RGBA" and got.size == (want.shape[1], want.shape[0]), where
    got = np.asarray(got).astype(np.int64)
    assert (got[..., :3] == want[..., :3]).all(), where
    diff = np.abs(got[..., 3] - want[..., 3])
    assert diff.max() <= MAX_LEVEL_DIFF and (diff > 0).mean() <= MAX_FLIPPED, (where, diff.max())


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_matches_transformers_js(fixture, backend):
    for path, want, summary in recorded(fixture):
        assert want.shape == (summary["height"], summary["width"], 4)
        check_cutout(pipe(fixture, backend)(str(path)), want, f"{fixture} {backend} {path.name}")


@pytest.mark.parametrize("fixture", FIXTURES)
def test_return_mask_is_the_alpha(fixture):
    path, want, _ = recorded(fixture)[2]  # 100x150: the mask is resized from the model's 64x64
    mask = pipe(fixture)(str(path), return_mask=True)
    assert mask.mode == "L" and mask.size == (want.shape[1], want.shape[0])
    assert np.abs(np.asarray(mask).astype(int) - want[..., 3]).max() <= MAX_LEVEL_DIFF


def test_sharp_resize_equals_transformers_js():
    cases = json.loads((ROOT / "rmbg" / "references" / "sharp_resize.json").read_text())["cases"]
    for case in cases:
        src = case["source"]
        shape = [(c["height"], c["width"], c["channels"]) for c in (src, case)]
        pixels = np.array(src["data"], np.uint8).reshape(shape[0])
        want = np.array(case["data"], np.uint8).reshape(shape[1])
        got = sharp_bilinear(pixels, (case["height"], case["width"]))
        assert got.dtype == np.uint8 and (got == want).all(), (pixels.shape, want.shape)


def test_batch_equals_one_by_one():
    paths = [str(path) for path, _, _ in recorded("rmbg")] * 2
    one = [np.asarray(pipe("rmbg")(p)) for p in paths]
    for got, want in zip(pipe("rmbg")(paths, batch_size=4), one):
        assert (np.asarray(got) == want).all()
    for got, want in zip(pipe("rmbg")(iter(paths), batch_size=3, return_mask=True), one):
        assert (np.asarray(got) == want[..., 3]).all()


def test_image_kinds():
    """A PIL image, bytes and an array give what the path gives; a grayscale image comes back as
    RGBA of its gray (transformers.js' putAlpha refuses one-channel images)."""
    path, want, _ = recorded("rmbg")[0]
    image = Image.open(path)
    for given in (image, path.read_bytes(), np.asarray(image)):
        check_cutout(pipe("rmbg")(given), want, type(given).__name__)
    gray = pipe("rmbg")(image.convert("L"))
    assert gray.mode == "RGBA" and np.ptp(np.asarray(gray)[..., :3], axis=-1).max() == 0


def test_bad_options_and_graphs_are_clear_errors(tmp_path):
    with pytest.raises(PipelineError, match="return_mask"):
        pipe("rmbg")(str(recorded("rmbg")[0][0]), return_mask="yes")
    with pytest.raises(PipelineError, match="one-channel mask"):
        transmuter.pipeline(TASK, ROOT / "detr")(str(ROOT / "detr/references/image_0.png"))
    folder = tmp_path / "modnet-like"
    folder.mkdir()
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes((ROOT / "rmbg/onnx/model.onnx").read_bytes())
    (folder / "config.json").write_text((ROOT / "rmbg/config.json").read_text())
    config = json.loads((ROOT / "rmbg/preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps(dict(config, do_center_crop=True)))
    with pytest.raises(InputError, match="do_center_crop"):
        transmuter.pipeline(TASK, folder)
