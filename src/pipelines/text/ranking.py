"""text-ranking: documents sorted by a cross-encoder's score, as sentence-transformers'
``CrossEncoder.rank``.

    pipe({"query": "Where is the tower?", "documents": ["...", "..."]}, top_k=2,
         return_documents=True)
    -> [{"corpus_id": 0, "score": 0.93, "text": "..."}, ...]  (best first)

Each (query, document) pair is a row of the batch. The score is the model's one logit through the
activation config.json names (``sentence_transformers.activation_fn``), else sigmoid, as
CrossEncoder does for a one-label model. A causal-LM reranker (Qwen3-Reranker: modules.json's
LogitScore, or a ``*ForCausalLM`` config) renders each pair through its chat template and scores
the last token's "yes" / "no" logits (logit_score.py), prompts truncated at the tokenizer's
model_max_length (not at ``sequence_length``: the decoder pads its prompts itself).
"""

import numpy as np

from ...errors import PipelineError
from ..heads import sigmoid
from .base import TextPipeline, check_text
from .logit_score import LogitScorer, logit_score_config


class TextRankingPipeline(TextPipeline):
    task = "text-ranking"

    def __init__(self, model, config=None, **kwargs):
        config = config or {}
        settings = logit_score_config(kwargs.get("repo"), config)
        labels = len(config.get("id2label") or {}) or config.get("num_labels", 1)
        if labels != 1 and settings is None:
            raise PipelineError(f"text-ranking needs a cross-encoder with one output score; this "
                                f"model has {labels} labels (try text-classification)")
        self.activation = _activation(config, kwargs.get("repo"))
        super().__init__(model, config, **kwargs)
        self.scorer = None if settings is None else LogitScorer(
            model, config, self.repo, self.tokenizer, settings, self.max_length)

    def _sanitize_parameters(self, top_k=None, return_documents=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise PipelineError(f"top_k must be a positive int or None, got {top_k!r}")
        return {}, {}, {"top_k": top_k, "return_documents": return_documents}

    def _is_single(self, inputs):
        return isinstance(inputs, dict)

    def _input_kind(self):
        return 'a {"query": ..., "documents": [...]} dict'

    def preprocess(self, inputs):
        if not isinstance(inputs, dict) or set(inputs) != {"query", "documents"}:
            raise PipelineError('text-ranking takes {"query": str, "documents": [str, ...]}; got '
                                f"{inputs!r:.100}")
        query, documents = check_text(inputs["query"], "query"), inputs["documents"]
        if isinstance(documents, str) or not documents:
            raise PipelineError("documents must be a non-empty list of strings")
        for i, doc in enumerate(documents):
            doc = check_text(doc, f"document {i}")
            yield {**pair_chunk(self, query, doc), "corpus_id": i, "text": doc}

    def feeds_model(self):
        return not self.scorer

    def _forward(self, chunks):
        return scored(self, chunks) if self.scorer else super()._forward(chunks)

    def postprocess(self, outputs, top_k=None, return_documents=False):
        logits = np.array([self.output(o, "logits").reshape(-1)[0] for o in outputs], np.float32)
        scores = self.activation(logits)
        ranked = [{"corpus_id": o["corpus_id"], "score": float(s)}
                  for o, s in zip(outputs, scores)]
        if return_documents:
            for r, o in zip(ranked, outputs):
                r["text"] = o["text"]
        ranked.sort(key=lambda r: r["score"], reverse=True)
        return ranked[:top_k]


def pair_chunk(pipe, text, pair):
    """The chunk of a (query, document) pair: its encoding; for a causal-LM reranker, the
    rendered prompt's ids too (the encoding then only sizes the batch)."""
    if pipe.scorer is None:
        return {"encoding": pipe.tokenizer.encode(text, pair, max_length=pipe.sequence_lengths[-1])}
    ids = pipe.scorer.prompt_ids(text, pair)
    return {"encoding": pipe.tokenizer.encode(text, pair, truncation=False), "prompt_ids": ids}


def scored(pipe, chunks):
    """Chunks with ``logits`` [1]: the causal-LM reranker's LogitScore of each."""
    scores = pipe.scorer.scores([c["prompt_ids"] for c in chunks], pipe._rows(len(chunks)))
    return [dict(c, logits=np.array([s], np.float32)) for c, s in zip(chunks, scores)]


def _activation(config, repo=None):
    """CrossEncoder's activation: config.json's (sentence_transformers.activation_fn), else
    config_sentence_transformers.json's (how sentence-transformers 5 saves a CrossEncoder),
    else sigmoid."""
    saved = repo.json("config_sentence_transformers.json", {}) if repo is not None else {}
    name = ((config.get("sentence_transformers") or {}).get("activation_fn")
            or config.get("sbert_ce_default_activation_function")
            or (saved or {}).get("activation_fn") or "Sigmoid")
    kind = name.rsplit(".", 1)[-1]
    functions = {"Sigmoid": sigmoid, "Identity": lambda x: x, "Tanh": np.tanh}
    if kind not in functions:
        raise PipelineError(f"text-ranking: unsupported activation {name!r} in config.json; "
                            f"known: {', '.join(functions)}")
    return functions[kind]
