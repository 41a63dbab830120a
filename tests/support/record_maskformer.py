"""References of the MaskFormer-family fixtures (tests/test_pipelines_maskformer.py), recorded on the
PyTorch models families_maskformer.py builds (rebuilt here, seeded: check 1 fails if it is not the
model the ONNX file holds).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_maskformer.py [mask2former]

1. onnxruntime equals PyTorch (class logits within 1e-4, mask logits 1e-3) on every photo below.
2. references/segmentation.json: transformers' pipeline("image-segmentation") on scikit-image photos
   of several sizes (tests/support/image_cases.py; not committed) for the calls in CALLS (panoptic,
   instance, threshold options, the defaults, semantic): scores, labels, and each mask as a key into
   references/segmentation_masks.npz, which holds np.packbits of the mask > 0 (the pipeline's masks
   are 0 / 255) with its height and width.
3. references/fuse.npz + the "fuse" entry of segmentation.json: the image processor's
   post_process_panoptic_segmentation with label_ids_to_fuse (the pipeline never passes it) on
   PyTorch's outputs for two photos: the inputs (class / mask logits, target size), the
   segmentation map and segments_info.
4. The references can discriminate: per call, masks differ between segments, and over the photos
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

import families_maskformer as fam  # noqa: E402
import image_cases  # noqa: E402
from families_vision_audio import FIXTURES, run, save_json, save_npz, session  # noqa: E402

TASK = "image-segmentation"
PHOTOS = ["astronaut", "coffee", "chelsea", "camera_L", "coffee_tall"]
CALLS = [
    {"subtask": "panoptic", "threshold": 0.3, "mask_threshold": 0.3, "overlap_mask_area_threshold": 0.1},
    {"subtask": "panoptic", "threshold": 0.8, "mask_threshold": 0.5, "overlap_mask_area_threshold": 0.5},
    {},  # transformers' defaults: subtask None -> panoptic, threshold 0.9
    {"subtask": "instance", "threshold": 0.1},
    # a cut through the instance scores (0.23-0.54); the two mask options are ignored by this route
    {"subtask": "instance", "threshold": 0.45, "mask_threshold": 0.2, "overlap_mask_area_threshold": 0.9},
    {"subtask": "semantic"},
]
# low mask thresholds, so that several queries of one label stay valid segments and merge
FUSE = {"photos": [0, 2, 3], "threshold": 0.3, "mask_threshold": 0.05, "overlap_mask_area_threshold": 0.0}
OUTPUTS = ("class_queries_logits", "masks_queries_logits")


def check_onnxruntime(fx, model, proc, images):
    sess = session(fx / "onnx" / "model.onnx")
    for name, image in zip(PHOTOS, images):
        pixels = proc(images=image, return_tensors="pt")["pixel_values"]
        got = run(sess, {"pixel_values": pixels.numpy()})
        with torch.no_grad():
            want = model(pixel_values=pixels)
        np.testing.assert_allclose(got[OUTPUTS[0]], want[OUTPUTS[0]].numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(got[OUTPUTS[1]], want[OUTPUTS[1]].numpy(), rtol=0, atol=1e-3, err_msg=name)
        print(f"onnxruntime == torch on {name} {tuple(pixels.shape[2:])}")


def record_pipeline(fx, model, proc, images):
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
        summarize(kwargs, outputs, masks)
    save_npz(fx / "references" / "segmentation_masks.npz", masks)
    return calls


def record_fuse(fx, model, proc, images):
    """post_process_panoptic_segmentation with label_ids_to_fuse: the two labels most of its kept
    queries have, so that some segments fuse."""
    arrays, cases, merged = {}, [], []
    for i in FUSE["photos"]:
        image = images[i]
        with torch.no_grad():
            out = model(**proc(images=image, return_tensors="pt"))
        probs = out.class_queries_logits[0].softmax(-1)
        kept = probs.argmax(-1)[(probs.max(-1).values > FUSE["threshold"])
                                & (probs.argmax(-1) != probs.shape[-1] - 1)]
        counts = np.bincount(kept.numpy())
        fuse = sorted(int(v) for v in np.argsort(-counts, kind="stable")[:2])  # the most kept labels
        size = (image.height, image.width)
        result = proc.post_process_panoptic_segmentation(
            out, threshold=FUSE["threshold"], mask_threshold=FUSE["mask_threshold"],
            overlap_mask_area_threshold=FUSE["overlap_mask_area_threshold"], label_ids_to_fuse=set(fuse),
            target_sizes=[size])[0]
        for name in OUTPUTS:
            arrays[f"{i}/{name}"] = out[name][0].numpy()
        arrays[f"{i}/segmentation"] = result["segmentation"].numpy().astype(np.int32)
        segments = result["segments_info"]
        cases.append({"photo": i, "size": list(size), "label_ids_to_fuse": fuse, "segments_info": segments})
        ids = [s["id"] for s in segments]
        print(f"fuse {fuse} on photo {i}: {len(segments)} segments, ids {ids}")
        merged.append(len(set(ids)) < len(ids))
    assert any(merged), "no segments merged: the reference cannot tell fusing from not"
    save_npz(fx / "references" / "fuse.npz", arrays)
    return {**FUSE, "cases": cases}


def unpack(masks, key):
    h, w = masks[f"{key}/shape"]
    return np.unpackbits(masks[f"{key}/bits"])[: h * w].reshape(h, w).astype(bool)


def summarize(kwargs, outputs, masks):
    counts = [len(o) for o in outputs]
    labels = {r["label"] for o in outputs for r in o}
    print(f"{kwargs}: segments per photo {counts}, labels {sorted(labels)}")
    for o in outputs:
        got = [unpack(masks, r["mask"]) for r in o]
        print("   ", [(r["label"], r["score"], int(m.sum())) for r, m in zip(o, got)])
        if kwargs.get("subtask") != "instance":  # instance masks may be painted over: empty or equal
            assert all(m.any() for m in got), "an empty mask"
            assert len({m.tobytes() for m in got}) == len(got), "two segments with the same mask"
    assert max(counts) >= 2 and len(labels) >= 2, "references that cannot discriminate"


def main(names):
    for name in names or list(fam.BUILDERS):
        fx = FIXTURES / name
        model, proc = fam.build_model(name)
        images = [image_cases.make(photo).convert("RGB") for photo in PHOTOS]
        check_onnxruntime(fx, model, proc, images)
        calls = record_pipeline(fx, model, proc, images)
        fuse = record_fuse(fx, model, proc, images)
        save_json(fx / "references" / "segmentation.json",
                  {"task": TASK, "inputs": {"photos": PHOTOS, "how_made": "tests/support/image_cases.py make(name)"},
                   "mask_encoding": "segmentation_masks.npz: '<call>/<image>/<segment>/bits' = "
                   "np.packbits(mask > 0), '.../shape' = (height, width)", "calls": calls, "fuse": fuse})


if __name__ == "__main__":
    main(sys.argv[1:])
