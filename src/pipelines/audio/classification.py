"""audio-classification: transformers' AudioClassificationPipeline (AST, wav2vec2 / HuBERT
classifiers, Whisper-encoder classifiers).

    pipe("dog.wav")                      -> [{"score": 0.91, "label": "Dog"}, ...]  (top 5)
    pipe(clips, top_k=None, function_to_apply="sigmoid")   # every label, multi-label scores
"""

from ...errors import PipelineError
from ..heads import apply, check_function, ranked
from .base import AudioPipeline


class AudioClassificationPipeline(AudioPipeline):
    task = "audio-classification"

    def __init__(self, model, config=None, **kwargs):
        if not (config or {}).get("id2label"):
            raise PipelineError(f"{self.task}: the model's config.json has no id2label, so it has "
                                "no classification head; use a model fine-tuned for it")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, top_k=5, function_to_apply=None, **unknown):
        """As transformers: ``top_k`` 5 unless given; None (or more than there are) means every
        label; scores are a softmax unless ``function_to_apply`` says otherwise (AudioSet
        models are multi-label, yet transformers' default stays softmax)."""
        super()._sanitize_parameters(**unknown)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                  or top_k < 1):
            raise PipelineError(f"top_k must be a positive int or None, got {top_k!r}")
        function = check_function(function_to_apply) or "softmax"
        return {}, {}, {"top_k": top_k, "function": function}

    def postprocess(self, outputs, top_k=5, function="softmax"):
        scores = apply(self.output(outputs[0], "logits"), function)
        # transformers' audio records put the score first
        return [{"score": r["score"], "label": r["label"]} for r in ranked(scores, self.label,
                                                                          top_k)]
