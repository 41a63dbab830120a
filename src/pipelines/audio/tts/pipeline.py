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

VITS runs one text per graph call, as transformers' pipeline does: the waveform's length follows
the predicted durations, and in a padded batch the vocoder's convolutions read the padded frames
next to a shorter row's end, changing its last ~40 samples (measured on the fixture: up to 1.0).
Its ids are padded (masked) to a length bucket, which changes nothing (measured: 0.0).
"""

from ....errors import InputError
from ....preprocess.text.tokenizer import _Encoding
from .... import buckets
from ...base import Pipeline
from ....errors import PipelineError
from ...text.base import check_text
from . import speecht5

FAMILIES = ("vits", "speecht5")


class TextToAudioPipeline(Pipeline):
    task = "text-to-audio"
    # the second graph this task may load; factory.pipeline passes its variant= on
    encoder_component = "encoder_model"

    def __init__(self, model, config=None, *, repo=None, sampling_rate=None, sequence_length=None,
                 encoder_variant=None, **kwargs):
        self.family = dict(config or {}).get("model_type")
        if self.family not in FAMILIES:
            raise PipelineError(f"text-to-audio runs VITS / MMS-TTS and SpeechT5 models; this "
                                f"one's model_type is {self.family!r}")
        if repo is None:
            raise PipelineError("A text-to-audio model loaded by hand needs config= the repo or "
                                "folder it came from (for its tokenizer and other graphs)")
        if self.family == "vits":
            self.speech = VitsSpeech(model, repo, sequence_length, self._run_model)
            self.sampling_rate = sampling_rate or _config_rate(config)
        else:
            self.speech = _speecht5(model, config, repo, encoder_variant,
                                    kwargs.get("cache_size", buckets.COMPILED_CACHE_SIZE))
            self.sampling_rate = _vocoder_rate(repo, sampling_rate)
        self.tokenizer = self.speech.tokenizer
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """SpeechT5's merged decoder (the encoder and vocoder load beside it), else model.onnx."""
        return speecht5.COMPONENTS[1] if repo.config().get("model_type") == "speecht5" \
            else "model"

    def _sanitize_parameters(self, forward_params=None, generate_kwargs=None, **options):
        for name, value in (("forward_params", forward_params),
                            ("generate_kwargs", generate_kwargs)):
            if value is not None and not isinstance(value, dict):
                raise PipelineError(f"{name} must be a dict, got {type(value).__name__}")
        if self.family == "vits":
            if generate_kwargs:  # as transformers, for a model that does not generate
                raise PipelineError("VITS runs in one pass: it takes no generate_kwargs")
            given = {**(forward_params or {}), **options}
            seed = given.pop("seed", None)
            if given:
                raise PipelineError(f"text-to-audio with VITS takes no option(s) {sorted(given)} "
                                    "(its noise scales and speaking rate are fixed in the graph)")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise PipelineError(f"seed must be an int, got {seed!r}")
            # the graph's noise (RandomNormalLike) draws from a key made from the seed: a seed
            # repeats the audio, on each backend (torch's generator is not reproduced)
            return {}, {"seed": seed} if seed is not None else {}, {}
        # transformers: generate_kwargs win over forward_params
        merged = {**(forward_params or {}), **(generate_kwargs or {}), **options}
        return {}, speecht5.options(merged, self.speech.speaker_size), {}

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


class VitsSpeech:
    """A VITS graph (input_ids, attention_mask -> waveform [1, samples]) and its tokenizer;
    ``run`` is the pipeline's compiled call of the graph."""

    def __init__(self, model, repo, sequence_length, run):
        from ....preprocess.text.vits import VitsTokenizer

        self.tokenizer = VitsTokenizer.from_repo(repo)
        names = {v.name for v in model.inputs}
        if "input_ids" not in names or not names <= {"input_ids", "attention_mask"}:
            raise PipelineError(f"A VITS graph takes input_ids and attention_mask; this one "
                                f"takes {sorted(names)}")
        self.names = [n for n in ("input_ids", "attention_mask") if n in names]
        given = buckets.DEFAULT_SEQUENCE_LENGTHS if sequence_length is None else sequence_length
        self.lengths = buckets.lengths(given, max(buckets.DEFAULT_SEQUENCE_LENGTHS))
        self.run = run

    def speak_ids(self, ids, seed=None):
        length = buckets.length(len(ids), self.lengths)
        feed = self.tokenizer.pad([_Encoding(ids)], length, self.names, rows=1)
        return self.run(feed, rng_seed=seed)["waveform"].astype("float32", copy=False)


def _config_rate(config):
    """transformers reads sample_rate, then sampling_rate, from config.json."""
    rate = None
    for name in ("sample_rate", "sampling_rate"):
        rate = config.get(name) or rate
    if not rate:
        raise PipelineError("config.json gives no sampling_rate; pass sampling_rate=")
    return int(rate)


def _vocoder_rate(repo, given):
    """SpeechT5's rate is its vocoder's (transformers: vocoder.config.sampling_rate): the repo's
    vocoder/config.json, else ``given``, preprocessor_config.json's, or HiFi-GAN's 16 kHz."""
    vocoder = repo.json("vocoder/config.json", {}) if repo.has("vocoder/config.json") else {}
    rate = vocoder.get("sampling_rate") or given or \
        repo.json("preprocessor_config.json", {}).get("sampling_rate") or 16000
    return int(rate)


def _speecht5(decoder, config, repo, variant, cache_size):
    """The SpeechT5Speech of ``decoder`` (shared on the model), its tokenizer beside it."""
    from ....hub.load import load_beside

    speech = decoder.shared.get("speecht5")
    if speech is None:
        encoder, vocoder = (load_beside(decoder, repo, repo.choose(name, variant).path)
                            for name in (speecht5.COMPONENTS[0], speecht5.COMPONENTS[2]))
        speech = decoder.shared["speecht5"] = speecht5.SpeechT5Speech(
            encoder, decoder, vocoder, config, cache_size)
    speech.tokenizer = speecht5.SpeechT5Tokenizer.from_repo(repo)
    return speech
