"""text-ranking: documents sorted by a cross-encoder's score, as sentence-transformers'
``CrossEncoder.rank``.

    pipe({"query": "Where is the tower?", "documents": ["...", "..."]}, top_k=2,
         return_documents=True)
    -> [{"corpus_id": 0, "score": 0.93, "text": "..."}, ...]  (best first)

Each (query, document) pair is a row of the batch. The score is the model's one logit through the
activation config.json names (``sentence_transformers.activation_fn``), else sigmoid, as
CrossEncoder does for a one-label model.
"""

import numpy as np

from ..base import PipelineError
from ..heads import sigmoid
from .base import TextPipeline, check_text


class TextRankingPipeline(TextPipeline):
    task = "text-ranking"

    def __init__(self, model, config=None, **kwargs):
        config = config or {}
        labels = len(config.get("id2label") or {}) or config.get("num_labels", 1)
        if labels != 1:
            raise PipelineError(f"text-ranking needs a cross-encoder with one output score; this "
                                f"model has {labels} labels (try text-classification)")
        self.activation = _activation(config)
        super().__init__(model, config, **kwargs)

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
            enc = self.tokenizer.encode(query, check_text(doc, f"document {i}"),
                                        max_length=self.sequence_lengths[-1])
            yield {"encoding": enc, "corpus_id": i, "text": doc}

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


def _activation(config):
    name = ((config.get("sentence_transformers") or {}).get("activation_fn")
            or config.get("sbert_ce_default_activation_function") or "Sigmoid")
    kind = name.rsplit(".", 1)[-1]
    functions = {"Sigmoid": sigmoid, "Identity": lambda x: x, "Tanh": np.tanh}
    if kind not in functions:
        raise PipelineError(f"text-ranking: unsupported activation {name!r} in config.json; "
                            f"known: {', '.join(functions)}")
    return functions[kind]
