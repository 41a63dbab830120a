"""Tiny Idefics3 / SmolVLM fixture ``tests/fixtures/idefics3``: a random
Idefics3ForConditionalGeneration shaped as HuggingFaceTB/SmolVLM-256M-Instruct (SigLIP-style
vision tower, pixel-shuffle connector, a Llama text model with grouped KV heads) but tiny, exported
as the three graphs transformers.js loads (its ``Idefics3ForConditionalGeneration``):

- ``onnx/vision_encoder.onnx``: pixel_values [batch, images, 3, H, W], pixel_attention_mask
  [batch, images, H, W] (bool) -> image_features [real images, image_seq_len, text hidden]
  (``get_image_features``: all-zero padding images dropped, patch mask from the pixel mask);
- ``onnx/embed_tokens.onnx``: input_ids -> inputs_embeds;
- ``onnx/decoder_model_merged.onnx``: inputs_embeds, attention_mask, position_ids,
  past_key_values.{i}.key/value -> logits, present.{i}.key/value (one graph, the past may be
  empty: as onnx-community's files, no ``use_cache_branch``).

optimum-onnx has no Idefics3 export, so this script exports with ``torch.onnx.export``
(TorchScript, ``dynamo=False``) as transformers.js' conversion does. Two export-only rewrites,
equal in value (record_image_text_to_text.py checks every graph against the unpatched PyTorch
model): the vision embeddings' per-image Python loop (bucketized position ids) is written over
all images at once, for the valid-patch rectangle the processor's bottom/right padding leaves;
the decoder receives transformers' 4-D additive causal mask built from attention_mask and the
past length (the 2-D mask helpers do not trace).

Tokenizer: a byte-level BPE (GPT2TokenizerFast, as SmolVLM's) trained on the shared corpus, with
SmolVLM's special tokens: <|endoftext|> 0 (unk), <|im_start|> 1 (bos), <|im_end|> 2 (pad), then
<global-img>, <row_r_col_c> for r, c in 1..6, <fake_token_around_image>, <image>,
<end_of_utterance> (eos) as added tokens; the repo's own chat_template.json. Images: 32-pixel
tiles (``max_image_size``), 8-pixel patches and scale factor 2, so each image is 4 tokens
(``image_seq_len``); ``size`` 96, so an image splits into at most 3 x 3 tiles plus the global one.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_idefics3.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_common as ec  # noqa: E402
import families_text  # noqa: E402

NAME = "idefics3"
HUB = Path(__file__).resolve().parents[3] / "shared/hub-files/HuggingFaceTB/SmolVLM-256M-Instruct"
OPSET = 17
TILE, PATCH, SCALE, LONGEST = 32, 8, 2, 96
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE ** 2
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 8
EXPORTER = "torch.onnx.export (TorchScript, dynamo=False), transformers.js layout"
# SmolVLM-256M's preprocessor_config.json with the tiny tile and resize sizes
PREPROCESSOR = {"do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True,
                "do_pad": True, "do_rescale": True, "do_resize": True,
                "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Idefics3ImageProcessor",
                "image_std": [0.5, 0.5, 0.5], "max_image_size": {"longest_edge": TILE},
                "processor_class": "Idefics3Processor", "resample": 1,
                "rescale_factor": 1 / 255, "size": {"longest_edge": LONGEST}}
ADDED = ["<global-img>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
         "<fake_token_around_image>", "<image>", "<end_of_utterance>"]


def tokenizer(work: Path):
    from transformers import GPT2TokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work / "tok", 600,
                                           ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok = GPT2TokenizerFast(vocab_file=str(vocab), merges_file=str(merges),
                            unk_token="<|endoftext|>", bos_token="<|im_start|>",
                            eos_token="<end_of_utterance>", pad_token="<|im_end|>",
                            add_prefix_space=False, model_max_length=8192)
    tok.add_tokens(ADDED[:-3], special_tokens=True)
    tok.add_special_tokens({"additional_special_tokens": ADDED[-3:]})
    tok.chat_template = json.loads((HUB / "chat_template.json").read_text())["chat_template"]
    return tok


def model(tok):
    """The seeded torch model (same weights on every call)."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    ec.seed_everything()
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "image_size": TILE, "patch_size": PATCH,
              "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
              "max_image_size": {"longest_edge": TILE}, "size": {"longest_edge": LONGEST}}
    text = {"model_type": "llama", "vocab_size": len(tok), "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
            "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu",
            "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 100000,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 2, "initializer_range": families_text.DECODER_INIT}
    cfg = Idefics3Config(vision_config=vision, text_config=text, scale_factor=SCALE,
                         image_token_id=tok.convert_tokens_to_ids("<image>"),
                         tie_word_embeddings=False, pad_token_id=2)
    cfg._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = cfg.text_config._attn_implementation = "eager"
    m = Idefics3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # the vision tower's 0.02 init gives near-identical image features
        for p in m.model.vision_model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for p in m.model.connector.parameters():
            p.add_(torch.randn_like(p) * 0.4)
    m.generation_config.update(bos_token_id=1, eos_token_id=tok.eos_token_id, pad_token_id=2)
    return m


# --- export-only modules -------------------------------------------------------------------------


def _embeddings_forward(self, pixel_values, patch_attention_mask):
    """Idefics3VisionEmbeddings.forward over every image at once (same float ops as its loop)."""
    batch, _, height, width = pixel_values.shape
    embeddings = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
    side = self.num_patches_per_side
    boundaries = torch.arange(1 / side, 1.0, 1 / side, device=pixel_values.device)
    mask = patch_attention_mask
    nb_h = mask[:, :, 0].sum(1).to(pixel_values.dtype)[:, None]
    nb_w = mask[:, 0, :].sum(1).to(pixel_values.dtype)[:, None]
    h = torch.arange(mask.shape[1], dtype=pixel_values.dtype)[None] / nb_h * (1 - 1e-6)
    w = torch.arange(mask.shape[2], dtype=pixel_values.dtype)[None] / nb_w * (1 - 1e-6)
    # bucketize(right=True) = the count of boundaries <= x
    bh = (boundaries[None, None] <= h[..., None]).sum(-1)
    bw = (boundaries[None, None] <= w[..., None]).sum(-1)
    ids = bh[:, :, None] * side + bw[:, None, :]
    ids = torch.where(mask, ids, torch.zeros_like(ids)).reshape(batch, -1)
    return embeddings + self.position_embedding(ids)


class VisionEncoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values, pixel_attention_mask):
        """Idefics3Model.get_image_features with the patch mask summed over a reshape (the
        exporter has no ``unfold`` of a dynamic bool tensor); same values."""
        inner = self.m.model
        b, n, c, h, w = pixel_values.shape
        pixel_values = pixel_values.reshape(b * n, c, h, w)
        real = (pixel_values == 0.0).sum(dim=(-1, -2, -3)) != c * h * w
        pixel_values = pixel_values[real]
        mask = pixel_attention_mask.reshape(b * n, h, w)[real].to(torch.int64)
        p = PATCH
        patches = mask.reshape(-1, h // p, p, w // p, p).sum(dim=(2, 4)) > 0
        states = inner.vision_model(pixel_values=pixel_values, patch_attention_mask=patches)
        return inner.connector(states.last_hidden_state)


class EmbedTokens(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed = m.model.text_model.embed_tokens

    def forward(self, input_ids):
        return self.embed(input_ids)


def causal_mask(attention_mask, query_length, dtype):
    """[B, 1, S, P + S] additive mask: key j is seen by query i when it is real and j <= P + i."""
    keys = attention_mask.shape[1]
    past = keys - query_length
    rows = torch.arange(query_length)[:, None] + past
    cols = torch.arange(keys)[None, :]
    allowed = (cols <= rows)[None, None] & attention_mask[:, None, None, :].bool()
    return torch.where(allowed, torch.zeros((), dtype=dtype),
                       torch.full((), torch.finfo(dtype).min, dtype=dtype))


class Decoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(LAYERS):
            cache.update(past[2 * i], past[2 * i + 1], i)
        mask = causal_mask(attention_mask, inputs_embeds.shape[1], inputs_embeds.dtype)
        out = self.m.model.text_model(inputs_embeds=inputs_embeds, attention_mask=mask,
                                      position_ids=position_ids, past_key_values=cache,
                                      use_cache=True)
        logits = self.m.lm_head(out.last_hidden_state)
        layers = out.past_key_values.layers
        return (logits, *[t for layer in layers for t in (layer.keys, layer.values)])


def past_names():
    return [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]


def export(m, out: Path):
    from transformers.models.idefics3 import modeling_idefics3 as mi

    out.mkdir(parents=True, exist_ok=True)
    original = mi.Idefics3VisionEmbeddings.forward
    mi.Idefics3VisionEmbeddings.forward = _embeddings_forward
    try:
        pv = torch.randn(1, 2, 3, TILE, TILE)
        pm = torch.ones(1, 2, TILE, TILE, dtype=torch.bool)
        torch.onnx.export(VisionEncoder(m), (pv, pm), str(out / "vision_encoder.onnx"),
                          input_names=["pixel_values", "pixel_attention_mask"],
                          output_names=["image_features"], opset_version=OPSET, dynamo=False,
                          dynamic_axes={"pixel_values": {0: "batch_size", 1: "num_images"},
                                        "pixel_attention_mask": {0: "batch_size",
                                                                 1: "num_images"},
                                        "image_features": {0: "image_batch_size"}})
    finally:
        mi.Idefics3VisionEmbeddings.forward = original
    ids = torch.tensor([[1, 5, 9]])
    torch.onnx.export(EmbedTokens(m), (ids,), str(out / "embed_tokens.onnx"),
                      input_names=["input_ids"], output_names=["inputs_embeds"],
                      opset_version=OPSET, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                                    "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})
    emb = torch.randn(2, 3, m.config.text_config.hidden_size)
    past = [torch.randn(2, KV_HEADS, 4, HEAD_DIM) for _ in past_names()]
    mask = torch.ones(2, 7, dtype=torch.int64)
    pos = torch.tensor([[4, 5, 6], [4, 5, 6]])
    presents = [n.replace("past_key_values", "present") for n in past_names()]
    axes = {"inputs_embeds": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    axes.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in past_names()})
    axes.update({n: {0: "batch_size", 2: "total_sequence_length"} for n in presents})
    torch.onnx.export(Decoder(m), (emb, mask, pos, *past), str(out / "decoder_model_merged.onnx"),
                      input_names=["inputs_embeds", "attention_mask", "position_ids",
                                   *past_names()],
                      output_names=["logits", *presents], opset_version=OPSET, dynamo=False,
                      dynamic_axes=axes)


# --- reference inputs ----------------------------------------------------------------------------


def images(d: Path):
    """Two small RGB test images (smooth gradients plus seeded noise), committed as PNGs: 70 x 50
    (splits into 3 x 2 tiles) and 40 x 40 (3 x 3)."""
    from PIL import Image

    rng = np.random.default_rng(17)
    paths = []
    for i, (w, h) in enumerate([(70, 50), (40, 40)]):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], -1)
        pixels = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)
        path = d / "references" / f"image_{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


def references(d: Path, tok):
    """onnxruntime outputs of each graph (README's .npz layout)."""
    from transformers import Idefics3Processor
    from PIL import Image

    proc = Idefics3Processor.from_pretrained(d)
    pics = [Image.open(p) for p in sorted((d / "references").glob("image_*.png"))]
    feed = proc(images=[pics], text=["<image><image>"], return_tensors="np")
    onnx_dir = d / "onnx"
    vis = ec.encoder_reference(onnx_dir / "vision_encoder.onnx",
                               {"pixel_values": feed["pixel_values"].astype(np.float32),
                                "pixel_attention_mask": feed["pixel_attention_mask"].astype(bool)})
    ec.save_reference(d / "references/vision_encoder.npz", vis)
    first = tok.encode("Hello world! This is")
    ids = np.array([first, first[::-1]])  # two rows of one length
    emb = ec.encoder_reference(onnx_dir / "embed_tokens.onnx", {"input_ids": ids})
    ec.save_reference(d / "references/embed_tokens.npz", emb)
    steps = decoder_steps(onnx_dir / "decoder_model_merged.onnx", emb[0][1]["inputs_embeds"],
                          onnx_dir / "embed_tokens.onnx")
    ec.save_reference(d / "references/decoder_model_merged.npz", steps)


def decoder_steps(path, embeds, embed_path, n_cached=3):
    """The prompt step (empty past), then ``n_cached`` greedy steps of one token."""
    sess, embed = ec.ort_session(path), ec.ort_session(embed_path)
    b, s, _ = embeds.shape
    feeds = {"inputs_embeds": embeds, "attention_mask": np.ones((b, s), np.int64),
             "position_ids": np.broadcast_to(np.arange(s), (b, s)).copy()}
    feeds.update({n: np.zeros((b, KV_HEADS, 0, HEAD_DIM), np.float32) for n in past_names()})
    steps = []
    for step in range(n_cached + 1):
        names = [o.name for o in sess.get_outputs()]
        out = dict(zip(names, sess.run(names, feeds)))
        steps.append((dict(feeds), out))
        token = out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        total = feeds["attention_mask"].shape[1]
        feeds = {"inputs_embeds": embed.run(None, {"input_ids": token})[0],
                 "attention_mask": np.ones((b, total + 1), np.int64),
                 "position_ids": np.full((b, 1), total, np.int64)}
        feeds.update({n: out[n.replace("past_key_values", "present")] for n in past_names()})
    return steps


def build(d: Path, work: Path):
    tok = tokenizer(work)
    m = model(tok)
    tok.save_pretrained(d)
    m.config.save_pretrained(d)
    m.generation_config.save_pretrained(d)
    (d / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (d / "processor_config.json").write_text(json.dumps(
        {"image_seq_len": IMAGE_SEQ_LEN, "processor_class": "Idefics3Processor"}, indent=2) + "\n")
    # as the Hub repo: the template in tokenizer_config.json and chat_template.json
    (d / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config["chat_template"] = tok.chat_template
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (d / "chat_template.json").write_text((HUB / "chat_template.json").read_text())
    export(m, d / "onnx")
    images(d)
    references(d, tok)
    graphs = {f"onnx/{g}.onnx": {"reference": f"references/{g}.npz", "static_inputs": []}
              for g in ("vision_encoder", "embed_tokens", "decoder_model_merged")}
    ec.write_manifest(d, NAME, "Idefics3ForConditionalGeneration", "image-text-to-text", OPSET,
                      graphs, exporter=EXPORTER)
    ec.verify_fixture(d)


def main():
    import tempfile

    d = ec.reset_dir(ec.FIXTURES_ROOT / NAME)
    with tempfile.TemporaryDirectory() as work:
        build(d, Path(work))
    print(f"{NAME}: {ec.dir_size(d) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
