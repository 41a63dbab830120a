"""text-to-audio (alias text-to-speech): transformers' TextToAudioPipeline for VITS / MMS-TTS
and SpeechT5 (+ its HiFi-GAN vocoder).

    pipe = transmuter.pipeline("text-to-speech", "Xenova/mms-tts-eng")
    pipe("Hello, world!")  -> {"audio": float32 [1, samples], "sampling_rate": 16000}

    pipe = transmuter.pipeline("text-to-speech", "Xenova/speecht5_tts")
    pipe("Hello.", speaker_embeddings="speaker.npy")   # or an array [1, 512] / [512]
        -> {"audio": float32 [samples], "sampling_rate": 16000}

The audio's shape is transformers': VITS returns the waveform row [1, samples], SpeechT5 the
vocoder's [samples]. Options go as transformers takes them (``forward_params={...}``, and
``generate_kwargs={...}`` for SpeechT5) or plainly as keywords: SpeechT5's speaker_embeddings,
threshold, minlenratio and maxlenratio (see speecht5.py). VITS takes none: its noise scales and
speaking rate are constants of the exported graph.

This module holds what both share; each family's class is its own (VitsTextToAudioPipeline in
vits.py, SpeechT5TextToAudioPipeline in speecht5.py), picked by config.json's model_type from the
registry's family table (pipelines/registry.py).

VITS runs one text per graph call, as transformers' pipeline does: the waveform's length follows
the predicted durations, and in a padded batch the vocoder's convolutions read the padded frames
next to a shorter row's end, changing its last ~40 samples (measured on the fixture: up to 1.0).
Its ids are padded (masked) to a length bucket, which changes nothing (measured: 0.0).
"""

from .... import buckets
from ....errors import InputError, PipelineError
from ...base import Pipeline
from ...text.base import check_text


class TextToAudioPipeline(Pipeline):
    """What the families share: a family's class sets ``model_type`` (config.json's) and gives
    ``_speech`` (its speech object, with ``tokenizer`` and ``speak_ids``, and its sampling rate)
    and ``_speech_options`` (the call's options as ``speak_ids``'s keywords)."""

    task = "text-to-audio"
    # the second graph this task may load; factory.pipeline passes its variant= on
    encoder_component = "encoder_model"
    model_type = None  # config.json's model_type of a family's class

    def __init__(self, model, config=None, *, repo=None, sampling_rate=None, sequence_length=None,
                 encoder_variant=None, **kwargs):
        kind = dict(config or {}).get("model_type")
        if self.model_type is None or kind != self.model_type:
            raise PipelineError(f"text-to-audio runs VITS / MMS-TTS, SpeechT5 and Kokoro "
                                f"models; this one's model_type is {kind!r}")
        if repo is None:
            raise PipelineError("A text-to-audio model loaded by hand needs config= the repo or "
                                "folder it came from (for its tokenizer and other graphs)")
        self.speech, self.sampling_rate = self._speech(
            model, config, repo, sampling_rate=sampling_rate, sequence_length=sequence_length,
            encoder_variant=encoder_variant,
            cache_size=kwargs.get("cache_size", buckets.COMPILED_CACHE_SIZE))
        self.tokenizer = self.speech.tokenizer
        super().__init__(model, config, repo=repo, **kwargs)

    def _speech(self, model, config, repo, *, sampling_rate, sequence_length, encoder_variant,
                cache_size):
        raise NotImplementedError

    def _speech_options(self, forward_params, generate_kwargs, options):
        raise NotImplementedError

    def _sanitize_parameters(self, forward_params=None, generate_kwargs=None, **options):
        for name, value in (("forward_params", forward_params),
                            ("generate_kwargs", generate_kwargs)):
            if value is not None and not isinstance(value, dict):
                raise PipelineError(f"{name} must be a dict, got {type(value).__name__}")
        return {}, self._speech_options(forward_params or {}, generate_kwargs or {}, options), {}

    def preprocess(self, text):
        ids = self.tokenizer.encode(check_text(text)).ids
        if not ids:
            raise InputError(f"Nothing is left of the input {text!r:.60} once the characters "
                             "the model's vocabulary lacks are dropped; give text in its "
                             "alphabet")
        yield {"ids": ids}

    def _forward(self, chunks, **params):
        """Each text alone (see the module's docstring)."""
        return [dict(c, audio=self.speech.speak_ids(c["ids"], **params)) for c in chunks]

    def postprocess(self, outputs):
        return {"audio": outputs[0]["audio"], "sampling_rate": self.sampling_rate}


TextToSpeechPipeline = TextToAudioPipeline  # the same pipeline under its alias's name
