"""References of the sam2 fixture (tests/test_pipelines_mask_generation.py), recorded on the
PyTorch model that families_sam2.py saved beside the ONNX files it exported (its weights' sha256
is in the fixture's manifest; checked here). Run in the fast venv: Sam2's only image processor is
Sam2ImageProcessorFast, which needs torchvision (requirements-fast.txt):

    ~/.cache/transmuter-tests/venv-fast/bin/python tests/support/record_sam2.py

1. The fixture's preprocessor_config.json is what Sam2ImageProcessorFast saves with its options.
2. references/sam2.json "prompts": Sam2Processor(images, input_points / input_labels /
   input_boxes) -> Sam2Model -> post_process_masks (binarized at 0.0), iou_scores and
   object_score_logits, for the calls in PROMPTS.
3. references/sam2.json "automatic": transformers' pipeline("mask-generation") for the calls in
   AUTOMATIC (torchvision's batched_nms itself here).
Masks are stored in references/sam2_masks.npz as in record_sam.py. The steps are record_sam.py's,
written again: that module imports onnx and onnxruntime (through families_vision_audio.py), which
this venv lacks, and Sam2's processor calls differ (no reshaped_input_sizes, boxes).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import image_cases  # noqa: E402

FX = HERE.parent / "fixtures" / "sam2"
TORCH_DIR = Path(os.environ.get("TRANSMUTER_VENVS", Path.home() / ".cache" / "transmuter-tests")) / "sam2-torch"
PHOTOS = ["chelsea", "coffee_tall", "ihc_257x129"]
# per image, as our pipeline takes them: input_points [prompt][point][x, y], input_labels
# [prompt][point], input_boxes [box][x0, y0, x1, y1], in original pixels
PROMPTS = [
    {"input_points": [[[120, 80]]], "input_labels": [[1]]},
    {"input_points": [[[30, 40]], [[100, 200]], [[10, 120]]], "input_labels": [[1], [1], [1]]},
    {"input_points": [[[60, 50], [110, 100]]], "input_labels": [[1, 0]]},
    {"input_points": [[[80, 90], [20, 20]]]},  # labels default to 1 (Sam2Model: ones)
    {"input_boxes": [[10, 20, 200, 110], [0, 0, 90, 60]]},
    {"input_points": [[[70, 60]]], "input_labels": [[1]], "input_boxes": [[20, 10, 150, 120]]},
]
AUTOMATIC = [
    {"points_per_crop": 4, "points_per_batch": 8, "pred_iou_thresh": 0.0, "stability_score_thresh": 0.0},
    {"points_per_crop": 4, "points_per_batch": 16, "pred_iou_thresh": 0.3, "stability_score_thresh": 0.0,
     "crops_nms_thresh": 1.0, "output_bboxes_mask": True},
    {"points_per_crop": 4, "points_per_batch": 4, "pred_iou_thresh": 0.0, "stability_score_thresh": 0.3,
     "stability_score_offset": 0.5, "crops_nms_thresh": 0.5},
    {"points_per_crop": 6, "points_per_batch": 12, "mask_threshold": 1.0, "pred_iou_thresh": 0.2,
     "stability_score_thresh": 0.1, "output_bboxes_mask": True, "output_rle_mask": True},
    {"points_per_crop": 4, "points_per_batch": 16},  # transformers' thresholds (0.88 / 0.95)
]


def load():
    from transformers import Sam2ImageProcessorFast, Sam2Model

    manifest = json.loads((FX / "manifest.json").read_text())
    digest = hashlib.sha256((TORCH_DIR / "model.safetensors").read_bytes()).hexdigest()
    assert any(digest in note for note in manifest["notes"]), "not the model the fixture's graphs hold"
    config = json.loads((FX / "preprocessor_config.json").read_text())
    proc = Sam2ImageProcessorFast(**{k: v for k, v in config.items() if k != "image_processor_type"})
    with tempfile.TemporaryDirectory() as tmp:
        proc.save_pretrained(tmp)
        saved = json.loads((Path(tmp) / "preprocessor_config.json").read_text())
    assert saved == config, {k: (saved.get(k), config.get(k)) for k in set(saved) | set(config)
                             if saved.get(k) != config.get(k)}
    return Sam2Model.from_pretrained(TORCH_DIR).eval(), proc


def put_mask(masks, key, mask):
    mask = np.asarray(mask, bool)
    masks[f"{key}/bits"] = np.packbits(mask)
    masks[f"{key}/shape"] = np.array(mask.shape, np.int32)
    return key


def record_prompts(model, proc, images, masks):
    from transformers import Sam2Processor

    processor = Sam2Processor(image_processor=proc)
    calls = []
    for c, kwargs in enumerate(PROMPTS):
        outputs = []
        for i, image in enumerate(images):
            batch = {k: [v] for k, v in kwargs.items()}  # one image: Sam2Processor's outer level
            inputs = processor(images=image, return_tensors="pt", **batch)
            with torch.no_grad():
                out = model(**inputs, multimask_output=True)
            logits = processor.post_process_masks(out.pred_masks, inputs["original_sizes"], binarize=False)[0]
            key = put_mask(masks, f"prompts/{c}/{i}", logits.numpy() > 0.0)
            masks[f"prompts/{c}/{i}/near"] = np.packbits(np.abs(logits.numpy()) < 1e-3)
            outputs.append({"masks": key, "iou_scores": out.iou_scores[0].tolist(),
                            "object_score_logits": out.object_score_logits[0].tolist()})
            area = (logits > 0).float().mean((-1, -2))
            print(f"prompts {c} photo {i}: iou {np.round(out.iou_scores[0].numpy(), 3).tolist()}, "
                  f"mask area {np.round(area.numpy(), 3).tolist()}")
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
    return calls


def record_automatic(model, proc, images, masks):
    from transformers import pipeline

    p = pipeline("mask-generation", model=model, image_processor=proc, device="cpu")
    calls = []
    for c, kwargs in enumerate(AUTOMATIC):
        outputs = []
        for i, image in enumerate(images):
            out = p(image, **kwargs)
            assert set(out) <= {"masks", "scores", "bounding_boxes", "rle_mask"}, sorted(out)
            result = {"masks": [put_mask(masks, f"automatic/{c}/{i}/{m}", mask) for m, mask in enumerate(out["masks"])],
                      "scores": out["scores"].tolist()}
            if "bounding_boxes" in out:
                result["bounding_boxes"] = out["bounding_boxes"].tolist()
            if "rle_mask" in out:
                result["rle_mask"] = out["rle_mask"]
            outputs.append(result)
            print(f"automatic {c} photo {i}: {len(out['masks'])} masks, scores "
                  f"{np.round(out['scores'].numpy(), 3).tolist()}")
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
    # This tiny random SAM 2's masks follow the photo more than the point (localize() sharpens
    # them less than SAM's), so NMS at 0.7 keeps one mask; the call without NMS (crops_nms_thresh
    # 1.0) keeps every mask, with scores that differ point by point: the grid's scaling shows there.
    kept = calls[1]["outputs"]
    assert min(len({round(s, 4) for s in o["scores"]}) for o in kept) >= 10, "references that cannot discriminate"
    return calls


def save_npz(path, arrays):
    """families_vision_audio.save_npz (fixed zip timestamps: reruns are byte-identical); that module
    needs onnx, which this venv lacks."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def main():
    model, proc = load()
    images = [image_cases.make(name).convert("RGB") for name in PHOTOS]
    masks = {}
    prompts = record_prompts(model, proc, images, masks)
    automatic = record_automatic(model, proc, images, masks)
    save_npz(FX / "references" / "sam2_masks.npz", masks)
    (FX / "references" / "sam2.json").write_text(json.dumps(
        {"task": "mask-generation",
         "inputs": {"photos": PHOTOS, "how_made": "tests/support/image_cases.py make(name)"},
         "mask_encoding": "sam2_masks.npz: '<key>/bits' = np.packbits(mask), '<key>/shape' = its shape; "
         "prompts also '<key>/near' = np.packbits(|logit| < 1e-3)",
         "prompts": prompts, "automatic": automatic}, indent=1) + "\n")


if __name__ == "__main__":
    main()
