"""Record transformers' fast (torchvision) image-processor outputs: the references of
tests/test_fast_image_processor.py. Run in the fast venv (tests/support/requirements-fast.txt):

    /root/.cache/transmuter-tests/venv-fast/bin/python tests/support/record_fast_image_processors.py

(regenerate.sh makes that venv; any venv of requirements-fast.txt will do.) Names on the command
line record only those sets. transformers 5's RfDetrImageProcessor (SETS_5: fast_rfdetr*.npz) is
recorded the same way in the venv of requirements-rfdetr.txt (transformers 5.24.0, these torch /
torchvision), which records only SETS_5:

    /root/.cache/transmuter-tests/venv-rfdetr/bin/python tests/support/record_fast_image_processors.py

SETS_5 holds SAM 3's Sam3ImageProcessor too (fast_sam3.npz), recorded in the venv of
requirements-sam3.txt (transformers 5.24.0, torch 2.13.0+cpu with torchvision 0.28.0, which
torchvision_cpu.py lets import), where the rfdetr venv's CUDA torch is not to be had:

    /work/venvs/sam3/bin/python tests/support/record_fast_image_processors.py sam3

The same images and file layout as record_image_processors.py (whose helpers this reuses), written
to tests/fixtures/image_processors/fast_<config>.npz, with AutoImageProcessor(use_fast=True):
`<case>/pixel_values`, `<case>/original_size`, `<case>/size`, `<case>/digest`, `<case>/error`,
`<case>/pixel_mask` where transformers returns one, and `batch/...` (one call on BATCH) for the
families that pad a batch (DETR's, YOLOS, RT-DETR, MaskFormer).
PIL images go in as transformers' fast path reads them (pil_to_tensor: CHW, so
input_data_format="channels_first", which keeps 1- or 3-pixel-tall images from being re-guessed).

torchvision's bilinear resize of uint8 takes ATen's native uint8 kernel only where
torch.backends.cpu.get_cpu_capability() is AVX2 / AVX512 (or on ARM), a float32 path elsewhere:
ATEN_CPU_CAPABILITY=avx2 pins the native kernel (the AVX2 and AVX-512 builds give equal bytes), so
the references do not depend on the recording machine. Small variants only (24-64 px), as the slow
recorder's; one 384 px ConvNext config strided.
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import torchvision_cpu  # noqa: E402, F401  (before transformers; nothing where torchvision loads)
import transformers  # noqa: E402
from transformers import AutoImageProcessor  # noqa: E402

import image_cases  # noqa: E402

MAJOR = int(transformers.__version__.split(".")[0])  # 5: the rfdetr / sam3 venvs (SETS_5 below)
import record_image_processors as slow  # noqa: E402

OUT = slow.OUT
CORE, FEW, SMALL = image_cases.CORE, image_cases.FEW, image_cases.SMALL


def fast(config, kind, **changes):
    return {**config, "image_processor_type": kind, **changes}


# 20 photos of different sizes and modes (after load_image) for each dense family's main set
TWENTY = CORE + ["coins_L", "horse_1", "moon_LA", "chelsea_P", "coffee_CMYK", "camera_I16_scaled",
                 "chelsea_png_bytes", "coffee_jpeg_exif6"]
BATCH = slow.BATCH
DETR = fast(slow.fixture("detr"), "DetrImageProcessorFast",
            size={"shortest_edge": 20, "longest_edge": 30})

VIT = fast(slow.fixture("vit"), "ViTImageProcessorFast")
CLIP = fast(slow.fixture("clip"), "CLIPImageProcessorFast")

SETS = {
    "vit": (VIT, slow.ALL, {}),
    **{f"vit_resample{r}": ({**VIT, "resample": r}, CORE[:8], {}) for r in (0, 1, 3)},
    "vit_nulls": ({**VIT, "do_normalize": None, "resample": None, "crop_pct": 0.9}, CORE[:4], {}),
    "vit_no_normalize": ({**VIT, "do_normalize": False}, CORE[:6], {}),
    "vit_no_rescale": ({**VIT, "do_rescale": False, "image_mean": [120.0, 110.0, 100.0],
                        "image_std": 60.0}, CORE[:6], {}),
    "vit_crop_larger": ({**VIT, "size": {"height": 24, "width": 20}, "do_center_crop": True,
                         "crop_size": {"height": 27, "width": 25}}, CORE[:6], {}),
    "clip": (CLIP, CORE, {}),
    "clip_crop_larger": ({**CLIP, "size": {"shortest_edge": 24}}, CORE, {}),
    "siglip": (fast(slow.fixture("siglip"), "SiglipImageProcessorFast"), CORE, {}),
    "segformer": (fast(slow.fixture("segformer"), "SegformerImageProcessorFast"), CORE, {}),
    "deit": ({"image_processor_type": "DeiTImageProcessorFast",
              "size": {"height": 36, "width": 36}, "crop_size": {"height": 32, "width": 32}},
             CORE, {}),
    "beit": ({"image_processor_type": "BeitImageProcessorFast",
              "size": {"height": 40, "width": 40}, "crop_size": {"height": 32, "width": 32},
              "do_center_crop": True, "do_reduce_labels": True}, CORE, {}),
    "bit": ({"image_processor_type": "BitImageProcessorFast", "size": {"shortest_edge": 32},
             "crop_size": {"height": 28, "width": 28}}, CORE, {}),
    "mobilenet_v1": ({"image_processor_type": "MobileNetV1ImageProcessorFast",
                      "size": {"shortest_edge": 36}, "crop_size": {"height": 32, "width": 32}},
                     CORE, {}),
    "mobilenet_v2": ({"image_processor_type": "MobileNetV2ImageProcessorFast",
                      "size": {"shortest_edge": 36}, "crop_size": {"height": 40, "width": 32},
                      "do_reduce_labels": True}, CORE, {}),
    "convnext": ({"image_processor_type": "ConvNextImageProcessorFast",
                  "size": {"shortest_edge": 32}, "crop_pct": 0.875, "resample": 3}, CORE, {}),
    "convnext_default_pct": ({"image_processor_type": "ConvNextImageProcessorFast",
                              "size": {"shortest_edge": 40}}, CORE[:6], {}),
    "convnext_384": ({"image_processor_type": "ConvNextImageProcessorFast",
                      "size": {"shortest_edge": 384}}, FEW[:2], {"stride": 8}),
    "owlvit": ({"image_processor_type": "OwlViTImageProcessorFast",
                "size": {"height": 40, "width": 40}, "do_center_crop": True,
                "crop_size": {"height": 32, "width": 36}}, CORE, {}),
    "owlvit_normalize": ({"image_processor_type": "OwlViTImageProcessorFast",
                          "size": {"height": 36, "width": 28}, "do_normalize": True}, CORE[:6], {}),
    "mobilevit": ({"image_processor_type": "MobileViTImageProcessorFast",
                   "size": {"shortest_edge": 32}, "crop_size": {"height": 36, "width": 28}},
                  CORE, {}),
    # the detection / dense families (image_families_dense_fast.py)
    "detr": (DETR, TWENTY, {"batch": BATCH}),
    "detr_legacy": ({"image_processor_type": "DetrImageProcessorFast", "size": 24, "max_size": 36,
                     "pad_and_return_pixel_mask": True}, CORE[:6], {"batch": BATCH}),
    "detr_pad_size": ({**DETR, "pad_size": {"height": 36, "width": 40}}, CORE[:6],
                      {"batch": BATCH}),
    "detr_max_hw": ({**DETR, "size": {"max_height": 28, "max_width": 24}}, CORE[:6], {}),
    "detr_no_pad": ({**DETR, "do_pad": False, "resample": 3}, CORE[:4], {}),
    "detr_nulls": ({"image_processor_type": "DetrImageProcessorFast", "size": {"height": 24,
                    "width": 20}, "do_pad": None, "do_normalize": None, "image_mean": None},
                   CORE[:4], {"batch": BATCH}),
    "conditional_detr": ({**DETR, "image_processor_type": "ConditionalDetrImageProcessorFast"},
                         CORE[:4], {"batch": BATCH}),
    "deformable_detr": ({**DETR, "image_processor_type": "DeformableDetrImageProcessorFast"},
                        CORE[:4], {"batch": BATCH}),
    "grounding_dino": ({**DETR, "image_processor_type": "GroundingDinoImageProcessorFast"},
                       CORE[:4], {"batch": BATCH}),
    "yolos": (fast(slow.fixture("yolos"), "YolosImageProcessorFast"), TWENTY, {"batch": BATCH}),
    "yolos_pad_size": (fast(slow.fixture("yolos"), "YolosImageProcessorFast",
                            pad_size={"height": 48, "width": 48}), CORE[:4], {"batch": BATCH}),
    "rt_detr": (fast(slow.fixture("rt-detr"), "RTDetrImageProcessorFast",
                     size={"height": 24, "width": 28}), TWENTY, {}),
    "rt_detr_pad": (fast(slow.fixture("rt-detr"), "RTDetrImageProcessorFast", do_pad=True,
                         size={"max_height": 28, "max_width": 28}), CORE[:4], {"batch": BATCH}),
    "mask2former": (fast(slow.fixture("mask2former"), "Mask2FormerImageProcessorFast",
                         size={"shortest_edge": 20, "longest_edge": 30}, size_divisor=8),
                    TWENTY, {"batch": BATCH}),
    "mask2former_legacy": ({"image_processor_type": "Mask2FormerImageProcessorFast", "size": 24,
                            "max_size": 40, "size_divisor": 0, "resample": 3}, CORE[:6],
                           {"batch": BATCH}),
    "mask2former_pad_size": ({"image_processor_type": "Mask2FormerImageProcessorFast",
                              "size": {"height": 28, "width": 20}, "do_pad": False,
                              "pad_size": {"height": 40, "width": 40}}, CORE[:4],
                             {"batch": BATCH}),
    "maskformer": ({"image_processor_type": "MaskFormerImageProcessorFast",
                    "size": {"max_height": 30, "max_width": 26}, "size_divisor": 16,
                    "ignore_index": 255, "do_reduce_labels": True}, CORE[:6], {"batch": BATCH}),
    "dpt": (fast(slow.fixture("dpt"), "DPTImageProcessorFast", size={"height": 24, "width": 28}),
            TWENTY, {}),
    "dpt_keep_aspect": (fast(slow.fixture("dpt"), "DPTImageProcessorFast",
                             size={"height": 40, "width": 40}, keep_aspect_ratio=True,
                             ensure_multiple_of=14), CORE[:6], {}),
    "dpt_pad": (fast(slow.fixture("dpt"), "DPTImageProcessorFast", size={"height": 30,
                     "width": 30}, keep_aspect_ratio=True, do_pad=True, size_divisor=16),
                CORE[:6], {}),
    "dpt_crop": (fast(slow.fixture("dpt"), "DPTImageProcessorFast", do_center_crop=True,
                      crop_size={"height": 24, "width": 36}), CORE[:4], {}),
    "sam": (fast(slow.fixture("sam"), "SamImageProcessorFast", size={"longest_edge": 28},
                 pad_size={"height": 32, "width": 32}), TWENTY, {}),
    "sam_no_pad": (fast(slow.fixture("sam"), "SamImageProcessorFast", size={"longest_edge": 30},
                        do_pad=False, resample=3), CORE[:4], {}),
    # SAM 2 (no committed sam2 fixture: written inline): every option but a small, non-square
    # size left to the class defaults, so they are what is compared (squeezed, no padding)
    "sam2": ({"image_processor_type": "Sam2ImageProcessorFast",
              "size": {"height": 48, "width": 40}}, TWENTY, {}),
    "swin2sr": (fast(slow.fixture("swin2sr"), "Swin2SRImageProcessorFast"), SMALL, {}),
    "swin2sr_legacy_pad_size": ({"image_processor_type": "Swin2SRImageProcessorFast",
                                 "pad_size": 16}, SMALL[:3], {}),
    "swin2sr_no_divisor": ({"image_processor_type": "Swin2SRImageProcessorFast"}, SMALL[:2], {}),
    # real Hub configs at full size (800-1333 px), every 16th row and column stored
    "hub_detr_xenova": ({"image_processor_type": "DetrImageProcessorFast"}, FEW[:2],
                        {"stride": 16, "hub": slow.hub("Xenova/detr-resnet-50")}),
    "hub_grounding_dino": ({"image_processor_type": "GroundingDinoImageProcessorFast"}, FEW[:2],
                           {"stride": 16, "hub": slow.hub("IDEA-Research/grounding-dino-tiny")}),
    "owlv2": (fast(slow.fixture("owlv2"), "Owlv2ImageProcessorFast",
                   size={"height": 24, "width": 24}), TWENTY, {}),
    "owlv2_upscale": (fast(slow.fixture("owlv2"), "Owlv2ImageProcessorFast"), SMALL, {}),
}

# transformers 5's torchvision-backend processors (no "Fast" in the name), recorded in the venv of
# requirements-rfdetr.txt (transformers 5.24, the torch / torchvision above): the sets there
RFDETR = slow.fixture("rf-detr")  # RfDetrImageProcessor, fixed 64 x 64, bilinear, do_pad
SETS_5 = {
    "rfdetr": (RFDETR, TWENTY, {"stride": 3}),  # the fixture's config as is (64 px: strided)
    "rfdetr_edges": ({**RFDETR, "size": {"shortest_edge": 20, "longest_edge": 32}}, TWENTY,
                     {"batch": BATCH}),
    "rfdetr_nearest": ({**RFDETR, "size": {"height": 24, "width": 28}, "resample": 0}, CORE[:6],
                       {}),
    # SAM 3 (the tracker's and SAM 3's processor; written inline, as sam2): a small non-square
    # size, every other option the class default (squeezed, mean / std 0.5, no padding)
    "sam3": ({"image_processor_type": "Sam3ImageProcessor", "size": {"height": 48, "width": 40}},
             TWENTY, {}),
}


def processor_for(config):
    folder = OUT / "_config_fast"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    proc = AutoImageProcessor.from_pretrained(str(folder), use_fast=True)
    assert type(proc).__name__ == config["image_processor_type"], type(proc).__name__
    return proc


def reference_size(proc, image, out, pixels):
    """(h, w) after resize / crop, before padding: from the pixel mask, or the family's rule (SAM
    Fast's own reshaped_input_sizes repeat the original sizes in 4.57, so its
    _get_preprocess_shape; SAM 2 Fast's repeat them too, but it does not pad: the pixels' shape;
    DPT's pad has no mask)."""
    kind = type(proc).__name__
    if "pixel_mask" in out:
        mask = out["pixel_mask"][0].numpy()
        return (int(mask.any(1).sum()), int(mask.any(0).sum()))
    if kind == "SamImageProcessorFast":
        hw = (image.height, image.width)
        return proc._get_preprocess_shape(hw, proc.size["longest_edge"]) if proc.do_resize else hw
    if kind.startswith("Swin2SR"):
        return (image.height, image.width)
    if kind.startswith("DPT") and proc.do_pad:
        from transformers.models.dpt.image_processing_dpt_fast import (
            get_resize_output_image_size as dpt_fast_size)  # 4.57's (transformers 5 has none)
        new = dpt_fast_size(torch.empty(3, image.height, image.width),
                            (proc.size["height"], proc.size["width"]), proc.keep_aspect_ratio,
                            proc.ensure_multiple_of)
        return (new.height, new.width)
    return tuple(pixels.shape[-2:])


def store(record, key, proc, image, stride):
    try:
        out = proc(image, return_tensors="pt", input_data_format="channels_first")
    except Exception as e:  # transformers refuses it: our processor must refuse it too
        record[f"{key}/error"] = np.array(f"{type(e).__name__}: {e}")
        return
    pixels = out["pixel_values"][0].to(torch.float32).numpy()
    record[f"{key}/original_size"] = np.array([image.height, image.width], np.int64)
    record[f"{key}/size"] = np.array(reference_size(proc, image, out, pixels), np.int64)
    if "pixel_mask" in out:
        mask = out["pixel_mask"][0].numpy().astype(np.int64)
        record[f"{key}/pixel_mask"] = mask if stride == 1 else mask[::stride, ::stride]
    if stride > 1:
        record[f"{key}/stride"] = np.array(stride)
        record[f"{key}/shape"] = np.array(pixels.shape)
        record[f"{key}/sum"] = np.array(pixels.astype(np.float64).sum())
        pixels = pixels[:, ::stride, ::stride]
    record[f"{key}/pixel_values"] = pixels


def record_set(name, config, cases, options):
    record = {}
    if "hub" in options:  # a real Hub config (not copied: config_source + the type changed)
        record["config_source"] = np.array(options["hub"])
        record["config_changes"] = np.array(json.dumps(config))
        config = {**json.loads((slow.HUB / options["hub"]).read_text()), **config}
    else:
        record["config"] = np.array(json.dumps(config))
    proc = processor_for(config)
    record.update({"class": np.array(type(proc).__name__),
                   "cpu_capability": np.array(torch.backends.cpu.get_cpu_capability())})
    for case in cases:
        image = slow.transformers_image(case)
        record[f"{case}/digest"] = np.array(image_cases.pixels_digest(image))
        store(record, case, proc, image, options.get("stride", 1))
    if "batch" in options:  # one call on several images: the families that pad a batch
        images = [slow.transformers_image(c) for c in options["batch"]]
        out = proc(images, return_tensors="pt", input_data_format="channels_first")
        record["batch/cases"] = np.array(options["batch"])
        record["batch/pixel_values"] = out["pixel_values"].to(torch.float32).numpy()
        if "pixel_mask" in out:
            record["batch/pixel_mask"] = out["pixel_mask"].numpy().astype(np.int64)
    np.savez_compressed(OUT / f"fast_{name}.npz", **record)
    return type(proc).__name__


def main(names):
    print("torch CPU capability:", torch.backends.cpu.get_cpu_capability())
    sets = SETS_5 if MAJOR >= 5 else SETS  # this venv's transformers: its sets
    for name in names:
        if name not in sets:
            sys.exit(f"{name}: not a set of transformers {transformers.__version__} (SETS is "
                     "recorded in the fast venv, SETS_5 in the rfdetr or sam3 venv)")
    for name in names or sets:
        config, cases, options = sets[name]
        cls = record_set(name, config, cases, options)
        size = (OUT / f"fast_{name}.npz").stat().st_size
        print(f"fast_{name:24s} {cls:32s} {len(cases):3d} images  {size / 1e3:8.1f} kB")
    for stale in (OUT / "_config_fast").glob("*"):
        stale.unlink()
    (OUT / "_config_fast").rmdir()
    total = sum(p.stat().st_size for p in OUT.glob("fast_*.npz"))
    print(f"total fast_*.npz {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
