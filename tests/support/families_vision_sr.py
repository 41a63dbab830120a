"""Tiny image-to-image fixture: Swin2SR super-resolution (Swin2SRForImageSuperResolution, x2).

Same conventions as families_vision_audio.py (whose helpers this script imports): a random-weight
model from a transformers config class, seeded and perturbed, exported offline with optimum-onnx,
references from onnxruntime (references/model.npz) and from the transformers pipeline on the torch
model (references/pipeline_image-to-image.json, with each output image also saved as
references/pipeline_image-to-image_<i>.png so a test can compare pixels). See
tests/support/README.md for the fixture contract.

The inputs are NOT families_vision_audio's IMAGE_SPECS (40x48 and 32x32, multiples of 8): Swin2SR's
processor pads symmetrically to the next multiple of size_divisor (8), so these two images have
sizes that are not multiples of 8 and of each other's padded size (two model.npz steps, one per
image: a batch needs equal padded sizes).

Usage (regenerates deterministically; no argument = every fixture):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_sr.py [names...]

Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

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
from PIL import Image  # noqa: E402

from families_vision_audio import (  # noqa: E402
    copy_hub_files, export_main, fresh_fixture, make_image, move_onnx, perturb, run, save_json,
    save_model_dir, save_reference, seed, session, tensor_stats, tmpdir, write_manifest,
)
import families_vision_audio as fva  # noqa: E402

# (seed, height, width): neither side a multiple of 8, padded sizes differ (32x40 and 24x32)
SR_IMAGE_SPECS = [(0, 29, 35), (1, 19, 26)]
TASK = "image-to-image"
FINAL_CONV_SCALE = 0.4


def write_sr_images(fx: Path) -> list[Image.Image]:
    images = []
    for s, h, w in SR_IMAGE_SPECS:
        path = fx / "references" / f"image_{s}.png"
        make_image(s, h, w).save(path)
        images.append(Image.open(path).convert("RGB"))
    return images


def sr_inputs_description() -> dict:
    return {
        "images": [f"references/image_{s}.png" for s, _, _ in SR_IMAGE_SPECS],
        "how_made": "make_image(seed, height, width) in tests/support/families_vision_audio.py: "
        "255*(0.7*gradient + 0.3*rng.random) with numpy default_rng(seed), uint8 RGB PNG; sizes "
        "from SR_IMAGE_SPECS in tests/support/families_vision_sr.py (not multiples of the pad size 8)",
        "specs": [{"seed": s, "height": h, "width": w} for s, h, w in SR_IMAGE_SPECS],
    }


def pipeline_image_to_image(fx, model, proc, images):
    """transformers' ImageToImagePipeline on the torch model: one PIL image per input, summarised as
    the other image references are (mode, size, pixel sum, md5) and saved as a PNG."""
    from transformers import pipeline

    p = pipeline(TASK, model=model, image_processor=proc, device="cpu")
    out = p(images)
    pngs = []
    for i, img in enumerate(out):
        rel = f"references/pipeline_{TASK}_{i}.png"
        img.save(fx / rel)
        assert np.array_equal(np.asarray(Image.open(fx / rel)), np.asarray(img))  # PNG is lossless
        pngs.append(rel)
    save_json(fx / "references" / f"pipeline_{TASK}.json",
              {"task": TASK, "inputs": sr_inputs_description(), "call_kwargs": {}, "outputs": out,
               "output_pngs": pngs,
               "image_encoding": "each output PIL image summarised as mode, size, pixel sum and md5 of "
                                 "its bytes; the image itself in output_pngs"})
    return out


def build_swin2sr():
    from transformers import Swin2SRConfig, Swin2SRForImageSuperResolution, Swin2SRImageProcessor

    # caidas/swin2SR-classical-sr-x2-64 scaled down: embed_dim 180 -> 16, depths [6]*6 -> [2],
    # heads [6]*6 -> [2]; window 8, pixelshuffle upsampler, upscale 2, img_range 1 as it ships
    cfg = Swin2SRConfig(image_size=32, patch_size=1, num_channels=3, embed_dim=16, depths=[2], num_heads=[2],
                        window_size=8, mlp_ratio=2.0, upscale=2, img_range=1.0, resi_connection="1conv",
                        upsampler="pixelshuffle", architectures=["Swin2SRForImageSuperResolution"])
    seed(0)
    model = perturb(Swin2SRForImageSuperResolution(cfg).eval())
    # Scale the final 3x3 conv by 0.4 (weights and bias): perturbed, the reconstruction's std is ~0.46
    # around 0.67 and a third of it clamps to 0 or 255; scaled, most pixels fall inside (0, 1), so the
    # test compares rounded values, not clamped ones.
    last = model.upsample.final_convolution
    with torch.no_grad():
        last.weight.mul_(FINAL_CONV_SCALE)
        last.bias.mul_(FINAL_CONV_SCALE)
    # as caidas/swin2SR-* ship it: {"do_pad": true, "do_rescale": true, "pad_size": 8,
    # "rescale_factor": 1/255} (transformers 4.57 saves pad_size as size_divisor)
    proc = Swin2SRImageProcessor(do_rescale=True, rescale_factor=1 / 255, do_pad=True, pad_size=8)
    assert proc.size_divisor == 8

    fx = fresh_fixture("swin2sr")
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc)
    out = export_main(d, tmp / "out", TASK, 18)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    m = onnx.load(str(fx / "onnx/model.onnx"))
    assert [o.name for o in m.graph.output] == ["reconstruction"], [o.name for o in m.graph.output]

    images = write_sr_images(fx)
    # one step per image: the padded sizes differ, so they cannot share a batch
    sess = session(fx / "onnx/model.onnx")
    steps, stats = [], []
    for img, (_, h, w) in zip(images, SR_IMAGE_SPECS):
        pv = proc(images=[img], return_tensors="np")["pixel_values"].astype(np.float32)
        ph, pw = pv.shape[-2:]
        assert (ph, pw) == ((h // 8 + 1) * 8, (w // 8 + 1) * 8), (pv.shape, h, w)
        ort_out = run(sess, {"pixel_values": pv})
        rec = ort_out["reconstruction"]
        assert rec.shape == (1, 3, 2 * ph, 2 * pw), rec.shape
        with torch.no_grad():
            want = model(pixel_values=torch.tensor(pv)).reconstruction.numpy()
        diff = float(np.abs(rec - want).max())
        assert diff < 1e-4, f"onnxruntime vs torch at {ph}x{pw}: {diff}"
        inside = float(((rec > 0) & (rec < 1)).mean())
        assert inside > 0.9, f"only {inside:.2f} of the reconstruction is inside (0, 1): clamping flattens it"
        steps.append(({"pixel_values": pv}, ort_out))
        stats.append({"padded_size": [ph, pw], "reconstruction": tensor_stats(rec),
                      "fraction_inside_0_1": inside, "max_abs_diff_onnxruntime_vs_torch": diff})
    graphs = {"onnx/model.onnx": {"reference": save_reference(fx, "onnx/model.onnx", steps)}}

    outs = pipeline_image_to_image(fx, model, proc, images)
    for img, (_, h, w), st in zip(outs, SR_IMAGE_SPECS, stats):
        ph, pw = st["padded_size"]
        # transformers 4.57 does not crop the processor's padding: the output is the padded size x 2
        assert img.size == (2 * pw, 2 * ph) and img.mode == "RGB", (img.size, img.mode)
        a = np.asarray(img)
        st["pipeline_image"] = {"size": list(img.size), "distinct_values": int(np.unique(a).size),
                                "zeros": int((a == 0).sum()), "full": int((a == 255).sum()),
                                "pixels": int(a.size)}
        assert np.unique(a).size > 32, "the output image is nearly flat"

    write_manifest(fx, family="swin2sr", architecture="Swin2SRForImageSuperResolution", task=TASK, opset=18,
                   graphs=graphs, inputs_from="references/image_*.png through preprocessor_config.json, "
                   "one image per step (their padded sizes differ)",
                   pipeline_task=TASK, reference_stats=stats,
                   notes=["caidas/swin2SR-classical-sr-x2-64 scaled down: embed_dim 16, one stage of depth 2 "
                          "(the second block shifts its 8x8 windows by 4), 2 heads, window 8, patch 1, "
                          "upscale 2, pixelshuffle upsampler, img_range 1",
                          f"seeded weight noise std 0.05 (perturb), then the upsampler's final conv scaled by "
                          f"{FINAL_CONV_SCALE} so most of the reconstruction lies inside (0, 1) (fraction_inside_0_1 "
                          "in reference_stats) rather than clamped",
                          "Swin2SRImageProcessor as caidas/swin2SR-* ship it (pad_size 8, saved by transformers "
                          "4.57 as size_divisor 8): rescale 1/255, then symmetric padding bottom / right to "
                          "(h // 8 + 1) * 8 (a full block even for multiples of 8)",
                          "inputs 29x35 and 19x26 (not multiples of 8): padded to 32x40 and 24x32, "
                          "reconstruction 64x80 and 48x64; model.npz holds one step per image",
                          "transformers' ImageToImagePipeline does not crop the padding: its output image is "
                          "the padded size times the upscale (the recorded PNGs are 80x64 and 64x48)",
                          "exported by optimum-onnx 0.1.0 main_export(task='image-to-image') (its "
                          "Swin2srOnnxConfig); checked when made: onnxruntime equals the torch model at both "
                          "padded sizes (max_abs_diff_onnxruntime_vs_torch in reference_stats)"])
    shutil.rmtree(tmp)
    return fx


BUILDERS = {
    "swin2sr": build_swin2sr,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
