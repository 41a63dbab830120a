"""Tiny zero-shot-object-detection fixtures: OWL-ViT (OwlViTForObjectDetection) and OWLv2
(Owlv2ForObjectDetection), their processors as google/owlvit-base-patch32 and
google/owlv2-base-patch16 ship them (scaled down), with a small CLIP BPE tokenizer.

Same conventions as families_vision_audio.py (whose helpers this script imports): random-weight
models from transformers config classes, seeded and perturbed, exported offline with optimum-onnx
main_export, references from onnxruntime (references/model.npz) and from the transformers
pipeline on the torch model (references/pipeline_zero-shot-object-detection.json), inputs
references/image_*.png. See tests/support/README.md for the fixture contract.

Usage (regenerates deterministically; no argument = every fixture):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_vision_owl.py [names...]

Pinned versions: those of families_vision_audio.py (requirements-export.txt; Owlv2ImageProcessor's
resize needs SciPy, which scikit-image brings).
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

from families_vision_audio import (  # noqa: E402
    clip_style_vocab, copy_hub_files, export_main, fresh_fixture, image_inputs_description, move_onnx,
    perturb, reference_single, save_json, save_model_dir, seed, tmpdir, write_images, write_manifest,
    write_vocab_merges,
)
import families_vision_audio as fva  # noqa: E402

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
OWL_LABELS = ["a cat", "a dog", "the red square"]
TASK = "zero-shot-object-detection"
# The head perturbation: with the default 0.05 every box sat near its patch's prior and the
# scores of one label were within ~1e-3; 0.2 (seeded) gives boxes and scores that vary.
HEAD_PERTURB = 0.2


def owl_tokenizer(tmp: Path):
    """CLIP BPE (families_vision_audio.clip_style_vocab) as google/owlvit-* ship theirs: pad token
    "!" (id 0), model_max_length 16."""
    from transformers import CLIPTokenizer, CLIPTokenizerFast

    vocab, merges = clip_style_vocab(60)
    vf, mf = write_vocab_merges(tmp / "owl_tok_src", vocab, merges)
    slow = CLIPTokenizer(vf, mf, model_max_length=16, pad_token="!")
    slow.save_pretrained(tmp / "owl_tok_slow")
    return CLIPTokenizerFast.from_pretrained(tmp / "owl_tok_slow")


def _configs(tok, image_size, patch_size):
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=16, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=image_size, patch_size=patch_size)
    return text, vision


# Owlv2's _init_weights draws its class head's logit_shift / logit_scale with std ~1: on 32-dim
# image embeddings that gave logits of -160..+2 (scores 0 or exactly 0.5, ties and float32
# underflow). Scaled down by these factors its logits lie within a few units, as OWL-ViT's do.
OWLV2_CLASS_HEAD_SCALE = {"class_head.logit_shift.": 0.2, "class_head.logit_scale.": 0.1}


def _perturbed(model, scale_params=None):
    perturb(model)
    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.startswith(("box_head.", "class_head.", "objectness_head.")):
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * HEAD_PERTURB)
            for prefix, factor in (scale_params or {}).items():
                if name.startswith(prefix):
                    p.mul_(factor)
    return model


def pipeline_zero_shot_detection(fx, model, proc, tok, images):
    from transformers import pipeline

    p = pipeline(TASK, model=model, image_processor=proc, tokenizer=tok, device="cpu")
    calls = []
    for kwargs in ({"candidate_labels": OWL_LABELS, "threshold": 0.0, "top_k": 5},
                   {"candidate_labels": OWL_LABELS, "threshold": 0.0}):
        # one call per image: a list of images is zipped with candidate_labels by transformers
        # (one label per image), not what these references record
        calls.append({"call_kwargs": kwargs, "outputs": [p(image, **kwargs) for image in images]})
    save_json(fx / "references" / f"pipeline_{TASK}.json",
              {"task": TASK, "inputs": image_inputs_description(), "calls": calls})
    return calls


def _owl_fixture(name, family, arch, model, proc, tok, notes):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc, tok)
    out = export_main(d, tmp / "out", TASK, 18)
    produced = sorted(f.name for f in out.glob("*.onnx"))
    assert produced == ["model.onnx"], produced
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    graph = onnx.load(str(fx / "onnx/model.onnx")).graph
    ins, outs = [i.name for i in graph.input], [o.name for o in graph.output]
    # one image, the three labels as its text queries (padded to the longest)
    pv = proc(images=images[:1], return_tensors="np")["pixel_values"]
    enc = tok(OWL_LABELS, return_tensors="np", padding=True)
    feeds = {"pixel_values": pv, "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx",
                                                                {k: feeds[k] for k in ins})}}
    # onnxruntime equals the torch model on those inputs
    ref = np.load(fx / graphs["onnx/model.onnx"]["reference"])
    with torch.no_grad():
        want = model(**{k: torch.tensor(v) for k, v in feeds.items()})
    for k in ("logits", "pred_boxes"):
        np.testing.assert_allclose(ref[f"0/out/{k}"], want[k].numpy(), rtol=1e-5, atol=1e-4, err_msg=k)
    calls = pipeline_zero_shot_detection(fx, model, proc, tok, images)
    boxes = {tuple(r["box"].values()) for out in calls[1]["outputs"] for r in out}
    scores = [r["score"] for out in calls[1]["outputs"] for r in out]
    spread = max(scores) - min(scores)
    gap = min(abs(a["score"] - b["score"]) for out in calls[1]["outputs"] for a, b in zip(out, out[1:]))
    assert len(boxes) > 4 and spread > 1e-2 and gap > 1e-6, (name, len(boxes), spread, gap)
    assert all(len(out) == len(OWL_LABELS) * ref["0/out/pred_boxes"].shape[1] for out in calls[1]["outputs"])
    shape = list(ref["0/out/logits"].shape)
    scaled = (f"; class_head logit_shift / logit_scale then scaled by {OWLV2_CLASS_HEAD_SCALE} (Owlv2 "
              "initializes them with std ~1: logits of -160 otherwise)")
    write_manifest(fx, family=family, architecture=arch, task=TASK, opset=18, graphs=graphs,
                   notes=list(notes) + [
                       f"optimum exported {produced}: inputs {ins}, outputs {outs}",
                       f"model.npz: image_0 with the labels {OWL_LABELS} as its text queries, tokenized "
                       f"together (padding=True: attention_mask has zeros); logits {shape} "
                       "(image, box, query)",
                       f"heads (box_head, class_head{', objectness_head' if family == 'owlv2' else ''}) "
                       f"perturbed by a further {HEAD_PERTURB} (seeded) so boxes and scores vary"
                       f"{scaled if family == 'owlv2' else ''}; "
                       f"{len(boxes)} distinct boxes, score spread {spread:.4f}, smallest gap between "
                       f"consecutive scores {gap:.2e} in the threshold-0 call (no near-ties to reorder)",
                       "pipeline_zero-shot-object-detection.json: transformers' pipeline on the torch model, "
                       "one call per image (it runs each label alone: one text query per forward), "
                       "calls {candidate_labels, threshold 0, top_k 5} and {candidate_labels, threshold 0}",
                   ],
                   inputs_from="references/image_*.png through preprocessor_config.json",
                   text_inputs={"texts": OWL_LABELS, "tokenizer_kwargs": {"padding": True}})
    shutil.rmtree(tmp)
    return fx


def build_owlvit():
    from transformers import OwlViTConfig, OwlViTForObjectDetection, OwlViTImageProcessor

    tmp = tmpdir()
    tok = owl_tokenizer(tmp)
    text, vision = _configs(tok, 32, 8)
    cfg = OwlViTConfig(text_config=text, vision_config=vision, projection_dim=32,
                       architectures=["OwlViTForObjectDetection"])
    seed(0)
    model = _perturbed(OwlViTForObjectDetection(cfg).eval())
    # as google/owlvit-base-patch32 ships it (768x768 bicubic, no crop, CLIP mean/std), scaled down
    proc = OwlViTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=3,
                                do_center_crop=False, crop_size={"height": 32, "width": 32}, do_rescale=True,
                                rescale_factor=1 / 255, do_normalize=True, image_mean=CLIP_MEAN,
                                image_std=CLIP_STD)
    fx = _owl_fixture("owlvit", "owlvit", "OwlViTForObjectDetection", model, proc, tok,
                      ["OwlViTImageProcessor as google/owlvit-base-patch32 ships it: resize to 32x32 (not "
                       "keeping the aspect ratio) bicubic, no center crop, CLIP mean/std; boxes are relative "
                       "to the image, scaled by (width, height)",
                       "vision 32px, patch 8: 16 boxes; text hidden 32, 2 layers, 16 positions; projection 32 (the "
                       "class head compares text_embeds with its text-hidden-size output)",
                       "tokenizer: CLIP BPE (60 merges) with pad token '!' (id 0) as google/owlvit-* ship it"])
    shutil.rmtree(tmp)
    return fx


def build_owlv2():
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor

    tmp = tmpdir()
    tok = owl_tokenizer(tmp)
    text, vision = _configs(tok, 64, 16)
    cfg = Owlv2Config(text_config=text, vision_config=vision, projection_dim=32,
                      architectures=["Owlv2ForObjectDetection"])
    seed(0)
    model = _perturbed(Owlv2ForObjectDetection(cfg).eval(), OWLV2_CLASS_HEAD_SCALE)
    # as google/owlv2-base-patch16 ships it (pad to a square with 0.5, 960x960, CLIP mean/std), scaled down
    proc = Owlv2ImageProcessor(do_rescale=True, rescale_factor=1 / 255, do_pad=True, do_resize=True,
                               size={"height": 64, "width": 64}, resample=2, do_normalize=True,
                               image_mean=CLIP_MEAN, image_std=CLIP_STD)
    fx = _owl_fixture("owlv2", "owlv2", "Owlv2ForObjectDetection", model, proc, tok,
                      ["Owlv2ImageProcessor as google/owlv2-base-patch16 ships it: rescale, pad bottom / right "
                       "to a square with 0.5, resize to 64x64 (scikit-image style, antialiased), CLIP "
                       "mean/std; boxes are relative to the padded square, so transformers scales them by "
                       "max(height, width)",
                       "vision 64px, patch 16: 16 boxes; text hidden 32, 2 layers, 16 positions; projection 32 (the "
                       "class head compares text_embeds with its text-hidden-size output)",
                       "tokenizer: CLIP BPE (60 merges) with pad token '!' (id 0) as google/owlv2-* ship it"])
    shutil.rmtree(tmp)
    return fx


BUILDERS = {
    "owlvit": build_owlvit,
    "owlv2": build_owlv2,
}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
