"""image-classification: transformers' ImageClassificationPipeline.

    pipe("cat.jpg")                      -> [{"label": "tabby", "score": 0.91}, ...]  (top 5)
    pipe(["a.jpg", "b.jpg"], top_k=1)    -> [[{...}], [{...}]]
"""

from ...errors import PipelineError
from ..heads import apply, check_function, image_function, ranked
from .base import VisionPipeline


class ImageClassificationPipeline(VisionPipeline):
    task = "image-classification"

    def __init__(self, model, config=None, **kwargs):
        if not (config or {}).get("id2label"):
            raise PipelineError(f"{self.task}: the model's config.json has no id2label, so it has "
                                "no classification head; use a model fine-tuned for it (or "
                                "image-feature-extraction for this one)")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, top_k=5, function_to_apply=None, **unknown):
        super()._sanitize_parameters(**unknown)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                  or top_k < 1):
            raise PipelineError(f"top_k must be a positive int or None, got {top_k!r}")
        return {}, {}, {"top_k": top_k, "function_to_apply": check_function(function_to_apply)}

    def postprocess(self, outputs, top_k=5, function_to_apply=None):
        scores = apply(self.output(outputs[0], "logits"),
                       function_to_apply or image_function(self.config))
        return ranked(scores, self.label, top_k)
