"""Tiny Qwen2-VL fixtures ``tests/fixtures/qwen2-vl`` and ``tests/fixtures/qwen2.5-vl``: a random
Qwen2VLForConditionalGeneration shaped as Qwen/Qwen2-VL-2B-Instruct (14-pixel patches over 2
frames, 2 x 2 patch merger, a Qwen2 text model with grouped KV heads and M-RoPE sections), and a
Qwen2_5_VLForConditionalGeneration (the same, with Qwen2.5-VL's windowed vision attention: a
window of 56 pixels here, so the images span several, and its last block attending the whole
image), both tiny, exported as the three graphs transformers.js loads for
onnx-community/Qwen2-VL-2B-Instruct (its ``Qwen2VLForConditionalGeneration``,
models/qwen2_vl/modeling_qwen2_vl.js; Qwen2.5-VL's subclass names the grid ``image_grid_thw``):

- ``onnx/vision_encoder.onnx``: pixel_values [patches, 3 * 2 * 14 * 14], grid_thw (Qwen2.5-VL:
  image_grid_thw) [images, 3] (int64) -> image_features [patches / 4, text hidden]
  (``get_image_features``, all images concatenated);
- ``onnx/embed_tokens.onnx``: input_ids -> inputs_embeds;
- ``onnx/decoder_model_merged.onnx``: inputs_embeds, attention_mask, position_ids [3, batch,
  sequence] (M-RoPE: temporal, height, width), past_key_values.{i}.key/value -> logits,
  present.{i}.key/value (one graph, the past may be empty, no ``use_cache_branch``).

optimum-onnx has no Qwen2-VL export, so this script exports with ``torch.onnx.export``
(TorchScript, ``dynamo=False``) as transformers.js' conversion does. Export-only rewrites, equal
in value (record_qwen2vl.py checks every graph against the unpatched PyTorch model): the vision
tower's per-image Python loops (rotary positions from grid_thw, attention split at cu_seqlens,
Qwen2.5-VL's window reordering) are written over all patches at once in the processor's order,
each patch's (row, column) computed from grid_thw and attention masked to its own frame (or its
own window: the reordering only groups each window's patches for cu_seqlens, and attention with
a mask does not depend on the order); the decoder receives transformers' 4-D additive causal mask
built from attention_mask and the past length (the 2-D mask helpers do not trace).

Tokenizer: a byte-level BPE (Qwen2TokenizerFast) trained on the shared corpus, with Qwen2-VL's
special tokens (<|endoftext|> pad, <|im_start|>, <|im_end|> eos, <|vision_start|>,
<|vision_end|>, <|vision_pad|>, <|image_pad|>, <|video_pad|>) and Qwen2-VL-2B-Instruct's chat
template (CHAT_TEMPLATE, as its tokenizer_config.json has it; not in ../shared/hub-files, copied
from the published template). Images: Qwen2-VL's real patch (14), temporal patch (2) and merge
(2) sizes and CLIP normalisation; max_pixels 28 * 28 * 16, so an image is at most 16 tokens.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_qwen2vl.py [name ...]
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

NAMES = ("qwen2-vl", "qwen2.5-vl")
OPSET = 17
WINDOW = 56  # Qwen2.5-VL's window_size (112 in the real model): 2 x 2 merged patches
PATCH, TEMPORAL, MERGE = 14, 2, 2
LAYERS, HEADS, KV_HEADS, HEAD_DIM = 2, 4, 2, 8
EXPORTER = "torch.onnx.export (TorchScript, dynamo=False), transformers.js layout"
# Qwen2-VL-2B-Instruct's preprocessor_config.json with a tiny max_pixels
PREPROCESSOR = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16, "patch_size": PATCH,
                "temporal_patch_size": TEMPORAL, "merge_size": MERGE,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "image_processor_type": "Qwen2VLImageProcessor",
                "processor_class": "Qwen2VLProcessor"}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# three scikit-image photos, cut and shrunk (Pillow box filter) to small committed PNGs
PHOTOS = [("astronaut", (0, 0, 512, 384), (96, 72)), ("chelsea", (0, 0, 451, 300), (84, 56)),
          ("coffee", (0, 100, 600, 400), (60, 30))]


def tokenizer(work: Path):
    from transformers import Qwen2TokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work / "tok", 600, SPECIAL)
    tok = Qwen2TokenizerFast(vocab_file=str(vocab), merges_file=str(merges),
                             unk_token=None, bos_token=None, eos_token="<|im_end|>",
                             pad_token="<|endoftext|>", model_max_length=32768,
                             clean_up_tokenization_spaces=False, errors="replace")
    tok.add_special_tokens({"additional_special_tokens": ADDED})
    tok.chat_template = CHAT_TEMPLATE
    return tok


def model(tok, name):
    """The seeded torch model of fixture ``name`` (same weights on every call)."""
    import transformers

    ec.seed_everything()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL + ADDED}
    vision = {"depth": 2, "hidden_size": 32, "num_heads": 2, "in_channels": 3,
              "patch_size": PATCH, "spatial_merge_size": MERGE, "temporal_patch_size": TEMPORAL}
    if name == "qwen2-vl":
        config, cls = transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration
        vision.update(embed_dim=32, hidden_act="quick_gelu", mlp_ratio=2)
    else:
        config, cls = (transformers.Qwen2_5_VLConfig,
                       transformers.Qwen2_5_VLForConditionalGeneration)
        vision.update(hidden_act="silu", intermediate_size=64, out_hidden_size=32,
                      window_size=WINDOW, fullatt_block_indexes=[1], tokens_per_second=2)
    text = {"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "hidden_act": "silu",
            "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]},
            "tie_word_embeddings": False, "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"], "initializer_range": families_text.DECODER_INIT}
    cfg = config(text_config=text, vision_config=vision,
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"],
                        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = cfg.text_config._attn_implementation = "eager"
    m = cls(cfg).eval()
    with torch.no_grad():  # the 0.02 init gives near-identical image features
        for p in m.model.visual.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    m.generation_config.update(bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
                               eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]])
    return m


# --- export-only modules -------------------------------------------------------------------------


def patch_layout(grid_thw, n):
    """For each of ``n`` patches (the processor's order): its (row, column) in its image and the
    index of its frame (attention stays inside a frame, as cu_seqlens splits it)."""
    t, h, w = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]
    ends = torch.cumsum(t * h * w, 0)
    at = torch.arange(n, dtype=grid_thw.dtype)
    image = (at[:, None] >= ends[None, :]).sum(1)
    local = at - (ends - t * h * w)[image]
    hw, width = (h * w)[image], w[image]
    frame = image * 65536 + local // hw
    local = local % hw
    block, inside = local // (MERGE * MERGE), local % (MERGE * MERGE)
    cols = width // MERGE
    row = (block // cols) * MERGE + inside // MERGE
    col = (block % cols) * MERGE + inside % MERGE
    return row, col, frame


def _attention_forward(self, hidden_states, cu_seqlens, rotary_pos_emb=None,
                       position_embeddings=None, **kwargs):
    """VisionAttention.forward (eager) over all patches at once, masked to each patch's frame
    (``self._same_frame``), instead of one attention per cu_seqlens chunk."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl as mq

    n = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(n, 3, self.num_heads, -1).permute(1, 0, 2, 3) \
        .unbind(0)
    cos, sin = position_embeddings
    q, k = mq.apply_rotary_pos_emb_vision(q, k, cos, sin)
    q, k, v = (x.transpose(0, 1) for x in (q, k, v))  # [heads, n, head_dim]
    scores = torch.matmul(q, k.transpose(1, 2)) * self.scaling
    scores = scores.masked_fill(~self._same_frame[None], torch.finfo(scores.dtype).min)
    out = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
    return self.proj(out.transpose(0, 1).reshape(n, -1))


class VisionEncoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.visual = m.model.visual

    def forward(self, pixel_values, grid_thw):
        """The vision tower's forward with rot_pos_emb from patch_layout and each block's
        attention masked to its frame (Qwen2.5-VL's windowed blocks: to its window)."""
        visual = self.visual
        states = visual.patch_embed(pixel_values)
        row, col, frame = patch_layout(grid_thw, pixel_values.shape[0])
        inv = visual.rotary_pos_emb.inv_freq
        rotary = torch.cat([row.to(inv.dtype)[:, None] * inv, col.to(inv.dtype)[:, None] * inv], -1)
        emb = torch.cat((rotary, rotary), dim=-1)
        same = frame[:, None] == frame[None, :]
        full = getattr(visual, "fullatt_block_indexes", None)
        if full is not None:  # Qwen2.5-VL: windows of (window_size / patch / merge)^2 merges
            side = visual.window_size // visual.patch_size // MERGE
            window = frame * 4096 + (row // MERGE // side) * 64 + col // MERGE // side
            in_window = window[:, None] == window[None, :]
        for i, blk in enumerate(visual.blocks):
            blk.attn._same_frame = same if full is None or i in full else in_window
            states = blk(states, cu_seqlens=None, position_embeddings=(emb.cos(), emb.sin()))
        return visual.merger(states)


class EmbedTokens(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed = m.model.language_model.embed_tokens

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
        out = self.m.model.language_model(inputs_embeds=inputs_embeds, attention_mask=mask,
                                          position_ids=position_ids, past_key_values=cache,
                                          use_cache=True)
        logits = self.m.lm_head(out.last_hidden_state)
        layers = out.past_key_values.layers
        return (logits, *[t for layer in layers for t in (layer.keys, layer.values)])


def past_names():
    return [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]


def grid_name(name):
    """The vision encoder's grid input, as transformers.js names it per model class."""
    return "grid_thw" if name == "qwen2-vl" else "image_grid_thw"


def export(m, out: Path, name):
    attention = type(m.model.visual.blocks[0].attn)
    out.mkdir(parents=True, exist_ok=True)
    original = attention.forward
    attention.forward = _attention_forward
    try:
        grid = torch.tensor([[1, 4, 6], [1, 2, 2]])
        pv = torch.randn(int(grid.prod(-1).sum()), 3 * TEMPORAL * PATCH * PATCH)
        torch.onnx.export(VisionEncoder(m), (pv, grid), str(out / "vision_encoder.onnx"),
                          input_names=["pixel_values", grid_name(name)],
                          output_names=["image_features"], opset_version=OPSET, dynamo=False,
                          dynamic_axes={"pixel_values": {0: "num_patches"},
                                        grid_name(name): {0: "num_images"},
                                        "image_features": {0: "num_image_tokens"}})
    finally:
        attention.forward = original
    ids = torch.tensor([[1, 5, 9]])
    torch.onnx.export(EmbedTokens(m), (ids,), str(out / "embed_tokens.onnx"),
                      input_names=["input_ids"], output_names=["inputs_embeds"],
                      opset_version=OPSET, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                                    "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})
    emb = torch.randn(2, 3, 32)
    past = [torch.randn(2, KV_HEADS, 4, HEAD_DIM) for _ in past_names()]
    mask = torch.ones(2, 7, dtype=torch.int64)
    pos = torch.tensor([[[4, 5, 6], [4, 5, 6]], [[4, 5, 6], [4, 5, 6]], [[4, 6, 7], [4, 5, 6]]])
    presents = [n.replace("past_key_values", "present") for n in past_names()]
    axes = {"inputs_embeds": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {1: "batch_size", 2: "sequence_length"},
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
    """The PHOTOS as small PNGs in references/ (scikit-image's samples cut and shrunk)."""
    import skimage.data
    from PIL import Image

    paths = []
    for i, (name, (x0, y0, x1, y1), size) in enumerate(PHOTOS):
        photo = np.asarray(getattr(skimage.data, name)())[y0:y1, x0:x1]
        path = d / "references" / f"image_{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo).resize(size, Image.Resampling.BOX).save(path)
        paths.append(path)
    return paths


def references(d: Path, tok, name):
    """onnxruntime outputs of each graph (README's .npz layout)."""
    from PIL import Image
    from transformers import Qwen2VLImageProcessor

    proc = Qwen2VLImageProcessor.from_pretrained(d)
    pics = [Image.open(p).convert("RGB") for p in sorted((d / "references").glob("image_*.png"))]
    feed = proc(images=pics[:2], return_tensors="np")
    onnx_dir = d / "onnx"
    vis = ec.encoder_reference(onnx_dir / "vision_encoder.onnx",
                               {"pixel_values": feed["pixel_values"].astype(np.float32),
                                grid_name(name): feed["image_grid_thw"].astype(np.int64)})
    ec.save_reference(d / "references/vision_encoder.npz", vis)
    first = tok.encode("Hello world! This is")
    ids = np.array([first, first[::-1]])  # two rows of one length
    emb = ec.encoder_reference(onnx_dir / "embed_tokens.onnx", {"input_ids": ids})
    ec.save_reference(d / "references/embed_tokens.npz", emb)
    steps = decoder_steps(onnx_dir / "decoder_model_merged.onnx", emb[0][1]["inputs_embeds"],
                          onnx_dir / "embed_tokens.onnx")
    ec.save_reference(d / "references/decoder_model_merged.npz", steps)


def decoder_steps(path, embeds, embed_path, n_cached=3):
    """The prompt step (empty past, 3-D positions that differ per axis), then ``n_cached``
    greedy steps of one token."""
    sess, embed = ec.ort_session(path), ec.ort_session(embed_path)
    b, s, _ = embeds.shape
    pos = np.broadcast_to(np.arange(s), (3, b, s)).copy()
    pos[1, :, 2:] += 1  # as an image's rows / columns would shift them
    pos[2, :, 3:] += 2
    feeds = {"inputs_embeds": embeds, "attention_mask": np.ones((b, s), np.int64),
             "position_ids": pos}
    feeds.update({n: np.zeros((b, KV_HEADS, 0, HEAD_DIM), np.float32) for n in past_names()})
    steps, nxt = [], int(pos.max()) + 1
    for step in range(n_cached + 1):
        names = [o.name for o in sess.get_outputs()]
        out = dict(zip(names, sess.run(names, feeds)))
        steps.append((dict(feeds), out))
        token = out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        total = feeds["attention_mask"].shape[1]
        feeds = {"inputs_embeds": embed.run(None, {"input_ids": token})[0],
                 "attention_mask": np.ones((b, total + 1), np.int64),
                 "position_ids": np.full((3, b, 1), nxt + step, np.int64)}
        feeds.update({n: out[n.replace("past_key_values", "present")] for n in past_names()})
    return steps


def build(d: Path, work: Path, name):
    tok = tokenizer(work)
    m = model(tok, name)
    tok.save_pretrained(d)
    m.config.save_pretrained(d)
    m.generation_config.save_pretrained(d)
    (d / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    # as the Hub repo: the template in tokenizer_config.json and chat_template.json
    (d / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (d / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2)
                                          + "\n")
    export(m, d / "onnx", name)
    images(d)
    references(d, tok, name)
    graphs = {f"onnx/{g}.onnx": {"reference": f"references/{g}.npz", "static_inputs": []}
              for g in ("vision_encoder", "embed_tokens", "decoder_model_merged")}
    ec.write_manifest(d, name, type(m).__name__, "image-text-to-text", OPSET, graphs,
                      exporter=EXPORTER)
    ec.verify_fixture(d)


def main(names=NAMES):
    import tempfile

    for name in names:
        d = ec.reset_dir(ec.FIXTURES_ROOT / name)
        with tempfile.TemporaryDirectory() as work:
            build(d, Path(work), name)
        print(f"{name}: {ec.dir_size(d) / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:] or NAMES)
