"""A tiny Gemma 3 decoder (Gemma3ForCausalLM: sliding and full attention layers, two RoPE thetas,
q/k norms, four norms a layer) exported by onnxruntime-genai's model builder with full-length
caches, the layout of onnx-community's GroupQueryAttention Gemma 3 repos: ``onnx/model.onnx``
(input_ids, attention_mask, past_key_values.*; GroupQueryAttention with ``local_window_size`` on
the sliding layers and rotary inside the op), config and tokenizer files at the root.

Environment: the export venv (transformers 4.57.6 builds and runs the torch model) plus the
builder, which needs transformers 5, in a separate folder put first on the builder's PYTHONPATH
only (the export venv stays as it is):

    /root/.cache/transmuter-tests/venv-export/bin/pip install --target /tmp/genai_pkgs \\
        onnxruntime-genai==0.18.0 transformers==5.24.0 huggingface_hub==2.4.0 tokenizers==0.23.3
    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/families_gemma3.py \\
        [--genai /tmp/genai_pkgs]

Two builder details: 0.18 reads ``config.rope_theta`` and flat ``rope_parameters`` while
transformers 5 nests them per layer type (without a flat rope_theta the global layers got
theta 10000: flattened here before the builder reads the config), and by default it gives the
sliding layers window-sized ring caches (``sliding_window_cache=1``, a cache at least the window
long from the first call), which ``windowed_kv_cache=false`` turns off: full caches, as the
onnx-community exports have.

References: ``references/model.npz`` (onnxruntime steps, right-padded prompts, as
families_genai.py records them) and ``references/generate.json`` (greedy ids of transformers'
``generate`` on the torch model and of onnxruntime on the graph, for a chat prompt and a prompt
three windows long).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_common as ec  # noqa: E402
import families_genai as fg  # noqa: E402
import families_text as ft  # noqa: E402

NAME = "gemma3-gqa"
WINDOW = 8
N_NEW = 12
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
LONG_PROMPT = "The quick brown fox jumps over the lazy dog."
# Runs the builder with Gemma3Model's rope_parameters flattened (see the module docstring).
BUILDER = """
import os, runpy, sys
import onnxruntime_genai.models as models
sys.path.insert(0, os.path.dirname(models.__file__))  # the builder imports "builders" itself
from builders import base
original = base.Model.__init__
def init(self, config, *args, **kwargs):
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict) and "full_attention" in rope:
        config.rope_local_base_freq = rope["sliding_attention"]["rope_theta"]
        config.rope_theta = rope["full_attention"]["rope_theta"]
        config.rope_parameters = dict(rope["full_attention"])
    return original(self, config, *args, **kwargs)
base.Model.__init__ = init
sys.argv = ["builder"] + sys.argv[1:]
runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
"""
BUILDER_COMMAND = ["python", "-m", "onnxruntime_genai.models.builder", "-i", "<hf folder>", "-o",
                   "<out>", "-p", "fp32", "-e", "cpu", "--extra_options", "windowed_kv_cache=false"]


def make_model(tok):
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        sliding_window=WINDOW, layer_types=["sliding_attention", "sliding_attention",
                                            "full_attention"],
        rope_theta=1000000.0, rope_local_base_freq=10000.0, query_pre_attn_scalar=16,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        # small weights, random norm scales (Gemma's norms scale by 1 + w): varied greedy text
        initializer_range=0.05, tie_word_embeddings=True)
    ec.seed_everything()
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.5 * torch.randn_like(p))
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def build(d: Path, work: Path, genai: str):
    import onnx
    import torch

    tok = ft.qwen_tokenizer(work)
    model = make_model(tok)
    hf = work / "hf"
    model.config.architectures = ["Gemma3ForCausalLM"]
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    env = dict(os.environ, PYTHONPATH=genai)
    subprocess.run([sys.executable, "-c", BUILDER, "-i", str(hf), "-o", str(work / "out"), "-p",
                    "fp32", "-e", "cpu", "-c", str(work / "cache"), "--extra_options",
                    "windowed_kv_cache=false"], check=True, env=env, stdout=subprocess.DEVNULL)
    ft._save_hub_files(d, model, tok, generation=True)
    (d / "onnx").mkdir()
    graph = onnx.load(str(work / "out" / "model.onnx"), load_external_data=True)
    onnx.save_model(graph, str(d / "onnx" / "model.onnx"), save_as_external_data=False)

    sess = fg.ort_session(d / "onnx" / "model.onnx")
    chat_text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    chat_ids = tok(chat_text, add_special_tokens=False)["input_ids"]
    long_ids = tok(LONG_PROMPT, add_special_tokens=False)["input_ids"]
    arrays, _ = fg.record_steps(sess, [chat_ids, long_ids], tok.pad_token_id, 4)
    ec._write_npz(d / "references" / "model.npz", arrays)
    eos = [tok.convert_tokens_to_ids("<|im_end|>")]
    cases = []
    for prompt in (chat_ids, long_ids):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=N_NEW, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tok.pad_token_id)
        theirs = out[0, len(prompt):].tolist()
        ours = fg.ort_greedy(sess, prompt, N_NEW, eos)
        assert theirs == ours, (theirs, ours)
        cases.append({"prompt_ids": prompt, "transformers": theirs, "onnxruntime_fp32": ours})
    record = {"prompt_messages": CHAT, "prompt_text": chat_text, "long_prompt": LONG_PROMPT,
              "max_new_tokens": N_NEW, "eos_token_id": eos, "window": WINDOW, "cases": cases}
    (d / "references" / "generate.json").write_text(json.dumps(record, indent=1) + "\n")
    ec.write_manifest(d, "gemma3_text", "Gemma3ForCausalLM", "text-generation", 21,
                      {"onnx/model.onnx": {"reference": "references/model.npz",
                                           "static_inputs": [],
                                           "builder_command": " ".join(BUILDER_COMMAND)}},
                      exporter="onnxruntime-genai 0.18.0 model builder")


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--genai", default="/tmp/genai_pkgs")
    args = parser.parse_args(argv)
    d = ec.reset_dir(ec.FIXTURES_ROOT / NAME)
    (d / "references").mkdir()
    with tempfile.TemporaryDirectory() as work:
        build(d, Path(work), args.genai)
    # not ec.verify_fixture: onnx.checker knows no SimplifiedLayerNormalization (an ORT-only
    # op in the default domain, as every genai builder graph has); rerun the steps instead
    sess = fg.ort_session(d / "onnx" / "model.onnx")
    for ins, outs in ec.load_reference(d / "references" / "model.npz"):
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, ins)))
        assert all((got[k] == v).all() for k, v in outs.items()), "steps not reproduced"
    print(f"{NAME}: {ec.dir_size(d) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
