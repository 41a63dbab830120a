"""The `*ImageProcessorFast` families (torchvision resize, transformers' fast steps) against
transformers 4.57.6 / torchvision 0.29.1 / torch 2.14.1 on the CPU.

References: tests/fixtures/image_processors/fast_*.npz, recorded by
tests/support/record_fast_image_processors.py (the layout of record_image_processors.py). No torch.
"""

import functools
import json

import numpy as np
import pytest

from transmuter.errors import InputError
from transmuter.preprocess import image_resize_fast as R
from transmuter.preprocess.image import ImageProcessor

from .support import image_cases
from .test_image_processor import REFS, compare, loaded

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

# The resize is exact (uint8 in, uint8 out: ATen's integer kernel reproduced bit for bit), so what
# can differ is float32 rounding of the fused rescale + normalize: transformers computes
# (x - mean / rescale_factor) / (std / rescale_factor) in float32 as we do, but an ulp of values up
# to ~2.6 (~2.4e-7) is the most either side can move. Measured: 0.0 for every family (the same
# float32 operations in the same order). Anything bigger is a bug.
ATOL = 1e-5


def references():
    return sorted(REFS.glob("fast_*.npz"))


@functools.lru_cache(maxsize=None)
def reference(name):
    return dict(np.load(REFS / f"{name}.npz", allow_pickle=False))


@functools.lru_cache(maxsize=None)
def processor(name):
    return ImageProcessor.from_config(json.loads(str(reference(name)["config"])))


def cases():
    for path in references():
        keys = np.load(path, allow_pickle=False).files
        for key in sorted({k.rsplit("/", 1)[0] for k in keys if "/" in k}):
            yield pytest.param(path.stem, key, id=f"{path.stem}-{key}")


@pytest.mark.parametrize("name,key", list(cases()))
def test_matches_transformers_fast(name, key):
    ref = reference(name)
    proc = processor(name)
    assert type(proc).__name__ == str(ref["class"])
    assert image_cases.pixels_digest(loaded(key)) == str(ref[f"{key}/digest"])
    if f"{key}/error" in ref:
        with pytest.raises(InputError):
            proc(loaded(key))
        return
    assert compare(proc(loaded(key)), ref, key) <= ATOL


def test_every_fast_family_has_references():
    recorded = {str(reference(p.stem)["class"]) for p in references()}
    from transmuter.preprocess.image_processor import _REGISTRY
    fast = {name for name in _REGISTRY if name.endswith("Fast")}
    assert fast == recorded


def test_float_bilinear_path_rounds_half_to_even():
    # the float32 path (ATen's DEFAULT kernels): upscaling 2 pixels [0, 1] to 4 gives weights
    # 1, 0.75/0.25, 0.25/0.75, 1 -> 0, 0.25, 0.75, 1 -> rounds to 0, 0, 1, 1
    image = np.array([[[0], [1]]], np.uint8)
    out = R.resize(image, (1, 4), R.BILINEAR, native_uint8_bilinear=False)
    np.testing.assert_array_equal(out[0, :, 0], [0, 0, 1, 1])


@pytest.mark.parametrize("change,match", [
    ({"resample": 4}, "torchvision resizes tensors"),
    ({"size": {"width": 32}}, "key sets"),
    ({"do_center_crop": True, "crop_size": {"shortest_edge": 30}}, "crop_size must have"),
])
def test_bad_fast_options_are_errors(change, match):
    config = json.loads(str(reference("fast_vit")["config"])) | change
    with pytest.raises(InputError, match=match):
        ImageProcessor.from_config(config)(loaded("coffee"))


def test_null_options_take_the_fast_class_defaults():
    config = json.loads(str(reference("fast_vit")["config"]))
    proc = ImageProcessor.from_config(config | {"do_normalize": None, "crop_pct": 0.9})
    assert proc.do_normalize and proc.ignored == ["crop_pct"]
