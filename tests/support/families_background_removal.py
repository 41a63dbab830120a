"""Tiny background-removal fixtures, shaped like the exports transformers.js' background-removal
pipeline runs. The real models (BiRefNet, RMBG-1.4's IS-Net, MODNet) are custom code that
transformers does not hold, so the graph here is a small segmentation-style network built with
torch and exported with torch.onnx under the real exports' input / output names; config.json and
preprocessor_config.json are briaai/RMBG-1.4's (scaled down to 64x64). The manifests say so.

- ``rmbg``: RMBG-1.4-shaped: ``input`` [B, 3, H, W] -> ``output`` [B, 1, H, W], already a
  sigmoid (RMBG-1.4's and MODNet's graphs end in one).
- ``rmbg-logits``: the same network without the final sigmoid (BiRefNet's exports give logits):
  transformers.js applies the sigmoid itself when a value lies outside [0, 1].
- ``modnet``: the sigmoid network under a MODNet-style processor (resize by the shortest edge to
  a multiple of 16, pad): every image runs at its own processed size.

References: onnxruntime (references/model.npz) and, recorded afterwards by
tests/support/record_background_removal.mjs, transformers.js' own pipeline on the images written
here (references/image_*.png: crops of scikit-image photos, two at the model's 64x64 size so no
resize happens anywhere, three of other sizes, one RGBA).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_background_removal.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import families_vision_audio as fva  # noqa: E402
import image_cases  # noqa: E402

OPSET = 17
SIZE = 64
# briaai/RMBG-1.4's preprocessor_config.json with its 1024x1024 size scaled down
PREPROCESSOR = {"do_normalize": True, "do_pad": False, "do_rescale": True, "do_resize": True,
                "image_mean": [0.5, 0.5, 0.5], "feature_extractor_type": "ImageFeatureExtractor",
                "image_std": [1, 1, 1], "resample": 2, "rescale_factor": 0.00392156862745098,
                "size": {"width": SIZE, "height": SIZE}}
# briaai/RMBG-1.4's config.json without its auto_map / custom_pipelines (remote code), and with a
# model_type transformers.js 4.3.2 runs: its background-removal refuses RMBG-1.4's own
# "SegformerForSemanticSegmentation" (no candidate model class) and takes the custom architectures
# modnet / birefnet / isnet / ben (src/models/registry.js CUSTOM_ARCHITECTURES_MAPPING); RMBG-1.4 is
# an IS-Net, BiRefNet's exports give logits.
CONFIGS = {True: {"architectures": ["BriaRMBG"], "in_ch": 3, "model_type": "isnet", "out_ch": 1,
                  "torch_dtype": "float32"},
           False: {"architectures": ["BiRefNet"], "model_type": "birefnet", "torch_dtype": "float32"}}
# MODNet-style: resize by the shortest edge, rounded down to a multiple of size_divisibility (the
# route transformers.js' generic processor takes for such configs); Xenova/modnet's own file was
# not available here, so this is that route's shape, not a copy
MODNET_PREPROCESSOR = {"do_normalize": True, "do_pad": True, "do_rescale": True, "do_resize": True,
                       "image_mean": [0.5, 0.5, 0.5], "feature_extractor_type": "ImageFeatureExtractor",
                       "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 0.00392156862745098,
                       "size": {"shortest_edge": 48}, "size_divisibility": 16}
MODNET_CONFIG = {"architectures": ["MODNet"], "model_type": "modnet"}


def _crop(name, rows, cols, step=1):
    return Image.fromarray(np.ascontiguousarray(image_cases._data(name)[rows, cols][::step, ::step]))


# (file stem, how made): two at 64x64 (no resize), three others, one RGBA (its alpha is replaced)
IMAGES = [
    ("image_0", lambda: _crop("astronaut", slice(0, 512), slice(0, 512), 8)),  # 64x64
    ("image_1", lambda: _crop("chelsea", slice(40, 104), slice(150, 214))),  # 64x64
    ("image_2", lambda: _crop("coffee", slice(0, 400), slice(0, 600), 4)),  # 100x150
    ("image_3", lambda: _crop("astronaut", slice(60, 300), slice(100, 260), 5)),  # 48x32
    ("image_4", lambda: _crop("logo", slice(0, 500), slice(0, 500), 10)),  # 50x50 RGBA
]


class TinySegmenter(torch.nn.Module):
    """Encoder (stride 2) - decoder (bilinear back to the input size) with a skip, one channel out."""

    def __init__(self, sigmoid=True):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.mid = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.head = torch.nn.Conv2d(24, 1, 3, padding=1)
        self.sigmoid = sigmoid

    def forward(self, x):
        skip = torch.relu(self.stem(x))
        y = torch.relu(self.mid(torch.relu(self.down(skip))))
        y = torch.nn.functional.interpolate(y, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        y = self.head(torch.cat([skip, y], 1))
        return torch.sigmoid(y) if self.sigmoid else y


def write_images(fx):
    images = []
    for stem, make in IMAGES:
        make().save(fx / "references" / f"{stem}.png")
        images.append(Image.open(fx / "references" / f"{stem}.png"))
    return images


def pixel_values(image):
    """RMBG-1.4's preprocessing at the model size (the images already 64x64 need no resize)."""
    x = np.asarray(image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR), np.float32)
    x = (x * np.float32(PREPROCESSOR["rescale_factor"]) - np.float32(0.5)) / np.float32(1)
    return x.transpose(2, 0, 1)[None]


def build(name, sigmoid, preprocessor=PREPROCESSOR, config=None):
    fx = fva.fresh_fixture(name)
    fva.seed(0)
    model = TinySegmenter(sigmoid).eval()
    with torch.no_grad():  # torch's init gives a mask within 0.43..0.64; x3 spreads it over (0, 1)
        for weight in model.parameters():
            weight.mul_(3.0)
    path = fx / "onnx" / "model.onnx"
    torch.onnx.export(model, (torch.zeros(1, 3, SIZE, SIZE),), str(path), input_names=["input"],
                      output_names=["output"], opset_version=OPSET, dynamo=False,
                      dynamic_axes={"input": {0: "batch_size", 2: "height", 3: "width"},
                                    "output": {0: "batch_size", 2: "height", 3: "width"}})
    config = config or CONFIGS[sigmoid]
    fva.save_json(fx / "config.json", config)
    fva.save_json(fx / "preprocessor_config.json", preprocessor)
    images = write_images(fx)
    feeds = {"input": np.concatenate([pixel_values(im) for im in images])}
    ref = fva.reference_single(fx, "onnx/model.onnx", feeds)
    out = fva.run(fva.session(path), feeds)["output"]
    with torch.no_grad():
        want = model(torch.from_numpy(feeds["input"])).numpy()
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5)
    probs = out if sigmoid else 1 / (1 + np.exp(-out))
    assert probs.std() > 0.1 and (out.min() < 0 or out.max() > 1) != sigmoid, (probs.std(), out.min(), out.max())
    print(f"{name}: output in [{out.min():.3f}, {out.max():.3f}], probability std {probs.std():.3f}")
    kind = "a sigmoid (as RMBG-1.4 / MODNet)" if sigmoid else "logits, no sigmoid (as BiRefNet's exports)"
    fva.write_manifest(
        fx, family="background_removal", architecture="BriaRMBG", task="background-removal", opset=OPSET,
        graphs={"onnx/model.onnx": {"reference": ref}}, exporter=f"torch.onnx (torch {torch.__version__})",
        inputs_from="references/image_*.png through preprocessor_config.json",
        notes=["not an RMBG-1.4 network: a tiny conv encoder-decoder (torch, seeded) exported with torch.onnx "
               "under RMBG-1.4's graph names (input -> output [B, 1, H, W]); the real BiRefNet / IS-Net / MODNet "
               "are remote code transformers cannot build",
               f"output: {kind}",
               "preprocessor_config.json: briaai/RMBG-1.4's (ImageFeatureExtractor: resize to 64x64 bilinear, "
               "rescale 1/255, mean 0.5, std 1), size scaled down from 1024" if preprocessor is PREPROCESSOR else
               "preprocessor_config.json: MODNet-style, written here (ImageFeatureExtractor: shortest_edge 48, "
               "size_divisibility 16, do_pad, mean / std 0.5); the graph reference's inputs are 64x64",
               f"config.json: model_type {config['model_type']!r}, one transformers.js 4.3.2 runs for "
               "background-removal (RMBG-1.4's own 'SegformerForSemanticSegmentation' it refuses)",
               "references/transformers_js.json and cutout_*.png: transformers.js' background-removal pipeline "
               "(tests/support/record_background_removal.mjs)"])
    return fx


BUILDERS = {
    "rmbg": lambda: build("rmbg", True),
    "rmbg-logits": lambda: build("rmbg-logits", False),
    "modnet": lambda: build("modnet", True, MODNET_PREPROCESSOR, MODNET_CONFIG),
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
