"""zero-shot-audio-classification: transformers' ZeroShotAudioClassificationPipeline over CLAP's
joint export (text and audio in, ``logits_per_audio`` out).

    pipe("dog.wav", candidate_labels=["dog", "vacuum cleaner"])
        -> [{"score": 0.98, "label": "dog"}, {"score": 0.02, "label": "vacuum cleaner"}]

The label texts are padded to the longest, as transformers pads them; each call's labels are
tokenized once and share every batch of clips.
"""

from ..base import PipelineError
from ..featurizers import TEXT_INPUTS
from ..heads import softmax
from .base import AudioPipeline, check_labels


class ZeroShotAudioClassificationPipeline(AudioPipeline):
    task = "zero-shot-audio-classification"
    featurizers = ("feature_extractor", "tokenizer")

    def __init__(self, model, config=None, *, tokenizer, **kwargs):
        self.tokenizer = tokenizer
        names = {v.name for v in model.outputs}
        if "logits_per_audio" not in names:
            raise PipelineError(f"{self.task} runs CLAP's joint export (model.onnx with "
                                f"logits_per_audio); this graph gives {sorted(names)}")
        self._label_feeds = {}
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, candidate_labels=None,
                             hypothesis_template="This is a sound of {}.", **unknown):
        super()._sanitize_parameters(**unknown)
        if candidate_labels is None:
            return {}, {"labels": None}, {}
        labels = check_labels(candidate_labels, self.task)
        if not isinstance(hypothesis_template, str) or "{}" not in hypothesis_template:
            raise PipelineError(f"hypothesis_template must be a string with a {{}} for the "
                                f"label, got {hypothesis_template!r:.80}")
        return {}, {"labels": labels, "template": hypothesis_template}, {}

    def _forward_group(self, chunks, labels=None, template=None):
        if labels is None:
            raise PipelineError(f"{self.task} needs candidate_labels=[...]")
        feed = {**self._feed(chunks), **self._text_feed([template.format(x) for x in labels])}
        logits = self.output(self._run_model(feed), "logits_per_audio")
        return [dict(c, labels=labels, logits=logits[i]) for i, c in enumerate(chunks)]

    def _feed(self, chunks):
        items = [c["audio"] for c in chunks]
        audio_inputs = {k: v for k, v in self._inputs.items() if k not in TEXT_INPUTS}
        feed = self.featurizer.batch(items, self._rows(len(items)), audio_inputs, self.task)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()}

    def _text_feed(self, texts):
        key = tuple(texts)
        if key not in self._label_feeds:
            self._label_feeds = {}  # one label set at a time: a call's labels share its batches
            encodings = [self.tokenizer.encode(t, truncation=False) for t in texts]
            limit = self.tokenizer.model_max_length
            for text, e in zip(texts, encodings):
                if limit and len(e.ids) > limit:  # transformers fails inside the text model
                    raise PipelineError(f"The label text {text!r} is {len(e.ids)} tokens; the "
                                        f"model's text encoder takes at most {limit}: use a "
                                        "shorter label or hypothesis_template")
            names = [n for n in TEXT_INPUTS if n in self._inputs]
            feed = self.tokenizer.pad(encodings, max(len(e.ids) for e in encodings), names)
            self._label_feeds[key] = {k: v.astype(self._inputs[k].dtype, copy=False)
                                      for k, v in feed.items()}
        return self._label_feeds[key]

    def postprocess(self, outputs):
        out = outputs[0]
        pairs = sorted(zip(softmax(out["logits"]).tolist(), out["labels"]), key=lambda x: -x[0])
        return [{"score": score, "label": label} for score, label in pairs]
