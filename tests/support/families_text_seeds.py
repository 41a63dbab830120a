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


def build(name: str) -> None:
    d = ec.reset_dir(ec.FIXTURES_ROOT / name)
    with tempfile.TemporaryDirectory() as work:
        FIXTURES[name](d, Path(work))
    ec.verify_fixture(d)


def main(argv: list[str]) -> int:
    return ec.run_fixtures(__file__, FIXTURES, build, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
