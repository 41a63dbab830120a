"""Image loading and image processors against transformers' (4.57, slow / Pillow processors).

The references are tests/fixtures/image_processors/*.npz, recorded by
tests/support/record_image_processors.py (which says what each holds); the test images are
scikit-image's bundled samples, made by tests/support/image_cases.py on both sides. No torch.
"""

import base64
import functools
import io
import json
import pathlib

import numpy as np
import PIL.Image
import pytest

from transmuter.errors import InputError
from transmuter.preprocess.image.auto import image_processor_for
from transmuter.preprocess.image.load import load_image

from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

REFS = pathlib.Path(__file__).with_name("fixtures") / "image_processors"
HUB_FILES = pathlib.Path(__file__).resolve().parents[2] / "shared" / "hub-files"
FIXTURES = pathlib.Path(__file__).with_name("fixtures")

# Our steps are transformers' steps in the same dtypes, so values come out equal; what can differ
# is float32 rounding of rescale + normalize (an ulp of values up to ~2.6, ~2e-7). Anything
# bigger is a bug: a size, a filter or a step order differs.
ATOL = 1e-5


@functools.lru_cache(maxsize=None)
def reference(name):
    return dict(np.load(REFS / f"{name}.npz", allow_pickle=False))


@functools.lru_cache(maxsize=None)
def processor(name):
    ref = reference(name)
    if "config_source" in ref:
        path = HUB_FILES / str(ref["config_source"])
        if not path.is_file():
            pytest.skip(f"needs ../shared/hub-files ({ref['config_source']})")
        config = json.loads(path.read_text())
    else:
        config = json.loads(str(ref["config"]))
    return image_processor_for(config)


@functools.lru_cache(maxsize=None)
def loaded(case):
    return load_image(image_cases.make(case))


def slow_references():
    """The slow processors' references (fast_*.npz are tests/test_fast_image_processor.py's)."""
    return [p for p in sorted(REFS.glob("*.npz")) if not p.stem.startswith("fast_")]


def cases():
    for path in slow_references():
        keys = np.load(path, allow_pickle=False).files
        for key in sorted({k.rsplit("/", 1)[0] for k in keys if "/" in k} - {"batch"}):
            yield pytest.param(path.stem, key, id=f"{path.stem}-{key}")


def batch_sets():
    return [p.stem for p in slow_references()
            if "batch/cases" in np.load(p, allow_pickle=False).files]


def compare(ours, ref, key, atol=ATOL):
    """Max abs difference of pixel_values (strided as recorded), after the exact checks."""
    expected = ref[f"{key}/pixel_values"]
    stride = int(ref.get(f"{key}/stride", 1))
    got = ours["pixel_values"]
    assert got.dtype == np.float32
    if stride > 1:
        assert got.shape == tuple(ref[f"{key}/shape"])
        # the full array's sum: each of n values may differ by ATOL
        assert abs(got.astype(np.float64).sum() - ref[f"{key}/sum"]) <= atol * got.size
        got = got[:, ::stride, ::stride]
    assert got.shape == expected.shape
    assert ours["original_size"] == tuple(ref[f"{key}/original_size"])
    assert ours["size"] == tuple(ref[f"{key}/size"])
    if f"{key}/pixel_mask" in ref:
        mask = ours["pixel_mask"] if stride == 1 else ours["pixel_mask"][::stride, ::stride]
        assert mask.dtype == np.int64
        np.testing.assert_array_equal(mask, ref[f"{key}/pixel_mask"])
    else:
        assert "pixel_mask" not in ours
    diff = float(np.max(np.abs(got - expected))) if got.size else 0.0
    assert diff <= atol, f"max abs difference {diff:.3g}"
    return diff


@pytest.mark.parametrize("name,key", list(cases()))
def test_matches_transformers(name, key):
    ref = reference(name)
    proc = processor(name)
    direct = key.startswith("direct:")
    case = key.split(":", 1)[1] if direct else key
    if not direct:
        # load_image equals transformers' load_image (EXIF, mode conversion, array reading)
        assert image_cases.pixels_digest(loaded(case)) == str(ref[f"{key}/digest"]), \
            "our load_image made other pixels than transformers' load_image"
    if f"{key}/ambiguous" in ref:
        pytest.skip(f"transformers mistakes the channel axis here: {ref[f'{key}/ambiguous']}")
    image = image_cases.make(case) if direct else loaded(case)
    if f"{key}/error" in ref:
        with pytest.raises(InputError):
            proc(image)
        return
    compare(proc(image), ref, key)


@pytest.mark.parametrize("name", batch_sets())
def test_pad_matches_transformers(name):
    ref = reference(name)
    proc = processor(name)
    features = [proc(loaded(str(c))) for c in ref["batch/cases"]]
    batch = proc.pad(features)
    expected = ref["batch/pixel_values"]
    got = batch["pixel_values"]
    if "batch/stride" in ref:
        s = int(ref["batch/stride"])
        assert got.shape == tuple(ref["batch/shape"])
        got, mask = got[:, :, ::s, ::s], batch.get("pixel_mask")
        mask = None if mask is None else mask[:, ::s, ::s]
    else:
        mask = batch.get("pixel_mask")
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
    if "batch/pixel_mask" in ref:
        np.testing.assert_array_equal(mask, ref["batch/pixel_mask"])
    else:
        assert mask is None
    np.testing.assert_array_equal(batch["original_size"], [f["original_size"] for f in features])


# --- pad to a fixed size, stacking --------------------------------------------------------------

def test_pad_to_a_larger_fixed_size():
    proc = processor("detr_32")
    features = [proc(loaded(c)) for c in ("coffee", "coffee_tall")]
    batch = proc.pad(features, height=64, width=80)
    assert batch["pixel_values"].shape == (2, 3, 64, 80)
    for row, f in enumerate(features):
        h, w = f["pixel_values"].shape[1:]
        np.testing.assert_array_equal(batch["pixel_values"][row, :, :h, :w], f["pixel_values"])
        assert not batch["pixel_values"][row, :, h:].any()
        assert not batch["pixel_values"][row, :, :, w:].any()
        assert batch["pixel_mask"][row].sum() == h * w and batch["pixel_mask"][row, :h, :w].all()
    with pytest.raises(InputError, match="Cannot pad"):
        proc.pad(features, height=16, width=80)


def test_fixed_size_families_stack():
    proc = processor("vit")
    features = [proc(loaded(c)) for c in ("coffee", "camera_L")]
    batch = proc.pad(features)
    assert batch["pixel_values"].shape == (2, 3, 32, 32) and "pixel_mask" not in batch
    np.testing.assert_array_equal(batch["size"], [[32, 32], [32, 32]])
    np.testing.assert_array_equal(batch["original_size"], [[400, 600], [512, 512]])
    with pytest.raises(InputError, match="does not pad"):
        proc.pad(features, height=48, width=48)
    dpt = processor("dpt_keep_aspect")
    with pytest.raises(InputError, match="does not pad"):
        dpt.pad([dpt(loaded("coffee")), dpt(loaded("coffee_tall"))])
    with pytest.raises(InputError, match="at least one"):
        proc.pad([])


# --- loading ------------------------------------------------------------------------------------

def test_load_image_sources(tmp_path):
    data = image_cases.make("chelsea_png_bytes")
    want = np.asarray(loaded("chelsea_png_bytes"))
    path = tmp_path / "chelsea.png"
    path.write_bytes(data)
    for source in (str(path), path, bytearray(data), memoryview(data),
                   base64.b64encode(data).decode(),
                   "data:image/png;base64," + base64.b64encode(data).decode(),
                   PIL.Image.open(io.BytesIO(data))):
        image = load_image(source)
        assert image.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(image), want)


def test_processor_takes_any_load_image_source():
    proc = processor("vit")
    data = image_cases.make("chelsea_png_bytes")
    np.testing.assert_array_equal(proc(data)["pixel_values"],
                                  proc(loaded("chelsea_png_bytes"))["pixel_values"])


def test_exif_orientation_is_applied():
    # orientation 6: the stored 360x240 pixels are shown rotated, 240 wide and 360 tall
    assert loaded("coffee_jpeg_exif6").size == (240, 360)
    raw = PIL.Image.open(io.BytesIO(image_cases.make("coffee_jpeg_exif6")))
    assert raw.size == (360, 240)


@pytest.mark.parametrize("source,match", [
    (b"not an image at all", "bytes of 19 bytes is not an image"),
    (12345, "Cannot read an image from a builtins.int"),
    ([1, 2, 3], "builtins.list"),
    (np.zeros((2, 3, 4, 5), np.uint8), "2 or 3 dimensions"),
    (np.zeros((5, 6, 7), np.uint8), "channel axis"),
    (np.zeros((0, 4), np.uint8), "no pixels"),
    (np.full((4, 4, 3), 2.5), r"values in \[2.5, 2.5\]"),
    (np.full((4, 4, 3), 300.0), "cannot be read as uint8"),
    ("no/such/file.png", "neither an image file"),
])
def test_load_image_errors(source, match):
    with pytest.raises(InputError, match=match):
        load_image(source)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_files_are_input_errors(fmt, tmp_path):
    data = image_cases._encoded(image_cases._pil(np.asarray(loaded("coffee"))), fmt)
    cut = data[: len(data) // 2]
    with pytest.raises(InputError, match=f"bytes of {len(cut)} bytes"):
        load_image(cut)
    path = tmp_path / f"cut.{fmt.lower()}"
    path.write_bytes(cut)
    with pytest.raises(InputError, match="cut"):
        load_image(path)


def test_missing_path_is_named(tmp_path):
    with pytest.raises(InputError, match="missing.png"):
        load_image(tmp_path / "missing.png")


# --- configs ------------------------------------------------------------------------------------

def test_unknown_processor_type_lists_supported(monkeypatch):
    with pytest.raises(InputError, match="'Idefics3ImageProcessor'.*supported: .*ViTImage"):
        image_processor_for(
            json.loads((FIXTURES / "vit" / "preprocessor_config.json").read_text())
            | {"image_processor_type": "Idefics3ImageProcessor"})
    with pytest.raises(InputError, match="names no image_processor_type"):
        image_processor_for({"do_resize": True})
    # a Fast type of a family whose fast processor is not implemented (every registered family
    # has one now: a stand-in) is refused with a hint at the slow one
    from transmuter.preprocess.image.auto import PROCESSORS
    monkeypatch.setitem(PROCESSORS, "ToyImageProcessor", PROCESSORS["ViTImageProcessor"])
    with pytest.raises(InputError, match="torchvision.*ToyImageProcessor to accept"):
        image_processor_for({"image_processor_type": "ToyImageProcessorFast"})


def test_the_committed_fixture_configs_are_supported():
    for name in ("vit", "clip", "siglip", "detr", "yolos", "segformer", "dpt"):
        config = json.loads((FIXTURES / name / "preprocessor_config.json").read_text())
        assert type(image_processor_for(config)).__name__ == config["image_processor_type"]


@pytest.mark.parametrize("change,match", [
    ({"resample": 7}, "resample=7 is not a Pillow filter"),
    ({"resample": None}, "without a resample"),
    ({"size": {"shortest_edge": 32}}, "size must have the keys"),
    ({"size": {"width": 32}}, "key sets"),
    ({"rescale_factor": None}, "without a rescale_factor"),
    ({"image_mean": [0.5, 0.5]}, "image_mean has 2 values"),
])
def test_bad_options_are_errors(change, match):
    config = json.loads((FIXTURES / "vit" / "preprocessor_config.json").read_text()) | change
    with pytest.raises(InputError, match=match):
        image_processor_for(config)(loaded("coffee"))


def test_options_transformers_ignores_are_listed():
    config = json.loads((FIXTURES / "vit" / "preprocessor_config.json").read_text())
    proc = image_processor_for(config | {"crop_pct": 0.9, "processor_class": "X"})
    assert proc.ignored == ["crop_pct"]


def test_non_rgb_pil_image_without_conversion_is_refused():
    with pytest.raises(InputError, match="mode 'L'.*load_image"):
        processor("vit")(image_cases.make("camera_L"))


@pytest.mark.parametrize("size", [{"shortest_edge": None}, {"height": 0, "width": 8},
                                  {"shortest_edge": "224"}, {"height": True, "width": 8}])
def test_a_size_that_is_no_positive_number_is_an_input_error(size):
    # issue 14 (fuzz 20261202:6645: a clip repo's preprocessor_config.json with size
    # {"shortest_edge": null}): a TypeError deep in the resize before; a longest_edge of null
    # stays "no cap"
    from transmuter.preprocess.image.sizes import size_dict
    with pytest.raises(InputError, match=r"size\['\w+'\] = .*: a size must be a positive number"):
        size_dict(size)
    assert size_dict({"shortest_edge": 224, "longest_edge": None})["shortest_edge"] == 224


@pytest.mark.parametrize("options", [
    {},                                                   # rescale + normalize (0.5 / 0.5)
    {"do_normalize": False},                              # rescale alone
    {"do_rescale": False},                                # normalize of raw bytes
    {"image_mean": [0.48145466, 0.4578275, 0.40821073],   # CLIP's, rounding to odd float32s
     "image_std": [0.26862954, 0.26130258, 0.27577711], "rescale_factor": 0.00392156862745098},
])
def test_the_byte_table_gives_the_bits_of_the_steps(options):
    """rescale_normalize looks uint8 pixels up in a per-channel table of the same steps; exact
    equality (not ATOL) with transformers' step-by-step order on every byte value: the steps are
    elementwise in the same dtypes, so any difference is a bug in the table."""
    proc = image_processor_for({"image_processor_type": "ViTImageProcessor", **options})
    every = np.arange(256, dtype=np.uint8).reshape(16, 16)  # each byte value in each channel
    pixels = np.stack([every, every.T, every[::-1]], axis=-1)
    looked_up = proc.rescale_normalize(pixels)
    assert looked_up.dtype == np.float32
    np.testing.assert_array_equal(looked_up, proc._rescale_normalize(pixels))


def test_a_pil_image_and_its_array_give_the_same_pixels():
    """The resize-first families resize the PIL image itself (transform_image); transform, which
    other families and subclasses use, resizes its array: the same pixels."""
    image = PIL.Image.fromarray(
        np.random.default_rng(1).integers(0, 256, (300, 410, 3), dtype=np.uint8))
    for kind in ("ViTImageProcessor", "CLIPImageProcessor"):
        proc = image_processor_for({"image_processor_type": kind})
        (a, size_a), (b, size_b) = proc.transform_image(image), proc.transform(np.asarray(image))
        np.testing.assert_array_equal(a, b)
        assert size_a == size_b
