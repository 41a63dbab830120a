"""Tiny SAM fixture for `mask-generation`: a random SamModel exported with optimum-onnx main_export
(SamOnnxConfig, variant "split", the layout of Xenova/sam-vit-base and Xenova/slimsam-77-uniform,
which transformers.js' SamModel loads):

    onnx/vision_encoder.onnx               pixel_values -> image_embeddings, image_positional_embeddings
    onnx/prompt_encoder_mask_decoder.onnx  input_points, input_labels, image_embeddings,
                                           image_positional_embeddings -> iou_scores, pred_masks

optimum's patcher fixes two things in the decoder graph (model_patcher.SAMModelPatcher): no
input_boxes / input_masks (the prompt encoder runs with input_boxes=None, so a padding point is
appended to the points) and multimask_output=True (pred_masks holds the decoder's masks 1..3).

Same conventions as families_vision_audio.py (whose helpers this script imports): seeded,
perturbed random weights; references/<graph>.npz from onnxruntime on references/image_*.png. The
pipeline references (scikit-image photos, prompt and automatic mode) are recorded by
record_sam.py, which rebuilds this model with `build_model()`.

Usage: ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_sam.py
Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # as families_vision_audio.py: optimum picks names from sets
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import families_vision_audio as fva  # noqa: E402

PERTURB = 0.2  # seeded weight noise: distinct masks and iou scores per point
IMAGE = 128    # pixel side: 16-pixel patches give an 8x8 embedding and 32x32 low-res masks
NOTES = [
    "SamModel: vision hidden 32, 2 layers (window 4, global attention at layer 1), 2 heads, output_channels 32, "
    f"image_size {IMAGE}, patch 16 (8x8 image embeddings); prompt encoder hidden 32; mask decoder hidden 32, "
    "2 layers, 2 heads, 3 multimask outputs (pred_masks 32x32)",
    "optimum-onnx main_export task feature-extraction, SamOnnxConfig variant split (Xenova's layout): "
    "vision_encoder.onnx + prompt_encoder_mask_decoder.onnx; the decoder graph has no input_boxes and "
    "multimask_output fixed True (optimum's SAMModelPatcher)",
    f"SamImageProcessor longest_edge {IMAGE}, pad_size {IMAGE}x{IMAGE}",
    f"seeded weight noise std {PERTURB}, then localize(): Fourier features x0.15, image embeddings x0.05, "
    "decoder cross-attention q/k x10, hypernetwork outputs x5 (else every point gave the same diffuse mask)",
    "pipeline references: tests/support/record_sam.py (references/sam.json + sam_masks.npz)",
]


def build_model():
    """The torch model and its processor, deterministically (record_sam.py rebuilds it)."""
    from transformers import (SamConfig, SamImageProcessor, SamMaskDecoderConfig, SamModel,
                              SamPromptEncoderConfig, SamVisionConfig)

    vision = SamVisionConfig(hidden_size=32, output_channels=32, num_hidden_layers=2, num_attention_heads=2,
                             image_size=IMAGE, patch_size=16, mlp_dim=64, window_size=4, global_attn_indexes=[1],
                             num_pos_feats=16)
    prompt = SamPromptEncoderConfig(hidden_size=32, image_size=IMAGE, patch_size=16, mask_input_channels=4)
    decoder = SamMaskDecoderConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64,
                                   iou_head_hidden_dim=32)
    cfg = SamConfig(vision_config=vision.to_dict(), prompt_encoder_config=prompt.to_dict(),
                    mask_decoder_config=decoder.to_dict(), architectures=["SamModel"])
    fva.seed(0)
    model = localize(fva.perturb(SamModel(cfg).eval(), PERTURB))
    proc = SamImageProcessor(size={"longest_edge": IMAGE}, pad_size={"height": IMAGE, "width": IMAGE})
    return model, proc


def localize(model):
    """Make masks follow their point. With random weights every point gave a diffuse mask over the
    whole image (every mask's box was the image's, so NMS kept one mask per photo: a test that
    cannot fail). Lower the Fourier features' frequency (smooth positions: nearby pixels and points
    match), shrink the image embeddings so positions dominate the decoder's cross attention,
    sharpen that attention, and scale the hypernetwork outputs so mask logits leave the +-1 band
    that the stability score measures."""
    import torch

    with torch.no_grad():
        model.shared_image_embedding.positional_embedding.mul_(0.15)
        neck = model.vision_encoder.neck.layer_norm2
        neck.weight.mul_(0.05)
        neck.bias.mul_(0.05)
        for layer in model.mask_decoder.transformer.layers:
            for attention in (layer.cross_attn_image_to_token, layer.cross_attn_token_to_image):
                attention.q_proj.weight.mul_(10.0)
                attention.k_proj.weight.mul_(10.0)
        for mlp in model.mask_decoder.output_hypernetworks_mlps:
            mlp.proj_out.weight.mul_(5.0)
            mlp.proj_out.bias.mul_(5.0)
    return model


def build_sam():
    model, proc = build_model()
    fx = fva.fresh_fixture("sam")
    tmp = fva.tmpdir()
    d = fva.save_model_dir(model, tmp, proc)
    out = fva.export_main(d, tmp / "out", "feature-extraction", 18)
    fva.move_onnx(out, fx, {"vision_encoder.onnx": "vision_encoder.onnx",
                            "prompt_encoder_mask_decoder.onnx": "prompt_encoder_mask_decoder.onnx"})
    fva.copy_hub_files(d, fx)
    images = fva.write_images(fx)
    pixels = proc(images=images, return_tensors="np")["pixel_values"]
    encoder = "onnx/vision_encoder.onnx"
    embeddings = fva.run(fva.session(fx / encoder), {"pixel_values": pixels})
    decoder = "onnx/prompt_encoder_mask_decoder.onnx"
    # two images, two prompts each: one point, and a point with a negative (label 0) point
    points = np.array([[[[20.0, 30.0], [0.0, 0.0]], [[90.0, 60.0], [40.0, 100.0]]]] * 2, np.float32)
    labels = np.array([[[1, -10], [1, 0]]] * 2, np.int64)
    feeds = {"input_points": points, "input_labels": labels, **embeddings}
    graphs = {encoder: {"reference": fva.reference_single(fx, encoder, {"pixel_values": pixels})},
              decoder: {"reference": fva.reference_single(fx, decoder, feeds)}}
    fva.write_manifest(fx, family="sam", architecture="SamModel", task="mask-generation", opset=18, graphs=graphs,
                       notes=NOTES, inputs_from="references/image_*.png through preprocessor_config.json")
    shutil.rmtree(tmp)
    return fx


BUILDERS = {"sam": build_sam}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
