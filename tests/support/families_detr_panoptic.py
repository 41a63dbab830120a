"""Tiny panoptic / instance segmentation fixture: DetrForSegmentation (DETR with its mask head, as
facebook/detr-resnet-50-panoptic and Xenova/detr-resnet-50-panoptic), a 3-stage transformers ResNet
backbone (no timm), exported with optimum-onnx main_export for task image-segmentation (outputs
logits and pred_masks).

Same conventions as families_vision_audio.py (whose helpers this script imports): a seeded,
perturbed random-weight model, references/model.npz from onnxruntime on references/image_*.png.
The pipeline references (scikit-image photos, subtasks panoptic and instance) are recorded by
record_detr_panoptic.py, which rebuilds this model with `build_model()`.

Why the backbone has 3 stages: with 4 (total stride 32) a small image gives a 2x3 feature map, on
which every query's attention map, and so its mask, came out the same (one full-image segment per
photo: a test that cannot fail). 3 stages give stride 16, and 128-pixel inputs give an 8x8 map.

Usage: ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_detr_panoptic.py
Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # as families_vision_audio.py: optimum picks names from sets
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402
from families_vision_audio import _id2label, _image_fixture, perturb, seed  # noqa: E402

LABELS = ["person", "car", "sky", "road", "tree"]
PERTURB = 0.2          # as the detr fixture: distinct scores per query
QUERY_STD = 2.0        # query_position_embeddings redrawn: each query attends elsewhere
NOTES = [
    "DetrForSegmentation; backbone: transformers ResNet (use_timm_backbone=False), 3 basic stages "
    "(hidden 8, 16, 32), out stage1-3: total stride 16, so a 128-pixel input gives an 8x8 feature map "
    "and pred_masks of 32x32 (stride 4)",
    "d_model 32, 8 attention heads (the mask head's GroupNorm needs d_model + heads divisible by 8), "
    "2+2 layers, 10 queries, 5 labels",
    "optimum's image-segmentation export: outputs logits and pred_masks (no pred_boxes, no pixel_mask input)",
    "images resized to shortest_edge 128 / longest_edge 192",
    f"seeded weight noise std {PERTURB}, query_position_embeddings redrawn with std {QUERY_STD}, then "
    "separate_queries(): transformer biases zeroed, cross / bbox attention sharpened, the mask head's "
    "image-feature inputs scaled by 0.01, the no-object bias lowered by 3 (else every query gave the same mask)",
    "pipeline references: tests/support/record_detr_panoptic.py (references/panoptic.json + panoptic_masks.npz)",
]


def build_model():
    """The torch model and its processor, deterministically (record_detr_panoptic.py rebuilds it)."""
    from transformers import DetrConfig, DetrForSegmentation, DetrImageProcessor, ResNetConfig

    backbone = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16, 32], depths=[1, 1, 1],
                            layer_type="basic", out_features=["stage1", "stage2", "stage3"])
    cfg = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None, backbone_config=backbone,
                     d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=10,
                     id2label=_id2label(LABELS), label2id={n: i for i, n in enumerate(LABELS)},
                     architectures=["DetrForSegmentation"])
    seed(0)
    model = perturb(DetrForSegmentation(cfg).eval(), PERTURB)
    queries = model.detr.model.query_position_embeddings.weight
    with torch.no_grad():
        queries.copy_(torch.randn(queries.shape, generator=torch.Generator().manual_seed(0)) * QUERY_STD)
        separate_queries(model)
    proc = DetrImageProcessor(format="coco_panoptic", do_resize=True,
                              size={"shortest_edge": 128, "longest_edge": 192}, do_rescale=True,
                              do_normalize=True, image_mean=[0.485, 0.456, 0.406],
                              image_std=[0.229, 0.224, 0.225], do_pad=True)
    return model, proc


def separate_queries(model):
    """Make the per-query signal reach pred_masks. With random weights it did not: the transformer's
    biases gave every query nearly the same decoder output (so the same attention map), and the
    backbone's large FPN features swamped the attention maps in the mask head: every query's mask
    was equal to 1e-8. Zero the transformer's biases, sharpen the cross- and bbox attention, and
    scale down the mask head's image-feature inputs (its projected features and FPN adapters)."""
    detr = model.detr.model
    for module in (detr.encoder, detr.decoder, detr.input_projection):
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    for layer in detr.decoder.layers:
        layer.encoder_attn.q_proj.weight.mul_(5.0)
    model.bbox_attention.q_linear.weight.mul_(20.0)
    head = model.mask_head
    head.lay1.weight[:, : model.config.d_model].mul_(0.01)
    head.lay1.weight[:, model.config.d_model:].mul_(100.0)
    for adapter in (head.adapter1, head.adapter2, head.adapter3):
        adapter.weight.mul_(0.01)
        adapter.bias.mul_(0.01)
    # the "no object" class won every query (best score ~0.45): lower its bias so queries get labels,
    # and sharpen the classifier so queries differ in label, not only in score
    model.detr.class_labels_classifier.bias[-1] -= 3.0
    model.detr.class_labels_classifier.weight.mul_(5.0)


def build_detr_panoptic():
    model, proc = build_model()
    return _image_fixture("detr-panoptic", "detr", "DetrForSegmentation", "image-segmentation", model, proc,
                          None, NOTES)


BUILDERS = {"detr-panoptic": build_detr_panoptic}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
