"""text-classification (alias sentiment-analysis): transformers' TextClassificationPipeline.

    pipe("I love it")                          -> [{"label": "POSITIVE", "score": 0.99}]
    pipe({"text": "A", "text_pair": "B"})      -> [{"label": ..., "score": ...}]
    pipe(["A", "B"], top_k=None)               -> [[{...} per label, best first], ...]

A causal-LM reranker (ranking.py, logit_score.py) classifies a (text, text_pair) as the
one-label cross-encoder it stands for: LABEL_0, its sentence-transformers CrossEncoder.predict
score (LogitScore through a sigmoid) as the score.
"""

from ...errors import PipelineError
from ..heads import apply, check_function, text_function
from .base import TextPipeline, check_text
from .logit_score import LogitScorer, logit_score_config
from .ranking import pair_chunk, scored


class TextClassificationPipeline(TextPipeline):
    task = "text-classification"

    def __init__(self, model, config=None, **kwargs):
        settings = logit_score_config(kwargs.get("repo"), config)
        self.scorer = None
        if settings is not None:
            config = {**(config or {}), "id2label": {"0": "LABEL_0"}}
            super().__init__(model, config, **kwargs)
            self.scorer = LogitScorer(model, config, self.repo, self.tokenizer, settings,
                                      self.max_length)
            return
        if not (config or {}).get("id2label"):
            raise PipelineError(
                f"{self.task}: the model's config.json has no id2label, so it has no "
                "classification head to name labels with; use a model fine-tuned for "
                "sequence classification (or feature-extraction for this one)")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, top_k="", function_to_apply=None, **unknown):
        super()._sanitize_parameters(**unknown)
        post = {}
        if isinstance(top_k, int) or top_k is None:  # "" (not given) keeps the legacy output
            post.update(top_k=top_k, legacy=False)
        elif top_k != "":
            raise PipelineError(f"top_k must be an int or None, got {top_k!r}")
        if function_to_apply is not None:
            post["function_to_apply"] = check_function(function_to_apply)
        return {}, {}, post

    def _is_single(self, inputs):
        return isinstance(inputs, (str, dict)) or _is_pair(inputs)

    def _input_kind(self):
        return 'a string, a {"text", "text_pair"} dict or a (text, text_pair) tuple'

    def __call__(self, inputs, **kwargs):
        result = super().__call__(inputs, **kwargs)
        # transformers: one string without top_k gives a one-element list
        return [result] if isinstance(inputs, str) and isinstance(result, dict) else result

    def preprocess(self, inputs):
        text, pair = _text_and_pair(inputs)
        if self.scorer is not None:
            if pair is None:
                raise PipelineError("This model is a causal-LM reranker: it classifies a text "
                                    'pair, {"text": query, "text_pair": document}')
            yield pair_chunk(self, check_text(text, "text"), check_text(pair, "text_pair"))
            return
        encoding = self.tokenizer.encode(check_text(text, "text"),
                                         None if pair is None else check_text(pair, "text_pair"),
                                         max_length=self.sequence_lengths[-1])
        yield {"encoding": encoding}

    def feeds_model(self):
        return not self.scorer

    def _forward(self, chunks):
        return scored(self, chunks) if self.scorer else super()._forward(chunks)

    def postprocess(self, outputs, top_k=1, legacy=True, function_to_apply=None):
        logits = self.output(outputs[0], "logits")
        scores = apply(logits, function_to_apply or text_function(self.config))
        if top_k == 1 and legacy:
            return {"label": self.label(scores.argmax()), "score": scores.max().item()}
        ranked = [{"label": self.label(i), "score": s.item()} for i, s in enumerate(scores)]
        if not legacy:
            ranked.sort(key=lambda x: x["score"], reverse=True)
            ranked = ranked if top_k is None else ranked[:top_k]
        return ranked


def _is_pair(inputs):
    return isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(x, str) for x in inputs)


def _text_and_pair(inputs):
    if isinstance(inputs, dict):
        unknown = set(inputs) - {"text", "text_pair"}
        if "text" not in inputs or unknown:
            raise PipelineError('A text pair is a dict {"text": ..., "text_pair": ...}; got keys '
                                f"{sorted(inputs)}")
        return inputs["text"], inputs.get("text_pair")
    if _is_pair(inputs):
        return inputs
    return inputs, None
