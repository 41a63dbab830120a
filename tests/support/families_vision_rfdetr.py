"""Tiny object-detection fixture for RF-DETR (RfDetrForObjectDetection, transformers 5.24): a small
windowed DINOv2 backbone (RfDetrDinov2), its C2f projector and a 2-layer deformable decoder, its
processor as transformers 5.24 makes it for the Roboflow/rf-detr-* checkpoints (RfDetrImageProcessor
with size {height, width} = the backbone's resolution), scaled down to 64x64.

Why its own script and venv: transformers 4.57 (the export venv's) has no RF-DETR, and transformers
5's RfDetrImageProcessor is a torchvision-backend processor that imports torchvision, which the CPU
torch of the export and genai venvs cannot load; so requirements-rfdetr.txt pairs transformers 5.24
with the torch / torchvision of requirements-fast.txt. optimum-onnx 0.1.0 has no ONNX config for
rf_detr (nor could it load transformers 5), so the graph is exported with torch.onnx (TorchScript
exporter) under the names of onnx-community's RF-DETR exports and of optimum's RT-DETR export:
pixel_values -> logits, pred_boxes.

Same conventions as families_vision_audio.py (whose helpers this script imports: it imports no
optimum at module level): a random-weight model from transformers config classes, seeded and
perturbed, references from onnxruntime (references/model.npz) and from transformers' pipeline on the
torch model (references/pipeline_object-detection.json, threshold 0.0 on the synthetic images
references/image_*.png; run by tests/test_pipelines_vision.py). See tests/support/README.md.

    ~/.cache/transmuter-tests/venv-rfdetr/bin/python tests/support/families_vision_rfdetr.py [names...]

Pinned versions: requirements-rfdetr.txt (torch 2.14.1, torchvision 0.29.1, transformers 5.24.0,
onnx 1.23.2, onnxruntime 1.32.0, numpy 2.4.6, pillow 13.0.0).
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
from families_vision_detr_variants import Wrapped  # noqa: E402  (logits, pred_boxes)
from families_vision_audio import _id2label, perturb, pipeline_object_detection, seed  # noqa: E402

# 18: Resize's antialias attribute (see bicubic_aa)
OPSET = 18
LABELS = ["person", "bicycle", "car", "cat", "dog"]
# Seeded noise on every weight, as for rt-detr: with transformers' init (class bias prior, zero
# box deltas) every query reports nearly the same score and its anchor box
PERTURB = 0.2
SIZE = 64  # the backbone's image_size and the processor's height / width
# onnxruntime against PyTorch: float32 sums in another order through the ViT, the projector and
# GridSample's bilinear taps (the rt-detr and DETR-variant fixtures' tolerance)
TOL = 1e-4


def bicubic_aa(g, image, output_size, align_corners, scales_h=None, scales_w=None):
    """aten::_upsample_bicubic2d_aa, which the TorchScript exporter has no symbolic for:
    RfDetrDinov2Embeddings.interpolate_pos_encoding resizes the position embeddings with
    interpolate(mode="bicubic", align_corners=False, antialias=True), always while tracing. ATen's
    antialiased kernel is Pillow's (Keys' cubic a = -0.5, the taps outside the input dropped and the
    rest renormalised, widened by the downscale factor): ONNX Resize cubic, cubic_coeff_a -0.5,
    half_pixel, exclude_outside 1, antialias 1. Here the grid is resized to its own size (the
    images are the backbone's image_size): the identity, in PyTorch as in the graph."""
    from torch.onnx import symbolic_helper as sh

    if sh._maybe_get_const(align_corners, "b"):
        raise NotImplementedError("bicubic antialias with align_corners=True")
    shape = g.op("Shape", image)
    start, end = (g.op("Constant", value_t=torch.tensor([i])) for i in (0, 2))
    lead = g.op("Slice", shape, start, end)
    sizes = g.op("Concat", lead, g.op("Cast", output_size, to_i=7), axis_i=0)  # 7: INT64
    return g.op("Resize", image, sh._optional_input_placeholder_tensor(g), sh._optional_input_placeholder_tensor(g),
                sizes, mode_s="cubic", cubic_coeff_a_f=-0.5, coordinate_transformation_mode_s="half_pixel",
                exclude_outside_i=1, antialias_i=1)


def build_rf_detr():
    from transformers import RfDetrConfig, RfDetrDinov2Config, RfDetrForObjectDetection, RfDetrImageProcessor

    # stages 2 and 4 out (global attention in layer 2, windowed in 0, 1, 3: window_block_indexes
    # are the layers up to the last out stage that are not out stages); 2 x 2 windows of 4 x 4 patches
    backbone = RfDetrDinov2Config(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, mlp_ratio=2,
                                  image_size=SIZE, patch_size=8, num_windows=2, out_features=["stage2", "stage4"])
    cfg = RfDetrConfig(backbone_config=backbone, d_model=32, hidden_expansion=0.5, c2f_num_blocks=1,
                       decoder_ffn_dim=64, decoder_layers=2, decoder_self_attention_heads=2,
                       decoder_cross_attention_heads=2, decoder_n_points=2, num_queries=20, group_detr=3,
                       num_labels=len(LABELS), id2label=_id2label(LABELS),
                       label2id={n: i for i, n in enumerate(LABELS)}, architectures=["RfDetrForObjectDetection"])
    seed(0)
    model = perturb(RfDetrForObjectDetection(cfg).eval(), PERTURB)
    # as transformers 5.24 makes it for the checkpoints (size = the backbone's resolution, the rest
    # the class defaults: bilinear, rescale 1/255 before the resize, ImageNet normalize, pad), scaled down
    proc = RfDetrImageProcessor(size={"height": SIZE, "width": SIZE})
    fx = fva.fresh_fixture("rf-detr")
    images = fva.write_images(fx)
    enc = proc(images=images, return_tensors="pt")
    pixels = enc["pixel_values"].numpy()
    assert enc["pixel_mask"].all(), "every image is resized to SIZE x SIZE: no padding"
    # PyTorch's outputs and the pipeline references first, as families_vision_detr_variants.py does
    # (torch.onnx.export puts a module back in the mode it found it in: a fresh wrapper's training
    # mode, which reaches the model, unless the wrapper is put in eval mode, as here)
    other = torch.from_numpy(np.random.default_rng(1).standard_normal((1, 3, 96, 128), dtype=np.float32))
    with torch.no_grad():
        want = model(pixel_values=enc["pixel_values"])
        want_other = model(pixel_values=other)  # another size: the position embeddings resized
    pipeline_object_detection(fx, model, proc, images)
    path = fx / "onnx" / "model.onnx"
    torch.onnx.register_custom_op_symbolic("aten::_upsample_bicubic2d_aa", bicubic_aa, OPSET)
    with torch.no_grad():
        torch.onnx.export(Wrapped(model).eval(), (enc["pixel_values"][:1],), str(path),
                          input_names=["pixel_values"], output_names=["logits", "pred_boxes"], opset_version=OPSET,
                          dynamo=False, dynamic_axes={"pixel_values": {0: "batch_size", 2: "height", 3: "width"},
                                                      "logits": {0: "batch_size"}, "pred_boxes": {0: "batch_size"}})
    assert not model.training
    model.config.save_pretrained(fx)
    proc.save_pretrained(fx)
    feeds = {"pixel_values": pixels}
    ref = fva.reference_single(fx, "onnx/model.onnx", feeds)
    got = fva.run(fva.session(path), feeds)
    got_other = fva.run(fva.session(path), {"pixel_values": other.numpy()})
    for k in ("logits", "pred_boxes"):
        for name, g, w in (("64x64", got[k], want[k]), ("96x128", got_other[k], want_other[k])):
            err = float(np.abs(g - w.numpy()).max())
            np.testing.assert_allclose(g, w.numpy(), rtol=TOL, atol=TOL, err_msg=f"rf-detr {k} {name}")
            print(f"rf-detr {k} at {name}: onnxruntime vs PyTorch max abs diff {err:.1e}")
    found = json.loads((fx / "references/pipeline_object-detection.json").read_text())["outputs"]
    scores = [r["score"] for out in found for r in out]
    boxes = {tuple(r["box"].values()) for out in found for r in out}
    gap = min(abs(a["score"] - b["score"]) for out in found for a, b in zip(out, out[1:]))
    assert len(boxes) >= 5 and max(scores) - min(scores) > 1e-3 and gap > 1e-6, (len(boxes), scores, gap)
    print(f"rf-detr: {[len(o) for o in found]} detections, {len(boxes)} distinct boxes, "
          f"score spread {max(scores) - min(scores):.4f}, smallest gap {gap:.1e}")
    fva.write_manifest(
        fx, family="rf_detr", architecture="RfDetrForObjectDetection", task="object-detection", opset=OPSET,
        graphs={"onnx/model.onnx": {"reference": ref}},
        exporter=f"torch.onnx (torch {torch.__version__}, dynamo=False; optimum-onnx 0.1.0 has no rf_detr config)",
        inputs_from="references/image_*.png through preprocessor_config.json",
        notes=["transformers 5.24.0 (4.57 has no RF-DETR); RfDetrImageProcessor needs torchvision: built in the "
               "venv of tests/support/requirements-rfdetr.txt",
               "RfDetrImageProcessor as transformers 5.24 makes it for the Roboflow/rf-detr-* checkpoints "
               f"(size = the backbone's resolution, class defaults otherwise), scaled to {SIZE}x{SIZE}: rescale "
               "1/255 in float32 before the resize, torchvision bilinear resize of the float image without "
               "antialias, ImageNet normalize, pad to the batch's largest (a no-op here: one size; the graph "
               "takes no pixel_mask)",
               f"backbone: RfDetrDinov2, hidden 32, 4 layers, 2 heads, patch 8, image_size {SIZE}, 2x2 windows, "
               "out stages 2 and 4; C2f projector (1 block) to d_model 32; decoder 2 layers, 2 + 2 heads, "
               "2 sampling points, 1 feature level; 20 queries (group_detr 3, training only); 5 labels",
               "graph: pixel_values -> logits, pred_boxes (onnx-community's RF-DETR names); batch, height and "
               "width dynamic (height and width multiples of patch 8 x 2 windows), checked against PyTorch at "
               "64x64 and 96x128 too (the references are at 64x64, the processor's size)",
               "aten::_upsample_bicubic2d_aa (the position embeddings' bicubic antialiased resize, always "
               "traced) has no TorchScript symbolic: exported as Resize cubic, a = -0.5, half_pixel, "
               "exclude_outside 1, antialias 1 (opset 18); the identity at 64x64",
               "head: sigmoid, the top num_queries (20) of queries x classes "
               "(RfDetrImageProcessor.post_process_object_detection, as RT-DETR's)",
               f"seeded weight noise std {PERTURB} on every parameter (boxes and scores vary)",
               f"onnxruntime vs PyTorch within {TOL} (float32 sums in another order)",
               "pipeline threshold 0.0 so all 20 top-k detections are reported"])
    return fx


BUILDERS = {
    "rf-detr": build_rf_detr,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
