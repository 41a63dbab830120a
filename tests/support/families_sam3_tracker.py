"""Tiny SAM 3 tracker fixture for `mask-generation`: a random transformers 5 Sam3TrackerModel (SAM 3's
ViT + FPN vision encoder in front of SAM 2's prompt encoder and mask decoder) split into the two
graphs of onnx-community/sam3-tracker-ONNX, which transformers.js' Sam3TrackerModel (a Sam2Model)
loads:

    onnx/vision_encoder.onnx               pixel_values -> image_embeddings.0, .1, .2
    onnx/prompt_encoder_mask_decoder.onnx  input_points, input_labels, input_boxes,
                                           image_embeddings.0..2 -> iou_scores, pred_masks,
                                           object_score_logits

The graphs are traced from families_sam2.py's wrappers (Sam3TrackerModel is a Sam2Model with another
vision encoder: get_image_embeddings and the decoder's feeds are the same), and checked against the
PyTorch model at batch 2 for transformers.js' three prompt layouts. The processor files are
what transformers 5's Sam3TrackerProcessor.save_pretrained writes: processor_config.json alone, the
image processor (Sam3ImageProcessor) nested in it.

References, all here (one venv):
1. references/vision_encoder.npz, prompt_encoder_mask_decoder.npz: onnxruntime on the graphs.
2. references/sam3_tracker.json "prompts" + sam3_tracker_masks.npz: Sam3TrackerProcessor(images,
   input_points / input_labels / input_boxes) -> onnxruntime on the two graphs (transformers.js'
   feeds) -> processor.post_process_masks (binarized at 0.0), iou_scores and object_score_logits;
   the same processor outputs through Sam3TrackerModel (PyTorch) give "torch" scores, required
   within 1e-4 of onnxruntime's, and masks that differ from onnxruntime's only where onnxruntime's
   upscaled logit is within NEAR of 0 (recorded as '<key>/near').
3. "automatic": transformers' pipeline("mask-generation") on the PyTorch model, for record_sam2.py's
   AUTOMATIC calls on the smallest photo, torchvision's batched_nms stood in for by record_sam.py's
   (onnxruntime's NonMaxSuppression).
4. the processor's pixel_values of each photo, every 4th row and column (sam3_tracker_masks.npz
   'pixels/<i>'), for the image processor's own check.
The calls and photos are record_sam2.py's.

Environment: transformers 5.24 (Sam3Tracker) with torch 2.13.0+cpu and torchvision 0.28.0 (Sam3ImageProcessor
is torchvision-only), in a plain venv of requirements-sam3.txt:

    python3 -m venv /work/venvs/sam3 && /work/venvs/sam3/bin/pip install -r tests/support/requirements-sam3.txt
    /work/venvs/sam3/bin/python tests/support/families_sam3_tracker.py

torchvision 0.28's compiled ops do not load beside the CPU torch: torchvision_cpu.py lets it import
(see there); nothing here runs them (automatic mode's NMS is the stand-in above). ATEN_CPU_CAPABILITY
is pinned to avx2 as record_fast_image_processors.py pins it (torchvision's uint8 bilinear kernel).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # as families_vision_audio.py
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")  # as record_fast_image_processors.py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import torchvision_cpu  # noqa: E402, F401  (before transformers' torchvision image processors)
import families_sam2 as sam2  # noqa: E402
import families_vision_audio as fva  # noqa: E402
import image_cases  # noqa: E402
from record_sam import batched_nms  # noqa: E402
from record_sam2 import AUTOMATIC, PHOTOS, PROMPTS  # noqa: E402

IMAGE = 112    # pixel side: 8x8 patches of 14, feature maps 32, 16 and 8 wide, 32x32 low-res masks
PERTURB = 0.2  # seeded weight noise, as families_sam2.py
NEAR = 1e-3    # |logit| band where onnxruntime's and PyTorch's masks may differ (see check_prompts)
NAME = "sam3-tracker"
AUTOMATIC_PHOTOS = [2]  # the smallest photo (129x257) only: ~40 masks a photo in the NMS-free call
NOTES = [
    "Sam3TrackerModel: Sam3ViT hidden 32, 2 layers (window 4, global attention at layer 1), 4 heads, "
    f"patch 14, image_size {IMAGE}; FPN hidden 32, scale factors 4/2/1 (feature maps 32/16/8); prompt "
    "encoder hidden 32; mask decoder hidden 32, 2 layers, 2 heads, 3 multimask outputs (pred_masks 32x32)",
    "traced with torch.onnx.export (TorchScript exporter, opset 18) from families_sam2.py's wrappers, in the "
    "onnx-community/sam3-tracker-ONNX layout transformers.js loads (see the module docstring)",
    f"processor_config.json as transformers 5.24's Sam3TrackerProcessor saves it: Sam3ImageProcessor size "
    f"{IMAGE}x{IMAGE}, mask_size 32x32, target_size {IMAGE}",
    f"seeded weight noise std {PERTURB}, then localize() (families_sam2.localize's scales on SAM 3's modules)",
    "pipeline references: references/sam3_tracker.json + sam3_tracker_masks.npz (this script)",
]


def build_model():
    """The torch model, deterministically."""
    from transformers import Sam3TrackerConfig, Sam3TrackerModel
    from transformers.models.sam3.configuration_sam3 import Sam3ViTConfig, Sam3VisionConfig
    from transformers.models.sam3_tracker.configuration_sam3_tracker import (Sam3TrackerMaskDecoderConfig,
                                                                            Sam3TrackerPromptEncoderConfig)

    backbone = Sam3ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             image_size=IMAGE, patch_size=14, window_size=4, global_attn_indexes=[1],
                             pretrain_image_size=IMAGE)
    vision = Sam3VisionConfig(backbone_config=backbone.to_dict(), fpn_hidden_size=32, scale_factors=[4.0, 2.0, 1.0],
                              backbone_feature_sizes=[[32, 32], [16, 16], [8, 8]])
    prompt = Sam3TrackerPromptEncoderConfig(hidden_size=32, image_size=IMAGE, patch_size=14, mask_input_channels=4)
    decoder = Sam3TrackerMaskDecoderConfig(hidden_size=32, mlp_dim=64, num_hidden_layers=2, num_attention_heads=2,
                                           iou_head_hidden_dim=32)
    cfg = Sam3TrackerConfig(vision_config=vision.to_dict(), prompt_encoder_config=prompt.to_dict(),
                            mask_decoder_config=decoder.to_dict(), architectures=["Sam3TrackerModel"])
    cfg._attn_implementation = "eager"
    fva.seed(0)
    return localize(fva.perturb(Sam3TrackerModel(cfg).eval(), PERTURB))


def localize(model):
    """families_sam2.localize on SAM 3's vision neck (its FPN convs are named otherwise)."""
    with torch.no_grad():
        model.shared_image_embedding.positional_embedding.mul_(0.15)
        for layer in model.vision_encoder.neck.fpn_layers:  # each level's last conv
            layer.proj2.weight.mul_(0.05)
            layer.proj2.bias.mul_(0.05)
        for layer in model.mask_decoder.transformer.layers:
            for attention in (layer.cross_attn_image_to_token, layer.cross_attn_token_to_image):
                attention.q_proj.weight.mul_(10.0)
                attention.k_proj.weight.mul_(10.0)
        for mlp in model.mask_decoder.output_hypernetworks_mlps:
            mlp.proj_out.weight.mul_(5.0)
            mlp.proj_out.bias.mul_(5.0)
    return model


def export(model, fx):
    pixels = torch.randn(1, 3, IMAGE, IMAGE)
    with torch.no_grad():
        levels = model.get_image_embeddings(pixels)
    batch = {0: "batch_size"}
    with fva.quiet():
        torch.onnx.export(sam2.VisionEncoder(model), (pixels,), str(fx / "onnx" / "vision_encoder.onnx"),
                          input_names=["pixel_values"], output_names=sam2.LEVELS, opset_version=18, dynamo=False,
                          dynamic_axes={"pixel_values": batch, **{n: batch for n in sam2.LEVELS}})
        feeds, _ = sam2.prompt_cases(1)["point_and_box"]
        prompts = {0: "batch_size", 1: "point_batch_size", 2: "num_points"}
        torch.onnx.export(sam2.PromptEncoderMaskDecoder(model), (*feeds.values(), *levels),
                          str(fx / "onnx" / "prompt_encoder_mask_decoder.onnx"),
                          input_names=[*feeds, *sam2.LEVELS], output_names=sam2.OUTPUTS, opset_version=18,
                          dynamo=False,
                          dynamic_axes={"input_points": prompts, "input_labels": prompts,
                                        "input_boxes": {0: "batch_size", 1: "num_boxes"},
                                        **{n: batch for n in sam2.LEVELS},
                                        **{n: {0: "batch_size", 1: "point_batch_size"} for n in sam2.OUTPUTS}})


def check_against_torch(model, fx):
    """ONNX Runtime equals Sam3TrackerModel on both graphs, for every prompt layout, at batch 2."""
    pixels = torch.randn(2, 3, IMAGE, IMAGE)
    encoder = fva.session(fx / "onnx" / "vision_encoder.onnx")
    decoder = fva.session(fx / "onnx" / "prompt_encoder_mask_decoder.onnx")
    got = fva.run(encoder, {"pixel_values": pixels.numpy()})
    with torch.no_grad():
        levels = model.get_image_embeddings(pixels)
    for name, want in zip(sam2.LEVELS, levels):
        np.testing.assert_allclose(got[name], want.numpy(), rtol=0, atol=1e-4, err_msg=name)
    for case, (feeds, kwargs) in sam2.prompt_cases(2).items():
        out = fva.run(decoder, {**{k: v.numpy() for k, v in feeds.items()}, **got})
        with torch.no_grad():
            want = model(image_embeddings=levels, multimask_output=True, **{k: v.clone() for k, v in kwargs.items()})
        for key in sam2.OUTPUTS:  # mask logits: localize()'s x10 and x5 scales carry float32 noise to ~1e-4
            atol = 1e-3 if key == "pred_masks" else 1e-4
            np.testing.assert_allclose(out[key], getattr(want, key).numpy(), rtol=0, atol=atol, err_msg=f"{case} {key}")
        print(f"onnxruntime == torch, {case}: pred_masks {out['pred_masks'].shape}")
    return got


def processor():
    from transformers import Sam3ImageProcessor, Sam3TrackerProcessor

    image_processor = Sam3ImageProcessor(size={"height": IMAGE, "width": IMAGE}, mask_size={"height": 32, "width": 32})
    return Sam3TrackerProcessor(image_processor=image_processor)


def onnx_feeds(inputs):
    """The processor's prompts as transformers.js feeds them: boxes alone as one row of no points
    and a row of no labels per box; points without boxes with an empty input_boxes."""
    points, labels, boxes = (inputs.get(k) for k in ("input_points", "input_labels", "input_boxes"))
    if points is None:
        points, labels = torch.zeros(1, 1, 0, 2), torch.zeros(1, boxes.shape[1], 0, dtype=torch.int64)
    if labels is None:
        labels = torch.ones(points.shape[:3], dtype=torch.int64)
    if boxes is None:
        boxes = torch.zeros(1, 0, 4)
    return {"input_points": points.numpy(), "input_labels": labels.numpy(), "input_boxes": boxes.numpy()}


def put_mask(masks, key, mask):
    mask = np.asarray(mask, bool)
    masks[f"{key}/bits"] = np.packbits(mask)
    masks[f"{key}/shape"] = np.array(mask.shape, np.int32)
    return key


def record_prompts(model, proc, fx, images, masks):
    encoder = fva.session(fx / "onnx" / "vision_encoder.onnx")
    decoder = fva.session(fx / "onnx" / "prompt_encoder_mask_decoder.onnx")
    calls, worst = [], {"scores": 0.0, "logits": 0.0}
    for c, kwargs in enumerate(PROMPTS):
        outputs = []
        for i, image in enumerate(images):
            batch = {k: [v] for k, v in kwargs.items()}  # one image: the processor's outer level
            inputs = proc(images=image, return_tensors="pt", **batch)
            levels = fva.run(encoder, {"pixel_values": inputs["pixel_values"].numpy()})
            got = fva.run(decoder, {**onnx_feeds(inputs), **levels})
            with torch.no_grad():
                want = model(**inputs, multimask_output=True)
            logits = proc.post_process_masks(torch.from_numpy(got["pred_masks"]), inputs["original_sizes"],
                                             binarize=False)[0].numpy()
            torch_logits = proc.post_process_masks(want.pred_masks, inputs["original_sizes"], binarize=False)[0].numpy()
            near = np.abs(logits) < NEAR
            assert not ((logits > 0) != (torch_logits > 0))[~near].any(), (c, i, "torch and onnxruntime masks differ")
            worst["logits"] = max(worst["logits"], float(np.abs(logits - torch_logits).max()))
            key = put_mask(masks, f"prompts/{c}/{i}", logits > 0.0)
            masks[f"prompts/{c}/{i}/near"] = np.packbits(near)
            out = {"masks": key, "iou_scores": got["iou_scores"][0].tolist(),
                   "object_score_logits": got["object_score_logits"][0].tolist(),
                   "torch": {"iou_scores": want.iou_scores[0].tolist(),
                             "object_score_logits": want.object_score_logits[0].tolist()}}
            for name in ("iou_scores", "object_score_logits"):
                diff = float(np.abs(got[name] - getattr(want, name).numpy()).max())
                assert diff <= 1e-4, (c, i, name, diff)
                worst["scores"] = max(worst["scores"], diff)
            outputs.append(out)
            print(f"prompts {c} photo {i}: iou {np.round(got['iou_scores'][0], 3).tolist()}, "
                  f"mask area {np.round((logits > 0).mean((-1, -2)), 3).tolist()}")
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
    print(f"onnxruntime vs torch: scores {worst['scores']:.2e}, upscaled logits {worst['logits']:.2e}")
    return calls, worst


def record_automatic(model, proc, images, masks):
    """transformers' pipeline("mask-generation") on the PyTorch model, its batched_nms stood in for
    by record_sam.py's (onnxruntime's NonMaxSuppression: see its docstring)."""
    from transformers import pipeline
    from transformers.models.sam3 import image_processing_sam3

    image_processing_sam3.batched_nms = batched_nms
    p = pipeline("mask-generation", model=model, image_processor=proc.image_processor, device="cpu")
    calls = []
    for c, kwargs in enumerate(AUTOMATIC):
        outputs = []
        for i in AUTOMATIC_PHOTOS:
            out = p(images[i], **kwargs)
            assert set(out) <= {"masks", "scores", "bounding_boxes", "rle_mask"}, sorted(out)
            result = {"masks": [put_mask(masks, f"automatic/{c}/{i}/{m}", mask) for m, mask in enumerate(out["masks"])],
                      "scores": out["scores"].tolist()}
            if "bounding_boxes" in out:
                result["bounding_boxes"] = out["bounding_boxes"].tolist()
            if "rle_mask" in out:
                result["rle_mask"] = out["rle_mask"]
            outputs.append(result)
            print(f"automatic {c} photo {i}: {len(out['masks'])} masks")
        calls.append({"call_kwargs": kwargs, "outputs": outputs})
    # as sam2's: NMS at 0.7 keeps one mask, so the NMS-free call (crops_nms_thresh 1.0) carries the
    # point-by-point check, with scores that differ point by point
    kept = calls[1]["outputs"]
    assert min(len({round(s, 4) for s in o["scores"]}) for o in kept) >= 10, "references that cannot discriminate"
    return calls


def weights_digest(model):
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return hashlib.sha256((Path(tmp) / "model.safetensors").read_bytes()).hexdigest()


def build_sam3_tracker():
    model = build_model()
    proc = processor()
    fx = fva.fresh_fixture(NAME)
    with tempfile.TemporaryDirectory() as tmp:
        model.config.save_pretrained(tmp)
        proc.save_pretrained(tmp)
        fva.copy_hub_files(Path(tmp), fx)
    export(model, fx)
    levels = check_against_torch(model, fx)

    images = [image_cases.make(name).convert("RGB") for name in PHOTOS]
    masks = {}
    for i, image in enumerate(images):
        pixels = proc(images=image, return_tensors="pt")["pixel_values"][0].numpy()
        masks[f"pixels/{i}"] = pixels[:, ::4, ::4]
    prompts, worst = record_prompts(model, proc, fx, images, masks)
    automatic = record_automatic(model, proc, images, masks)
    fva.save_npz(fx / "references" / "sam3_tracker_masks.npz", masks)
    fva.save_json(fx / "references" / "sam3_tracker.json", {
        "task": "mask-generation",
        "inputs": {"photos": PHOTOS, "how_made": "tests/support/image_cases.py make(name)"},
        "mask_encoding": "sam3_tracker_masks.npz: '<key>/bits' = np.packbits(mask), '<key>/shape' = its shape; "
        f"'<key>/near' = np.packbits(|logit| < {NEAR}); 'pixels/<i>' = pixel_values[:, ::4, ::4] of photo i",
        "onnxruntime_vs_torch": worst, "prompts": prompts,
        "automatic_photos": [PHOTOS[i] for i in AUTOMATIC_PHOTOS], "automatic": automatic})

    pixels = np.stack([masks[f"pixels/{i}"].repeat(4, 1).repeat(4, 2) for i in range(2)])
    encoder, decoder = "onnx/vision_encoder.onnx", "onnx/prompt_encoder_mask_decoder.onnx"
    feeds, _ = sam2.prompt_cases(2)["points"]
    graphs = {encoder: {"reference": fva.reference_single(fx, encoder, {"pixel_values": pixels})},
              decoder: {"reference": fva.reference_single(fx, decoder, {**{k: v.numpy() for k, v in feeds.items()},
                                                                        **levels})}}
    fva.write_manifest(fx, family="sam3_tracker", architecture="Sam3TrackerModel", task="mask-generation",
                       opset=18, graphs=graphs, exporter="torch.onnx.export (TorchScript) of families_sam2.py's wrappers",
                       notes=NOTES + [f"torch weights sha256 {weights_digest(model)}"],
                       inputs_from="the processor's pixel_values of two photos, every 4th pixel repeated 4x4 "
                       "(graph references)")
    return fx


BUILDERS = {NAME: build_sam3_tracker}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
