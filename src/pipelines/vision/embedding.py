"""image-feature-extraction (transformers' ImageFeatureExtractionPipeline) and image-embedding
(ours: one vector per image).

    features = transmuter.pipeline("image-feature-extraction", "Xenova/dinov2-small")
    features("cat.jpg")              -> [[[float] * hidden] * tokens]   (a batch of one, as transformers)
    features("cat.jpg", pool=True)   -> [[float] * hidden]              (the pooler output)
    embed = transmuter.pipeline("image-embedding", "Xenova/clip-vit-base-patch32")  # vision_model.onnx
    embed("cat.jpg")                 -> float32 [dim]
"""

import numpy as np

from ...errors import PipelineError
from .base import VisionPipeline

# image-embedding: the first output present, in this order
EMBEDDING_OUTPUTS = ("image_embeds", "pooler_output")


class ImageFeatureExtractionPipeline(VisionPipeline):
    task = "image-feature-extraction"

    def _sanitize_parameters(self, pool=False, return_tensors=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if pool and "pooler_output" not in {v.name for v in self.model.outputs}:
            raise PipelineError("pool=True needs a pooler_output, which this model does not give "
                                "(it has no pooler layer); use the hidden states (pool=False)")
        return {}, {}, {"pool": bool(pool), "return_tensors": bool(return_tensors)}

    def postprocess(self, outputs, pool=False, return_tensors=False):
        out = outputs[0]
        # transformers: the pooler output, else the first output (last_hidden_state or logits)
        value = out["pooler_output"] if pool else out[self.model.outputs[0].name]
        value = value[None]  # the batch of one transformers returns
        return value if return_tensors else value.tolist()


class ImageEmbeddingPipeline(VisionPipeline):
    """One vector per image: ``image_embeds`` (CLIP / SigLIP vision_model.onnx), else
    ``pooler_output``, else the first token of the last hidden state; ``normalize=True`` scales
    it to unit length."""

    task = "image-embedding"

    def __init__(self, model, config=None, *, normalize=False, **kwargs):
        self.normalize = bool(normalize)
        names = [v.name for v in model.outputs]
        self.source = next((n for n in EMBEDDING_OUTPUTS if n in names), None)
        if self.source is None and "last_hidden_state" not in names:
            raise PipelineError(f"image-embedding needs an image_embeds, pooler_output or "
                                f"last_hidden_state output; this graph gives {names}")
        super().__init__(model, config, **kwargs)

    def postprocess(self, outputs):
        out = outputs[0]
        vector = (out[self.source] if self.source else out["last_hidden_state"][0])
        vector = np.asarray(vector, np.float32)
        if self.normalize:
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)  # F.normalize's eps
        return vector
