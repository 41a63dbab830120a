"""Tiny Florence-2 fixture ``tests/fixtures/florence2``: a random transformers 4.57
Florence2ForConditionalGeneration (native class: a DaViT vision tower, the multi-modal projector,
a BART encoder-decoder) shaped as microsoft/Florence-2-base but tiny, exported as the graphs
transformers.js loads (its ``Florence2ForConditionalGeneration``) and onnx-community's
Florence-2-base holds:

- ``onnx/vision_encoder.onnx``: pixel_values [B, 3, H, W] -> image_features [B, 1 + (H/32)^2, d]
  (``get_image_features``: tower, projector with its position / temporal embeddings, projection
  and norm);
- ``onnx/embed_tokens.onnx``: input_ids -> inputs_embeds (the shared BART embedding; Florence's
  text config has ``scale_embedding`` false, so no scale);
- ``onnx/encoder_model.onnx``: inputs_embeds, attention_mask -> last_hidden_state (BART encoder
  over the image features followed by the prompt's embeddings);
- ``onnx/decoder_model_merged.onnx``: inputs_embeds, encoder_attention_mask,
  encoder_hidden_states, past_key_values.{i}.decoder/encoder.key/value, use_cache_branch ->
  logits, present.* (optimum's ``merge_decoders`` over the two graphs below, strict=False as
  optimum merges seq2seq decoders);
  (the split graphs are not kept: the fixture stays under 3 MB).

optimum-onnx has no Florence-2 export, so the graphs are ``torch.onnx.export`` (TorchScript,
``dynamo=False``) of small wrappers over the transformers modules (the manifest says so); every
graph is checked against the PyTorch module here (``check_against_torch``, 1e-4).

Tokenizer: a byte-level BPE (BartTokenizerFast, as Florence-2's) trained on the shared corpus with
BART's <s>=0, <pad>=1, </s>=2, <unk>=3, then Florence-2's added special tokens in the real
tokenizer's order (read from ../shared/hub-files/onnx-community/Florence-2-base/added_tokens.json:
<od>, ..., <loc_0>..<loc_999>, ..., <and>) and the native processor's ``<image>``. The
preprocessor is the real one (CLIPImageProcessor, bicubic, ImageNet mean / std, no crop) at
64 x 64 pixels, so an image gives 1 + 2 x 2 = 5 feature rows (``image_seq_length``); the
generation config is the real one (beam 3, no_repeat_ngram_size 3, forced bos / eos,
early_stopping). The embedding rows of </s> and one token are swapped so that some generations
stop on </s> before the limit (``model``).

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_florence2.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # torch.onnx / merge_decoders name values from sets
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_common as ec  # noqa: E402

NAME = "florence2"
HUB = Path(__file__).resolve().parents[3] / "shared/hub-files/onnx-community/Florence-2-base"
OPSET = 17
SIZE = 64  # pixels: the tower's strides 4 * 2 * 2 * 2 leave a 2 x 2 grid
IMAGE_SEQ = 1 + (SIZE // 32) ** 2
D_MODEL, LAYERS, HEADS = 32, 2, 2
EOS, SWAP_WITH_EOS = 2, 715  # see model()
HEAD_DIM = D_MODEL // HEADS
EXPORTER = ("torch.onnx.export (TorchScript, dynamo=False) of wrappers over transformers' "
            "Florence2 modules, transformers.js layout; decoder merged with optimum's "
            "merge_decoders")
# Florence-2-base's preprocessor_config.json (CLIPImageProcessor) at 64 pixels
PREPROCESSOR = {"do_convert_rgb": None, "do_normalize": True, "do_rescale": True,
                "do_resize": True, "do_center_crop": False,
                "image_processor_type": "CLIPImageProcessor", "image_seq_length": IMAGE_SEQ,
                "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
                "processor_class": "Florence2Processor", "resample": 3,
                "size": {"height": SIZE, "width": SIZE},
                "crop_size": {"height": SIZE, "width": SIZE}}
GENERATION = {"bos_token_id": 0, "decoder_start_token_id": 2, "early_stopping": True,
              "eos_token_id": 2, "forced_bos_token_id": 0, "forced_eos_token_id": 2,
              "no_repeat_ngram_size": 3, "num_beams": 3, "pad_token_id": 1}


def tokenizer(work: Path):
    from tokenizers import AddedToken
    from transformers import BartTokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work / "tok", 600, ["<s>", "<pad>", "</s>", "<unk>"])
    tok = BartTokenizerFast(vocab_file=str(vocab), merges_file=str(merges),
                            add_prefix_space=False, model_max_length=1024)
    tok.add_special_tokens({"mask_token": AddedToken("<mask>", lstrip=True)})
    added = json.loads((HUB / "added_tokens.json").read_text())
    names = [k for k in sorted(added, key=added.get) if k != "<mask>"]
    tok.add_tokens([AddedToken(n, special=True, normalized=False) for n in names],
                   special_tokens=True)
    # the native processor's image placeholder, as transformers' convert_florence2 adds it
    tok.add_tokens(AddedToken("<image>", special=True, normalized=False), special_tokens=True)
    tok.image_token = "<image>"
    tok.image_token_id = tok.convert_tokens_to_ids("<image>")
    tok.extra_special_tokens = {"image_token": "<image>"}
    return tok


def model(tok):
    """The seeded torch model (same weights on every call)."""
    from transformers import Florence2Config, Florence2ForConditionalGeneration, GenerationConfig

    ec.seed_everything()
    vision = {"depths": [1, 1, 1, 1], "embed_dim": [16, 16, 32, 32], "num_heads": [1, 1, 2, 2],
              "num_groups": [1, 1, 2, 2], "window_size": 2, "projection_dim": D_MODEL,
              "max_position_embeddings": 8, "max_temporal_embeddings": 4,
              "drop_path_rate": 0.0}
    text = {"model_type": "bart", "vocab_size": len(tok), "d_model": D_MODEL,
            "encoder_layers": LAYERS, "decoder_layers": LAYERS,
            "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS,
            "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "max_position_embeddings": 64,
            "scale_embedding": False, "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2,
            "decoder_start_token_id": 2, "forced_bos_token_id": 0, "forced_eos_token_id": 2,
            "tie_word_embeddings": True, "dropout": 0.0, "attention_dropout": 0.0,
            "activation_dropout": 0.0}
    cfg = Florence2Config(text_config=text, vision_config=vision,
                          image_token_id=tok.image_token_id)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    m = Florence2ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # spread the 0.02 init: image features and logits that differ
        for p in m.model.vision_tower.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for p in m.model.multi_modal_projector.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for p in m.model.language_model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        # rows of </s> and SWAP_WITH_EOS swapped in the (tied) embedding: without it the random
        # decoder never ends before the limit; with it, some generations stop early (greedy
        # after 12 tokens on some photos, beams after 3-6) and others run to the limit
        w = m.model.language_model.shared.weight
        w[[EOS, SWAP_WITH_EOS]] = w[[SWAP_WITH_EOS, EOS]].clone()
    m.generation_config = GenerationConfig(**GENERATION)
    return m


def processor(d: Path):
    from transformers import Florence2Processor

    return Florence2Processor.from_pretrained(d)


# --- export-only modules -------------------------------------------------------------------------


class VisionEncoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m.model.get_image_features(pixel_values)


class EmbedTokens(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed = m.model.get_input_embeddings()

    def forward(self, input_ids):
        return self.embed(input_ids)


class Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.encoder = m.model.language_model.encoder

    def forward(self, inputs_embeds, attention_mask):
        return self.encoder(inputs_embeds=inputs_embeds,
                            attention_mask=attention_mask).last_hidden_state


class Decoder(torch.nn.Module):
    """The BART decoder and lm_head; ``past``: (self key, self value, cross key, cross value)
    per layer, or none (the first step computes the cross-attention KV)."""

    def __init__(self, m):
        super().__init__()
        self.decoder, self.lm_head = m.model.language_model.decoder, m.lm_head

    def forward(self, inputs_embeds, encoder_attention_mask, encoder_hidden_states, *past):
        from transformers import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        for i in range(len(past) // 4):
            cache.self_attention_cache.update(past[4 * i], past[4 * i + 1], i)
            cache.cross_attention_cache.update(past[4 * i + 2], past[4 * i + 3], i)
            cache.is_updated[i] = True
        out = self.decoder(inputs_embeds=inputs_embeds, encoder_hidden_states=encoder_hidden_states,
                           encoder_attention_mask=encoder_attention_mask,
                           past_key_values=cache, use_cache=True)
        logits = self.lm_head(out.last_hidden_state)
        c = out.past_key_values
        selfs = c.self_attention_cache.layers
        if past:
            return (logits, *[t for layer in selfs for t in (layer.keys, layer.values)])
        cross = c.cross_attention_cache.layers
        return (logits, *[t for a, b in zip(selfs, cross)
                          for t in (a.keys, a.values, b.keys, b.values)])


def past_names(prefix="past_key_values", cross=True):
    kinds = ("decoder", "encoder") if cross else ("decoder",)
    return [f"{prefix}.{i}.{k}.{kv}" for i in range(LAYERS) for k in kinds for kv in ("key", "value")]


def export(m, out: Path, work: Path):
    out.mkdir(parents=True, exist_ok=True)
    kw = {"opset_version": OPSET, "dynamo": False}
    pv = torch.randn(2, 3, SIZE, SIZE)
    torch.onnx.export(VisionEncoder(m), (pv,), str(out / "vision_encoder.onnx"),
                      input_names=["pixel_values"], output_names=["image_features"],
                      dynamic_axes={"pixel_values": {0: "batch_size"},
                                    "image_features": {0: "batch_size"}}, **kw)
    ids = torch.tensor([[0, 5, 9, 2]])
    torch.onnx.export(EmbedTokens(m), (ids,), str(out / "embed_tokens.onnx"),
                      input_names=["input_ids"], output_names=["inputs_embeds"],
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                                    "inputs_embeds": {0: "batch_size", 1: "sequence_length"}}, **kw)
    emb = torch.randn(2, 9, D_MODEL)
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 7:] = 0
    torch.onnx.export(Encoder(m), (emb, mask), str(out / "encoder_model.onnx"),
                      input_names=["inputs_embeds", "attention_mask"],
                      output_names=["last_hidden_state"],
                      dynamic_axes={"inputs_embeds": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                                    "last_hidden_state": {0: "batch_size",
                                                          1: "encoder_sequence_length"}}, **kw)
    dec = torch.randn(2, 1, D_MODEL)
    states = torch.randn(2, 9, D_MODEL)
    base = {"inputs_embeds": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
            "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"}}
    presents = past_names("present")
    axes = dict(base)
    for n in presents:
        axes[n] = {0: "batch_size", 2: "encoder_sequence_length" if ".encoder." in n
                   else "decoder_sequence_length"}
    inputs = ["inputs_embeds", "encoder_attention_mask", "encoder_hidden_states"]
    torch.onnx.export(Decoder(m), (dec, mask, states), str(work / "decoder_model.onnx"),
                      input_names=inputs, output_names=["logits", *presents],
                      dynamic_axes=axes, **kw)
    past = [torch.randn(2, HEADS, 9 if ".encoder." in n else 3, HEAD_DIM) for n in past_names()]
    axes = dict(base)
    axes.update({n: {0: "batch_size", 2: "encoder_sequence_length" if ".encoder." in n
                     else "past_decoder_sequence_length"} for n in past_names()})
    axes.update({n: {0: "batch_size", 2: "past_decoder_sequence_length + 1"}
                 for n in past_names("present", cross=False)})
    torch.onnx.export(Decoder(m), (dec, mask, states, *past),
                      str(work / "decoder_with_past_model.onnx"),
                      input_names=inputs + past_names(),
                      output_names=["logits", *past_names("present", cross=False)],
                      dynamic_axes=axes, **kw)
    from optimum.onnx import merge_decoders

    merge_decoders(decoder=work / "decoder_model.onnx",
                   decoder_with_past=work / "decoder_with_past_model.onnx",
                   save_path=out / "decoder_model_merged.onnx", strict=False)


# --- references ----------------------------------------------------------------------------------


def images():
    """Three scikit-image photos (shipped in its wheel, not committed) of different sizes."""
    import skimage.data
    from PIL import Image

    return [Image.fromarray(getattr(skimage.data, n)()).convert("RGB")
            for n in ("astronaut", "chelsea", "coffee")]


def check_against_torch(m, d: Path, proc):
    """Each graph's onnxruntime output against the PyTorch module it was exported from; returns
    the worst difference per graph (the manifest records them)."""
    inputs = proc(text=["<OD>", "<CAPTION>"], images=images()[:2], return_tensors="pt",
                  padding=True)
    pv = inputs["pixel_values"]
    sess = {g: ec.ort_session(d / "onnx" / f"{g}.onnx") for g in
            ("vision_encoder", "embed_tokens", "encoder_model", "decoder_model_merged")}
    worst = {}

    def cmp(name, got, want):
        err = float(np.abs(np.asarray(got) - want.detach().numpy()).max())
        worst[name] = max(worst.get(name, 0.0), err)
        if err > 1e-4:
            raise AssertionError(f"{name}: onnxruntime differs from PyTorch by {err}")

    with torch.no_grad():
        feats = m.model.get_image_features(pv)
        cmp("vision_encoder", sess["vision_encoder"].run(None, {"pixel_values": pv.numpy()})[0], feats)
        ids = inputs["input_ids"]
        emb = m.model.get_input_embeddings()(ids)
        cmp("embed_tokens", sess["embed_tokens"].run(None, {"input_ids": ids.numpy()})[0], emb)
        merged = emb.masked_scatter((ids == m.config.image_token_id)[..., None].expand_as(emb), feats)
        mask = inputs["attention_mask"]
        enc = m.model.language_model.encoder(inputs_embeds=merged, attention_mask=mask).last_hidden_state
        got = sess["encoder_model"].run(None, {"inputs_embeds": merged.numpy(),
                                               "attention_mask": mask.numpy()})[0]
        cmp("encoder_model", got, enc)
        out = m(pixel_values=pv, input_ids=ids, attention_mask=mask,
                decoder_input_ids=torch.full((2, 1), 2), use_cache=True)
        feeds = {"inputs_embeds": m.model.get_input_embeddings()(torch.full((2, 1), 2)).numpy(),
                 "encoder_attention_mask": mask.numpy(), "encoder_hidden_states": enc.numpy(),
                 "use_cache_branch": np.array([False])}
        feeds.update(empty_past(2, enc.shape[1]))
        names = [o.name for o in sess["decoder_model_merged"].get_outputs()]
        first = dict(zip(names, sess["decoder_model_merged"].run(names, feeds)))
        cmp("decoder_model_merged", first["logits"], out.logits)
        # the with-past branch: a second token, against PyTorch on both tokens without a cache
        second = torch.full((2, 1), 7)
        feeds.update({n: first[n.replace("past_key_values", "present")] for n in past_names()})
        feeds.update(inputs_embeds=m.model.get_input_embeddings()(second).numpy(),
                     use_cache_branch=np.array([True]))
        both = m(pixel_values=pv, input_ids=ids, attention_mask=mask, use_cache=False,
                 decoder_input_ids=torch.cat([torch.full((2, 1), 2), second], 1))
        cmp("decoder_model_merged", sess["decoder_model_merged"].run(["logits"], feeds)[0],
            both.logits[:, -1:])
    return worst


def empty_past(b, enc_len):
    return {n: np.zeros((b, HEADS, 0, HEAD_DIM), np.float32) for n in past_names()}


def references(d: Path, proc):
    """onnxruntime outputs of each graph (README's .npz layout), over the processor's inputs."""
    feed = proc(text=["<OD>", "<CAPTION_TO_PHRASE_GROUNDING>a cat"], images=images()[:2],
                return_tensors="np", padding=True)
    onnx_dir = d / "onnx"
    vis = ec.encoder_reference(onnx_dir / "vision_encoder.onnx",
                               {"pixel_values": feed["pixel_values"].astype(np.float32)})
    ec.save_reference(d / "references/vision_encoder.npz", vis)
    ids = feed["input_ids"]
    emb = ec.encoder_reference(onnx_dir / "embed_tokens.onnx", {"input_ids": ids})
    ec.save_reference(d / "references/embed_tokens.npz", emb)
    embeds = emb[0][1]["inputs_embeds"].copy()
    at = ids == proc.tokenizer.image_token_id
    embeds[at] = vis[0][1]["image_features"].reshape(-1, D_MODEL)
    mask = feed["attention_mask"].astype(np.int64)
    enc = ec.encoder_reference(onnx_dir / "encoder_model.onnx",
                               {"inputs_embeds": embeds, "attention_mask": mask})
    ec.save_reference(d / "references/encoder_model.npz", enc)
    states = enc[0][1]["last_hidden_state"]
    ec.save_reference(d / "references/decoder_model_merged.npz",
                      decoder_steps(onnx_dir, states, mask))


def decoder_steps(onnx_dir, states, mask, n_cached=1):
    """The first step (use_cache_branch False, empty past) from </s>, then ``n_cached`` greedy
    steps of one token."""
    sess = ec.ort_session(onnx_dir / "decoder_model_merged.onnx")
    embed = ec.ort_session(onnx_dir / "embed_tokens.onnx")
    b = len(states)
    token = np.full((b, 1), 2, np.int64)
    feeds = {"use_cache_branch": np.array([False]), **empty_past(b, states.shape[1])}
    steps = []
    for _ in range(n_cached + 1):
        feeds.update({"inputs_embeds": embed.run(None, {"input_ids": token})[0],
                      "encoder_attention_mask": mask, "encoder_hidden_states": states})
        names = [o.name for o in sess.get_outputs()]
        out = dict(zip(names, sess.run(names, feeds)))
        steps.append((dict(feeds), out))
        token = out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        cross = {n: feeds[n] if feeds["use_cache_branch"][0] else out[n.replace("past_key_values",
                                                                                "present")]
                 for n in past_names() if ".encoder." in n}
        feeds = {"use_cache_branch": np.array([True]), **cross,
                 **{n: out[n.replace("past_key_values", "present")] for n in past_names()
                    if ".decoder." in n}}
    return steps


def build(d: Path, work: Path):
    tok = tokenizer(work)
    m = model(tok)
    tok.save_pretrained(d)
    m.config.save_pretrained(d)
    m.generation_config.save_pretrained(d)
    (d / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    post = json.loads((Path(__file__).parent / "florence2_post_processor.json").read_text())
    (d / "processor_config.json").write_text(json.dumps(
        {"processor_class": "Florence2Processor", "post_processor_config": post}, indent=2) + "\n")
    proc = processor(d)
    export(m, d / "onnx", work)
    worst = check_against_torch(m, d, proc)
    references(d, proc)
    graphs = {f"onnx/{g}.onnx": {"reference": f"references/{g}.npz",
                                 "static_inputs": ["use_cache_branch"] if "decoder" in g else []}
              for g in ("vision_encoder", "embed_tokens", "encoder_model", "decoder_model_merged")}
    ec.write_manifest(d, NAME, "Florence2ForConditionalGeneration", "image-to-text", OPSET,
                      graphs, exporter=EXPORTER)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["notes"] = [
        "optimum-onnx cannot export Florence-2: torch.onnx.export of wrappers over the "
        "transformers 4.57.6 modules, in transformers.js' layout (families_florence2.py)",
        "decoder_model_merged.onnx is optimum's merge_decoders (strict=False) of the split "
        "decoder_model / decoder_with_past_model exports (not kept, for size); the decoder is "
        "traced for one token per call (BART's causal mask is skipped at length 1), as "
        "generation feeds it",
        f"onnxruntime vs PyTorch, worst |diff| per graph: {worst}",
        "pipeline references: record_florence2.py"]
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    ec.verify_fixture(d)


def main():
    import tempfile

    d = ec.reset_dir(ec.FIXTURES_ROOT / NAME)
    with tempfile.TemporaryDirectory() as work:
        build(d, Path(work))
    print(f"{NAME}: {ec.dir_size(d) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
