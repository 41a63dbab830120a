"""transformers' ``pipeline("image-text-to-text")`` references for the idefics3 fixture
(families_idefics3.py), on the PyTorch model rebuilt with the fixture's own builder (same seed).

First each committed graph is checked against the unpatched PyTorch model on its recorded
reference inputs (vision_encoder vs ``get_image_features``, embed_tokens vs the embedding,
decoder_model_merged vs the text model + lm_head over the recorded pasts): worst difference under
1e-4, else the script stops.

Writes, in the fixture's references/:
- ``processor.npz`` + ``processor.json``: Idefics3Processor's input_ids, pixel_values and
  pixel_attention_mask for each case of PROCESSOR_CASES (chat templates rendered by
  ``apply_chat_template``, prompts by the processor itself);
- ``processor_smolvlm.npz``: the real SmolVLM-256M-Instruct processor
  (../shared/hub-files: its tokenizer, 512-pixel tiles, 2048 longest edge) on image_0 with a
  prompt: input_ids, the pixel_values' shape and every 16th pixel of each row and column (the
  whole array is 40 MB), the pixel_attention_mask's shape and sum;
- ``pipeline_image-text-to-text.json``: ``{"task", "generation_config", "cases": [{"name",
  "images": [paths], "text": chat or prompt, "call_kwargs", "outputs", "token_ids"}]}``, each
  case's ``outputs`` the pipeline's records (images in ``input_text`` replaced by their path) and
  ``token_ids`` generate's whole sequences (``return_tensors=True``, the same call). Sampling is
  not recorded: torch's random draws are not ours.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_image_text_to_text.py
"""

from __future__ import annotations

import copy
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
from PIL import Image  # noqa: E402

import export_common as ec  # noqa: E402
import families_idefics3 as fi  # noqa: E402

TASK = "image-text-to-text"
FX = ec.FIXTURES_ROOT / fi.NAME
IMAGES = ["references/image_0.png", "references/image_1.png"]


def chat(*parts, role="user"):
    content = [{"type": "image"} if p is None else {"type": "text", "text": p} for p in parts]
    return [{"role": role, "content": content}]


ONE = chat(None, "Describe this image.")
TWO = chat(None, "What differs between", None, "these two?")
LONG = chat(None, "Tell me a story about it.") + \
    [{"role": "assistant", "content": [{"type": "text", "text": "Once upon"}]}]
# (name, images, text, call kwargs)
CASES = [
    ("one_image", [0], ONE, {"max_new_tokens": 10}),
    ("two_images", [0, 1], TWO, {"max_new_tokens": 8}),
    ("prompt_split", [1], "<image>A photo of", {"max_new_tokens": 6}),
    ("prompt_no_split", [0], "<image>A photo of", {"max_new_tokens": 6,
                                                  "do_image_splitting": False}),
    ("new_text", [1], ONE, {"max_new_tokens": 5, "return_full_text": False}),
    ("beam", [0], ONE, {"max_new_tokens": 6, "generate_kwargs": {"num_beams": 3}}),
    ("continue_final", [1], LONG, {"max_new_tokens": 5}),
    ("is_cat", [1], chat(None, "Is it a cat?"), {"max_new_tokens": 7}),
]
# (name, images, text, processor kwargs): text a chat (rendered) or a prompt
PROCESSOR_CASES = [
    ("one_split", [0], ONE, {}),
    ("one_square", [1], ONE, {}),
    ("two_split", [0, 1], TWO, {}),
    ("one_no_split", [0], ONE, {"do_image_splitting": False}),
    ("prompt", [1], "<image>A photo of", {}),
]


def load_images(idx):
    return [Image.open(FX / IMAGES[i]).convert("RGB") for i in idx]


def with_images(messages, idx):
    """The chat with each image part given its path (what the test hands our pipeline)."""
    out, it = copy.deepcopy(messages), iter(idx)
    for m in out:
        for part in [] if isinstance(m["content"], str) else m["content"]:
            if part["type"] == "image":
                part["image"] = IMAGES[next(it)]
    return out


def check_graphs(m):
    """Each committed graph against the unpatched PyTorch model (1e-4)."""
    from transformers import DynamicCache

    worst = {}
    with torch.no_grad():
        (ins, outs), = ec.load_reference(FX / "references/vision_encoder.npz")
        got = m.model.get_image_features(torch.from_numpy(ins["pixel_values"]),
                                         torch.from_numpy(ins["pixel_attention_mask"]))
        worst["vision_encoder"] = np.abs(got.numpy() - outs["image_features"]).max()
        (ins, outs), = ec.load_reference(FX / "references/embed_tokens.npz")
        got = m.model.text_model.embed_tokens(torch.from_numpy(ins["input_ids"]))
        worst["embed_tokens"] = np.abs(got.numpy() - outs["inputs_embeds"]).max()
        diffs = []
        for ins, outs in ec.load_reference(FX / "references/decoder_model_merged.npz"):
            cache = DynamicCache()
            for i in range(fi.LAYERS):
                cache.update(torch.from_numpy(ins[f"past_key_values.{i}.key"]),
                             torch.from_numpy(ins[f"past_key_values.{i}.value"]), i)
            past = cache.get_seq_length()
            n = ins["inputs_embeds"].shape[1]
            out = m.model.text_model(inputs_embeds=torch.from_numpy(ins["inputs_embeds"]),
                                     attention_mask=torch.from_numpy(ins["attention_mask"]),
                                     position_ids=torch.from_numpy(ins["position_ids"]),
                                     past_key_values=cache, use_cache=True,
                                     cache_position=torch.arange(past, past + n))
            logits = m.lm_head(out.last_hidden_state).numpy()
            diffs.append(np.abs(logits - outs["logits"]).max())
        worst["decoder_model_merged"] = max(diffs)
    print("graphs vs PyTorch:", {k: float(v) for k, v in worst.items()})
    bad = {k: v for k, v in worst.items() if not v < 1e-4}
    if bad:
        raise SystemExit(f"ONNX graphs differ from PyTorch: {bad}")


def record_processor(proc):
    arrays, meta = {}, []
    for name, idx, text, kwargs in PROCESSOR_CASES:
        if isinstance(text, str):
            feed = proc(images=load_images(idx), text=text, return_tensors="np",
                        images_kwargs=kwargs)
        else:
            rendered = proc.apply_chat_template(text, add_generation_prompt=True)
            feed = proc(images=load_images(idx), text=rendered, return_tensors="np",
                        images_kwargs=kwargs)
        for key in ("input_ids", "pixel_values", "pixel_attention_mask"):
            arrays[f"{name}/{key}"] = np.asarray(feed[key])
        meta.append({"name": name, "images": [IMAGES[i] for i in idx], "text": text,
                     "kwargs": kwargs})
    np.savez_compressed(FX / "references/processor.npz", **arrays)
    (FX / "references/processor.json").write_text(json.dumps(meta, indent=2) + "\n")


REAL_PROMPT = "<image>Can you describe this image?"
REAL_STRIDE = 16


def record_real():
    """The real SmolVLM processor's outputs (its files in ../shared/hub-files)."""
    from transformers import Idefics3Processor

    proc = Idefics3Processor.from_pretrained(fi.HUB)
    feed = proc(images=load_images([0]), text=REAL_PROMPT, return_tensors="np")
    pixels, mask = feed["pixel_values"][0], feed["pixel_attention_mask"][0]
    np.savez_compressed(FX / "references/processor_smolvlm.npz",
                        input_ids=feed["input_ids"][0], pixel_shape=np.array(pixels.shape),
                        pixels=pixels[:, :, ::REAL_STRIDE, ::REAL_STRIDE],
                        mask_shape=np.array(mask.shape), mask_sum=np.array(mask.sum()))


def plain(records, idx):
    """Pipeline records as JSON: the chat's PIL images replaced by their paths."""
    out = []
    for r in records:
        r = dict(r)
        if isinstance(r.get("input_text"), list):
            r["input_text"] = with_images(_strip(r["input_text"]), idx)
        if isinstance(r.get("generated_text"), list):
            r["generated_text"] = with_images(_strip(r["generated_text"]), idx)
        out.append(r)
    return ec.to_jsonable(out)


def _strip(messages):
    return [dict(m, content=m["content"] if isinstance(m["content"], str) else
                 [{k: v for k, v in p.items() if k != "image"} for p in m["content"]])
            for m in messages]


def record_pipeline(m, proc):
    from transformers import pipeline

    pipe = pipeline(TASK, model=m, processor=proc, framework="pt")
    cases = []
    for name, idx, text, kwargs in CASES:
        images = load_images(idx)
        call = dict(kwargs)
        if isinstance(text, str):
            args = {"images": images, "text": text}
        else:  # the images inside the chat, as add_images_to_messages leaves them
            args = {"text": copy.deepcopy(text), "images": images}
        # transformers 4.57 ignores do_image_splitting as a call keyword ("not a valid argument
        # for this processor"): the processor's own setting is switched instead
        proc.image_processor.do_image_splitting = call.pop("do_image_splitting", True)
        # (deep copies: transformers writes max_new_tokens into the generate_kwargs given)
        outputs = pipe(**copy.deepcopy(args), **copy.deepcopy(call))
        call.pop("return_full_text", None)
        tensors = pipe(**copy.deepcopy(args), **copy.deepcopy(call), return_tensors=True)
        proc.image_processor.do_image_splitting = True
        cases.append({"name": name, "images": [IMAGES[i] for i in idx], "text": text,
                      "call_kwargs": kwargs, "outputs": plain(outputs, idx),
                      "token_ids": [ec.to_jsonable(t["generated_token_ids"]) for t in tensors]})
        print(name, cases[-1]["outputs"][0]["generated_text"] if isinstance(
            cases[-1]["outputs"][0]["generated_text"], str) else
            cases[-1]["outputs"][0]["generated_text"][-1]["content"])
    config = {k: getattr(pipe.generation_config, k) for k in
              ("max_new_tokens", "eos_token_id", "pad_token_id", "bos_token_id")}
    record = {"task": TASK, "generation_config": config, "cases": cases}
    (FX / f"references/pipeline_{TASK}.json").write_text(
        json.dumps(ec.to_jsonable(record), indent=1, ensure_ascii=False) + "\n")


def main():
    from transformers import AutoTokenizer, Idefics3Processor

    tok = AutoTokenizer.from_pretrained(FX)
    m = fi.model(tok)
    check_graphs(m)
    proc = Idefics3Processor.from_pretrained(FX)
    record_processor(proc)
    record_real()
    record_pipeline(m, proc)


if __name__ == "__main__":
    main()
