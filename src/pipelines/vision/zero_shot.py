"""zero-shot-image-classification: transformers' ZeroShotImageClassificationPipeline over CLIP /
SigLIP exports: a joint ``model.onnx`` (text and image in, ``logits_per_image`` out), or the split
``vision_model.onnx`` + ``text_model.onnx`` of transformers.js' repos (the label texts embedded
once per label set and reused for every image).

    pipe("cat.jpg", candidate_labels=["cat", "dog"])
        -> [{"score": 0.93, "label": "cat"}, {"score": 0.07, "label": "dog"}]

CLIP's scores are a softmax over the labels; SigLIP's a sigmoid per label, its texts padded to
64 tokens as transformers pads them. Split files hold no logit scale (nor SigLIP's bias): a repo
with only those needs ``logit_scale=`` (and ``logit_bias=``), the trained values of the model.
"""


from ...errors import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import sigmoid, softmax
from ..zero_shot_labels import (LabelEmbeddings, ZeroShotLabels, check_scale, component, load_text_model)
from .base import VisionPipeline

SIGLIP_LENGTH = 64  # ZeroShotImageClassificationPipeline.preprocess: max_length=64 for SigLIP


class ZeroShotImageClassificationPipeline(ZeroShotLabels, VisionPipeline):
    task = "zero-shot-image-classification"
    item, default_template = "image", "This is a photo of {}."
    logits_output, embeds_output = "logits_per_image", "image_embeds"
    featurizers = ("image_processor", "tokenizer")
    encoder_component = "text_model"  # the split layout's second graph; it takes variant= too

    def __init__(self, model, config=None, *, tokenizer, repo=None, text_model=None,
                 encoder_variant=None, logit_scale=None, logit_bias=None, **kwargs):
        self.tokenizer = tokenizer
        self.siglip = "siglip" in str((config or {}).get("model_type", ""))
        names = {v.name for v in model.outputs}
        self.joint = self.logits_output in names
        if not self.joint:
            if self.embeds_output not in names:
                raise PipelineError(f"{self.task} runs CLIP / SigLIP exports (a joint model.onnx "
                                    "with logits_per_image, or a vision_model.onnx with "
                                    f"image_embeds); this graph gives {sorted(names)}")
            self.text_model = text_model or load_text_model(repo, model, encoder_variant,
                                                            "vision_model")
            self.scale, self.bias = self._split_head(logit_scale, logit_bias)
            self._label_sets = LabelEmbeddings()
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """The joint model.onnx when the repo has one, else the split vision_model.onnx."""
        return component(repo, "vision_model")

    def _split_head(self, logit_scale, logit_bias):
        if logit_scale is None or (self.siglip and logit_bias is None):
            need = "logit_scale= and logit_bias=" if self.siglip else "logit_scale="
            raise PipelineError(f"Split text_model / vision_model files hold no logit scale"
                                f"{' or bias' if self.siglip else ''}: give {need} (the trained "
                                "model's values; logit_scale is the multiplier, exp of the stored "
                                "log scale), or use a repo with the joint model.onnx")
        return (check_scale(logit_scale, "logit_scale", "vision_model"),
                check_scale(logit_bias, "logit_bias", "vision_model") or 0.0)

    def _text_feed(self, sequences, inputs):
        """The label texts as transformers tokenizes them: padded to the longest (CLIP), or to
        64 tokens and truncated there (SigLIP)."""
        limit = SIGLIP_LENGTH if self.siglip else None
        encodings = [self.tokenizer.encode(s, max_length=limit) for s in sequences]
        length = SIGLIP_LENGTH if self.siglip else max(len(e.ids) for e in encodings)
        names = [n for n in TEXT_INPUTS if n in inputs]
        feed = self.tokenizer.pad(encodings, length, names)
        return {k: v.astype(inputs[k].dtype, copy=False) for k, v in feed.items()}

    def postprocess(self, outputs):
        out = outputs[0]
        scores = sigmoid(out["logits"]) if self.siglip else softmax(out["logits"])
        pairs = sorted(zip(scores.tolist(), out["labels"]), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in pairs]
