"""Tiny fixtures of the text model families of issue 19 that the other family scripts lack.

Usage (export environment only; no network, no Hub downloads):

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/families_text_seeds.py
    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/families_text_seeds.py bert-st-dense

    bert-st-dense    a sentence-transformers model: tiny BERT (tests/fixtures/bert's tokenizer),
                     mean Pooling, Dense 32->24 (Tanh, bias; 2_Dense/model.safetensors), Dense
                     24->16 (GELU, no bias; 3_Dense/pytorch_model.bin, torch.save's zip format),
                     Normalize. references/pipeline_text-embedding.json: SentenceTransformer.encode
                     of the folder as saved (and without Normalize: normalize=False).
    qwen3-reranker   a causal-LM reranker as sentence-transformers 5 runs it: tiny Qwen3ForCausalLM
                     (tests/fixtures/qwen3's tokenizer, with "yes" and "no" added), a chat
                     template carrying the query/document roles (Qwen3-Reranker's prompt),
                     modules.json Transformer(text-generation) + LogitScore. onnx/model.onnx as
                     families_text.py exports qwen3 (onnx-community layout). References:
                     CrossEncoder.rank (pipeline_text-ranking.json) and CrossEncoder.predict
                     (pipeline_text-classification.json, one label: LABEL_0).

Every model is built from a transformers config with random weights (``seed_everything``) and
follows tests/support/README.md.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_common as ec  # noqa: E402
import families_text as ft  # noqa: E402

FIXTURES = {}
PEER = "sentence-transformers 5.7.0"


def fixture(name):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


EMBED_TEXTS = [
    "Hello world!",
    "The cat sat on the mat.",
    "My name is Sarah and I live in London, where the weather is often grey.",
]


def _copy_saved(saved: Path, d: Path, names=("modules.json", "sentence_bert_config.json",
                                            "config_sentence_transformers.json")):
    """The sentence-transformers files of a saved model (root JSONs and module folders)."""
    for f in names:
        if (saved / f).exists():
            shutil.copyfile(saved / f, d / f)
    for sub in saved.iterdir():
        if sub.is_dir() and sub.name[:1].isdigit():
            (d / sub.name).mkdir(exist_ok=True)
            for f in sub.iterdir():
                shutil.copyfile(f, d / sub.name / f.name)
            if not any((d / sub.name).iterdir()):
                (d / sub.name / ".keep").write_text("")


@fixture("bert-st-dense")
def build_st_dense(d: Path, work: Path):
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel, BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(str(ec.FIXTURES_ROOT / "bert"))
    ec.seed_everything()
    model = BertModel(ft._bert_config(tok))
    ft.encoder_fixture(d, "bert", model, tok, "feature-extraction")
    st_dir = work / "st"
    model.save_pretrained(st_dir)
    tok.save_pretrained(st_dir)
    body = models.Transformer(str(st_dir), max_seq_length=32)
    dense1 = models.Dense(32, 24, bias=True, activation_function=torch.nn.Tanh())
    dense2 = models.Dense(24, 16, bias=False, activation_function=torch.nn.GELU())
    st = SentenceTransformer(modules=[body, models.Pooling(32, "mean"), dense1, dense2,
                                      models.Normalize()], device="cpu")
    saved = work / "saved"
    st.save(str(saved))
    # the second Dense as older sentence-transformers saved it: pytorch_model.bin
    (saved / "3_Dense" / "model.safetensors").unlink()
    torch.save(dense2.state_dict(), saved / "3_Dense" / "pytorch_model.bin")
    _copy_saved(saved, d, ("modules.json", "sentence_bert_config.json",
                           "config_sentence_transformers.json", "tokenizer_config.json"))
    loaded = SentenceTransformer(str(saved), device="cpu", local_files_only=True)
    assert [type(m).__name__ for m in loaded] == ["Transformer", "Pooling", "Dense", "Dense",
                                                  "Normalize"]
    plain = SentenceTransformer(modules=list(loaded)[:4], device="cpu")
    calls = [
        {"inputs": EMBED_TEXTS, "call_kwargs": {},
         "outputs": list(loaded.encode(EMBED_TEXTS, batch_size=1))},
        {"inputs": EMBED_TEXTS, "call_kwargs": {"normalize": False},
         "outputs": list(plain.encode(EMBED_TEXTS, batch_size=1))},
    ]
    ec.save_pipeline_record(d / "references" / "pipeline_text-embedding.json", "text-embedding",
                            calls, peer=f"{PEER} SentenceTransformer.encode")


RANK_QUERY = "Where is the Eiffel Tower?"
RANK_DOCS = [
    "The Eiffel Tower is in Paris.",
    "Bananas are yellow.",
    "Paris is the capital of France and has a famous tower.",
    # past max_length (256 tokens once rendered; the others ~210): truncated, the template's tail written back
    "The quick brown fox jumps over the lazy dog. " * 6,
]
# Qwen3-Reranker's prompt (its model card's format_instruction / prefix / suffix) as a chat
# template over sentence-transformers' pair roles: the query and the document messages, an
# optional system message as the instruction.
RERANK_TEMPLATE = (
    "{%- set query = messages | selectattr('role', 'eq', 'query') | map(attribute='content') | first -%}"
    "{%- set document = messages | selectattr('role', 'eq', 'document') | map(attribute='content') | first -%}"
    "{%- set system = messages | selectattr('role', 'eq', 'system') | map(attribute='content') | list -%}"
    "{%- set instruction = system[0] if system else "
    "'Given a web search query, retrieve relevant passages that answer the query' -%}"
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: {{ instruction }}\n<Query>: {{ query }}\n<Document>: "
    "{{ document }}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


@fixture("qwen3-reranker")
def build_qwen3_reranker(d: Path, work: Path):
    import json

    import numpy as np
    from sentence_transformers import CrossEncoder
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = ft.qwen_tokenizer(work)
    tok.add_tokens(["yes"])  # "no" is in the trained vocabulary; Qwen's has both as words
    tok.chat_template = RERANK_TEMPLATE
    ec.seed_everything()
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=tok.pad_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), initializer_range=ft.DECODER_INIT,
    )
    model = Qwen3ForCausalLM(cfg).eval()
    ft._save_hub_files(d, model, tok)
    ec.export_optimum(model, tok, "text-generation-with-past", d / "onnx", 18, eager=False,
                      keep={"model.onnx"})
    ids, mask = ft._left_padded(tok, ["Where is the Eiffel Tower?", "Bananas are yellow."])
    ec.save_reference(d / "references" / "model.npz",
                      ec.decoder_reference(d / "onnx" / "model.onnx", ids, mask, n_cached=1))
    ec.write_manifest(d, "qwen3", "Qwen3ForCausalLM", "text-generation-with-past", 18,
                      {"onnx/model.onnx": {"reference": "references/model.npz",
                                           "static_inputs": []}})
    model.save_pretrained(work / "hf")
    tok.save_pretrained(work / "hf")
    ce = CrossEncoder(str(work / "hf"), device="cpu", local_files_only=True, max_length=256)
    assert [type(m).__name__ for m in ce] == ["Transformer", "LogitScore"], list(ce)
    ce.save(str(work / "saved"))
    # transformers 4.57 saves the chat template as chat_template.jinja beside tokenizer_config
    _copy_saved(work / "saved", d, ("modules.json", "sentence_bert_config.json",
                                     "config_sentence_transformers.json", "tokenizer_config.json",
                                     "chat_template.jinja"))
    loaded = CrossEncoder(str(work / "saved"), device="cpu", local_files_only=True)
    query = {"query": RANK_QUERY, "documents": RANK_DOCS}
    calls = [
        {"inputs": [query], "call_kwargs": {},
         "outputs": [loaded.rank(RANK_QUERY, RANK_DOCS, batch_size=1)]},
        {"inputs": [query], "call_kwargs": {"top_k": 2, "return_documents": True},
         "outputs": [loaded.rank(RANK_QUERY, RANK_DOCS, top_k=2, return_documents=True,
                                 batch_size=1)]},
    ]
    ec.save_pipeline_record(d / "references" / "pipeline_text-ranking.json", "text-ranking",
                            calls, peer=f"{PEER} CrossEncoder.rank")
    pairs = [(RANK_QUERY, doc) for doc in RANK_DOCS]
    scores = loaded.predict(pairs, batch_size=1)
    calls = [{"inputs": [{"text": q, "text_pair": p} for q, p in pairs], "call_kwargs": {},
              "outputs": [{"label": "LABEL_0", "score": float(s)} for s in scores]}]
    ec.save_pipeline_record(d / "references" / "pipeline_text-classification.json",
                            "text-classification", calls,
                            peer=f"{PEER} CrossEncoder.predict (sigmoid of LogitScore; the "
                                 "label of a one-label head, as transformers names it)")
    # the prompts CrossEncoder's Transformer module renders and tokenizes: the pipeline's ids
    features = loaded[0].preprocess(pairs)
    rows = [[int(i) for i, m in zip(r, k) if m] for r, k in
            zip(features["input_ids"].tolist(), features["attention_mask"].tolist())]
    (d / "references" / "rerank_prompts.json").write_text(json.dumps(
        {"pairs": pairs, "input_ids": rows, "max_length": 256,
         "raw_scores": np.asarray(loaded.predict(pairs, batch_size=1, activation_fn=
                                                 __import__("torch").nn.Identity())).tolist()},
        indent=1) + "\n")


def build(name: str) -> None:
    d = ec.reset_dir(ec.FIXTURES_ROOT / name)
    with tempfile.TemporaryDirectory() as work:
        FIXTURES[name](d, Path(work))
    ec.verify_fixture(d)


def main(argv: list[str]) -> int:
    return ec.run_fixtures(__file__, FIXTURES, build, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
