"""Record transformers' image-processor outputs: the references of tests/test_image_processor.py.

Run in the export venv (tests/support/requirements-export.txt, plus scikit-image):

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_image_processors.py

For each processor config below, every listed test image (tests/support/image_cases.py) goes
through transformers' own `load_image` (arrays through its `to_pil_image` first, encoded files
through its base64 path) and then the transformers processor class, slow (Pillow) version, as
AutoImageProcessor picks it. Written to tests/fixtures/image_processors/<config>.npz:

    config                    the config as JSON (or config_source: a Hub file under
                              ../shared/hub-files/, read there at test time, not copied)
    <case>/digest             sha256 of the RGB pixels transformers' load_image produced
    <case>/pixel_values       (C, H, W) float32 [+ <case>/pixel_mask (H, W) int64]
    <case>/original_size, <case>/size   (h, w) of the loaded image, and after resize / crop
                              (from transformers: output shape, pixel mask, SAM's
                              reshaped_input_sizes, DPT's / YOLOS's size rule before padding)
    <case>/error              transformers refused the image (e.g. a size rounded to 0)
    <case>/ambiguous          transformers re-guessed the channel axis inside a step (below)
    direct:<case>/...         the processor called on the PIL image itself (no load_image)
    batch/...                 one call on three images (DETR / YOLOS pad them together)

Images are passed with input_data_format="channels_last": a PIL image is (H, W, C), but for one 1 or
3 pixels tall transformers' infer_channel_dimension_format guesses channels-first and fails (or
transposes); with the format given, every other image gives the same values as without. DPT's
pad and Owlv2's pad and resize still guess again on their intermediate image; such cases are
marked `ambiguous`.

What and why, to stay under 4 MB: the many photos x modes (38 cases) run through small variants of
ViT, CLIP and DETR (the loading path is shared by all families); each other processor type and
option (every resample filter, crops larger than the image, keep_aspect_ratio, pad_size, legacy
keys, ...) runs on a dozen varied shapes at 24-64 px, recorded in full. The full-size real Hub
configs (224-1333 px: up to 11 MB of float32 per image) run on three images each and store every
`stride`-th row and column of pixel_values (`<case>/stride`, `<case>/shape`, and the float64
`<case>/sum` of the full array); the small variants of the same types check every pixel.
"""

import base64
import json
import logging
import pathlib
import sys

import numpy as np
from transformers import AutoImageProcessor
from transformers.image_transforms import to_pil_image
from transformers.image_utils import load_image

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import image_cases  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "image_processors"
HUB = ROOT.parents[1] / "shared" / "hub-files"
FIXTURE = ROOT / "fixtures"

ALL = [name for name, _, _ in image_cases.CASES]
CORE, FEW, SMALL = image_cases.CORE, image_cases.FEW, image_cases.SMALL
MODES = ["camera_L", "horse_1", "logo_RGBA", "moon_LA", "chelsea_P", "coffee_CMYK",
         "camera_I16_scaled", "gravel_I", "grass_F"]
BATCH = ["coffee", "coffee_tall", "ihc_257x129"]


def fixture(name, **changes):
    config = json.loads((FIXTURE / name / "preprocessor_config.json").read_text())
    return {**config, **changes}


def hub(repo):
    return f"{repo}/preprocessor_config.json"


DETR_SMALL = fixture("detr", size={"shortest_edge": 32, "longest_edge": 48})

# name: (config dict or Hub path, cases, options); options: stride, direct, batch
SETS = {
    # the committed fixtures' configs, and the loading sweep
    "vit": (fixture("vit"), ALL, {"direct": ["camera_L", "logo_RGBA"]}),
    "clip": (fixture("clip"), ALL, {"direct": MODES}),
    "detr_32": (DETR_SMALL, ALL, {"batch": BATCH}),
    "detr": (fixture("detr"), CORE, {"batch": BATCH}),
    "siglip": (fixture("siglip"), CORE, {}),
    "yolos": (fixture("yolos"), CORE, {"batch": BATCH}),
    "segformer": (fixture("segformer"), CORE, {}),
    "dpt": (fixture("dpt"), CORE, {}),
    # every Pillow filter (2 is vit's own)
    **{f"vit_resample{r}": (fixture("vit", resample=r), CORE[:8], {}) for r in (0, 1, 3, 4, 5)},
    # options
    "clip_crop_larger": (fixture("clip", size={"shortest_edge": 24}), CORE, {}),
    "clip_height_width": (fixture("clip", size={"height": 40, "width": 24}, do_center_crop=False,
                                  resample=2), CORE, {}),
    "clip_int_size": (fixture("clip", size=30, crop_size=28, do_convert_rgb=False), CORE[:6],
                      {"direct": ["camera_L"]}),
    "vit_no_normalize": (fixture("vit", do_normalize=False), CORE[:6], {}),
    "vit_no_rescale": (fixture("vit", do_rescale=False, image_mean=[120.0, 110.0, 100.0],
                               image_std=60.0), CORE[:6], {}),
    "detr_legacy": ({"image_processor_type": "DetrImageProcessor", "size": 40, "max_size": 60,
                     "do_normalize": True, "do_resize": True}, CORE, {"batch": BATCH}),
    "detr_pad_size": ({**DETR_SMALL, "pad_size": {"height": 56, "width": 56}}, CORE[:6],
                      {"batch": BATCH}),
    "detr_max_hw": ({**DETR_SMALL, "size": {"max_height": 40, "max_width": 36}}, CORE[:8], {}),
    "detr_no_pad": ({**DETR_SMALL, "do_pad": False}, CORE[:4], {}),
    "grounding_dino": ({**DETR_SMALL, "image_processor_type": "GroundingDinoImageProcessor"},
                       CORE[:6], {"batch": BATCH}),
    "conditional_detr": ({**DETR_SMALL, "image_processor_type": "ConditionalDetrImageProcessor"},
                         CORE[:4], {"batch": BATCH}),
    "deformable_detr": ({**DETR_SMALL, "image_processor_type": "DeformableDetrImageProcessor"},
                        CORE[:4], {"batch": BATCH}),
    "yolos_pad_size": (fixture("yolos", pad_size={"height": 64, "width": 64}), CORE[:6],
                       {"batch": BATCH}),
    "dpt_keep_aspect": (fixture("dpt", size={"height": 56, "width": 56}, keep_aspect_ratio=True,
                                ensure_multiple_of=14), CORE, {}),
    "dpt_pad": (fixture("dpt", size={"height": 40, "width": 40}, keep_aspect_ratio=True,
                        do_pad=True, size_divisor=32), CORE, {}),
    "convnext": ({"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 32},
                  "crop_pct": 0.875, "resample": 3}, CORE, {}),
    "convnext_384": ({"image_processor_type": "ConvNextImageProcessor",
                      "size": {"shortest_edge": 384}}, FEW[:2], {"stride": 8}),
    "convnext_default_pct": ({"image_processor_type": "ConvNextImageProcessor",
                              "size": {"shortest_edge": 40}}, CORE[:6], {}),
    "beit": ({"image_processor_type": "BeitImageProcessor", "size": {"height": 40, "width": 40},
              "crop_size": {"height": 32, "width": 32}, "do_reduce_labels": True}, CORE, {}),
    "deit": ({"image_processor_type": "DeiTImageProcessor", "size": {"height": 36, "width": 36},
              "crop_size": {"height": 32, "width": 32}}, CORE, {}),
    "bit": ({"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 32},
             "crop_size": {"height": 28, "width": 28}}, CORE, {"direct": ["camera_L"]}),
    "mobilenet_v1": ({"image_processor_type": "MobileNetV1ImageProcessor",
                      "size": {"shortest_edge": 36}, "crop_size": {"height": 32, "width": 32}},
                     CORE, {}),
    "mobilenet_v2": ({"image_processor_type": "MobileNetV2ImageProcessor",
                      "size": {"shortest_edge": 36}, "crop_size": {"height": 40, "width": 32},
                      "do_reduce_labels": True}, CORE, {}),
    "owlvit": ({"image_processor_type": "OwlViTImageProcessor", "size": {"height": 40, "width": 40},
                "do_center_crop": True, "crop_size": {"height": 32, "width": 36},
                "rescale": False}, CORE, {}),
    "mobilevit": ({"image_processor_type": "MobileViTImageProcessor",
                   "size": {"shortest_edge": 32}, "crop_size": {"height": 36, "width": 28}},
                  CORE, {}),
    "swin2sr": ({"image_processor_type": "Swin2SRImageProcessor", "size_divisor": 8}, SMALL, {}),
    "swin2sr_legacy_pad_size": ({"image_processor_type": "Swin2SRImageProcessor",
                                 "pad_size": 16}, SMALL[:3], {}),
    "owlv2": ({"image_processor_type": "Owlv2ImageProcessor", "size": {"height": 48, "width": 48}},
              CORE, {}),
    "sam": ({"image_processor_type": "SamImageProcessor", "size": {"longest_edge": 64},
             "pad_size": {"height": 64, "width": 64}}, CORE, {"direct": ["camera_L"]}),
    "feature_extractor_type": ({**fixture("vit"), "image_processor_type": None,
                                "feature_extractor_type": "ViTFeatureExtractor"}, CORE[:2], {}),
    # MaskFormer / Mask2Former: shortest edge (longest capped) up to a multiple of size_divisor
    "maskformer": ({"image_processor_type": "MaskFormerImageProcessor",
                    "size": {"shortest_edge": 32, "longest_edge": 48}, "size_divisor": 32,
                    "ignore_index": 255, "do_reduce_labels": True}, CORE, {"batch": BATCH}),
    "mask2former": ({"image_processor_type": "Mask2FormerImageProcessor",
                     "size": {"shortest_edge": 36, "longest_edge": 60}, "size_divisor": 16},
                    CORE, {"batch": BATCH}),
    "mask2former_legacy": ({"image_processor_type": "Mask2FormerImageProcessor", "size": 40,
                            "max_size": 56, "size_divisor": 0, "resample": 3}, CORE[:6],
                           {"batch": BATCH}),
    "mask2former_pad_size": ({"image_processor_type": "Mask2FormerImageProcessor",
                              "size": {"height": 40, "width": 24},
                              "pad_size": {"height": 64, "width": 64}}, CORE[:4], {"batch": BATCH}),
    "mask2former_384": ({"image_processor_type": "Mask2FormerImageProcessor",
                         "size": {"shortest_edge": 384, "longest_edge": 1333}}, FEW[:2],
                        {"stride": 8}),
    # the real Hub configs, full size, strided
    "hub_clip": (hub("Xenova/clip-vit-base-patch32"), FEW, {"stride": 4}),
    "hub_detr_xenova": (hub("Xenova/detr-resnet-50"), FEW, {"stride": 16, "batch": FEW}),
    "hub_detr_facebook": (hub("facebook/detr-resnet-50"), FEW[:1], {"stride": 16}),
    "hub_segformer": (hub("Xenova/segformer-b0-finetuned-ade-512-512"), FEW, {"stride": 8}),
    "hub_grounding_dino": (hub("IDEA-Research/grounding-dino-tiny"), FEW[:2], {"stride": 16}),
    "hub_florence2": (hub("onnx-community/Florence-2-base"), FEW[:2], {"stride": 12}),
}


def transformers_image(name):
    """The RGB image transformers' load_image makes from case `name`."""
    kind, make = image_cases.BY_NAME[name]
    source = make()
    if kind == "bytes":
        return load_image(base64.b64encode(source).decode())  # its base64 string path
    if kind == "array":
        return load_image(to_pil_image(source[:, :, None] if source.ndim == 2 else source))
    return load_image(source)


def processor_for(config):
    if isinstance(config, str):
        config = json.loads((HUB / config).read_text())
    config = {k: v for k, v in config.items() if v is not None or k != "image_processor_type"}
    folder = OUT / "_config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    return AutoImageProcessor.from_pretrained(str(folder), use_fast=False)


def reference_size(proc, image, out):
    kind = type(proc).__name__
    if "reshaped_input_sizes" in out:
        return tuple(out["reshaped_input_sizes"][0])
    if "pixel_mask" in out:
        mask = np.asarray(out["pixel_mask"][0])
        return (int(mask.any(1).sum()), int(mask.any(0).sum()))
    if kind.startswith("Swin2SR"):
        return (image.height, image.width)
    # transformers 4.57's size rules, imported here: record_fast_image_processors.py imports this
    # module under transformers 5 too, which has neither
    if kind.startswith("Yolos") and proc.pad_size is not None:  # padded, and no mask
        from transformers.models.yolos.image_processing_yolos import (
            get_resize_output_image_size as yolos_size)
        return tuple(yolos_size(np.asarray(image), proc.size["shortest_edge"],
                                proc.size["longest_edge"], input_data_format="channels_last"))
    if kind.startswith("DPT") and proc.do_pad:
        from transformers.models.dpt.image_processing_dpt import (
            get_resize_output_image_size as dpt_size)
        return tuple(dpt_size(np.asarray(image), (proc.size["height"], proc.size["width"]),
                              proc.keep_aspect_ratio, proc.ensure_multiple_of,
                              input_data_format="channels_last"))
    return tuple(np.asarray(out["pixel_values"][0]).shape[-2:])


def store(record, key, proc, image, stride):
    out = proc(image, return_tensors="np", input_data_format="channels_last")
    pixels = np.asarray(out["pixel_values"][0], np.float32)
    record[f"{key}/original_size"] = np.array([image.height, image.width], np.int64)
    record[f"{key}/size"] = np.array(reference_size(proc, image, out), np.int64)
    if stride > 1:
        record[f"{key}/stride"] = np.array(stride)
        record[f"{key}/shape"] = np.array(pixels.shape)
        record[f"{key}/sum"] = np.array(pixels.astype(np.float64).sum())
        pixels = pixels[:, ::stride, ::stride]
    record[f"{key}/pixel_values"] = pixels
    if "pixel_mask" in out:
        mask = np.asarray(out["pixel_mask"][0], np.int64)
        record[f"{key}/pixel_mask"] = mask if stride == 1 else mask[::stride, ::stride]


class _Ambiguous(logging.Handler):
    """Catches transformers' "channel dimension is ambiguous" warning."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        if "ambiguous" in record.getMessage():
            self.messages.append(record.getMessage().split(". Use")[0])


def store_or_error(record, key, proc, image, stride):
    catcher = _Ambiguous()
    logger = logging.getLogger("transformers")
    logger.addHandler(catcher)
    try:
        store(record, key, proc, image, stride)
    except Exception as e:  # transformers refuses it: our processor must refuse it too
        record[f"{key}/error"] = np.array(f"{type(e).__name__}: {e}")
    finally:
        logger.removeHandler(catcher)
    if catcher.messages:
        # a step that infers the channel axis again (DPT's and Owlv2's pad, Owlv2's resize) took
        # an intermediate image 1 or 3 pixels tall for channels-first: not a reference
        record[f"{key}/ambiguous"] = np.array(catcher.messages[0])


def record_set(name, config, cases, options):
    proc = processor_for(config)
    stride = options.get("stride", 1)
    record = {"class": np.array(type(proc).__name__)}
    record["config_source" if isinstance(config, str) else "config"] = np.array(
        config if isinstance(config, str) else json.dumps(config))
    for case in cases:
        image = transformers_image(case)
        record[f"{case}/digest"] = np.array(image_cases.pixels_digest(image))
        store_or_error(record, case, proc, image, stride)
    for case in options.get("direct", []):
        store_or_error(record, f"direct:{case}", proc, image_cases.make(case), stride)
    if "batch" in options:
        images = [transformers_image(c) for c in options["batch"]]
        out = proc(images, return_tensors="np", input_data_format="channels_last")
        record["batch/cases"] = np.array(options["batch"])
        pixels = np.asarray(out["pixel_values"], np.float32)
        if stride > 1:
            record["batch/stride"], record["batch/shape"] = np.array(stride), np.array(pixels.shape)
            pixels = pixels[:, :, ::stride, ::stride]
        record["batch/pixel_values"] = pixels
        if "pixel_mask" in out:
            mask = np.asarray(out["pixel_mask"], np.int64)
            record["batch/pixel_mask"] = mask if stride == 1 else mask[:, ::stride, ::stride]
    np.savez_compressed(OUT / f"{name}.npz", **record)
    return type(proc).__name__


def main(names):
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or SETS:
        config, cases, options = SETS[name]
        cls = record_set(name, config, cases, options)
        size = (OUT / f"{name}.npz").stat().st_size
        print(f"{name:28s} {cls:30s} {len(cases):3d} images  {size / 1e3:8.1f} kB")
    for stale in (OUT / "_config").glob("*"):
        stale.unlink()
    (OUT / "_config").rmdir()
    total = sum(p.stat().st_size for p in OUT.glob("*.npz"))
    print(f"total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
