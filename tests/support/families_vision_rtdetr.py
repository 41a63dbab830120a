"""Tiny object-detection fixture for RT-DETR (RTDetrForObjectDetection): a small RT-DETR ResNet
backbone, a 32-wide hybrid encoder and a 2-layer deformable decoder, its processor as
PekingU/rtdetr_r18vd ships it (scaled down to 64x64).

Same conventions as families_vision_audio.py (whose helpers this script imports): a random-weight
model from transformers config classes, seeded and perturbed, exported offline with optimum-onnx
main_export (task object-detection), references from onnxruntime (references/model.npz) and from
the transformers pipeline on the torch model (references/pipeline_object-detection.json), inputs
references/image_*.png. See tests/support/README.md for the fixture contract.

Usage (regenerates deterministically; no argument = every fixture):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_rtdetr.py [names...]

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

from families_vision_audio import _image_fixture, _id2label, perturb, pipeline_object_detection, seed  # noqa: E402
import families_vision_audio as fva  # noqa: E402

RTDETR_LABELS = ["person", "bicycle", "car", "cat", "dog"]
# Seeded noise on every weight: with transformers' init (class bias prior 0.01, box head's last
# layer zero) every query reported the same score and its anchor box; 0.2 gives scores and boxes
# that vary.
RTDETR_PERTURB = 0.2


def build_rt_detr():
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrImageProcessor, RTDetrResNetConfig

    backbone = RTDetrResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 16, 32, 64],
                                  depths=[1, 1, 1, 1], layer_type="basic", out_indices=[2, 3, 4])
    cfg = RTDetrConfig(backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
                       encoder_hidden_dim=32, encoder_in_channels=[16, 32, 64], encoder_ffn_dim=64,
                       encoder_attention_heads=2, d_model=32, decoder_in_channels=[32, 32, 32],
                       decoder_ffn_dim=64, decoder_attention_heads=2, decoder_layers=2, decoder_n_points=2,
                       num_queries=20, num_labels=len(RTDETR_LABELS), id2label=_id2label(RTDETR_LABELS),
                       label2id={n: i for i, n in enumerate(RTDETR_LABELS)},
                       architectures=["RTDetrForObjectDetection"])
    seed(0)
    model = perturb(RTDetrForObjectDetection(cfg).eval(), RTDETR_PERTURB)
    # as PekingU/rtdetr_r18vd ships it (640x640 bilinear, rescale, no normalize, no pad), scaled down
    proc = RTDetrImageProcessor(do_resize=True, size={"height": 64, "width": 64}, resample=2, do_rescale=True,
                                rescale_factor=1 / 255, do_normalize=False, do_pad=False)
    fx = _image_fixture("rt-detr", "rt_detr", "RTDetrForObjectDetection", "object-detection", model, proc,
                        pipeline_object_detection,
                        ["RTDetrImageProcessor as PekingU/rtdetr_r18vd ships it: resize to 64x64 (not keeping "
                         "the aspect ratio) bilinear, rescale 1/255, no normalize, no pad (no pixel_mask)",
                         "backbone: RTDetrResNet, 4 basic stages (hidden 16, 16, 32, 64), out stages 2-4 "
                         "(strides 8, 16, 32); hybrid encoder 32 wide; decoder d_model 32, 2 layers, 2 heads, "
                         "2 sampling points; 20 queries; 5 labels",
                         "head: use_focal_loss (sigmoid scores, top-20 over queries x classes)",
                         f"seeded weight noise std {RTDETR_PERTURB} on every parameter (boxes and scores vary)",
                         "pipeline threshold 0.0 so all 20 top-k detections are reported"])
    graph = onnx.load(str(fx / "onnx/model.onnx")).graph
    outs = [o.name for o in graph.output]
    assert {"logits", "pred_boxes"} <= set(outs), outs
    ref = np.load(fx / "references/model.npz")
    proc_out = proc(images=fva.write_images(fx), return_tensors="pt")
    with torch.no_grad():
        want = model(pixel_values=proc_out["pixel_values"])
    for k in ("logits", "pred_boxes"):
        np.testing.assert_allclose(ref[f"0/out/{k}"], want[k].numpy(), rtol=1e-4, atol=1e-4, err_msg=k)
    found = json.loads((fx / "references/pipeline_object-detection.json").read_text())["outputs"]
    boxes = {tuple(r["box"].values()) for out in found for r in out}
    scores = [r["score"] for out in found for r in out]
    gap = min(abs(a["score"] - b["score"]) for out in found for a, b in zip(out, out[1:]))
    assert len(boxes) >= 5 and max(scores) - min(scores) > 1e-3 and gap > 1e-6, (len(boxes), scores, gap)
    print(f"rt-detr: {len(boxes)} distinct boxes, score spread {max(scores) - min(scores):.4f}, "
          f"smallest gap {gap:.2e}, outputs {outs}")
    return fx


BUILDERS = {
    "rt-detr": build_rt_detr,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
