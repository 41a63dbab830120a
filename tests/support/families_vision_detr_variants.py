"""Tiny object-detection fixtures for Conditional DETR and Deformable DETR, whose heads differ from
DETR's: sigmoid scores and the top 100 of queries x classes (their image processors'
post_process_object_detection, top_k=100), no "no object" class.

optimum-onnx 0.1.0 has no ONNX config for conditional_detr / deformable_detr, so the graphs are
exported with torch.onnx under the names optimum's DETR export uses (pixel_values -> logits,
pred_boxes; Xenova/conditional-detr-resnet-50's layout), and the manifests say so. Backbones:
transformers' ResNet (use_timm_backbone=False), as the detr fixture. References: onnxruntime
(references/model.npz) and transformers' pipeline on the torch model
(references/pipeline_object-detection.json, threshold 0.0, on the synthetic images; run by
tests/test_pipelines_vision.py).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_detr_variants.py [names...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402
from families_vision_audio import DET_LABELS, _id2label, perturb, pipeline_object_detection, seed  # noqa: E402

OPSET = 17
# Seeded noise as for the detr fixture: transformers' init gives every query the same score
PERTURB = 0.2
LABELS = DET_LABELS[1:]  # no "N/A": these heads have no "no object" class


class Wrapped(torch.nn.Module):
    """logits and pred_boxes only (the outputs optimum's DETR export keeps)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes


def backbone():
    from transformers import ResNetConfig

    return ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                        layer_type="basic", out_features=["stage2", "stage3", "stage4"])


def common():
    return dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None, d_model=32,
                encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=12, id2label=_id2label(LABELS),
                label2id={n: i for i, n in enumerate(LABELS)})


def export(fx, model, proc, name, family, arch, notes):
    images = fva.write_images(fx)
    feeds = {"pixel_values": proc(images=images, return_tensors="np")["pixel_values"]}
    # PyTorch's outputs and the pipeline references first: after torch.onnx.export the module gives
    # other logits (same state_dict; onnxruntime equals the model as it was before the export)
    with torch.no_grad():
        want = model(pixel_values=torch.from_numpy(feeds["pixel_values"]))
    pipeline_object_detection(fx, model, proc, images)
    path = fx / "onnx" / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(Wrapped(model), (torch.from_numpy(feeds["pixel_values"][:1]),), str(path),
                          input_names=["pixel_values"], output_names=["logits", "pred_boxes"],
                          opset_version=OPSET, dynamo=False,
                          dynamic_axes={"pixel_values": {0: "batch_size", 2: "height", 3: "width"},
                                        "logits": {0: "batch_size"}, "pred_boxes": {0: "batch_size"}})
    model.config.save_pretrained(fx)
    proc.save_pretrained(fx)
    ref = fva.reference_single(fx, "onnx/model.onnx", feeds)
    got = fva.run(fva.session(path), feeds)
    for k in ("logits", "pred_boxes"):
        np.testing.assert_allclose(got[k], want[k].numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name} {k}")
    found = json.loads((fx / "references/pipeline_object-detection.json").read_text())["outputs"]
    scores = [r["score"] for out in found for r in out]
    boxes = {tuple(r["box"].values()) for out in found for r in out}
    gap = min(abs(a["score"] - b["score"]) for out in found for a, b in zip(out, out[1:]))
    assert len(boxes) >= 5 and max(scores) - min(scores) > 1e-3 and gap > 1e-6, (len(boxes), gap)
    print(f"{name}: {[len(o) for o in found]} detections, {len(boxes)} distinct boxes, smallest gap {gap:.1e}")
    fva.write_manifest(fx, family=family, architecture=arch, task="object-detection", opset=OPSET,
                       graphs={"onnx/model.onnx": {"reference": ref}},
                       exporter=f"torch.onnx (torch {torch.__version__}; optimum-onnx has no {family} config)",
                       inputs_from="references/image_*.png through preprocessor_config.json",
                       notes=notes + ["graph: pixel_values -> logits, pred_boxes (optimum's DETR export names)",
                                      "head: sigmoid, the top 100 of queries x classes (here 12 x 3 = 36)",
                                      f"seeded weight noise std {PERTURB} on every parameter",
                                      "pipeline threshold 0.0 so every one of the top-k is reported"])
    return fx


def build_conditional_detr():
    from transformers import (ConditionalDetrConfig, ConditionalDetrForObjectDetection,
                              ConditionalDetrImageProcessor)

    cfg = ConditionalDetrConfig(backbone_config=backbone(), **common(),
                                architectures=["ConditionalDetrForObjectDetection"])
    cfg.backbone_config.out_features = ["stage4"]
    seed(0)
    model = perturb(ConditionalDetrForObjectDetection(cfg).eval(), PERTURB)
    proc = ConditionalDetrImageProcessor(format="coco_detection", do_resize=True,
                                         size={"shortest_edge": 64, "longest_edge": 96}, do_pad=True)
    fx = fva.fresh_fixture("conditional-detr")
    return export(fx, model, proc, "conditional-detr", "conditional_detr", "ConditionalDetrForObjectDetection",
                  ["backbone: transformers ResNet, 4 basic stages, out stage4 (stride 32); d_model 32, 2 + 2 layers, "
                   "12 queries, 3 labels", "ConditionalDetrImageProcessor: shortest_edge 64 (longest 96), "
                   "ImageNet normalize, pad to the batch max (the graph takes no pixel_mask)"])


def build_deformable_detr():
    from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, DeformableDetrImageProcessor

    cfg = DeformableDetrConfig(backbone_config=backbone(), **common(), num_feature_levels=3, encoder_n_points=2,
                               decoder_n_points=2, architectures=["DeformableDetrForObjectDetection"])
    seed(0)
    model = perturb(DeformableDetrForObjectDetection(cfg).eval(), PERTURB)
    # torch.onnx traces the feature maps' sizes into the graph (spatial_shapes_list is a Python list
    # of the traced image's): every image is resized to the one traced size
    proc = DeformableDetrImageProcessor(format="coco_detection", do_resize=True, size={"height": 64, "width": 64},
                                        do_pad=True)
    fx = fva.fresh_fixture("deformable-detr")
    return export(fx, model, proc, "deformable-detr", "deformable_detr", "DeformableDetrForObjectDetection",
                  ["backbone: transformers ResNet, 4 basic stages, out stages 2-4 (3 feature levels); d_model 32, "
                   "2 + 2 layers, 2 sampling points, 12 queries, 3 labels (multi-scale deformable attention in "
                   "PyTorch's grid_sample path: GridSample in the graph)",
                   "DeformableDetrImageProcessor: resize to 64x64 (the torch.onnx trace fixes the feature-map "
                   "sizes: spatial_shapes_list is a Python list), ImageNet normalize (the graph takes no pixel_mask)"])


BUILDERS = {
    "conditional-detr": build_conditional_detr,
    "deformable-detr": build_deformable_detr,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
