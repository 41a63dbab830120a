"""mask-generation on the split SAM exports transformers.js loads, against transformers on the
PyTorch model, on JAX and MLX:
- sam: optimum's SAM export (Xenova's layout), references/sam.json + sam_masks.npz recorded by
  tests/support/record_sam.py;
- sam2: a SAM 2 export in the onnx-community layout (points, boxes, object_score_logits),
  references/sam2.json + sam2_masks.npz recorded by tests/support/record_sam2.py;
- sam3-tracker: transformers 5's Sam3TrackerModel in the same layout (onnx-community/
  sam3-tracker-ONNX), with transformers 5's processor_config.json, references/sam3_tracker.json +
  sam3_tracker_masks.npz recorded by tests/support/families_sam3_tracker.py: prompt mode as
  Sam3TrackerProcessor + onnxruntime + post_process_masks, PyTorch's scores beside onnxruntime's;
all on scikit-image photos: prompt mode as Sam(2)Processor + Sam(2)Model + post_process_masks,
automatic mode as transformers' MaskGenerationPipeline; the image embedding computed once per
image; a batch equals one by one; bad input is a clear error."""

import json

import numpy as np
import pytest

import transmuter
from transmuter.pipelines.base import PipelineError
from transmuter.pipelines.vision import sam

from .fixtures import ROOT
from .support import image_cases

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

# iou_scores (and SAM 2's object_score_logits) come out of the same float32 decoder as PyTorch's,
# summed in another order: they move by ~1e-6 (measured at most 2.6e-6); the design's bound is
# 1e-4.
SCORE_TOL = 1e-4
# Prompt mode: a mask pixel may flip only where PyTorch's upscaled logit is within 1e-3 of the
# threshold 0.0 (recorded as '<key>/near'): the decoder's float32 logits differ from PyTorch's
# by ~1e-5 (onnxruntime vs PyTorch: <= 6e-6; sam2's localized weights: <= 1.2e-4), and bilinear
# resizing does not amplify that, so 1e-3 is an 8-100x margin. Measured: no flipped pixel.
# Automatic mode keeps no logits; there a mask may differ in at most 1e-3 of its pixels for the
# same reason (measured: none on sam, one pixel of one mask on sam2).
FLIP_FRACTION = 1e-3
SCORES = {"sam": ("iou_scores",), "sam2": ("iou_scores", "object_score_logits"),
          "sam3-tracker": ("iou_scores", "object_score_logits")}


class Recorded:
    """A fixture's recorded pipeline references."""

    def __init__(self, name):
        self.name, self.dir = name, ROOT / name
        stem = name.replace("-", "_")
        self.ref = json.loads((self.dir / "references" / f"{stem}.json").read_text())
        self.masks = np.load(self.dir / "references" / f"{stem}_masks.npz")
        # automatic mode recorded on these photos (all of them unless the record says)
        self.automatic_photos = self.ref.get("automatic_photos", self.ref["inputs"]["photos"])

    def unpack(self, key, part="bits"):
        shape = self.masks[f"{key}/shape"]
        bits = np.unpackbits(self.masks[f"{key}/{part}"])[: int(np.prod(shape))]
        return bits.reshape(shape).astype(bool)


RECORDED = {name: Recorded(name) for name in SCORES}
FX, REF = RECORDED["sam"].dir, RECORDED["sam"].ref
_PIPES = {}


def pipe(backend, fixture="sam"):
    if (backend, fixture) not in _PIPES:
        _PIPES[backend, fixture] = transmuter.pipeline("mask-generation", ROOT / fixture,
                                                       backend=backend)
    return _PIPES[backend, fixture]


def photos(fixture="sam"):
    return [image_cases.make(name).convert("RGB")
            for name in RECORDED[fixture].ref["inputs"]["photos"]]


def unpack(key, part="bits"):
    return RECORDED["sam"].unpack(key, part)


def check_prompts(got, want, where, recorded=RECORDED["sam"]):
    expected, near = recorded.unpack(want["masks"]), recorded.unpack(want["masks"], "near")
    assert set(got) == {"masks", *SCORES[recorded.name]}, where
    assert got["masks"].dtype == bool and got["masks"].shape == expected.shape, where
    flipped = got["masks"] != expected
    assert not (flipped & ~near).any(), (where, int((flipped & ~near).sum()))
    assert got["iou_scores"].shape == (expected.shape[0], 3), where
    for key in SCORES[recorded.name]:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=SCORE_TOL, err_msg=where)
        if "torch" in want:  # sam3-tracker: PyTorch's scores beside onnxruntime's, same bound
            np.testing.assert_allclose(got[key], want["torch"][key], rtol=0, atol=SCORE_TOL,
                                       err_msg=f"{where} torch")


def check_automatic(got, want, where, recorded=RECORDED["sam"]):
    expected_keys = {"masks", "scores"} | {k for k in ("bounding_boxes", "rle_mask") if k in want}
    assert set(got) == expected_keys, where
    assert len(got["masks"]) == len(want["masks"]), (where, len(got["masks"]), len(want["masks"]))
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=0, atol=SCORE_TOL, err_msg=where)
    for m, (mask, key) in enumerate(zip(got["masks"], want["masks"])):
        expected = recorded.unpack(key)
        assert mask.dtype == bool and mask.shape == expected.shape, where
        assert (mask != expected).sum() <= FLIP_FRACTION * expected.size, (where, m)
    if "bounding_boxes" in want:
        boxes = np.asarray(want["bounding_boxes"]).reshape(-1, 4)
        assert got["bounding_boxes"].dtype == np.int64
        # a box moves only with a flipped edge pixel
        assert np.abs(got["bounding_boxes"] - boxes).max(initial=0) <= 1, where
    if "rle_mask" in want:
        for rle, mask in zip(got["rle_mask"], got["masks"]):
            assert np.array_equal(sam.rle_to_mask(rle), mask), where
        if all(np.array_equal(m, recorded.unpack(k)) for m, k in zip(got["masks"], want["masks"])):
            assert got["rle_mask"] == want["rle_mask"], where


def test_references_discriminate():
    """Prompts give masks that differ (between prompts, and between the three outputs), and the
    automatic calls keep several distinct masks: a fixture whose points all gave one mask would
    pass anything (families_sam.localize)."""
    for call in REF["prompts"]:
        for out in call["outputs"]:
            masks = unpack(out["masks"]).reshape(-1, *unpack(out["masks"]).shape[-2:])
            assert len({m.tobytes() for m in masks}) == len(masks)
    counts = [[len(o["masks"]) for o in call["outputs"]] for call in REF["automatic"]]
    assert min(counts[0]) >= 2 and min(counts[1]) >= 15 and counts[-1] == [0, 0, 0]
    for out in REF["automatic"][1]["outputs"]:
        assert len({unpack(k).tobytes() for k in out["masks"]}) == len(out["masks"])


@pytest.mark.parametrize("family,least", [("sam2", 40), ("sam3-tracker", 30)])
def test_sam2_family_references_discriminate(family, least):
    """The family's prompts give distinct masks (between prompts and between the three outputs),
    boxes alone among them. Its automatic calls keep one mask after NMS at 0.7 (these tiny random
    models' masks follow the photo more than the point), so the call without NMS carries the
    check: it keeps ~40 masks (sam2 42-48) whose scores differ point by point, which a wrongly
    scaled grid would change."""
    recorded = RECORDED[family]
    assert any("input_boxes" in call["call_kwargs"] and "input_points" not in call["call_kwargs"]
               for call in recorded.ref["prompts"])
    for call in recorded.ref["prompts"]:
        for out in call["outputs"]:
            masks = recorded.unpack(out["masks"])
            masks = masks.reshape(-1, *masks.shape[-2:])
            assert len({m.tobytes() for m in masks}) == len(masks)
    for out in recorded.ref["automatic"][1]["outputs"]:
        assert len(out["masks"]) >= least and len({round(s, 4) for s in out["scores"]}) >= 10


@pytest.mark.parametrize("fixture", list(RECORDED))
@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_prompts_match_transformers(backend, fixture):
    p, recorded = pipe(backend, fixture), RECORDED[fixture]
    for call in recorded.ref["prompts"]:
        for i, (image, want) in enumerate(zip(photos(fixture), call["outputs"], strict=True)):
            check_prompts(p(image, **call["call_kwargs"]), want, f"{call['call_kwargs']} photo {i}",
                          recorded)


@pytest.mark.parametrize("fixture", list(RECORDED))
@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_automatic_matches_transformers(backend, fixture):
    p, recorded = pipe(backend, fixture), RECORDED[fixture]
    images = [image_cases.make(name).convert("RGB") for name in recorded.automatic_photos]
    for call in recorded.ref["automatic"]:
        for i, (image, want) in enumerate(zip(images, call["outputs"], strict=True)):
            where = f"{call['call_kwargs']} photo {i}"
            check_automatic(p(image, **call["call_kwargs"]), want, where, recorded)


def counting(p):
    """Count the graph runs of ``p`` per model (encoder / decoder)."""
    runs = {"encoder": 0, "decoder": 0}
    run = p._run_model

    def counted(feed, model=None, **kw):
        runs["decoder" if model is p.decoder else "encoder"] += 1
        return run(feed, model=model, **kw)

    p._run_model = counted
    return runs


def test_image_encoded_once_per_image():
    p = transmuter.pipeline("mask-generation", FX, backend="mlx")
    runs = counting(p)
    image = photos()[0]
    p(image, input_points=[[[30, 40]], [[100, 200]], [[10, 120]]])
    assert runs == {"encoder": 1, "decoder": 1}  # three prompts, one decoder run
    p(image, points_per_crop=4, points_per_batch=4, pred_iou_thresh=0.0, stability_score_thresh=0.0)
    assert runs == {"encoder": 2, "decoder": 5}  # 16 points in batches of 4, one encoder run
    p(photos(), input_points=[[[30, 40]]], batch_size=4)
    # three images of one padded size: one encoder batch, a decoder run each
    assert runs == {"encoder": 3, "decoder": 8}


def test_batch_equals_one_by_one():
    p = pipe("mlx")
    images = photos()
    for kwargs in (REF["prompts"][1]["call_kwargs"], REF["automatic"][0]["call_kwargs"]):
        one = [p(x, **kwargs) for x in images]
        for got, want in zip(p(images, batch_size=2, **kwargs), one):
            assert got.keys() == want.keys()
            for key in got:
                assert all(np.array_equal(g, w) for g, w in zip(got[key], want[key])), key


def test_points_per_batch_need_not_divide_the_grid():
    """transformers' pipeline stops with StopIteration when points_per_batch does not divide the
    grid (its is_last is never set); here the last batch is padded and every point counts."""
    p = pipe("mlx")
    image = photos()[1]
    kwargs = {"points_per_crop": 4, "pred_iou_thresh": 0.0, "stability_score_thresh": 0.0}
    want = p(image, points_per_batch=16, **kwargs)
    for batch in (5, None):
        got = p(image, points_per_batch=batch, **kwargs)
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=0, atol=1e-6)
        assert all(np.array_equal(g, w) for g, w in zip(got["masks"], want["masks"]))


@pytest.mark.parametrize("kwargs,match", [
    ({"input_boxes": [[10, 20, 100, 200]]}, "input_boxes: this prompt_encoder_mask_decoder"),
    ({"input_points": [[[1, 2]]], "multimask_output": False}, "fixes multimask_output=True"),
    ({"crops_n_layers": 1}, "only 0"),
    ({"points_per_batch": 0}, "points_per_batch must be a positive int"),
    ({"pred_iou_thresh": "high"}, "pred_iou_thresh must be a finite number"),
    ({"max_hole_area": 10}, "post_process_masks takes neither"),
    ({"points": [[1, 2]]}, r"takes no option\(s\) \['points'\]"),
    ({"input_points": [[1, 2]]}, r"shaped \[prompts\]\[points\]\[x, y\]"),
    ({"input_points": [[[1, 2]], [[1, 2], [3, 4]]]}, "as many points in every prompt"),
    ({"input_points": [[[1, 2]]], "input_labels": [1]}, r"input_labels must be ints shaped"),
    ({"input_labels": [[1]]}, "input_labels need input_points"),
    ({"input_points": [[[1, 2]]], "points_per_batch": 8}, "apply to automatic mask generation"),
])
def test_bad_input_is_a_clear_error(kwargs, match):
    with pytest.raises(PipelineError, match=match):
        pipe("mlx")(photos()[2], **kwargs)


@pytest.mark.parametrize("kwargs,match", [
    ({"input_points": [[[1, 2]], [[3, 4]]], "input_boxes": [[0, 0, 9, 9]]},
     r"one prompt and one box .* got 2 prompt\(s\) and 1 box"),
    ({"input_points": [[[1, 2]]], "input_boxes": [[0, 0, 9, 9], [1, 1, 5, 5]]},
     r"got 1 prompt\(s\) and 2 box"),
    ({"input_boxes": [0, 0, 9, 9]}, r"shaped \[boxes\]\[x0, y0, x1, y1\]"),
    ({"input_boxes": [[0, 0, 9]]}, r"shaped \[boxes\]\[x0, y0, x1, y1\]"),
    ({"input_boxes": [[0, 0, float("nan"), 9]]}, "finite numbers"),
    ({"input_boxes": []}, r"got shape \(0,\)"),
    ({"input_boxes": [[0, 0, 9, 9]], "input_labels": [[1]]}, "input_labels need input_points"),
    ({"input_boxes": [[0, 0, 9, 9]], "points_per_batch": 8}, "apply to automatic mask generation"),
])
def test_sam2_bad_prompts_are_clear_errors(kwargs, match):
    with pytest.raises(PipelineError, match=match):
        pipe("mlx", "sam2")(photos("sam2")[2], **kwargs)


def test_sam2_image_encoded_once_and_a_batch_equals_one_by_one():
    p = transmuter.pipeline("mask-generation", ROOT / "sam2", backend="mlx")
    runs = counting(p)
    images = photos("sam2")
    boxes = {"input_boxes": [[10, 20, 200, 110], [0, 0, 90, 60]]}
    one = [p(x, **boxes) for x in images]
    assert runs == {"encoder": 3, "decoder": 3}  # two boxes, one decoder run per image
    # the photos differ in size but SAM 2 squeezes each to one square: one encoder batch
    for got, want in zip(p(images, batch_size=4, **boxes), one):
        assert got.keys() == want.keys()
        for key in got:
            assert np.array_equal(got[key], want[key]), key
    assert runs == {"encoder": 4, "decoder": 6}


def test_sam2_jax_box_and_points():
    """The default suite's JAX run of sam2 (its full JAX twins are slow, tests/conftest.py): a
    box with a point, and boxes alone (the empty-points layout)."""
    recorded = RECORDED["sam2"]
    for call in recorded.ref["prompts"][4:6]:
        check_prompts(pipe("jax", "sam2")(photos("sam2")[1], **call["call_kwargs"]),
                      call["outputs"][1], f"jax {call['call_kwargs']}", recorded)




def test_sam3_tracker_pixels_are_sam3_image_processors():
    """Sam3ImageProcessor's pixel_values (every 4th pixel, recorded by transformers 5.24) from
    the image processor read out of processor_config.json: SAM 2's Fast steps with SAM 3's mean /
    std, the same float32 operations as torchvision's (measured: equal)."""
    p, recorded = pipe("mlx", "sam3-tracker"), RECORDED["sam3-tracker"]
    assert not (recorded.dir / "preprocessor_config.json").exists()
    assert type(p.image_processor).__name__ == "Sam3ImageProcessor"
    for i, image in enumerate(photos("sam3-tracker")):
        got = p.image_processor(image)["pixel_values"][:, ::4, ::4]
        np.testing.assert_allclose(got, recorded.masks[f"pixels/{i}"], rtol=0, atol=1e-6)


def test_sam3_tracker_jax_boxes():
    """The default suite's JAX run of sam3-tracker (its full JAX twins are slow,
    tests/conftest.py): boxes alone, the empty-points layout (the graph test runs points on JAX,
    tests/test_models.py)."""
    recorded = RECORDED["sam3-tracker"]
    call = recorded.ref["prompts"][4]
    assert "input_points" not in call["call_kwargs"]
    check_prompts(pipe("jax", "sam3-tracker")(photos("sam3-tracker")[1], **call["call_kwargs"]),
                  call["outputs"][1], f"jax {call['call_kwargs']}", recorded)


def test_a_processor_config_without_the_image_processor_is_a_clear_error(tmp_path):
    import shutil

    fx = RECORDED["sam3-tracker"].dir
    shutil.copy(fx / "config.json", tmp_path / "config.json")
    (tmp_path / "processor_config.json").write_text('{"processor_class": "Sam3TrackerProcessor"}')
    shutil.copytree(fx / "onnx", tmp_path / "onnx")
    with pytest.raises(PipelineError, match="nor a processor_config.json holding an "
                                            "'image_processor'"):
        transmuter.pipeline("mask-generation", tmp_path, backend="mlx")


def test_needs_the_decoder_beside_the_encoder(tmp_path):
    import shutil

    for name in ("config.json", "preprocessor_config.json"):
        shutil.copy(FX / name, tmp_path / name)
    (tmp_path / "onnx").mkdir()
    shutil.copy(FX / "onnx" / "vision_encoder.onnx", tmp_path / "onnx" / "vision_encoder.onnx")
    with pytest.raises(PipelineError, match="no onnx/prompt_encoder_mask_decoder"):
        transmuter.pipeline("mask-generation", tmp_path, backend="mlx")


def test_jax_first_photo():
    """The default suite's JAX run: one automatic call, 17 masks (the full JAX twins of the
    reference tests compile the decoder for each prompt shape, ~10 s each: slow marker,
    tests/conftest.py; the decoder graph and its post-processing are the same for prompts)."""
    automatic = REF["automatic"][1]
    check_automatic(pipe("jax")(photos()[0], **automatic["call_kwargs"]), automatic["outputs"][0],
                    "automatic jax")


def test_nms_matches_onnxruntime():
    """sam.nms (torchvision's rule) against onnxruntime's NonMaxSuppression, the stand-in the
    references were recorded with (record_sam.py), on random boxes with tied scores and boxes
    that touch (zero-area ones too)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["keep"])], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, None]),
         helper.make_tensor_value_info("max", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("keep", TensorProto.INT64, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for case in range(20):
        n = int(rng.integers(1, 60))
        corner = rng.integers(0, 100, (n, 2))
        boxes = np.concatenate([corner, corner + rng.integers(0, 60, (n, 2))], 1).astype(np.float32)
        scores = rng.choice(np.linspace(0, 1, 8), n).astype(np.float32)  # many ties
        for threshold in (0.3, 0.7, 1.0):
            feed = {"boxes": boxes[None], "scores": scores[None, None], "max": np.array([n]),
                    "iou": np.array([threshold], np.float32)}
            want = sess.run(None, feed)[0][:, 2]
            np.testing.assert_array_equal(sam.nms(boxes, scores, threshold), want,
                                          err_msg=f"{case} {threshold}")
