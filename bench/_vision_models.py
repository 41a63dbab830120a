"""The models and photos of bench/vision.py, built once into $TRANSMUTER_BENCH_CACHE (default
~/.cache/transmuter-bench)/vision/.

- ``vit-<layers>L``: a ViT-B/16-sized ViTForImageClassification (hidden 768, 12 heads, MLP 3072,
  image 224, patch 16, 1000 labels LABEL_0..), google/vit-base-patch16-224's ViTImageProcessor
  (224x224 bilinear, mean / std 0.5).
- ``clip-<layers>L``: a CLIP ViT-B/16-sized CLIPModel (vision: hidden 768, 12 heads, MLP 3072,
  patch 16, image 224; text: hidden 512, 8 heads, MLP 2048, 77 positions; projection 512),
  openai/clip-vit-base-patch16's CLIPImageProcessor, and a small CLIP BPE tokenizer built offline
  (tests/support/families_vision_audio.py's vocabulary: 574 tokens, so the text vocab is 574, not
  49408; an embedding lookup, so no cost the benchmark could see).

Random weights, torch seed 0, ``--layers`` layers in every tower. The export environment
($TRANSMUTER_EXPORT_PYTHON, default the tests' venv-export: transformers 4.57.6, torch CPU,
optimum-onnx; no network) saves the torch model, processor and tokenizer (save_pretrained) and
exports ``onnx/model.onnx`` with optimum-onnx's ``main_export`` (opset 18) into the same folder:
the Hub's layout, which ``transmuter.pipeline(task, folder)`` and ``transformers.pipeline(task,
model=folder)`` both read.

The photos are scikit-image's bundled samples, saved once at their natural sizes: colour ones as
JPEG (quality 90), grey ones as PNG.
"""

import os
import pathlib
import subprocess
import textwrap

import numpy as np
import onnxruntime as ort

EXPORT_PYTHON = os.environ.get("TRANSMUTER_EXPORT_PYTHON",
                               "/root/.cache/transmuter-tests/venv-export/bin/python")
CACHE = pathlib.Path(os.environ.get("TRANSMUTER_BENCH_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-bench")) / "vision"
SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "support"
TASKS = {"vit": "image-classification", "clip": "zero-shot-image-classification"}
COLOUR = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry",
          "hubble_deep_field", "retina", "colorwheel"]
GREY = ["camera", "coins", "moon", "clock"]

BUILD = textwrap.dedent("""
    import os, shutil, sys, tempfile, pathlib
    out, name, layers = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, sys.argv[4])  # tests/support: the offline CLIP tokenizer
    import torch, transformers
    from optimum.exporters.onnx import main_export
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    if name == "vit":
        labels = {i: f"LABEL_{i}" for i in range(1000)}
        cfg = transformers.ViTConfig(
            hidden_size=768, num_hidden_layers=layers, num_attention_heads=12,
            intermediate_size=3072, image_size=224, patch_size=16, qkv_bias=True,
            id2label=labels, label2id={v: k for k, v in labels.items()},
            architectures=["ViTForImageClassification"])
        model = transformers.ViTForImageClassification(cfg).eval()
        saved = [transformers.ViTImageProcessor(
            do_resize=True, size={"height": 224, "width": 224}, resample=2, do_rescale=True,
            rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3)]
        task = "image-classification"
    else:
        from families_vision_audio import clip_style_vocab, write_vocab_merges
        torch.set_num_threads(os.cpu_count())  # that module sets 1
        tmp = pathlib.Path(tempfile.mkdtemp())
        vf, mf = write_vocab_merges(tmp / "src", *clip_style_vocab(60))
        transformers.CLIPTokenizer(vf, mf, model_max_length=77).save_pretrained(tmp / "slow")
        tok = transformers.CLIPTokenizerFast.from_pretrained(tmp / "slow")
        cfg = transformers.CLIPConfig(
            text_config=dict(vocab_size=len(tok), hidden_size=512, intermediate_size=2048,
                             num_hidden_layers=layers, num_attention_heads=8,
                             max_position_embeddings=77, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
            vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=layers,
                               num_attention_heads=12, image_size=224, patch_size=16),
            projection_dim=512, architectures=["CLIPModel"])
        model = transformers.CLIPModel(cfg).eval()
        saved = [tok, transformers.CLIPImageProcessor(
            do_resize=True, size={"shortest_edge": 224}, resample=3, do_center_crop=True,
            crop_size={"height": 224, "width": 224}, do_rescale=True, rescale_factor=1 / 255,
            do_normalize=True, image_mean=[0.48145466, 0.4578275, 0.40821073],
            image_std=[0.26862954, 0.26130258, 0.27577711], do_convert_rgb=True)]
        task = "zero-shot-image-classification"
    model.save_pretrained(out)
    for s in saved:
        s.save_pretrained(out)
    main_export(str(out), output=str(out / "export"), task=task, opset=18, device="cpu",
                do_validation=False, local_files_only=True)
    (out / "onnx").mkdir(exist_ok=True)
    shutil.move(out / "export" / "model.onnx", out / "onnx" / "model.onnx")
    for f in (out / "export").glob("model.onnx*"):  # external data, if any
        shutil.move(f, out / "onnx" / f.name)
    shutil.rmtree(out / "export")
""")


def model_folder(name, layers):
    """``CACHE/<name>-<layers>L``: config, weights, processor, tokenizer, onnx/model.onnx."""
    folder = CACHE / f"{name}-{layers}L"
    if not (folder / "onnx" / "model.onnx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"building {name} ({layers} layers) into {folder} (once) ...", flush=True)
        with open(folder / "build.log", "w") as log:  # the exporter's warnings
            done = subprocess.run([EXPORT_PYTHON, "-c", BUILD, str(folder), name, str(layers),
                                   str(SUPPORT)], stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"building {name} failed:\n"
                             + (folder / "build.log").read_text()[-3000:])
    return folder


def photos(n):
    """``n`` paths to the sample photos, cycled (files written on first use)."""
    folder = CACHE / "photos"
    paths = [folder / f"{x}.jpg" for x in COLOUR] + [folder / f"{x}.png" for x in GREY]
    if not all(p.exists() for p in paths):
        import PIL.Image
        import skimage.data

        folder.mkdir(parents=True, exist_ok=True)
        for path in paths:
            image = PIL.Image.fromarray(np.asarray(getattr(skimage.data, path.stem)()))
            image.save(path, **({"quality": 90} if path.suffix == ".jpg" else {}))
    return [str(paths[i % len(paths)]) for i in range(n)]


def ort_session(path):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = os.cpu_count()
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
