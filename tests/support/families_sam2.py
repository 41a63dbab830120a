"""Tiny SAM 2 fixture for `mask-generation`: a random Sam2Model split into the two graphs of the
onnx-community SAM 2 / 2.1 exports (onnx-community/sam2.1-hiera-tiny-ONNX and kin), which
transformers.js' Sam2Model loads:

    onnx/vision_encoder.onnx               pixel_values -> image_embeddings.0, .1, .2
    onnx/prompt_encoder_mask_decoder.onnx  input_points, input_labels, input_boxes,
                                           image_embeddings.0..2 -> iou_scores, pred_masks,
                                           object_score_logits

optimum-onnx has no SAM 2 config, and the script that made the onnx-community files is not
public, so the graphs are traced here (torch.onnx.export, TorchScript exporter) from wrappers
that take transformers.js' feeds and compute what Sam2Model computes:
- the encoder is Sam2Model.get_image_embeddings (conv_s0 / conv_s1 applied, no_memory_embedding
  added);
- the decoder takes transformers.js' three prompt layouts in one graph: points with empty
  input_boxes [B, 0, 4] (Sam2Model with input_boxes=None: a not-a-point token is appended),
  points with one box, and boxes only (input_points [B, 1, 0, 2], input_labels [B, boxes, 0]);
  multimask_output is fixed True (pred_masks holds masks 1..3), as transformers.js reads it.
  Each layout is checked against Sam2Model here (ONNX Runtime vs torch, below).

The torch model is also saved (outside the repo, TORCH_DIR) for record_sam2.py, which records the
pipeline references in the fast venv: Sam2's only image processor is Sam2ImageProcessorFast,
which needs torchvision.

Usage: ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_sam2.py
Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # as families_vision_audio.py
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402

IMAGE = 128    # pixel side: feature maps 32, 16 and 8 wide, 32x32 low-res masks
PERTURB = 0.2  # seeded weight noise, as families_sam.py
TORCH_DIR = Path(os.environ.get("TRANSMUTER_VENVS", Path.home() / ".cache" / "transmuter-tests")) / "sam2-torch"
LEVELS = [f"image_embeddings.{i}" for i in range(3)]
OUTPUTS = ["iou_scores", "pred_masks", "object_score_logits"]
NOTES = [
    "Sam2Model: Hiera backbone hidden 8, stages of 1/2/2/1 blocks (dims 8/16/32/64, windows 4/4/4/2, global "
    f"attention at block 4), FPN hidden 32, 3 feature levels; image_size {IMAGE}; prompt encoder hidden 32, "
    "patch 16; mask decoder hidden 32, 2 layers, 2 heads, 3 multimask outputs (pred_masks 32x32)",
    "traced with torch.onnx.export (TorchScript exporter, opset 18) from this script's wrappers, in the "
    "onnx-community layout transformers.js loads (see the module docstring)",
    f"Sam2ImageProcessorFast size {IMAGE}x{IMAGE}, mask_size 32x32 (preprocessor_config.json written here: "
    "saving the processor needs torchvision)",
    f"seeded weight noise std {PERTURB}, then localize() as families_sam.py; its masks still follow the photo more "
    "than the point, so automatic mode keeps one mask after NMS at 0.7 (the references' NMS-free call carries the "
    "point-by-point check: record_sam2.py)",
    "pipeline references: tests/support/record_sam2.py (references/sam2.json + sam2_masks.npz)",
]


def build_model():
    """The torch model, deterministically."""
    from transformers import Sam2Config, Sam2Model
    from transformers.models.sam2.configuration_sam2 import (Sam2HieraDetConfig, Sam2MaskDecoderConfig,
                                                              Sam2PromptEncoderConfig, Sam2VisionConfig)

    backbone = Sam2HieraDetConfig(hidden_size=8, num_attention_heads=1, image_size=[IMAGE, IMAGE],
                                  blocks_per_stage=[1, 2, 2, 1], embed_dim_per_stage=[8, 16, 32, 64],
                                  num_attention_heads_per_stage=[1, 1, 2, 2], window_size_per_stage=[4, 4, 4, 2],
                                  global_attention_blocks=[4], window_positional_embedding_background_size=[4, 4])
    vision = Sam2VisionConfig(backbone_config=backbone.to_dict(), backbone_channel_list=[64, 32, 16, 8],
                              backbone_feature_sizes=[[IMAGE // s, IMAGE // s] for s in (4, 8, 16)],
                              fpn_hidden_size=32)
    prompt = Sam2PromptEncoderConfig(hidden_size=32, image_size=IMAGE, patch_size=16, mask_input_channels=4)
    decoder = Sam2MaskDecoderConfig(hidden_size=32, mlp_dim=64, num_hidden_layers=2, num_attention_heads=2,
                                    iou_head_hidden_dim=32)
    cfg = Sam2Config(vision_config=vision.to_dict(), prompt_encoder_config=prompt.to_dict(),
                     mask_decoder_config=decoder.to_dict(), architectures=["Sam2Model"])
    fva.seed(0)
    return localize(fva.perturb(Sam2Model(cfg).eval(), PERTURB))


def localize(model):
    """families_sam.localize for SAM 2's modules: smooth Fourier features, small image embeddings,
    sharp decoder cross attention, hypernetwork outputs past the stability band."""
    with torch.no_grad():
        model.shared_image_embedding.positional_embedding.mul_(0.15)
        for conv in model.vision_encoder.neck.convs:
            conv.weight.mul_(0.05)
            conv.bias.mul_(0.05)
        for layer in model.mask_decoder.transformer.layers:
            for attention in (layer.cross_attn_image_to_token, layer.cross_attn_token_to_image):
                attention.q_proj.weight.mul_(10.0)
                attention.k_proj.weight.mul_(10.0)
        for mlp in model.mask_decoder.output_hypernetworks_mlps:
            mlp.proj_out.weight.mul_(5.0)
            mlp.proj_out.bias.mul_(5.0)
    return model


class VisionEncoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return tuple(self.model.get_image_embeddings(pixel_values))


class PromptEncoderMaskDecoder(torch.nn.Module):
    """Sam2Model.forward from image embeddings, for transformers.js' feeds. The sparse prompt is
    [points, box corners if a box, not-a-point]: Sam2Model with boxes=None pads the points with a
    not-a-point (label -1) token, and a box's third token is that same embedding. Box counts are
    read from the shape of input_boxes inside the graph (Range + Gather), so one graph serves 0
    boxes and 1 or more."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_points, input_labels, input_boxes, level0, level1, level2):
        encoder = self.model.prompt_encoder
        batch = level2.shape[0]
        points = encoder._embed_points(input_points, input_labels, pad=False)  # [B, prompts, n, C]
        zeros = points.sum(2, keepdim=True) * 0  # [B, prompts, 1, C]: prompts from points and labels
        n_boxes = torch._shape_as_tensor(input_boxes)[1]
        has_box = torch.clamp(n_boxes, max=1)
        boxes = torch.cat([input_boxes, torch.zeros(batch, 1, 4)], 1)  # a dummy box when there is none
        corners = encoder._embed_boxes(boxes)[:, :, :2]
        corners = corners.index_select(1, torch.arange(torch.clamp(n_boxes, min=1)))
        corners = corners.index_select(2, torch.arange(2 * has_box)) + zeros
        not_a_point = encoder.not_a_point_embed.weight.reshape(1, 1, 1, -1) + zeros
        sparse = torch.cat([points, corners, not_a_point], 2)
        dense = encoder.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(batch, -1, *encoder.image_embedding_size)
        positional = self.model.get_image_wide_positional_embeddings().repeat(batch, 1, 1, 1)
        masks, iou, _, objects = self.model.mask_decoder(
            image_embeddings=level2, image_positional_embeddings=positional, sparse_prompt_embeddings=sparse,
            dense_prompt_embeddings=dense, multimask_output=True, high_resolution_features=[level0, level1])
        return iou, masks, objects


def prompt_cases(batch):
    """transformers.js' three layouts, each with Sam2Model's own arguments."""
    points = torch.tensor([[[[20.0, 30.0], [70.0, 80.0]], [[100.0, 64.0], [0.0, 0.0]]]] * batch)
    labels = torch.tensor([[[1, 0], [1, -10]]] * batch)
    one_point = torch.tensor([[[[40.0, 50.0]]]] * batch)
    box = torch.tensor([[[10.0, 20.0, 90.0, 100.0]]] * batch)
    boxes = torch.tensor([[[10.0, 20.0, 90.0, 100.0], [0.0, 0.0, 60.0, 50.0], [64.0, 30.0, 127.0, 127.0]]] * batch)
    return {
        "points": ({"input_points": points, "input_labels": labels, "input_boxes": torch.zeros(batch, 0, 4)},
                   {"input_points": points, "input_labels": labels}),
        "point_and_box": ({"input_points": one_point, "input_labels": torch.ones(batch, 1, 1, dtype=torch.int64),
                           "input_boxes": box},
                          {"input_points": one_point, "input_labels": torch.ones(batch, 1, 1, dtype=torch.int64),
                           "input_boxes": box}),
        "boxes": ({"input_points": torch.zeros(batch, 1, 0, 2), "input_labels": torch.zeros(batch, 3, 0, dtype=torch.int64),
                   "input_boxes": boxes},
                  {"input_boxes": boxes}),
    }


def export(model, fx):
    pixels = torch.randn(1, 3, IMAGE, IMAGE)
    with torch.no_grad():
        levels = model.get_image_embeddings(pixels)
    batch = {0: "batch_size"}
    with fva.quiet():
        torch.onnx.export(VisionEncoder(model), (pixels,), str(fx / "onnx" / "vision_encoder.onnx"),
                          input_names=["pixel_values"], output_names=LEVELS, opset_version=18, dynamo=False,
                          dynamic_axes={"pixel_values": batch, **{n: batch for n in LEVELS}})
        feeds, _ = prompt_cases(1)["point_and_box"]
        prompts = {0: "batch_size", 1: "point_batch_size", 2: "num_points"}
        torch.onnx.export(PromptEncoderMaskDecoder(model), (*feeds.values(), *levels),
                          str(fx / "onnx" / "prompt_encoder_mask_decoder.onnx"),
                          input_names=[*feeds, *LEVELS], output_names=OUTPUTS, opset_version=18, dynamo=False,
                          dynamic_axes={"input_points": prompts, "input_labels": prompts,
                                        "input_boxes": {0: "batch_size", 1: "num_boxes"},
                                        **{n: batch for n in LEVELS},
                                        **{n: {0: "batch_size", 1: "point_batch_size"} for n in OUTPUTS}})


def check_against_torch(model, fx):
    """ONNX Runtime equals Sam2Model on both graphs, for every prompt layout, at batch 2."""
    pixels = torch.randn(2, 3, IMAGE, IMAGE)
    encoder = fva.session(fx / "onnx" / "vision_encoder.onnx")
    decoder = fva.session(fx / "onnx" / "prompt_encoder_mask_decoder.onnx")
    got = fva.run(encoder, {"pixel_values": pixels.numpy()})
    with torch.no_grad():
        levels = model.get_image_embeddings(pixels)
    for name, want in zip(LEVELS, levels):
        np.testing.assert_allclose(got[name], want.numpy(), rtol=0, atol=1e-4, err_msg=name)
    for case, (feeds, kwargs) in prompt_cases(2).items():
        out = fva.run(decoder, {**{k: v.numpy() for k, v in feeds.items()}, **got})
        with torch.no_grad():
            want = model(image_embeddings=levels, multimask_output=True, **{k: v.clone() for k, v in kwargs.items()})
        for key in OUTPUTS:  # mask logits: localize()'s x10 and x5 scales carry float32 noise to ~1e-4
            atol = 1e-3 if key == "pred_masks" else 1e-4
            np.testing.assert_allclose(out[key], getattr(want, key).numpy(), rtol=0, atol=atol, err_msg=f"{case} {key}")
        print(f"onnxruntime == torch, {case}: pred_masks {out['pred_masks'].shape}")
    return got


def preprocessor_config():
    """What Sam2ImageProcessorFast.save_pretrained writes, at the fixture's size."""
    return {"crop_size": None, "data_format": "channels_first", "default_to_square": True, "device": None,
            "disable_grouping": None, "do_center_crop": None, "do_convert_rgb": True, "do_normalize": True,
            "do_pad": None, "do_rescale": True, "do_resize": True, "image_mean": [0.485, 0.456, 0.406],
            "image_processor_type": "Sam2ImageProcessorFast", "image_std": [0.229, 0.224, 0.225],
            "input_data_format": None, "mask_size": {"height": 32, "width": 32}, "pad_size": None,
            "processor_class": "Sam2Processor", "resample": 2, "rescale_factor": 1 / 255, "return_tensors": None,
            "size": {"height": IMAGE, "width": IMAGE}}


def weights_digest(directory):
    return hashlib.sha256((Path(directory) / "model.safetensors").read_bytes()).hexdigest()


def build_sam2():
    model = build_model()
    fx = fva.fresh_fixture("sam2")
    if TORCH_DIR.exists():
        shutil.rmtree(TORCH_DIR)
    model.save_pretrained(TORCH_DIR)
    (TORCH_DIR / "preprocessor_config.json").write_text(json.dumps(preprocessor_config(), indent=2) + "\n")
    fva.copy_hub_files(TORCH_DIR, fx)
    export(model, fx)
    levels = check_against_torch(model, fx)
    images = fva.write_images(fx)
    pixels = np.stack([np.asarray(i.resize((IMAGE, IMAGE)), np.float32).transpose(2, 0, 1) / 255 for i in images])
    encoder, decoder = "onnx/vision_encoder.onnx", "onnx/prompt_encoder_mask_decoder.onnx"
    feeds, _ = prompt_cases(2)["points"]
    graphs = {encoder: {"reference": fva.reference_single(fx, encoder, {"pixel_values": pixels})},
              decoder: {"reference": fva.reference_single(fx, decoder, {**{k: v.numpy() for k, v in feeds.items()},
                                                                        **levels})}}
    fva.write_manifest(fx, family="sam2", architecture="Sam2Model", task="mask-generation", opset=18,
                       graphs=graphs, exporter="torch.onnx.export (TorchScript) of this script's wrappers",
                       notes=NOTES + [f"torch weights sha256 {weights_digest(TORCH_DIR)} (record_sam2.py checks it)"],
                       inputs_from="references/image_*.png resized to the model's size, /255 (graph references)")
    return fx


BUILDERS = {"sam2": build_sam2}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
