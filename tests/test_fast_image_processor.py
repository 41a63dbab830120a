"""The `*ImageProcessorFast` families (torchvision resize, transformers' fast steps) against
transformers 4.57.6 / torchvision 0.29.1 / torch 2.14.1 on the CPU, and transformers 5's
RfDetrImageProcessor (a torchvision-backend class without "Fast") against 5.24.0 (fast_rfdetr*).

References: tests/fixtures/image_processors/fast_*.npz, recorded by
tests/support/record_fast_image_processors.py (the layout of record_image_processors.py). No torch.
"""

import functools
import json

import numpy as np
import pytest

from transmuter.errors import InputError
from transmuter.preprocess.image import resize_fast as R
from transmuter.preprocess.image.auto import image_processor_for

from .support import image_cases
from .test_image_processor import HUB_FILES, REFS, compare, loaded
from .test_image_processor import test_pad_matches_transformers as check_batch

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

# The resize is exact (uint8 in, uint8 out: ATen's integer kernel reproduced bit for bit), so what
# can differ is float32 rounding of the fused rescale + normalize: transformers computes
# (x - mean / rescale_factor) / (std / rescale_factor) in float32 as we do, but an ulp of values up
# to ~2.6 (~2.4e-7) is the most either side can move. Measured: 0.0 for every family (the same
# float32 operations in the same order). Anything bigger is a bug.
ATOL = 1e-5
# Owlv2ImageProcessorFast blurs with torchvision's gaussian_blur: one float32 convolution of
# k x k taps (k = 2 * ceil(3 sigma) + 1: 73 for 600 -> 24 px, 129 for 1024 -> 24), whose float32
# sums differ from exact ones by up to ~7e-6 in [0, 1] units (measured: torch's own float32 blur vs
# its float64 blur, 4.1e-6 on coffee); times 1 / std (up to 3.8) after the normalize. We sum in
# float64, so what remains is their rounding: measured 2.6e-5 (mosaic_1024), 1.2e-5 (coffee).
BLUR_ATOL = 5e-5


def references():
    return sorted(REFS.glob("fast_*.npz"))


@functools.lru_cache(maxsize=None)
def reference(name):
    return dict(np.load(REFS / f"{name}.npz", allow_pickle=False))


@functools.lru_cache(maxsize=None)
def processor(name):
    ref = reference(name)
    if "config_source" in ref:  # a Hub config under ../shared/hub-files, its type made Fast
        path = HUB_FILES / str(ref["config_source"])
        if not path.is_file():
            pytest.skip(f"needs ../shared/hub-files ({ref['config_source']})")
        config = json.loads(path.read_text()) | json.loads(str(ref["config_changes"]))
        return image_processor_for(config)
    return image_processor_for(json.loads(str(ref["config"])))


def cases():
    for path in references():
        keys = np.load(path, allow_pickle=False).files
        for key in sorted({k.rsplit("/", 1)[0] for k in keys if "/" in k} - {"batch"}):
            yield pytest.param(path.stem, key, id=f"{path.stem}-{key}")


@pytest.mark.parametrize("name,key", list(cases()))
def test_matches_transformers_fast(name, key):
    ref = reference(name)
    assert image_cases.pixels_digest(loaded(key)) == str(ref[f"{key}/digest"])
    if f"{key}/error" in ref:
        with pytest.raises(InputError):  # where the config is the fault: when it is read
            processor(name)(loaded(key))
        return
    proc = processor(name)
    assert str(ref["class"]) in type(proc).names  # the class transformers picked serves it
    atol = BLUR_ATOL if str(ref["class"]) == "Owlv2ImageProcessorFast" else ATOL
    compare(proc(loaded(key)), ref, key, atol=atol)


def batch_sets():
    return [p.stem for p in references() if "batch/cases" in np.load(p, allow_pickle=False).files]


@pytest.mark.parametrize("name", batch_sets())
def test_fast_pad_matches_transformers(name):
    """One call on several images: padded to the largest (or pad_size), with pixel masks."""
    check_batch(name)


# transformers 5's torchvision-backend classes (no "Fast" in the name): fast_rfdetr*.npz and
# fast_sam3.npz, recorded with transformers 5.24.0 (the recorder's SETS_5)
TORCHVISION_5 = {"RfDetrImageProcessor", "Sam3ImageProcessor"}
# earlier names of those classes, served by the same class here (transformers 5.0's Fast name)
RENAMED = {"Sam3ImageProcessorFast": "Sam3ImageProcessor"}


def test_every_fast_family_has_references():
    recorded = {str(reference(p.stem)["class"]) for p in references()}
    from transmuter.preprocess.image.auto import PROCESSORS
    fast = {RENAMED.get(name, name) for name in PROCESSORS
            if name.endswith("Fast") or name in TORCHVISION_5}
    assert fast == recorded
    for old, new in RENAMED.items():
        assert PROCESSORS[old] is PROCESSORS[new]


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
        image_processor_for(config)(loaded("coffee"))


def test_null_options_stay_none():
    # transformers sets a null key as None before the Fast __init__ fills in class defaults
    # (fast_vit_nulls and fast_detr_nulls hold its pixels); a missing key takes the default
    config = json.loads(str(reference("fast_vit")["config"]))
    proc = image_processor_for(config | {"do_normalize": None, "crop_pct": 0.9})
    assert not proc.do_normalize and proc.ignored == ["crop_pct"]
    config.pop("do_normalize")
    assert image_processor_for(config).do_normalize
