"""CTC speech recognition (wav2vec2, HuBERT, Data2Vec audio, Wav2Vec2-BERT): one pass of the
graph, the argmax token per logit frame, decoded as transformers decodes CTC.

Windows of a chunked recording lose their strides' frames (transformers' ``rescale_stride``)
before the frames of all windows are joined and decoded; timestamps are logit frames times
the model's samples per frame (``inputs_to_logits_ratio``) over the sampling rate.
"""

import functools
import operator

import numpy as np

from ...errors import PipelineError
from ...preprocess.text.ctc import CTCTokenizer


def is_ctc(config, model):
    architectures = (config or {}).get("architectures") or []
    return any(a.endswith("ForCTC") for a in architectures) or (
        not architectures and "logits" in {v.name for v in model.outputs})


class Head:
    def __init__(self, pipe, model, config, **_):
        if not isinstance(pipe.tokenizer, CTCTokenizer):
            raise PipelineError("A CTC model needs its Wav2Vec2CTCTokenizer (vocab.json and "
                                "tokenizer_config.json); this repo's tokenizer is "
                                f"{type(pipe.tokenizer).__name__}")
        self.pipe, self.config = pipe, dict(config or {})
        # samples per logit frame: the product of the conv feature extractor's strides
        self.align_to = int(self.config.get("inputs_to_logits_ratio") or functools.reduce(
            operator.mul, self.config.get("conv_stride") or [1], 1))

    def sanitize(self, return_timestamps, return_language, options):
        if return_language is not None:
            raise PipelineError("return_language is for Whisper; a CTC model has no language")
        if options:
            raise PipelineError(f"A CTC model generates nothing: it takes no generation "
                                f"option(s) {sorted(options)}")
        if return_timestamps not in (None, False, "char", "word"):
            raise PipelineError("CTC can either predict character level timestamps, or word "
                                "level timestamps: return_timestamps='char' or 'word', got "
                                f"{return_timestamps!r}")
        return {}, {"timestamps": return_timestamps or None}

    def features(self, samples):
        return self.pipe.feature_extractor(samples)

    def whole(self, samples):
        yield {"audio": self.features(samples), "stride": None, "is_last": True}

    def forward(self, chunks):
        pipe = self.pipe
        logits = pipe.output(pipe._run_model(pipe._feed(chunks)), "logits")
        out = []
        for i, chunk in enumerate(chunks):
            frames = self._frames(chunk["audio"])
            tokens = np.argmax(logits[i, :frames], axis=-1)
            if chunk["stride"] is not None:
                total, left, right = _rescale_stride(chunk["stride"], 1 / self.align_to)
                tokens = tokens[left:total - right]
            out.append({"tokens": tokens})
        return out

    def _frames(self, item):
        """Logit frames of the clip's own samples (a padded row has more)."""
        samples = len(item[self.pipe.feature_extractor.model_input_names[0]])
        if "attention_mask" in item:
            samples = int(np.asarray(item["attention_mask"]).sum())
        kernels, strides = self.config.get("conv_kernel"), self.config.get("conv_stride")
        if not kernels or not strides:
            return None  # no conv stack to measure: the row was not padded (no mask)
        for kernel, stride in zip(kernels, strides):
            samples = (samples - kernel) // stride + 1  # Conv1d without padding
        return max(samples, 0)

    def postprocess(self, outputs, timestamps=None):
        tokens = np.concatenate([o["tokens"] for o in outputs])
        tok = self.pipe.tokenizer
        result = {"text": tok.decode(tokens)}
        if timestamps:
            rate = self.pipe.sampling_rate
            result["chunks"] = [{"text": o[timestamps],
                                 "timestamp": (o["start_offset"] * self.align_to / rate,
                                               o["end_offset"] * self.align_to / rate)}
                                for o in tok.offsets(tokens, timestamps)]
        return result


def _rescale_stride(stride, ratio):
    """transformers' rescale_stride: (samples, left, right) to logit frames."""
    total, left, right = stride
    frames = int(round(total * ratio))
    return frames, int(round(left / total * frames)), int(round(right / total * frames))
