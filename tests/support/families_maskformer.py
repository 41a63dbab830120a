"""Tiny MaskFormer-family segmentation fixtures (outputs class_queries_logits and
masks_queries_logits, as the Xenova / optimum exports of MaskFormer and Mask2Former name them).

mask2former: Mask2FormerForUniversalSegmentation with a tiny Swin backbone (as transformers'
tests build it: depths [1, 1, 1, 1]), exported with optimum-onnx main_export for task
image-segmentation. optimum 0.1.0 registers no ONNX config for model type "mask2former", so the
export passes optimum's own MaskFormerOnnxConfig as custom_onnx_configs: the same inputs
(pixel_values) and output names (class_queries_logits, masks_queries_logits) as a MaskFormer export.

Why its images are a fixed 128x128: Mask2Former's pixel decoder (multi-scale deformable attention)
keeps the feature maps' sizes as Python ints (spatial_shapes_list), so torch's tracer bakes the
traced input's sizes into the graph (a Split by those sizes, constant reference points): onnxruntime
on another size gives wrong numbers (class logits off by 0.2), not an error. The export traces at
128x128 and the fixture's processor resizes every photo to 128x128 (size {"height", "width"});
the shortest-edge rule is checked against transformers by tests/test_image_processor.py.

maskformer: MaskFormerForInstanceSegmentation (the same tiny Swin, a 2-layer DETR decoder, FPN pixel
decoder), exported with optimum-onnx main_export for task image-segmentation (optimum's
MaskFormerOnnxConfig). Its graph follows the input's size, but only for sizes that are multiples of
64 (Swin's window padding is traced at optimum's 64x64 dummy input: a size like 96x160 fails in a
Reshape), so its processor rounds up to size_divisor 64 (shortest edge 128, longest 192): the photos
come out 128x128, 128x192, 192x128, 64x192.

Same conventions as families_vision_audio.py (whose helpers this script imports): a seeded,
perturbed random-weight model, references/model.npz from onnxruntime on references/image_*.png.
The pipeline references are recorded by record_maskformer.py, which rebuilds the model with
`build_model(name)`.

Usage: ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_maskformer.py [mask2former] [maskformer]
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

import torch  # noqa: E402

import families_vision_audio as fva  # noqa: E402
from families_vision_audio import (_id2label, copy_hub_files, export_main, fresh_fixture, move_onnx,  # noqa: E402
                                   perturb, reference_single, save_model_dir, seed, tmpdir, write_images,
                                   write_manifest)

# 70 labels: transformers' instance route takes torch.topk(num_queries, sorted=False) over
# queries x labels, whose order is only defined (descending, partial_sort on CPU) when
# num_labels >= 64; real checkpoints have 80-150 labels
LABELS = [f"class_{i:02d}" for i in range(70)]
SIDE = 128             # the traced (and only) input size of the mask2former graph
PERTURB = 0.1
CLASS_SCALE = 15.0     # class_predictor weights scaled: confident queries (scores past 0.9)
QUERY_STD = 2.0        # query features / embeddings redrawn: queries differ in label, not only score


def build_model(name="mask2former"):
    """The torch model and its processor, deterministically (record_maskformer.py rebuilds it)."""
    model, proc = (build_mask2former if name == "mask2former" else build_maskformer)()
    with torch.no_grad():
        model.class_predictor.weight.mul_(CLASS_SCALE)
        model.class_predictor.bias.zero_()
        g = torch.Generator().manual_seed(0)
        module = model.model.transformer_module
        for q in (getattr(module, "queries_features", None), module.queries_embedder):
            if q is not None:
                q.weight.copy_(torch.randn(q.weight.shape, generator=g) * QUERY_STD)
        if name == "maskformer":
            # the DETR decoder's (non-LayerNorm) biases gave every query one label: zero them
            for n, p in module.named_parameters():
                if n.endswith("bias") and "layernorm" not in n and "layer_norm" not in n:
                    p.zero_()
    return model, proc


def _swin():
    from transformers import SwinConfig

    return SwinConfig(image_size=SIDE, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1, 1, 1],
                      num_heads=[1, 1, 2, 2], window_size=4, mlp_ratio=2.0,
                      out_features=["stage1", "stage2", "stage3", "stage4"])


def _labels():
    return {"id2label": _id2label(LABELS), "label2id": {n: i for i, n in enumerate(LABELS)}}


def build_mask2former():
    from transformers import Mask2FormerConfig, Mask2FormerForUniversalSegmentation, Mask2FormerImageProcessor

    cfg = Mask2FormerConfig(backbone_config=_swin(), feature_size=32, mask_feature_size=32, hidden_dim=32,
                            encoder_feedforward_dim=64, dim_feedforward=64, encoder_layers=2, decoder_layers=3,
                            num_attention_heads=4, num_queries=10, **_labels(),
                            architectures=["Mask2FormerForUniversalSegmentation"])
    seed(0)
    model = perturb(Mask2FormerForUniversalSegmentation(cfg).eval(), PERTURB)
    proc = Mask2FormerImageProcessor(size={"height": SIDE, "width": SIDE}, size_divisor=32, ignore_index=255)
    return model, proc


def build_maskformer():
    from transformers import DetrConfig, MaskFormerConfig, MaskFormerForInstanceSegmentation, MaskFormerImageProcessor

    detr = DetrConfig(d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64, num_queries=10)
    cfg = MaskFormerConfig(backbone_config=_swin().to_dict(), decoder_config=detr.to_dict(), fpn_feature_size=32,
                           mask_feature_size=32, num_queries=10, **_labels(),
                           architectures=["MaskFormerForInstanceSegmentation"])
    seed(0)
    model = perturb(MaskFormerForInstanceSegmentation(cfg).eval(), PERTURB)
    # size_divisor 64: the export (traced at optimum's 64x64) is right at sizes that are multiples of 64
    proc = MaskFormerImageProcessor(size={"shortest_edge": SIDE, "longest_edge": 192}, size_divisor=64,
                                    ignore_index=255, do_reduce_labels=True)
    return model, proc


NOTES = {
    "mask2former": [
        "Mask2FormerForUniversalSegmentation; backbone: Swin (embed_dim 16, depths [1, 1, 1, 1], heads [1, 1, 2, 2], "
        "window 4, mlp_ratio 2), pixel decoder and transformer decoder hidden 32 (2 encoder, 3 decoder layers, "
        "4 heads), 10 queries, 70 labels",
        "exported by optimum-onnx main_export, task image-segmentation, with custom_onnx_configs={'model': "
        "MaskFormerOnnxConfig} (optimum has no mask2former config): input pixel_values, outputs "
        "class_queries_logits and masks_queries_logits",
        f"traced at {SIDE}x{SIDE}: the deformable-attention pixel decoder bakes the feature-map sizes into the "
        f"graph, so it is only valid at {SIDE}x{SIDE}; preprocessor_config.json resizes to that size",
        f"seeded weight noise std {PERTURB}, class_predictor weights x{CLASS_SCALE} and bias zeroed, query "
        f"features / embeddings redrawn with std {QUERY_STD}",
        "pipeline references: tests/support/record_maskformer.py (references/segmentation.json + "
        "segmentation_masks.npz)",
    ],
    "maskformer": [
        "MaskFormerForInstanceSegmentation; backbone: Swin (embed_dim 16, depths [1, 1, 1, 1], heads [1, 1, 2, 2], "
        "window 4, mlp_ratio 2), FPN / mask features 32, DETR decoder d_model 32 (2 layers, 4 heads), "
        "10 queries, 70 labels",
        "exported by optimum-onnx main_export, task image-segmentation: input pixel_values, outputs "
        "class_queries_logits and masks_queries_logits",
        "the graph is right at sizes that are multiples of 64 (Swin's window padding is traced at the 64x64 "
        "dummy input); preprocessor_config.json rounds up to size_divisor 64 (shortest edge 128, longest 192)",
        f"seeded weight noise std {PERTURB}, class_predictor weights x{CLASS_SCALE} and bias zeroed, query "
        f"embeddings redrawn with std {QUERY_STD}, the DETR decoder's biases (not its LayerNorms') zeroed (else "
        "every query gave one label)",
        "pipeline references: tests/support/record_maskformer.py (references/segmentation.json + "
        "segmentation_masks.npz)",
    ],
}


def build(name):
    from optimum.exporters.onnx.model_configs import MaskFormerOnnxConfig

    model, proc = build_model(name)
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc)
    if name == "mask2former":
        options = {"custom_onnx_configs": {"model": MaskFormerOnnxConfig(model.config, task="image-segmentation")},
                   "height": SIDE, "width": SIDE}
        exporter = "optimum-onnx 0.1.0 main_export (custom_onnx_configs: MaskFormerOnnxConfig)"
    else:
        options, exporter = {}, "optimum-onnx 0.1.0 main_export"
    out = export_main(d, tmp / "out", "image-segmentation", 18, **options)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pixels = {"pixel_values": proc(images=images, return_tensors="np")["pixel_values"]}  # padded to one size
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", pixels)}}
    write_manifest(fx, family=name, architecture=model.config.architectures[0], task="image-segmentation",
                   opset=18, graphs=graphs, notes=NOTES[name], exporter=exporter,
                   inputs_from="references/image_*.png through preprocessor_config.json")
    shutil.rmtree(tmp)
    return fx


BUILDERS = {"mask2former": lambda: build("mask2former"), "maskformer": lambda: build("maskformer")}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
