"""References of the detr-panoptic fixture (tests/test_pipelines_panoptic.py), recorded on the
PyTorch model families_detr_panoptic.py builds (rebuilt here, seeded: check 1 fails if it is not
the model the ONNX file holds).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_detr_panoptic.py

1. onnxruntime equals PyTorch (logits within 1e-4, pred_masks 2e-3: see below) on every photo below, each at its
   own processed size (the export traced one size; this checks it generalizes).
2. references/panoptic.json: transformers' pipeline("image-segmentation") on scikit-image photos
   (tests/support/image_cases.py; not committed), for the calls in CALLS (panoptic, instance, a threshold option,
   the defaults, semantic): scores, labels, and each
   mask as a key into references/panoptic_masks.npz, which holds np.packbits of the mask > 0 (the
   pipeline's masks are 0 / 255) with its height and width.
3. The references can discriminate: per call, masks differ between segments, and over the photos
   several segments per image and several distinct labels occur (asserted, and printed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import families_detr_panoptic as fam  # noqa: E402
import image_cases  # noqa: E402
from families_vision_audio import FIXTURES, run, save_json, save_npz, session  # noqa: E402

FX = FIXTURES / "detr-panoptic"
TASK = "image-segmentation"
PHOTOS = ["astronaut", "coffee", "chelsea", "camera_L", "coffee_tall"]
CALLS = [
    {"subtask": "panoptic", "threshold": 0.3, "mask_threshold": 0.15, "overlap_mask_area_threshold": 0.01},
    {"subtask": "instance", "threshold": 0.3, "mask_threshold": 0.15, "overlap_mask_area_threshold": 0.01},
    {"subtask": "panoptic", "threshold": 0.8, "mask_threshold": 0.3, "overlap_mask_area_threshold": 0.1},
    {},  # transformers' defaults: subtask None -> panoptic, threshold 0.9
    {"subtask": "semantic"},  # DETR's post_process_semantic_segmentation (score None)
]


def check_onnxruntime(model, proc, images):
    sess = session(FX / "onnx" / "model.onnx")
    for name, image in zip(PHOTOS, images):
        pixels = proc(images=image, return_tensors="pt")["pixel_values"]
        got = run(sess, {"pixel_values": pixels.numpy()})
        with torch.no_grad():
            want = model(pixel_values=pixels)
        np.testing.assert_allclose(got["logits"], want["logits"].numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
        # separate_queries() amplifies the mask head's attention-map channels 100x (and sharpens the
        # attention 20x): float32 summation-order noise reaches ~8e-4 in these mask logits
        np.testing.assert_allclose(got["pred_masks"], want["pred_masks"].numpy(), rtol=0, atol=2e-3,
                                   err_msg=f"{name} pred_masks")
        print(f"onnxruntime == torch on {name} {tuple(pixels.shape[2:])}: pred_masks {got['pred_masks'].shape}")


def record_pipeline(model, proc, images):
    from transformers import pipeline

    p = pipeline(TASK, model=model, image_processor=proc, device="cpu")
    masks, calls = {}, []
    for c, kwargs in enumerate(CALLS):
        outputs = []
        for i, image in enumerate(images):
            results = []
            for s, r in enumerate(p(image, **kwargs)):
                mask = np.asarray(r["mask"]) > 0
                key = f"{c}/{i}/{s}"
                masks[f"{key}/bits"] = np.packbits(mask)
                masks[f"{key}/shape"] = np.array(mask.shape, np.int32)
                results.append({"score": r["score"], "label": r["label"], "mask": key})
            outputs.append(results)
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
        summarize(kwargs, outputs, masks, c)
    save_npz(FX / "references" / "panoptic_masks.npz", masks)
    save_json(FX / "references" / "panoptic.json",
              {"task": TASK, "inputs": {"photos": PHOTOS, "how_made": "tests/support/image_cases.py make(name)"},
               "mask_encoding": "panoptic_masks.npz: '<call>/<image>/<segment>/bits' = np.packbits(mask > 0), "
               "'.../shape' = (height, width)", "calls": calls})


def unpack(masks, key):
    h, w = masks[f"{key}/shape"]
    return np.unpackbits(masks[f"{key}/bits"])[: h * w].reshape(h, w).astype(bool)


def summarize(kwargs, outputs, masks, c):
    counts = [len(o) for o in outputs]
    labels = {r["label"] for o in outputs for r in o}
    print(f"call {c} {kwargs}: segments per photo {counts}, labels {sorted(labels)}")
    for o in outputs:
        got = [unpack(masks, r["mask"]) for r in o]
        assert all(m.any() for m in got), "an empty mask"
        assert len({m.tobytes() for m in got}) == len(got), "two segments with the same mask"
        print("   ", [(r["label"], r["score"], int(m.sum())) for r, m in zip(o, got)])
    if kwargs.get("threshold") == 0.3:
        assert max(counts) >= 3, "references that cannot discriminate"


def main():
    model, proc = fam.build_model()
    images = [image_cases.make(name).convert("RGB") for name in PHOTOS]
    check_onnxruntime(model, proc, images)
    record_pipeline(model, proc, images)


if __name__ == "__main__":
    main()
