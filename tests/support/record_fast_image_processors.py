"""Record transformers' fast (torchvision) image-processor outputs: the references of
tests/test_fast_image_processor.py. Run in the fast venv (tests/support/requirements-fast.txt):

    /root/.cache/transmuter-tests/venv-fast/bin/python tests/support/record_fast_image_processors.py

The same images and file layout as record_image_processors.py (whose helpers this reuses), written
to tests/fixtures/image_processors/fast_<config>.npz, with AutoImageProcessor(use_fast=True):
`<case>/pixel_values`, `<case>/original_size`, `<case>/size`, `<case>/digest`, `<case>/error`.
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
from transformers import AutoImageProcessor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import image_cases  # noqa: E402
import record_image_processors as slow  # noqa: E402

OUT = slow.OUT
CORE, FEW = image_cases.CORE, image_cases.FEW


def fast(config, kind, **changes):
    return {**config, "image_processor_type": kind, **changes}


VIT = fast(slow.fixture("vit"), "ViTImageProcessorFast")
CLIP = fast(slow.fixture("clip"), "CLIPImageProcessorFast")

SETS = {
    "vit": (VIT, slow.ALL, {}),
    **{f"vit_resample{r}": ({**VIT, "resample": r}, CORE[:8], {}) for r in (0, 1, 3)},
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
}


def processor_for(config):
    folder = OUT / "_config_fast"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    proc = AutoImageProcessor.from_pretrained(str(folder), use_fast=True)
    assert type(proc).__name__ == config["image_processor_type"], type(proc).__name__
    return proc


def store(record, key, proc, image, stride):
    try:
        out = proc(image, return_tensors="pt", input_data_format="channels_first")
    except Exception as e:  # transformers refuses it: our processor must refuse it too
        record[f"{key}/error"] = np.array(f"{type(e).__name__}: {e}")
        return
    pixels = out["pixel_values"][0].to(torch.float32).numpy()
    record[f"{key}/original_size"] = np.array([image.height, image.width], np.int64)
    record[f"{key}/size"] = np.array(pixels.shape[-2:], np.int64)
    if stride > 1:
        record[f"{key}/stride"] = np.array(stride)
        record[f"{key}/shape"] = np.array(pixels.shape)
        record[f"{key}/sum"] = np.array(pixels.astype(np.float64).sum())
        pixels = pixels[:, ::stride, ::stride]
    record[f"{key}/pixel_values"] = pixels


def record_set(name, config, cases, options):
    proc = processor_for(config)
    record = {"class": np.array(type(proc).__name__), "config": np.array(json.dumps(config)),
              "cpu_capability": np.array(torch.backends.cpu.get_cpu_capability())}
    for case in cases:
        image = slow.transformers_image(case)
        record[f"{case}/digest"] = np.array(image_cases.pixels_digest(image))
        store(record, case, proc, image, options.get("stride", 1))
    np.savez_compressed(OUT / f"fast_{name}.npz", **record)
    return type(proc).__name__


def main(names):
    print("torch CPU capability:", torch.backends.cpu.get_cpu_capability())
    for name in names or SETS:
        config, cases, options = SETS[name]
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
