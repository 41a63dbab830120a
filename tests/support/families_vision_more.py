"""More tiny VISION fixtures: image feature extraction (ViTModel, DINOv2), image classifiers of other
families (ConvNeXt, DeiT, Swin, MobileViT) and CLIP split into Xenova's text_model.onnx /
vision_model.onnx.

Same conventions as families_vision_audio.py (whose helpers this script imports): random-weight
models from transformers config classes, seeded and perturbed, exported offline with optimum-onnx,
references from onnxruntime (references/<onnx stem>.npz) and from the transformers pipeline on the
torch model (references/pipeline_<task>.json), inputs references/image_*.png. See
tests/support/README.md for the fixture contract.

Usage (regenerates deterministically; no argument = every fixture):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_more.py [names...]

Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import json
import os
import shutil
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

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402

from families_vision_audio import (  # noqa: E402
    LABELS5, OPTIMUM_ONNX, ZS_LABELS, ZS_TEXTS, _id2label, clip_tokenizer, copy_hub_files,
    export_main, fresh_fixture, image_inputs_description, move_onnx, perturb, pipeline_image_classification,
    pipeline_zero_shot_image, quiet, reference_single, save_json, save_model_dir, seed, tmpdir,
    write_images, write_manifest,
)
import families_vision_audio as fva  # noqa: E402

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
INPUTS_FROM = "references/image_*.png through preprocessor_config.json"


def is_topological(graph) -> bool:
    """Every node input is a graph input, an initializer or an earlier node's output (top graph)."""
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    for n in graph.node:
        if any(x not in known for x in n.input):
            return False
        known.update(n.output)
    return True


def max_spread(outputs) -> float:
    """Largest minus smallest score of each image's top-k, the smallest over images (degeneracy check)."""
    return min(max(o["score"] for o in out) - min(o["score"] for o in out) for out in outputs)


# ---- image-feature-extraction ------------------------------------------------------------------


def pipeline_image_feature_extraction(fx, model, proc, images):
    from transformers import pipeline

    p = pipeline("image-feature-extraction", model=model, image_processor=proc, device="cpu")
    calls = []
    for kwargs in ({}, {"pool": True}):
        calls.append({"call_kwargs": kwargs, "outputs": p(images, **kwargs)})
    save_json(fx / "references" / "pipeline_image-feature-extraction.json",
              {"task": "image-feature-extraction", "inputs": image_inputs_description(), "calls": calls})


def _with_pooler(base):
    """optimum-onnx 0.1.0's ViT-family feature-extraction config outputs last_hidden_state only; the
    pipeline's pool=True needs pooler_output from the graph too."""

    class WithPooler(base):
        @property
        def outputs(self):
            return {"last_hidden_state": {0: "batch_size", 1: "sequence_length"}, "pooler_output": {0: "batch_size"}}

    return WithPooler


def _features_fixture(name, family, arch, model, proc, notes, onnx_config, fp16=False):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc)
    from transformers import AutoConfig

    # from the saved folder: DINOv2's dummy-input generator reads the preprocessor from config._name_or_path
    custom = _with_pooler(onnx_config)(AutoConfig.from_pretrained(d), task="feature-extraction")
    out = export_main(d, tmp / "out", "feature-extraction", 18, custom_onnx_configs={"model": custom})
    outputs = [o.name for o in onnx.load(str(out / "model.onnx")).graph.output]
    assert outputs == ["last_hidden_state", "pooler_output"], outputs
    notes = notes + [f"exported by main_export(task='feature-extraction', custom_onnx_configs={{'model': "
                     f"{onnx_config.__name__} subclass}}): optimum-onnx 0.1.0's own {onnx_config.__name__} outputs "
                     "last_hidden_state only; the subclass adds pooler_output (the pipeline's pool=True reads it)"]
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    names = ["onnx/model.onnx"]
    extra = {}
    if fp16:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        # what the converter itself gives (before families_vision_audio.fp16_variant's toposort)
        src = onnx.load(str(fx / "onnx/model.onnx"))
        raw = convert_float_to_float16(onnx.load(str(fx / "onnx/model.onnx")), keep_io_types=True,
                                       disable_shape_infer=False)
        appended = [f"{n.op_type} {n.name}: {list(n.input)} -> {list(n.output)}"
                    for n in raw.graph.node[len(src.graph.node):]]
        raw_sorted = is_topological(raw.graph)
        fva.fp16_variant(fx / "onnx/model.onnx", fx / "onnx/model_fp16.onnx", keep_io_types=True)
        saved_sorted = is_topological(onnx.load(str(fx / "onnx/model_fp16.onnx")).graph)
        names.append("onnx/model_fp16.onnx")
        extra["fp16_topological_order"] = {
            "converter_output": raw_sorted, "committed_file": saved_sorted,
            "converter_appended_last": appended,
            "note": "onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True) appends its "
                    "io Casts (pixel_values float32 -> float16, and float16 -> float32 for each output) after "
                    "the converted nodes, so the nodes reading the input Cast's output come before it: the "
                    "converter's graph is not in topological order (converter_output). "
                    "families_vision_audio.fp16_variant then sorts the nodes topologically (stable), so the "
                    "committed onnx/model_fp16.onnx is in order (committed_file)",
        }
    graphs = {g: {"reference": reference_single(fx, g, {"pixel_values": pv})} for g in names}
    if fp16:
        graphs["onnx/model_fp16.onnx"]["variant"] = "convert_float_to_float16(keep_io_types=True): float32 IO"
    pipeline_image_feature_extraction(fx, model, proc, images)
    write_manifest(fx, family=family, architecture=arch, task="feature-extraction", opset=18, graphs=graphs,
                   notes=notes, inputs_from=INPUTS_FROM, pipeline_task="image-feature-extraction", **extra)
    shutil.rmtree(tmp)
    return fx


def build_vit_features():
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8, num_channels=3, qkv_bias=True, architectures=["ViTModel"])
    seed(0)
    model = perturb(ViTModel(cfg, add_pooling_layer=True).eval())
    proc = ViTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=2, do_rescale=True,
                             rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5],
                             image_std=[0.5, 0.5, 0.5])
    from optimum.exporters.onnx.model_configs import ViTOnnxConfig

    return _features_fixture("vit-features", "vit", "ViTModel", model, proc,
                             ["ViTModel with its pooler (dense + tanh on the CLS token): optimum's "
                              "feature-extraction export outputs last_hidden_state and pooler_output",
                              "pipeline_image-feature-extraction.json: two calls, {} (last_hidden_state, "
                              "[1, 17, 32] per image) and {pool: true} (pooler_output, [1, 32] per image), "
                              "stored as the pipeline returns them (nested lists, full float precision)"],
                             ViTOnnxConfig)


def build_dinov2():
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    cfg = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=32,
                       patch_size=8, num_channels=3, layerscale_value=1.0, architectures=["Dinov2Model"])
    seed(0)
    model = perturb(Dinov2Model(cfg).eval())
    # as facebook/dinov2-* ship it (shortest_edge 256, crop 224), scaled down
    proc = BitImageProcessor(do_resize=True, size={"shortest_edge": 36}, resample=3, do_center_crop=True,
                             crop_size={"height": 32, "width": 32}, do_rescale=True, rescale_factor=1 / 255,
                             do_normalize=True, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD,
                             do_convert_rgb=True)
    from optimum.exporters.onnx.model_configs import Dinov2OnnxConfig

    return _features_fixture("dinov2", "dinov2", "Dinov2Model", model, proc,
                             ["BitImageProcessor as facebook/dinov2-* ship it: shortest_edge 36, bicubic, "
                              "center crop 32, ImageNet mean/std",
                              "Dinov2Embeddings.interpolate_pos_encoding always interpolates while tracing: "
                              "the graph resizes the 4x4 position grid to the input's patch grid (bicubic Resize)",
                              "pooler_output is the layer-normed CLS token",
                              "onnx/model_fp16.onnx: families_vision_audio.fp16_variant (onnxruntime.transformers "
                              "convert_float_to_float16, keep_io_types=True, then a stable topological sort); "
                              "see fp16_topological_order"],
                             Dinov2OnnxConfig, fp16=True)


# ---- image-classification: ConvNeXt, DeiT, Swin, MobileViT ----------------------------------------


def _classifier_fixture(name, family, arch, model, proc, notes):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc)
    out = export_main(d, tmp / "out", "image-classification", 18)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", {"pixel_values": pv})}}
    outputs = [o.name for o in onnx.load(str(fx / "onnx/model.onnx")).graph.output]
    assert outputs == ["logits"], outputs
    pipeline_image_classification(fx, model, proc, images)
    ref = json.loads((fx / "references" / "pipeline_image-classification.json").read_text())
    spread = max_spread(ref["outputs"])
    assert spread > 1e-3, f"{name}: top-5 scores within {spread} (degenerate)"
    write_manifest(fx, family=family, architecture=arch, task="image-classification", opset=18, graphs=graphs,
                   notes=list(notes) + [f"5 labels {LABELS5}; smallest top-5 score spread over the images "
                                        f"{spread:.4f}"],
                   inputs_from=INPUTS_FROM)
    shutil.rmtree(tmp)
    return fx


def _labels():
    return dict(id2label=_id2label(LABELS5), label2id={n: i for i, n in enumerate(LABELS5)})


def build_convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification, ConvNextImageProcessor

    cfg = ConvNextConfig(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                         image_size=32, architectures=["ConvNextForImageClassification"], **_labels())
    seed(0)
    model = perturb(ConvNextForImageClassification(cfg).eval())
    # as facebook/convnext-*-224 ship it (shortest_edge 224, crop_pct 0.875), scaled down: below 384 the
    # processor resizes the shortest edge to 32/0.875 = 36 and center-crops 32x32
    proc = ConvNextImageProcessor(do_resize=True, size={"shortest_edge": 32}, crop_pct=0.875, resample=3,
                                  do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                  image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)
    return _classifier_fixture("convnext", "convnext", "ConvNextForImageClassification", model, proc,
                               ["2 stages (hidden_sizes [16, 32], depths [1, 1]), patchify stem 4x4",
                                "ConvNextImageProcessor shortest_edge 32 with crop_pct 0.875: resize the shortest "
                                "edge to int(32/0.875)=36, center crop 32"])


def build_deit():
    from transformers import DeiTConfig, DeiTForImageClassification, DeiTImageProcessor

    cfg = DeiTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     image_size=32, patch_size=8, num_channels=3, qkv_bias=True,
                     architectures=["DeiTForImageClassification"], **_labels())
    seed(0)
    model = perturb(DeiTForImageClassification(cfg).eval())
    # as facebook/deit-*-patch16-224 ship it (size 256, crop 224), scaled down
    proc = DeiTImageProcessor(do_resize=True, size={"height": 36, "width": 36}, resample=3, do_center_crop=True,
                              crop_size={"height": 32, "width": 32}, do_rescale=True, rescale_factor=1 / 255,
                              do_normalize=True, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)
    return _classifier_fixture("deit", "deit", "DeiTForImageClassification", model, proc,
                               ["plain DeiTForImageClassification (config.architectures names it, so optimum's "
                                "AutoModelForImageClassification loads it, not DeiTForImageClassificationWithTeacher): "
                                "one output, logits, from the CLS token; the embeddings still carry the "
                                "distillation token (seq 16 patches + 2)",
                                "DeiTImageProcessor: resize 36x36 bicubic, center crop 32"])


def build_swin():
    from transformers import SwinConfig, SwinForImageClassification, ViTImageProcessor

    cfg = SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                     window_size=4, mlp_ratio=2.0, architectures=["SwinForImageClassification"], **_labels())
    seed(0)
    model = perturb(SwinForImageClassification(cfg).eval())
    # microsoft/swin-tiny-patch4-window7-224 ships a ViTImageProcessor (224x224, ImageNet mean/std)
    proc = ViTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=3, do_rescale=True,
                             rescale_factor=1 / 255, do_normalize=True, image_mean=IMAGENET_MEAN,
                             image_std=IMAGENET_STD)
    return _classifier_fixture("swin", "swin", "SwinForImageClassification", model, proc,
                               ["2 stages: embed_dim 16 (hidden 32 after the patch merging), depths [1, 1], "
                                "heads [1, 2], patch 4, window 4: stage 1 is 8x8 tokens in four 4x4 windows "
                                "(the block has no shift: depth 1), stage 2 is one 4x4 window",
                                "ViTImageProcessor as microsoft/swin-* ship it: 32x32 bicubic, ImageNet mean/std"])


def build_mobilevit():
    from transformers import MobileViTConfig, MobileViTForImageClassification, MobileViTImageProcessor

    cfg = MobileViTConfig(num_channels=3, image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
                          neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 48], num_attention_heads=2, mlp_ratio=2.0,
                          expand_ratio=2.0, architectures=["MobileViTForImageClassification"], **_labels())
    seed(0)
    model = perturb(MobileViTForImageClassification(cfg).eval())
    # as apple/mobilevit-* ship it (shortest_edge 288, crop 256, no normalization, BGR), scaled down
    proc = MobileViTImageProcessor(do_resize=True, size={"shortest_edge": 36}, resample=2, do_center_crop=True,
                                   crop_size={"height": 32, "width": 32}, do_rescale=True, rescale_factor=1 / 255,
                                   do_flip_channel_order=True)
    return _classifier_fixture("mobilevit", "mobilevit", "MobileViTForImageClassification", model, proc,
                               ["MobileViT v1: hidden_sizes [16, 24, 32], neck_hidden_sizes [8, 8, 16, 16, 24, 24, 48], "
                                "patch 2; at 32px the last MobileViT block sees a 1x1 map, which the model "
                                "bilinearly resizes to 2x2 before unfolding and back after folding "
                                "(sizes fixed at export)",
                                "MobileViTImageProcessor as apple/mobilevit-* ship it: shortest_edge 36 bilinear, "
                                "center crop 32, rescale 1/255, no normalization, do_flip_channel_order (RGB -> BGR)"])


# ---- CLIP split as Xenova ships it --------------------------------------------------------------


def _clip_split_configs():
    from optimum.exporters.onnx.model_configs import CLIPTextWithProjectionOnnxConfig, CLIPVisionModelOnnxConfig

    class TextWithProjection(CLIPTextWithProjectionOnnxConfig):
        # transformers.js' scripts/extra/clip.py: input_ids + attention_mask -> text_embeds, last_hidden_state
        @property
        def inputs(self):
            return {"input_ids": {0: "batch_size", 1: "sequence_length"},
                    "attention_mask": {0: "batch_size", 1: "sequence_length"}}

        @property
        def outputs(self):
            return {"text_embeds": {0: "batch_size"},
                    "last_hidden_state": {0: "batch_size", 1: "sequence_length"}}

    class VisionWithProjection(CLIPVisionModelOnnxConfig):
        @property
        def outputs(self):
            return {"image_embeds": {0: "batch_size"}, "last_hidden_state": {0: "batch_size"}}

    return TextWithProjection, VisionWithProjection


def build_clip_split():
    from optimum.exporters.onnx import export_models
    from transformers import (CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextModelWithProjection,
                              CLIPVisionModelWithProjection)

    fx = fresh_fixture("clip-split")
    tmp = tmpdir()
    tok = clip_tokenizer(tmp)
    # the 'clip' fixture's config and seed (families_vision_audio.build_clip): same weights
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=16, projection_dim=16,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8, projection_dim=16),
        projection_dim=16, architectures=["CLIPModel"],
    )
    seed(0)
    model = perturb(CLIPModel(cfg).eval())
    proc = CLIPImageProcessor(do_resize=True, size={"shortest_edge": 32}, resample=3, do_center_crop=True,
                              crop_size={"height": 32, "width": 32}, do_rescale=True, rescale_factor=1 / 255,
                              do_normalize=True, image_mean=[0.48145466, 0.4578275, 0.40821073],
                              image_std=[0.26862954, 0.26130258, 0.27577711], do_convert_rgb=True)
    d = save_model_dir(model, tmp, proc, tok)
    # the two halves, with the joint model's weights (state-dict names are the same)
    sd = model.state_dict()
    text = CLIPTextModelWithProjection(cfg.text_config).eval()
    text.load_state_dict({k: v for k, v in sd.items() if k.startswith(("text_model.", "text_projection."))})
    vision = CLIPVisionModelWithProjection(cfg.vision_config).eval()
    vision.load_state_dict({k: v for k, v in sd.items() if k.startswith(("vision_model.", "visual_projection."))})
    TextCfg, VisionCfg = _clip_split_configs()
    out = tmp / "out"
    out.mkdir()
    with quiet():
        export_models({"text_model": (text, TextCfg(text.config, task="feature-extraction")),
                       "vision_model": (vision, VisionCfg(vision.config, task="feature-extraction"))},
                      output_dir=out, opset=18, device="cpu")
    move_onnx(out, fx, {"text_model.onnx": "text_model.onnx", "vision_model.onnx": "vision_model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    enc = tok(ZS_TEXTS, return_tensors="np", padding=True)
    graphs = {
        "onnx/text_model.onnx": {"reference": reference_single(fx, "onnx/text_model.onnx", dict(enc))},
        "onnx/vision_model.onnx": {"reference": reference_single(fx, "onnx/vision_model.onnx", {"pixel_values": pv})},
    }
    for g, want in [("onnx/text_model.onnx", (["input_ids", "attention_mask"], ["text_embeds", "last_hidden_state"])),
                    ("onnx/vision_model.onnx", (["pixel_values"], ["image_embeds", "last_hidden_state"]))]:
        m = onnx.load(str(fx / g))
        got = ([i.name for i in m.graph.input], [o.name for o in m.graph.output])
        assert got == want, (g, got)
    # the halves agree with the joint model they come from
    t_ref = np.load(fx / graphs["onnx/text_model.onnx"]["reference"])
    v_ref = np.load(fx / graphs["onnx/vision_model.onnx"]["reference"])
    np.testing.assert_allclose(t_ref["0/out/text_embeds"],
                               model.get_text_features(**{k: torch.tensor(v) for k, v in enc.items()}).detach().numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(v_ref["0/out/image_embeds"],
                               model.get_image_features(pixel_values=torch.tensor(pv)).detach().numpy(), atol=1e-5)
    pipeline_zero_shot_image(fx, model, proc, tok, images, {"candidate_labels": ZS_LABELS})
    write_manifest(fx, family="clip", architecture="CLIPModel", task="zero-shot-image-classification", opset=18,
                   graphs=graphs, exporter=f"{OPTIMUM_ONNX} export_models",
                   notes=["Xenova's split layout (transformers.js scripts/convert.py --split_modalities): "
                          "CLIPTextModelWithProjection and CLIPVisionModelWithProjection loaded with the joint "
                          "CLIPModel's weights, exported together by optimum's export_models with custom "
                          "OnnxConfigs: optimum's CLIPTextWithProjectionOnnxConfig (model type "
                          "'clip-text-with-projection') with inputs input_ids + attention_mask and outputs "
                          "text_embeds + last_hidden_state, and its CLIPVisionModelOnnxConfig with outputs "
                          "image_embeds + last_hidden_state (TorchScript export, dynamic axes)",
                          "text_embeds / image_embeds are the projections, not L2-normalized (as "
                          "CLIPModel.get_text_features / get_image_features, checked to 1e-5)",
                          "same config, seed and weights as the 'clip' fixture (its joint model.onnx); "
                          "pipeline_zero-shot-image-classification.json is transformers' pipeline on that joint "
                          "torch CLIPModel",
                          "text reference: the three texts padded to the longest (attention_mask has zeros)",
                          "checked when made: L2-normalized text_embeds / image_embeds equal the 'clip' fixture's "
                          "model.npz text_embeds / image_embeds on the same inputs (max diff 1.5e-7)"],
                   text_inputs={"texts": ZS_TEXTS, "tokenizer_kwargs": {"padding": True}})
    shutil.rmtree(tmp)
    return fx


BUILDERS = {
    "vit-features": build_vit_features,
    "dinov2": build_dinov2,
    "convnext": build_convnext,
    "deit": build_deit,
    "swin": build_swin,
    "mobilevit": build_mobilevit,
    "clip-split": build_clip_split,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
