"""References of the sam fixture (tests/test_pipelines_mask_generation.py), recorded on the
PyTorch model families_sam.py builds (rebuilt here, seeded: check 1 fails if it is not the model
the ONNX files hold).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_sam.py

1. onnxruntime equals PyTorch on every photo below: vision_encoder.onnx against
   SamModel.get_image_embeddings / get_image_wide_positional_embeddings, and
   prompt_encoder_mask_decoder.onnx against SamModel(image_embeddings=..., multimask_output=True).
2. references/sam.json "prompts": SamProcessor(images, input_points, input_labels) -> SamModel ->
   SamProcessor.post_process_masks (binarized at 0.0) and iou_scores, for the calls in PROMPTS.
3. references/sam.json "automatic": transformers' pipeline("mask-generation") for the calls in
   AUTOMATIC (a 4x4 point grid: points_per_crop 4, so it stays fast).
Masks are stored in references/sam_masks.npz as np.packbits of the boolean mask with its shape.

torchvision: transformers' post_process_for_mask_generation calls torchvision.ops.batched_nms, and
PyPI's torchvision wheels are CUDA builds that do not load beside the CPU torch of the export venv.
`batched_nms` below stands in for it with onnxruntime's NonMaxSuppression (an independent
implementation of the same greedy rule: sort by score, drop boxes whose IoU with a kept one
exceeds the threshold; equal scores keep index order in both). transformers calls it with all
idxs 0 (one class), so batched_nms is plain NMS; the stand-in asserts that.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import families_sam as fam  # noqa: E402
import image_cases  # noqa: E402
from families_vision_audio import FIXTURES, run, save_json, save_npz, session  # noqa: E402

FX = FIXTURES / "sam"
PHOTOS = ["chelsea", "coffee_tall", "ihc_257x129"]
# prompt mode: per image, input_points [prompt][point][x, y] in original pixels, input_labels [prompt][point]
PROMPTS = [
    {"input_points": [[[120, 80]]], "input_labels": [[1]]},
    {"input_points": [[[30, 40]], [[100, 200]], [[10, 120]]], "input_labels": [[1], [1], [1]]},
    {"input_points": [[[60, 50], [110, 100]]], "input_labels": [[1, 0]]},
    {"input_points": [[[80, 90], [20, 20]]]},  # labels default to 1 (SamModel: ones)
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


def batched_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms for one class, by onnxruntime's NonMaxSuppression (see above)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if len(boxes) == 0:
        return torch.empty(0, dtype=torch.int64)
    assert bool((idxs == idxs[0]).all()), "the stand-in handles one class (transformers passes zeros)"
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["keep"])], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, None]),
         helper.make_tensor_value_info("max", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("keep", TensorProto.INT64, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    keep = sess.run(None, {"boxes": boxes.numpy()[None].astype(np.float32),
                           "scores": scores.numpy()[None, None].astype(np.float32),
                           "max": np.array([len(boxes)], np.int64),
                           "iou": np.array([iou_threshold], np.float32)})[0]
    return torch.as_tensor(keep[:, 2])


def check_onnxruntime(model, proc, images):
    encoder = session(FX / "onnx" / "vision_encoder.onnx")
    decoder = session(FX / "onnx" / "prompt_encoder_mask_decoder.onnx")
    for name, image in zip(PHOTOS, images):
        pixels = proc(images=image, return_tensors="pt")["pixel_values"]
        got = run(encoder, {"pixel_values": pixels.numpy()})
        with torch.no_grad():
            embeddings = model.get_image_embeddings(pixels)
            positional = model.get_image_wide_positional_embeddings()
        np.testing.assert_allclose(got["image_embeddings"], embeddings.numpy(), rtol=0, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(got["image_positional_embeddings"][0], positional[0].numpy(), rtol=0, atol=1e-5)
        points = torch.tensor([[[[20.0, 30.0]], [[100.0, 64.0]]]])
        labels = torch.ones(1, 2, 1, dtype=torch.int64)
        out = run(decoder, {"input_points": points.numpy(), "input_labels": labels.numpy(), **got})
        with torch.no_grad():
            want = model(image_embeddings=embeddings, input_points=points, input_labels=labels, multimask_output=True)
        np.testing.assert_allclose(out["iou_scores"], want.iou_scores.numpy(), rtol=0, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(out["pred_masks"], want.pred_masks.numpy(), rtol=0, atol=1e-3, err_msg=name)
        print(f"onnxruntime == torch on {name}: pred_masks {out['pred_masks'].shape}, "
              f"max |diff| {np.abs(out['pred_masks'] - want.pred_masks.numpy()).max():.2e}")


def put_mask(masks, key, mask):
    mask = np.asarray(mask, bool)
    masks[f"{key}/bits"] = np.packbits(mask)
    masks[f"{key}/shape"] = np.array(mask.shape, np.int32)
    return key


def record_prompts(model, proc, images, masks):
    from transformers import SamProcessor

    processor = SamProcessor(image_processor=proc)
    calls = []
    for c, kwargs in enumerate(PROMPTS):
        outputs = []
        for i, image in enumerate(images):
            batch = {k: [v] for k, v in kwargs.items()}  # one image: SamProcessor's outer level
            inputs = processor(images=image, return_tensors="pt", **batch)
            with torch.no_grad():
                out = model(**inputs, multimask_output=True)
            # the logits too: the test names pixels within float noise of the threshold
            logits = processor.post_process_masks(out.pred_masks, inputs["original_sizes"],
                                                  inputs["reshaped_input_sizes"], binarize=False)[0]
            key = put_mask(masks, f"prompts/{c}/{i}", logits.numpy() > 0.0)
            masks[f"prompts/{c}/{i}/near"] = np.packbits(np.abs(logits.numpy()) < 1e-3)
            outputs.append({"masks": key, "iou_scores": out.iou_scores[0].tolist()})
            area = (logits > 0).float().mean((-1, -2))
            print(f"prompts {c} photo {i}: iou {np.round(out.iou_scores[0].numpy(), 3).tolist()}, "
                  f"mask area {np.round(area.numpy(), 3).tolist()}")
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
    return calls


def record_automatic(model, proc, images, masks):
    import transformers.models.sam.image_processing_sam as sam_processing
    from transformers import pipeline

    sam_processing.batched_nms = batched_nms
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
    assert max(len(o["masks"]) for o in calls[0]["outputs"]) >= 3, "references that cannot discriminate"
    return calls


def main():
    model, proc = fam.build_model()
    images = [image_cases.make(name).convert("RGB") for name in PHOTOS]
    check_onnxruntime(model, proc, images)
    masks = {}
    prompts = record_prompts(model, proc, images, masks)
    automatic = record_automatic(model, proc, images, masks)
    save_npz(FX / "references" / "sam_masks.npz", masks)
    save_json(FX / "references" / "sam.json",
              {"task": "mask-generation",
               "inputs": {"photos": PHOTOS, "how_made": "tests/support/image_cases.py make(name)"},
               "mask_encoding": "sam_masks.npz: '<key>/bits' = np.packbits(mask), '<key>/shape' = its shape; "
               "prompts also '<key>/near' = np.packbits(|logit| < 1e-3)",
               "prompts": prompts, "automatic": automatic})


if __name__ == "__main__":
    main()
