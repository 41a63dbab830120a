"""Tiny zero-shot-object-detection fixture for Grounding DINO (GroundingDinoForObjectDetection),
shaped like IDEA-Research/grounding-dino-tiny: a Swin backbone (stages 2-4 and one extra level),
a BERT text backbone, the feature enhancer (fusion) encoder, two-stage query selection and the
cross-modality decoder, all tiny; its processor as the Hub repo ships it, scaled down.

Same conventions as families_vision_audio.py (whose helpers this script imports): a random-weight
model from transformers config classes, seeded and perturbed; references from onnxruntime
(references/model.npz). The transformers pipeline references and the ORT-vs-PyTorch checks on
other inputs are record_grounding_dino.py's (it rebuilds this model with `build_model`).

Export: optimum-onnx 0.1.0 has no Grounding DINO config, so the graph is made with torch.onnx's
TorchScript exporter (dynamo=False) under the input / output names of onnx-community's
grounding-dino-tiny-ONNX, the export transformers.js runs (pixel_values, input_ids,
token_type_ids, attention_mask, pixel_mask -> logits, pred_boxes). Two things the tracer cannot
follow, and what this script does about them:

  * generate_masks_with_special_tokens_and_transfer_map loops in Python over torch.nonzero: traced,
    it would freeze the phrase blocks of the example prompt. It is replaced during the export by
    `phrase_masks`, the same masks and position ids from comparisons and reductions (checked equal
    to the original on every prompt the references use, and on random ones).
  * Swin's window paddings and the deformable attention's spatial shapes are Python ints taken
    from the feature maps: the traced graph takes one image size only. The fixture's processor
    resizes every image to that size (HEIGHT x WIDTH, as onnx-community's export takes a fixed
    800 x 800); batch size and prompt length stay dynamic.

Usage (regenerates deterministically):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_grounding_dino.py

Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from families_vision_audio import (  # noqa: E402
    copy_hub_files, fresh_fixture, perturb, reference_single, save_model_dir, seed, tmpdir,
    write_manifest,
)
import families_vision_audio as fva  # noqa: E402

NAME = "grounding-dino"
TASK = "zero-shot-object-detection"
HUB = Path(__file__).resolve().parents[3] / "shared" / "hub-files" / "IDEA-Research" / "grounding-dino-tiny"
HEIGHT, WIDTH = 64, 96
OPSET = 17
# The model hard-codes bert-base-uncased's ids of [CLS], [SEP], "." and "?" (SPECIAL_TOKENS in
# modeling_grounding_dino.py): the small vocabulary keeps bert-base-uncased's first 1996 entries
# (specials, unused slots, punctuation, single characters) at their ids and appends a few words
# and the "##" continuation of each letter (other words split into letters, never [UNK]).
KEEP_IDS = 1996
WORDS = ["the", "a", "an", "of", "and", "cat", "cats", "dog", "remote", "control", "person",
         "car", "red", "square", "photo", "cup", "coffee", "rocket", "man", "woman", "helmet",
         "flag", "space", "suit", "table", "plate", "sky", "tree", "face", "window", "mug"]
# real photos (scikit-image's bundled samples), downscaled by slicing: (name, sample, rows, cols)
PHOTOS = [("chelsea", "chelsea", slice(None, None, 4), slice(None, None, 4)),
          ("astronaut", "astronaut", slice(None, None, 6), slice(None, None, 6)),
          ("coffee", "coffee", slice(None, None, 5), slice(None, None, 5))]
INPUT_NAMES = ["pixel_values", "input_ids", "token_type_ids", "attention_mask", "pixel_mask"]
OUTPUT_NAMES = ["logits", "pred_boxes"]
EXAMPLE_LABELS = ["a cat", "a remote control"]
# With transformers' init (class bias prior, zero box deltas) every query reported about the same
# score and box; seeded noise of this std on every weight makes scores and boxes vary.
PERTURB = 0.1


def small_vocab() -> list[str]:
    real = (HUB / "vocab.txt").read_text(encoding="utf-8").split("\n")
    index = {t: i for i, t in enumerate(real)}
    extra = [w for w in WORDS if w in index] + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    assert len(extra) == len(WORDS) + 26, [w for w in WORDS if w not in index]
    vocab = real[:KEEP_IDS] + extra
    assert [vocab[i] for i in (0, 100, 101, 102, 103, 1012, 1029)] == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?"]
    return vocab


def build_tokenizer(tmp: Path):
    """BertTokenizerFast over the small vocabulary, configured as the Hub repo's
    tokenizer_config.json (lower case, model_max_length 512)."""
    from transformers import BertTokenizer, BertTokenizerFast

    src = tmp / "gd_tok_src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "vocab.txt").write_text("\n".join(small_vocab()) + "\n", encoding="utf-8")
    BertTokenizer(str(src / "vocab.txt"), do_lower_case=True, model_max_length=512).save_pretrained(
        tmp / "gd_tok_slow")
    return BertTokenizerFast.from_pretrained(tmp / "gd_tok_slow")


def build_processor(tok):
    """GroundingDinoProcessor as the Hub repo ships it (bilinear, ImageNet mean / std, rescale,
    pad with pixel_mask), the resize fixed at HEIGHT x WIDTH (the graph's one size)."""
    from transformers import GroundingDinoImageProcessor, GroundingDinoProcessor

    image_processor = GroundingDinoImageProcessor(
        do_resize=True, size={"height": HEIGHT, "width": WIDTH}, resample=2, do_rescale=True,
        rescale_factor=1 / 255, do_normalize=True, image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225], do_pad=True)
    return GroundingDinoProcessor(image_processor=image_processor, tokenizer=tok)


def build_config(vocab_size: int):
    from transformers import BertConfig, GroundingDinoConfig, SwinConfig

    swin = SwinConfig(embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2], window_size=4,
                      mlp_ratio=2.0, out_features=["stage2", "stage3", "stage4"],
                      out_indices=[2, 3, 4])
    bert = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                      pad_token_id=0)
    return GroundingDinoConfig(
        backbone_config=swin, text_config=bert, use_timm_backbone=False,
        use_pretrained_backbone=False, d_model=32, encoder_layers=1, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, encoder_n_points=2, decoder_n_points=2, num_feature_levels=4,
        num_queries=20, max_text_len=32, architectures=["GroundingDinoForObjectDetection"])


def build_model(tok):
    from transformers import GroundingDinoForObjectDetection

    seed(0)
    model = GroundingDinoForObjectDetection(build_config(len(tok))).eval()
    return perturb(model, PERTURB)


def phrase_masks(input_ids):
    """generate_masks_with_special_tokens_and_transfer_map without its loop over nonzero: each
    token attends to the tokens of its phrase (those after the previous special token, up to and
    including the next special token, which must be neither the first nor the last column), and
    counts its position from the phrase's start; every other token attends to itself, position
    0. Equal to the original for rows that start with a special token ([CLS])."""
    from transformers.models.grounding_dino import modeling_grounding_dino as gd

    special = torch.zeros_like(input_ids, dtype=torch.bool)
    for token in gd.SPECIAL_TOKENS:
        special = special | (input_ids == token)
    # sizes as tensors, never Python ints: the tracer would freeze an int at the example's length
    idx = torch.cumsum(torch.ones_like(input_ids[0]), 0) - 1
    last = idx[-1:]
    at = special[:, None, :]  # [batch, token j, candidate i]
    later = idx[None, None, :] >= idx[None, :, None]
    nxt = torch.where(at & later, idx[None, None, :], last + 1).amin(-1)
    prv = torch.where(at & ~later, idx[None, None, :], -torch.ones_like(last)).amax(-1)
    inside = (nxt > 0) & (nxt < last)
    same = (nxt[:, :, None] == nxt[:, None, :]) & inside[:, :, None] & inside[:, None, :]
    mask = same | (idx[:, None] == idx[None, :])[None]
    position_ids = torch.where(inside, idx[None, :] - prv - 1, torch.zeros_like(nxt))
    return mask, position_ids.to(torch.long)


@contextlib.contextmanager
def traceable_masks():
    from transformers.models.grounding_dino import modeling_grounding_dino as gd

    original = gd.generate_masks_with_special_tokens_and_transfer_map
    gd.generate_masks_with_special_tokens_and_transfer_map = phrase_masks
    try:
        yield
    finally:
        gd.generate_masks_with_special_tokens_and_transfer_map = original


def check_phrase_masks(tok, texts):
    """phrase_masks equals the original on ``texts`` (one at a time and padded together) and on
    random rows of special and ordinary ids."""
    from transformers.models.grounding_dino import modeling_grounding_dino as gd

    batches = [tok([t], return_tensors="pt")["input_ids"] for t in texts]
    batches.append(tok(texts, return_tensors="pt", padding=True)["input_ids"])
    g = torch.Generator().manual_seed(7)
    for n in (2, 3, 7, 16):
        ids = torch.randint(0, 6, (4, n), generator=g)
        ids = torch.tensor([101, 102, 1012, 1029, 2000, 0])[ids]
        ids[:, 0] = 101
        batches.append(ids)
    for ids in batches:
        want = gd.generate_masks_with_special_tokens_and_transfer_map(ids)
        got = phrase_masks(ids)
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), ids


class _Graph(torch.nn.Module):
    """The model with the Hub export's inputs and outputs."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values, input_ids, token_type_ids, attention_mask, pixel_mask):
        out = self.model(pixel_values=pixel_values, input_ids=input_ids,
                         token_type_ids=token_type_ids, attention_mask=attention_mask,
                         pixel_mask=pixel_mask, return_dict=True)
        return out.logits, out.pred_boxes


def feeds_for(proc, images, text):
    enc = proc(images=images, text=text, return_tensors="pt", padding=True)
    return {k: enc[k] for k in INPUT_NAMES}


def export(model, proc, images, path: Path):
    """torch.onnx (TorchScript) at a batch of two images and the joined example prompt."""
    feeds = feeds_for(proc, images[:2], [EXAMPLE_LABELS, EXAMPLE_LABELS])
    dynamic = {"pixel_values": {0: "batch_size"}, "pixel_mask": {0: "batch_size"},
               **{k: {0: "batch_size", 1: "sequence_length"}
                  for k in ("input_ids", "token_type_ids", "attention_mask")},
               "logits": {0: "batch_size"}, "pred_boxes": {0: "batch_size"}}
    with traceable_masks(), torch.no_grad(), fva.quiet():
        torch.onnx.export(_Graph(model), tuple(feeds[k] for k in INPUT_NAMES), str(path),
                          input_names=INPUT_NAMES, output_names=OUTPUT_NAMES,
                          dynamic_axes=dynamic, opset_version=OPSET, dynamo=False)
    m = onnx.load(str(path))
    onnx.save(m, str(path))  # one file, no external data


def write_photos(fx: Path) -> list[Image.Image]:
    import skimage.data

    images = []
    for name, sample, rows, cols in PHOTOS:
        array = np.ascontiguousarray(getattr(skimage.data, sample)()[rows, cols])
        path = fx / "references" / f"{name}.png"
        Image.fromarray(array).save(path)
        images.append(Image.open(path).convert("RGB"))
    return images


def photos_description() -> dict:
    return {"images": [f"references/{name}.png" for name, *_ in PHOTOS],
            "how_made": "skimage.data.<sample>()[rows, cols] (scikit-image 0.26 bundled photos, "
                        "downscaled by slicing), saved as PNG",
            "specs": [{"name": n, "sample": s, "rows": [r.start, r.stop, r.step],
                       "cols": [c.start, c.stop, c.step]} for n, s, r, c in PHOTOS]}


def build():
    fx = fresh_fixture(NAME)
    tmp = tmpdir()
    tok = build_tokenizer(tmp)
    proc = build_processor(tok)
    model = build_model(tok)
    check_phrase_masks(tok, [". ".join(EXAMPLE_LABELS) + ".", *EXAMPLE_LABELS, "a cat?", "cat"])
    d = save_model_dir(model, tmp, proc)
    copy_hub_files(d, fx)
    images = write_photos(fx)
    export(model, proc, images, fx / "onnx" / "model.onnx")
    feeds = {k: v.numpy() for k, v in feeds_for(proc, images[:1], EXAMPLE_LABELS).items()}
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", feeds)}}
    write_manifest(
        fx, family="grounding-dino", architecture="GroundingDinoForObjectDetection", task=TASK,
        opset=OPSET, graphs=graphs,
        exporter="torch 2.13 torch.onnx.export (TorchScript, dynamo=False): optimum-onnx 0.1.0 "
                 "has no Grounding DINO config",
        inputs_from="references/*.png through preprocessor_config.json",
        text_inputs={"texts": [". ".join(EXAMPLE_LABELS) + "."], "how": "GroundingDinoProcessor"},
        notes=[
            f"inputs {INPUT_NAMES}, outputs {OUTPUT_NAMES}: onnx-community/grounding-dino-tiny-ONNX's names",
            "generate_masks_with_special_tokens_and_transfer_map replaced during the export by "
            "families_grounding_dino.phrase_masks (the same values without a Python loop over "
            "nonzero); the torch model itself is unchanged",
            f"one image size: the tracer freezes Swin's window paddings and the deformable "
            f"attention's spatial shapes, so the graph takes {HEIGHT}x{WIDTH} only and the "
            f"processor resizes to it (onnx-community's export takes a fixed 800x800); batch and "
            f"prompt length are dynamic",
            "Swin backbone: embed 16, depths [1, 1, 1, 1], window 4, out stages 2-4 + one extra "
            "level; BERT text backbone hidden 32, 2 layers; d_model 32, 1 encoder / 2 decoder "
            "layers, 2 heads, 2 sampling points, 20 queries, max_text_len 32",
            f"vocabulary: bert-base-uncased's first {KEEP_IDS} entries at their ids (the model "
            "hard-codes the ids of [CLS], [SEP], '.', '?') plus a few words and '##' letters",
            f"seeded weight noise std {PERTURB} on every parameter (scores and boxes vary)",
            "model.npz: chelsea.png with the prompt 'a cat. a remote control.'",
            "references/pipeline_zero-shot-object-detection.json, grounded.json, processor.npz: "
            "record_grounding_dino.py",
        ])
    shutil.rmtree(tmp)
    return fx


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], {NAME: build}))
