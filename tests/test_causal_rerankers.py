"""Causal-LM rerankers (Qwen3-Reranker's kind): text-ranking and text-classification against
sentence-transformers' CrossEncoder over the same tiny Qwen3 (tests/fixtures/qwen3-reranker,
families_text_seeds.py). The recorded rank / predict outputs are also checked by
test_pipelines_text.test_matches_recorded_pipeline; here: the prompts themselves, the raw
LogitScore, batching, and what is refused."""

import json
import shutil

import numpy as np
import pytest

import transmuter
from transmuter.pipelines import PipelineError

from .fixtures import ROOT

FIXTURE = ROOT / "qwen3-reranker"
# float32 under XLA vs PyTorch's kernels, other summation orders over 2 layers and ~210
# positions: the raw logit differences agree to ~2e-6 (they are O(1) numbers); 1e-4 as the other
# text pipelines.
TOL = 1e-4
# Batched vs alone: the same graph with shorter rows padded behind (masked; causal).
BATCH_TOL = 1e-5


@pytest.fixture(scope="module")
def model():
    return transmuter.load(FIXTURE / "onnx" / "model.onnx")


@pytest.fixture(scope="module")
def prompts():
    return json.loads((FIXTURE / "references" / "rerank_prompts.json").read_text())


@pytest.fixture(scope="module")
def classify(model):
    return transmuter.pipeline("text-classification", model, config=FIXTURE, tokenizer=FIXTURE)


def test_prompt_ids_are_sentence_transformers(model, prompts):
    """The pair renders through the chat template as query/document messages and tokenizes
    exactly as CrossEncoder's Transformer module does; the long document is cut at
    max_length (256) with the template's tail written back over its last tokens."""
    pipe = transmuter.pipeline("text-ranking", model, config=FIXTURE, tokenizer=FIXTURE)
    for (query, document), want in zip(prompts["pairs"], prompts["input_ids"]):
        assert pipe.scorer.prompt_ids(query, document) == want
    assert max(len(ids) for ids in prompts["input_ids"]) == prompts["max_length"]


def test_raw_logit_score(classify, prompts):
    """function_to_apply='none' gives LogitScore itself: logit('yes') - logit('no') at the last
    token, CrossEncoder.predict with an Identity activation."""
    pairs = [{"text": q, "text_pair": d} for q, d in prompts["pairs"]]
    got = [r["score"] for r in classify(pairs, function_to_apply="none")]
    np.testing.assert_allclose(got, prompts["raw_scores"], rtol=0, atol=TOL)


def test_batched_equals_alone(classify, prompts):
    pairs = [{"text": q, "text_pair": d} for q, d in prompts["pairs"]]
    alone = [classify(p)["score"] for p in pairs]
    batched = [r["score"] for r in classify(pairs, batch_size=4)]
    np.testing.assert_allclose(batched, alone, rtol=0, atol=BATCH_TOL)


def _copy(tmp_path, edit_logit_score=None):
    folder = tmp_path / "reranker"
    shutil.copytree(FIXTURE, folder)
    if edit_logit_score is not None:
        path = folder / "1_LogitScore" / "config.json"
        path.write_text(json.dumps(edit_logit_score(json.loads(path.read_text()))))
    return folder


def test_logit_score_of_the_true_token_alone(model, tmp_path, prompts):
    """Without false_token_id the score is the true token's logit: logit(yes) - logit(no)
    from two such models equals the recorded LogitScore (two pairs: each new pipeline
    compiles its prompt shapes again)."""
    def only(token):
        return lambda c: {"true_token_id": c[token], "module_input_name": "causal_logits"}

    raw = {}
    for token in ("true_token_id", "false_token_id"):
        folder = _copy(tmp_path / token, only(token))
        pipe = transmuter.pipeline("text-classification", model, config=folder, tokenizer=folder)
        raw[token] = [pipe({"text": q, "text_pair": d}, function_to_apply="none")["score"]
                      for q, d in prompts["pairs"][:2]]
    diff = np.subtract(raw["true_token_id"], raw["false_token_id"])
    np.testing.assert_allclose(diff, prompts["raw_scores"][:2], rtol=0, atol=TOL)


def test_what_is_refused(classify, tmp_path):
    with pytest.raises(PipelineError, match="text pair"):
        classify("Where is the Eiffel Tower?")
    with pytest.raises(ValueError, match="documents"):
        transmuter.pipeline("text-ranking", FIXTURE)({"query": "q", "documents": []})
    # a causal LM without modules.json is CrossEncoder's default: "yes" / "no", which the plain
    # qwen3 fixture's vocabulary lacks
    with pytest.raises(PipelineError, match="no 'yes' token"):
        transmuter.pipeline("text-ranking", ROOT / "qwen3")
