"""zero-shot-audio-classification: transformers' ZeroShotAudioClassificationPipeline over CLAP
exports: a joint ``model.onnx`` (text and audio in, ``logits_per_audio`` out), or the split
``audio_model.onnx`` + ``text_model.onnx`` of transformers.js' repos (ClapAudioModelWithProjection
and ClapTextModelWithProjection: ``audio_embeds`` / ``text_embeds``, projected, not normalized).

    pipe("dog.wav", candidate_labels=["dog", "vacuum cleaner"])
        -> [{"score": 0.98, "label": "dog"}, {"score": 0.02, "label": "vacuum cleaner"}]

The label texts are padded to the longest, as transformers pads them; each call's labels are
tokenized once and share every batch of clips. Split files hold no logit scale: a repo with only
those needs ``logit_scale=`` (exp of the trained model's ``logit_scale_a``); the scores are then
ClapModel's ``logit_scale * unit(audio_embeds) @ unit(text_embeds).T``, with each label set's text
embeddings computed once and kept.
"""

from ...errors import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import softmax
from ..zero_shot_labels import (LabelEmbeddings, ZeroShotLabels, check_scale, component, load_text_model)
from .base import AudioPipeline


class ZeroShotAudioClassificationPipeline(ZeroShotLabels, AudioPipeline):
    task = "zero-shot-audio-classification"
    item, default_template = "audio", "This is a sound of {}."
    logits_output, embeds_output = "logits_per_audio", "audio_embeds"
    featurizers = ("feature_extractor", "tokenizer")
    encoder_component = "text_model"  # the split layout's second graph; it takes variant= too

    def __init__(self, model, config=None, *, tokenizer, repo=None, text_model=None,
                 encoder_variant=None, logit_scale=None, **kwargs):
        self.tokenizer = tokenizer
        names = {v.name for v in model.outputs}
        self.joint = self.logits_output in names
        if not self.joint:
            if self.embeds_output not in names:
                raise PipelineError(f"{self.task} runs CLAP exports (a joint model.onnx with "
                                    "logits_per_audio, or an audio_model.onnx with audio_embeds); "
                                    f"this graph gives {sorted(names)}")
            self.text_model = text_model or load_text_model(repo, model, encoder_variant,
                                                            "audio_model")
            self.scale = _logit_scale(logit_scale)
            self._label_sets = LabelEmbeddings()
        elif text_model is not None or logit_scale is not None:
            raise PipelineError("text_model= and logit_scale= are for the split audio_model / "
                                "text_model files; the joint model.onnx holds both")
        self._label_feeds = {}
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """The joint model.onnx when the repo has one, else the split audio_model.onnx."""
        return component(repo, "audio_model")

    def _text_feed(self, texts, inputs):
        """The label texts tokenized as transformers does (padded to the longest), once per
        label set: a call's labels share its batches."""
        key = tuple(texts)
        if key not in self._label_feeds:
            self._label_feeds = {}  # one label set at a time
            encodings = [self.tokenizer.encode(t, truncation=False) for t in texts]
            limit = self.tokenizer.model_max_length
            for text, e in zip(texts, encodings):
                if limit and len(e.ids) > limit:  # transformers fails inside the text model
                    raise PipelineError(f"The label text {text!r} is {len(e.ids)} tokens; the "
                                        f"model's text encoder takes at most {limit}: use a "
                                        "shorter label or hypothesis_template")
            names = [n for n in TEXT_INPUTS if n in inputs]
            feed = self.tokenizer.pad(encodings, max(len(e.ids) for e in encodings), names)
            self._label_feeds[key] = {k: v.astype(inputs[k].dtype, copy=False)
                                      for k, v in feed.items()}
        return self._label_feeds[key]

    def postprocess(self, outputs):
        out = outputs[0]
        pairs = sorted(zip(softmax(out["logits"]).tolist(), out["labels"]), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in pairs]


def _logit_scale(logit_scale):
    if logit_scale is None:
        raise PipelineError("Split text_model / audio_model files hold no logit scale: give "
                            "logit_scale= (the trained model's multiplier, exp of its stored "
                            "logit_scale_a), or use a repo with the joint model.onnx")
    return check_scale(logit_scale, "logit_scale", "audio_model")
