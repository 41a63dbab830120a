"""GroupQueryAttention decoders built by onnxruntime-genai's model builder.

Makes tiny random Llama and Qwen3 causal LMs from transformers config classes, saves them (with a
byte-level BPE tokenizer trained here, offline) as Hugging Face folders, runs
``python -m onnxruntime_genai.models.builder`` on them (fp32 and int4, CPU), and lays out the results
the way onnx-community repos are laid out (``onnx/model.onnx``, ``onnx/model_q4.onnx``, config and
tokenizer files at the root). References follow tests/support/README.md.

Runs in the genai environment (transformers 5, onnxruntime-genai): see requirements-genai.txt.

    /work/venvs/genai/bin/python tests/support/families_genai.py [--out tests/fixtures] [--only NAME]
    /work/venvs/genai/bin/python tests/support/families_genai.py --record-beam [--only NAME]

``--record-beam`` rebuilds each fixture's PyTorch model (same config, same seed), checks that it
gives references/generate.json's greedy ids, and writes references/generate_beam.json: greedy and
beam-search ``generate`` ids in record_generation.py's format and cases.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SEED = 1234
ROOT = Path(__file__).resolve().parents[2]

# Shared tiny shape (design.md section 7: hidden 32-64, 2 layers).
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=1024,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=True,
    # Larger than the usual 0.02 so the logits are not flat: greedy decoding then has clear winners
    # and the int4 graph is not decided by ties.
    initializer_range=0.2,
)

# A small corpus for the BPE trainer: fixed text, so the tokenizer is the same on every run.
CORPUS = """
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Transformers run neural networks on text, images and audio. The model reads tokens and writes tokens.
Hello world! How are you today? I am fine, thank you. What is the capital of France? Paris is.
Numbers like 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 are split into digits by some tokenizers.
def main():\n    print("hello")\n    return 0\n\nif __name__ == "__main__":\n    main()
The weather is sunny with a chance of rain in the afternoon; bring an umbrella just in case.
Attention is all you need. Grouped query attention shares key and value heads between query heads.
Rotary position embeddings rotate pairs of channels by an angle that grows with the position.
Once upon a time there was a little robot who wanted to learn how to paint the sky at night.
Water boils at one hundred degrees Celsius at sea level, and freezes at zero degrees.
She sells sea shells by the sea shore; the shells she sells are surely sea shells.
You are a helpful assistant. Answer the question briefly and politely, then stop.
Über café naïve résumé — unicode text, emoji 🙂 and symbols ∑ ∞ ≠ also appear in real data.
""".strip()


def corpus_lines() -> list[str]:
    """CORPUS plus pseudo-words made from syllables by a seeded generator, enough text for the
    trainer to reach its vocabulary size."""
    rng = np.random.default_rng(SEED)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "ve", "zo", "pri", "str", "an", "el", "on", "is",
                 "qu", "th", "ing", "er", "ed", "ly", "ous", "ment", "tion", "pre", "un", "co", "de"]
    words = ["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(400)]
    lines = CORPUS.splitlines() * 3
    for _ in range(300):
        lines.append(" ".join(rng.choice(words, size=12)).capitalize() + ".")
    return lines


# Chat templates imitating the real ones (HuggingFaceTB/SmolLM2-135M-Instruct for the Llama family,
# Qwen3 for the Qwen3 family: system prompt handling, <think> blocks, enable_thinking).
SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named Tiny, trained for tests<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QWEN3_TEMPLATE = """{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if message.role == "user" and not (message.content is string and message.content.startswith('<tool_response>')) %}
        {%- if ns.last_query_index == messages|length - 1 %}{%- set ns.last_query_index = index %}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _special(content, special=True):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}


def _tok_entry(content):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


FAMILIES = {
    # SmolLM2-style Llama (HuggingFaceTB/SmolLM2-135M-Instruct): specials first, GPT2-style
    # pre-tokenizer (digits split), bos = <|im_start|>, eos = pad = <|im_end|>.
    "llama-gqa": dict(
        model_type="llama", architecture="LlamaForCausalLM", config_class="LlamaConfig",
        config_extra=dict(attention_bias=False, mlp_bias=False, rope_theta=100000.0, pretraining_tp=1),
        style="smollm",
    ),
    # Qwen3 (Qwen/Qwen3-0.6B): q_norm/k_norm, specials after the BPE vocabulary, no bos,
    # eos = <|im_end|>, pad = <|endoftext|>.
    "qwen3-gqa": dict(
        model_type="qwen3", architecture="Qwen3ForCausalLM", config_class="Qwen3Config",
        config_extra=dict(attention_bias=False, rope_theta=1000000.0, use_sliding_window=False,
                          sliding_window=None, max_window_layers=2),
        style="qwen3",
    ),
}


# ----------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(style: str, out: Path) -> dict:
    """Trains a byte-level BPE tokenizer and writes tokenizer.json, tokenizer_config.json and
    special_tokens_map.json into ``out``. Returns the special token ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if style == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus_lines(), trainer=trainer)
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        trainer = trainers.BpeTrainer(vocab_size=990, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus_lines(), trainer=trainer)
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.add_special_tokens(specials)
        tok.add_tokens(["<tool_call>", "</tool_call>", "<think>", "</think>"])
    tok.save(str(out / "tokenizer.json"))

    # Reload through json to get the ids the file really has.
    data = json.loads((out / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in data["added_tokens"]}
    added_decoder = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                       "single_word", "special")}
                     for t in data["added_tokens"]}
    if style == "smollm":
        cfg = {
            "add_prefix_space": False,
            "added_tokens_decoder": added_decoder,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": "<|im_start|>",
            "chat_template": SMOLLM_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>",
            "model_max_length": 256,
            "pad_token": "<|im_end|>",
            "tokenizer_class": "GPT2Tokenizer",
            "unk_token": "<|endoftext|>",
            "vocab_size": len(tok.get_vocab()),
        }
        stm = {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
               "bos_token": _tok_entry("<|im_start|>"), "eos_token": _tok_entry("<|im_end|>"),
               "pad_token": _tok_entry("<|im_end|>"), "unk_token": _tok_entry("<|endoftext|>")}
        special_ids = dict(bos=ids["<|im_start|>"], eos=ids["<|im_end|>"], pad=ids["<|im_end|>"])
    else:
        cfg = {
            "add_bos_token": False,
            "add_prefix_space": False,
            "added_tokens_decoder": added_decoder,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": None,
            "chat_template": QWEN3_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>",
            "errors": "replace",
            "model_max_length": 256,
            "pad_token": "<|endoftext|>",
            "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        }
        stm = {"additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
               "eos_token": _tok_entry("<|im_end|>"), "pad_token": _tok_entry("<|endoftext|>")}
        special_ids = dict(bos=ids["<|endoftext|>"], eos=[ids["<|im_end|>"], ids["<|endoftext|>"]],
                           pad=ids["<|endoftext|>"])
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(stm, indent=2, ensure_ascii=False) + "\n")
    return special_ids


# ----------------------------------------------------------------------------------------------
# Torch model


def make_hf_folder(name: str, hf_dir: Path):
    """Writes a tiny random model of family ``name`` as a Hugging Face folder. Returns the model."""
    import torch
    import transformers

    fam = FAMILIES[name]
    hf_dir.mkdir(parents=True, exist_ok=True)
    ids = train_tokenizer(fam["style"], hf_dir)
    config_cls = getattr(transformers, fam["config_class"])
    config = config_cls(**TINY, **fam["config_extra"], bos_token_id=ids["bos"],
                        eos_token_id=ids["eos"] if fam["style"] == "smollm" else ids["eos"][0],
                        pad_token_id=ids["pad"], use_cache=True)
    config.architectures = [fam["architecture"]]
    torch.manual_seed(SEED)
    model = getattr(transformers, fam["architecture"])(config).eval()
    # Norm weights start at exactly 1; randomize them so a missing norm scale would show.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model.save_pretrained(hf_dir, safe_serialization=True)
    if fam["style"] == "smollm":
        gen = {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"], "pad_token_id": ids["pad"]}
    else:
        gen = {"bos_token_id": ids["bos"], "do_sample": True, "eos_token_id": ids["eos"],
               "pad_token_id": ids["pad"], "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    gen["transformers_version"] = transformers.__version__
    (hf_dir / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return model, ids


# ----------------------------------------------------------------------------------------------
# Builder


def run_builder(hf_dir: Path, out_dir: Path, precision: str, cache_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out_dir),
           "-p", precision, "-e", "cpu", "-c", str(cache_dir)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return ["python", "-m", "onnxruntime_genai.models.builder", "-i", "<hf folder>", "-o", "<out>",
            "-p", precision, "-e", "cpu"]


def inline_model(src: Path, dst: Path):
    """Saves the builder's model.onnx (+ model.onnx.data) as one self-contained file."""
    import onnx

    model = onnx.load(str(src), load_external_data=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(dst), save_as_external_data=False)


def describe_graph(path: Path) -> dict:
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    ops = sorted({(n.domain + "." if n.domain not in ("", "ai.onnx") else "") + n.op_type
                  for n in model.graph.node})

    def io(values):
        return {v.name: {"dtype": helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
                         "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]}
                for v in values}

    attrs = {}
    for n in model.graph.node:
        if n.domain == "com.microsoft" and n.op_type not in attrs:
            attrs[n.op_type] = {a.name: _jsonable(helper.get_attribute_value(a)) for a in n.attribute}
    for n in model.graph.node:
        if n.op_type == "SimplifiedLayerNormalization" and n.op_type not in attrs:
            attrs[n.op_type] = {a.name: _jsonable(helper.get_attribute_value(a)) for a in n.attribute}
    return {
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "ops": ops,
        "op_attributes": attrs,
        "inputs": io(model.graph.input),
        "outputs": io(model.graph.output),
    }


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, float):
        return float(np.float32(v))
    return v


# ----------------------------------------------------------------------------------------------
# References


def ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _empty_past(sess, batch: int) -> dict:
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            past[i.name] = np.zeros((batch, TINY["num_key_value_heads"], 0, TINY["head_dim"]), np.float32)
    return past


def record_steps(sess, prompts: list[list[int]], pad_id: int, n_kv_steps: int) -> tuple[dict, list]:
    """Prompt step on a right-padded batch, then ``n_kv_steps`` one-token steps feeding each row's
    greedy token. GroupQueryAttention reads attention_mask only through its row sums (seqlens_k =
    sum - 1, total_sequence_length = its width): each row's keys/values sit at the front of the cache,
    so prompts are right-padded and the mask has ones at the front of each row."""
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = np.full((batch, width), pad_id, np.int64)
    mask = np.zeros((batch, width), np.int64)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = p
        mask[b, : len(p)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, **_empty_past(sess, batch)}
    names = [o.name for o in sess.get_outputs()]
    arrays, tokens = {}, []
    lengths = mask.sum(1)
    for step in range(n_kv_steps + 1):
        outs = dict(zip(names, sess.run(None, feeds)))
        for k, v in feeds.items():
            arrays[f"{step}/in/{k}"] = v
        for k, v in outs.items():
            arrays[f"{step}/out/{k}"] = v
        last = outs["logits"][np.arange(batch), lengths - 1 if step == 0 else 0]
        nxt = last.argmax(-1)
        tokens.append(nxt.tolist())
        lengths = lengths + 1
        mask = (np.arange(feeds["attention_mask"].shape[1] + 1)[None, :] < lengths[:, None]).astype(np.int64)
        feeds = {"input_ids": nxt[:, None].astype(np.int64), "attention_mask": mask}
        feeds.update({k.replace("present.", "past_key_values."): v for k, v in outs.items()
                      if k.startswith("present.")})
    return arrays, tokens


def torch_step_check(model, prompts: list[list[int]], tokens: list, arrays: dict) -> float:
    """Max |ORT - torch| over the real (unpadded) positions of every recorded step."""
    import torch

    worst = 0.0
    for b, p in enumerate(prompts):
        seq = list(p) + [t[b] for t in tokens[:-1]]
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0].numpy()
        worst = max(worst, float(np.abs(arrays["0/out/logits"][b, : len(p)] - logits[: len(p)]).max()))
        for step in range(1, len(tokens)):
            ref = arrays[f"{step}/out/logits"][b, 0]
            worst = max(worst, float(np.abs(ref - logits[len(p) + step - 1]).max()))
    return worst


def ort_greedy(sess, prompt: list[int], n_new: int, eos: list[int]) -> list[int]:
    ids = np.array([prompt], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), **_empty_past(sess, 1)}
    names = [o.name for o in sess.get_outputs()]
    out = []
    for _ in range(n_new):
        outs = dict(zip(names, sess.run(None, feeds)))
        tok = int(outs["logits"][0, -1].argmax())
        out.append(tok)
        if tok in eos:
            break
        width = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": np.array([[tok]], np.int64), "attention_mask": np.ones((1, width), np.int64)}
        feeds.update({k.replace("present.", "past_key_values."): v for k, v in outs.items()
                      if k.startswith("present.")})
    return out


def genai_greedy(builder_out: Path, prompt: list[int], n_new: int) -> list[int] | None:
    """The same greedy run through onnxruntime-genai's own generator (on the builder's folder)."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        return None
    model = og.Model(str(builder_out))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + n_new)
    gen = og.Generator(model, params)
    gen.append_tokens(prompt)
    while not gen.is_done():
        gen.generate_next_token()
    return [int(t) for t in gen.get_sequence(0)[len(prompt):]]


# ----------------------------------------------------------------------------------------------
# Fixture


CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PLAIN_PROMPT = "The quick brown fox"
N_KV_STEPS = 4
N_NEW = 12


def build_fixture(name: str, dest: Path, work: Path):
    import onnxruntime
    import onnxruntime_genai
    import torch
    import transformers

    fam = FAMILIES[name]
    hf_dir = work / "hf"
    model, ids = make_hf_folder(name, hf_dir)
    tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    chat_text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    chat_ids = tok(chat_text, add_special_tokens=False)["input_ids"]
    plain_ids = tok(PLAIN_PROMPT, add_special_tokens=False)["input_ids"]
    eos = ids["eos"] if isinstance(ids["eos"], list) else [ids["eos"]]

    if dest.exists():
        shutil.rmtree(dest)
    (dest / "onnx").mkdir(parents=True)
    (dest / "references").mkdir()
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json"):
        shutil.copy(hf_dir / f, dest / f)

    graphs, generate = {}, {
        "prompt_messages": CHAT, "prompt_text": chat_text, "prompt_ids": chat_ids,
        "max_new_tokens": N_NEW, "eos_token_id": eos,
    }
    with torch.no_grad():
        hf_out = model.generate(torch.tensor([chat_ids]), attention_mask=torch.ones(1, len(chat_ids), dtype=torch.long),
                                do_sample=False, max_new_tokens=N_NEW)
    generate["transformers"] = hf_out[0, len(chat_ids):].tolist()

    for precision, fname in (("fp32", "model.onnx"), ("int4", "model_q4.onnx")):
        out = work / f"out-{precision}"
        cmd = run_builder(hf_dir, out, precision, work / "cache")
        inline_model(out / "model.onnx", dest / "onnx" / fname)
        sess = ort_session(dest / "onnx" / fname)
        prompts = [chat_ids, plain_ids]
        arrays, tokens = record_steps(sess, prompts, ids["pad"], N_KV_STEPS)
        stem = fname[: -len(".onnx")]
        np.savez_compressed(dest / "references" / f"{stem}.npz", **arrays)
        desc = describe_graph(dest / "onnx" / fname)
        graphs[f"onnx/{fname}"] = {
            "reference": f"references/{stem}.npz",
            "static_inputs": [],
            "precision": precision,
            "builder_command": " ".join(cmd),
            "steps": N_KV_STEPS + 1,
            "prompt_lengths": [len(p) for p in prompts],
            "torch_max_abs_diff": torch_step_check(model, prompts, tokens, arrays),
            **desc,
        }
        generate[f"onnxruntime_{precision}"] = ort_greedy(sess, chat_ids, N_NEW, eos)
        generate[f"onnxruntime_genai_{precision}"] = genai_greedy(out, chat_ids, N_NEW)
        print(f"  {name} {fname}: ops {desc['ops']}  torch diff {graphs[f'onnx/{fname}']['torch_max_abs_diff']:.2e}")

    (dest / "references" / "generate.json").write_text(json.dumps(generate, indent=2, ensure_ascii=False) + "\n")
    all_ops = sorted({op for g in graphs.values() for op in g["ops"]})
    manifest = {
        "family": fam["model_type"],
        "architecture": fam["architecture"],
        "exporter": f"onnxruntime-genai {onnxruntime_genai.__version__} model builder",
        "opset": graphs["onnx/model.onnx"]["opset"]["ai.onnx"],
        "task": "text-generation",
        "graphs": graphs,
        "ops": all_ops,
        "padding_side": "right",
        "notes": [
            "GroupQueryAttention uses attention_mask only through its row sums: seqlens_k = sum(mask) - 1, "
            "total_sequence_length = mask width. Each row's keys/values sit at the front of the cache, so "
            "prompts are right-padded; in KV steps the mask has sum(mask) ones at the front of each row.",
            "present.* positions past a row's valid length are zeros in onnxruntime's output.",
            "No position_ids input: GroupQueryAttention applies rotary embeddings (do_rotary=1) itself, "
            "positions derived from seqlens_k.",
            "The builder writes model.onnx + model.onnx.data; here each graph is saved as one file.",
            "config.json and generation_config.json are written by transformers "
            f"{transformers.__version__} (rope_parameters, dtype).",
            "generate.json: greedy ids for the chat prompt from transformers generate() on the torch "
            "model and from onnxruntime (and onnxruntime-genai's generator) on each graph; int4 may differ.",
        ],
        "versions": {"onnxruntime": onnxruntime.__version__, "onnxruntime-genai": onnxruntime_genai.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
        "seed": SEED,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------
# Beam references


def record_beam(name: str, dest: Path, work: Path):
    """generate_beam.json for the fixture at ``dest`` from its rebuilt torch model. The cases are
    record_generation.py's; the generation config is the fixture's generation_config.json (as the
    pipeline reads it: qwen3's two eos ids), do_sample off."""
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import record_generation as rg

    model, _ = make_hf_folder(name, work / "hf")
    ref = json.loads((dest / "references" / "generate.json").read_text())
    chat_ids = ref["prompt_ids"]
    with torch.no_grad():  # the call build_fixture recorded, on the model's own defaults
        again = model.generate(torch.tensor([chat_ids]), attention_mask=torch.ones(1, len(chat_ids), dtype=torch.long),
                               do_sample=False, max_new_tokens=ref["max_new_tokens"])
    if again[0, len(chat_ids):].tolist() != ref["transformers"]:
        raise SystemExit(f"{name}: the rebuilt model does not reproduce generate.json's greedy ids")
    model.generation_config = transformers.GenerationConfig.from_pretrained(str(dest))
    tok = transformers.AutoTokenizer.from_pretrained(str(dest))
    prompts = [(ref["prompt_text"], chat_ids), (PLAIN_PROMPT, tok(PLAIN_PROMPT, add_special_tokens=False)["input_ids"])]
    cases = []
    with torch.no_grad():
        for text, ids in prompts:
            x = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
            greedy_new = model.generate(**x, max_new_tokens=rg.NEW, do_sample=False)[0, len(ids):].tolist()
            for kwargs in rg._cases(tok, "decoder", greedy_new):
                res = model.generate(**x, **kwargs, return_dict_in_generate=True, output_scores=True)
                case = {"prompt": text, "prompt_ids": ids, "kwargs": kwargs,
                        "sequences": [s[len(ids):].tolist() for s in res.sequences]}
                if getattr(res, "sequences_scores", None) is not None:
                    case["sequence_scores"] = res.sequences_scores.tolist()
                cases.append(case)
    out = {"generator": "tests/support/families_genai.py --record-beam",
           "transformers": transformers.__version__, "cases": cases}
    path = dest / "references" / "generate_beam.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{name}: {len(cases)} cases -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures")
    ap.add_argument("--only", action="append", choices=sorted(FAMILIES))
    ap.add_argument("--record-beam", action="store_true",
                    help="only record references/generate_beam.json for the existing fixtures")
    args = ap.parse_args()
    for name in args.only or FAMILIES:
        print(f"{'recording beams for' if args.record_beam else 'building'} {name}")
        with tempfile.TemporaryDirectory(prefix=f"genai-{name}-") as work:
            if args.record_beam:
                record_beam(name, args.out / name, Path(work))
            else:
                build_fixture(name, args.out / name, Path(work))


if __name__ == "__main__":
    main()
