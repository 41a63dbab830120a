"""Tiny object-detection fixture for D-FINE (DFineForObjectDetection): a small HGNetV2 backbone, a
32-wide hybrid encoder and a 2-layer decoder with D-FINE's distribution-refined boxes, its processor
as onnx-community's D-FINE exports ship it (RTDetrImageProcessor 640x640, rescale, no normalize;
scaled down to 64x64).

Same conventions as families_vision_rtdetr.py: a random-weight model from transformers config
classes, seeded and perturbed, exported offline with optimum-onnx main_export (task
object-detection, optimum's DFineOnnxConfig: pixel_values -> logits, pred_boxes), references from
onnxruntime (references/model.npz) and from the transformers pipeline on the torch model
(references/pipeline_object-detection.json on the synthetic images; references/photos.json on
scikit-image photos, tests/support/image_cases.py, several threshold calls).

Usage (regenerates deterministically):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_dfine.py [d-fine]

Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # same as families_vision_audio.py: optimum picks some names from Python sets
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402
import image_cases  # noqa: E402
from families_vision_audio import _image_fixture, _id2label, perturb, pipeline_object_detection, seed  # noqa: E402

DFINE_LABELS = ["person", "bicycle", "car", "cat", "dog"]
# Seeded noise on every weight: at rt-detr's 0.2 the decoder's queries stayed alike (scores within 1e-7 of
# each other, box widths equal); 0.5 gives scores and boxes that vary.
DFINE_PERTURB = 0.35
PHOTOS = ["astronaut", "coffee", "chelsea", "camera_L", "coffee_tall"]
# threshold 0.0 reports all top-k detections; the others cut the list where the scores lie
PHOTO_CALLS = [{"threshold": 0.0}, {"threshold": 0.7}, {}]


def build_config():
    from transformers import DFineConfig, HGNetV2Config

    backbone = HGNetV2Config(num_channels=3, embedding_size=16, depths=[1, 1, 1, 1], hidden_sizes=[32, 32, 64, 64],
                             stem_channels=[3, 8, 16], stage_in_channels=[16, 32, 32, 64],
                             stage_mid_channels=[8, 16, 16, 32], stage_out_channels=[32, 32, 64, 64],
                             stage_num_blocks=[1, 1, 1, 1], stage_downsample=[False, True, True, True],
                             stage_light_block=[False, False, True, True], stage_kernel_size=[3, 3, 5, 5],
                             stage_numb_of_layers=[2, 2, 2, 2], use_learnable_affine_block=True,
                             out_features=["stage2", "stage3", "stage4"])
    return DFineConfig(backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
                       encoder_hidden_dim=32, encoder_in_channels=[32, 64, 64], encoder_ffn_dim=64,
                       encoder_attention_heads=2, hidden_expansion=0.5, depth_mult=0.34, d_model=32,
                       decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, decoder_attention_heads=2,
                       decoder_layers=2, decoder_n_points=[2, 2, 2], lqe_hidden_dim=16, num_queries=20,
                       num_labels=len(DFINE_LABELS), id2label=_id2label(DFINE_LABELS),
                       label2id={n: i for i, n in enumerate(DFINE_LABELS)},
                       architectures=["DFineForObjectDetection"])


def build_processor():
    from transformers import RTDetrImageProcessor

    # onnx-community's D-FINE repos: 640x640 bilinear, rescale 1/255, no normalize, no pad; scaled down
    return RTDetrImageProcessor(do_resize=True, size={"height": 64, "width": 64}, resample=2, do_rescale=True,
                                rescale_factor=1 / 255, do_normalize=False, do_pad=False)


def build_model():
    from transformers import DFineForObjectDetection

    seed(0)
    return perturb(DFineForObjectDetection(build_config()).eval(), DFINE_PERTURB)


def check_onnxruntime(fx, model, proc, images, names):
    """onnxruntime equals PyTorch on each image at the processor's size."""
    sess = fva.session(fx / "onnx/model.onnx")
    worst = 0.0
    for name, image in zip(names, images):
        pixels = proc(images=image, return_tensors="pt")["pixel_values"]
        got = fva.run(sess, {"pixel_values": pixels.numpy()})
        with torch.no_grad():
            want = model(pixel_values=pixels)
        # the perturbed weights amplify float32 summation-order noise: one logit of coffee_tall differs
        # by 3.1e-4 (sigmoid: < 1e-4 in score); the boxes stay within 1e-4
        np.testing.assert_allclose(got["logits"], want["logits"].numpy(), rtol=0, atol=1e-3, err_msg=name)
        np.testing.assert_allclose(got["pred_boxes"], want["pred_boxes"].numpy(), rtol=0, atol=1e-4, err_msg=name)
        worst = max(worst, float(np.abs(got["logits"] - want["logits"].numpy()).max()))
    print(f"onnxruntime == torch on {names}: logits within {worst:.1e}")


def exact_boxes(model, proc, image, threshold):
    """The float pixel boxes behind the pipeline's ints: post_process_object_detection as the
    pipeline calls it (target size = the image's), before ObjectDetectionPipeline's ``box.int()``."""
    inputs = proc(images=image, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs)
    found = proc.post_process_object_detection(out, threshold, [(image.height, image.width)])[0]
    return found["boxes"].tolist()


def record_photos(fx, model, proc):
    from transformers import pipeline

    photos = [image_cases.make(n).convert("RGB") for n in PHOTOS]
    check_onnxruntime(fx, model, proc, photos, PHOTOS)
    p = pipeline("object-detection", model=model, image_processor=proc, device="cpu")
    calls = [{"call_kwargs": kw, "outputs": [p(im, **kw) for im in photos]} for kw in PHOTO_CALLS]
    calls[0]["exact_boxes"] = [exact_boxes(model, proc, im, calls[0]["call_kwargs"]["threshold"]) for im in photos]
    counts = [[len(o) for o in c["outputs"]] for c in calls]
    assert all(0 < n < 20 for n in counts[1]), counts  # threshold 0.7 keeps some, drops some
    fva.save_json(fx / "references/photos.json",
                  {"task": "object-detection", "inputs": {"photos": PHOTOS, "digests": [
                      image_cases.pixels_digest(im) for im in photos],
                      "how_made": "tests/support/image_cases.py (scikit-image samples, .convert('RGB'))"},
                   "calls": calls})
    print(f"d-fine photos: detections per call and photo {counts}")


def build_d_fine():
    model, proc = build_model(), build_processor()
    fx = _image_fixture("d-fine", "d_fine", "DFineForObjectDetection", "object-detection", model, proc,
                        pipeline_object_detection,
                        ["RTDetrImageProcessor as onnx-community's D-FINE repos ship it: resize to 64x64 (not "
                         "keeping the aspect ratio) bilinear, rescale 1/255, no normalize, no pad (no pixel_mask)",
                         "backbone: HGNetV2, 4 stages (out 32, 32, 64, 64; learnable affine blocks), out stages "
                         "2-4; hybrid encoder 32 wide; decoder d_model 32, 2 layers, 2 heads, 2 points per level; "
                         "20 queries; 5 labels",
                         "head: use_focal_loss (sigmoid scores, top-20 over queries x classes), as RT-DETR",
                         f"seeded weight noise std {DFINE_PERTURB} on every parameter (boxes and scores vary)",
                         "pipeline_object-detection.json: threshold 0.0 on the synthetic images; photos.json: "
                         "scikit-image photos, thresholds 0.0, 0.5 and the default"])
    outs = [o.name for o in onnx.load(str(fx / "onnx/model.onnx")).graph.output]
    assert {"logits", "pred_boxes"} <= set(outs), outs
    check_onnxruntime(fx, model, proc, fva.write_images(fx), ["image_0", "image_1"])
    found = json.loads((fx / "references/pipeline_object-detection.json").read_text())["outputs"]
    boxes = {tuple(r["box"].values()) for out in found for r in out}
    scores = [r["score"] for out in found for r in out]
    gap = min(abs(a["score"] - b["score"]) for out in found for a, b in zip(out, out[1:]))
    assert len(boxes) >= 5 and max(scores) - min(scores) > 1e-3 and gap > 1e-6, (len(boxes), scores, gap)
    print(f"d-fine: {len(boxes)} distinct boxes, score spread {max(scores) - min(scores):.4f}, "
          f"smallest gap {gap:.2e}, outputs {outs}")
    record_photos(fx, model, proc)
    return fx


BUILDERS = {
    "d-fine": build_d_fine,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
