"""SpeechT5 text-to-speech over optimum's three graphs (Xenova/speecht5_tts's layout):
onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx, onnx/decoder_postnet_and_vocoder.onnx.

``SpeechT5Speech.speak`` is transformers' ``generate_speech``: the encoder runs once; the merged
decoder then runs step by step on the whole ``output_sequence`` (its prenet reads every frame, its
layers only the last, with a KV cache), each step giving ``reduction_factor`` mel frames
(``spectrum``) and their stop probabilities (``prob``). Decoding stops once ``minlen`` steps are
done and the probabilities' sum reaches ``threshold``, or at ``maxlen`` steps, where
``maxlen = int(encoder length * maxlenratio / reduction_factor)`` (``minlen`` likewise). The
frames then go through the postnet and the HiFi-GAN vocoder in one graph.

The self-attention cache grows by one row a step (the decoder takes no mask that would let a
buffer hold free rows), so each step is a new shape: compiled once, then reused for texts of the
same length. The first step runs the graph's no-past branch (``use_cache_branch`` False), which
also computes the cross-attention cache; later steps return placeholders for it, so the first's
is kept.

``SpeechT5TextToAudioPipeline`` is text-to-audio for a model whose config.json says speecht5
(what text-to-audio's families share: pipeline.py).

    pipe = transmuter.pipeline("text-to-speech", "Xenova/speecht5_tts")
    pipe("Hello.", speaker_embeddings="speaker.npy")   # or an array [1, 512] / [512]
        -> {"audio": float32 [samples], "sampling_rate": 16000}
"""

import os

import numpy as np

from ....engine.compiled import compile
from ....errors import InputError, PipelineError
from ....hub.load import load_beside
from ....preprocess.text.speecht5_numbers import spell_numbers
from ....preprocess.text.tokenizer import (TokenizerError, check_text, content, Encoding, max_length, repo_config)
from ... import shared
from .pipeline import TextToAudioPipeline

COMPONENTS = ("encoder_model", "decoder_model_merged", "decoder_postnet_and_vocoder")
# generate_speech's defaults (the pipeline passes none of its own)
DEFAULTS = {"threshold": 0.5, "minlenratio": 0.0, "maxlenratio": 20.0}
_PAST = "past_key_values."


class SpeechT5Tokenizer:
    """transformers' (slow) ``SpeechT5Tokenizer``: spm_char.model's pieces (character level),
    special tokens in the text kept whole, eos appended; numbers spelled out first where the
    config says normalize=true (preprocess/text/speecht5_numbers.py). transformers has no fast
    SpeechT5 tokenizer, so this is what its pipeline uses even where a tokenizer.json exists."""

    def __init__(self, spm_file, config=None):
        try:
            import sentencepiece
        except ImportError as e:
            raise TokenizerError("SpeechT5's tokenizer is sentencepiece (spm_char.model): pip "
                                 "install sentencepiece") from e
        self.config = dict(config or {})
        self.normalize = bool(self.config.get("normalize"))
        self.sp = sentencepiece.SentencePieceProcessor(model_file=spm_file)
        for name, default in (("bos", "<s>"), ("eos", "</s>"), ("unk", "<unk>"),
                              ("pad", "<pad>")):
            token = content(self.config.get(f"{name}_token")) or default
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", self.sp.piece_to_id(token))
        self.model_max_length = max_length(self.config)
        added = [content(t) for t in (self.config.get("added_tokens_decoder") or {}).values()]
        specials = {self.bos_token, self.eos_token, self.unk_token, self.pad_token, *added}
        self.special_tokens = sorted((t for t in specials if t), key=len, reverse=True)

    @classmethod
    def from_repo(cls, repo):
        if not repo.has("spm_char.model"):
            raise TokenizerError(f"{repo.label} has no spm_char.model, SpeechT5's tokenizer")
        config = repo_config(repo)
        return cls(repo.file("spm_char.model"), config)

    def encode(self, text, **_):
        check_text(text, "text")
        if self.normalize:
            text = spell_numbers(text)
        tokens = []
        for piece in self._split(text):
            tokens += [piece] if piece in self.special_tokens else \
                self.sp.encode(piece, out_type=str)
        return Encoding([self.sp.piece_to_id(t) for t in tokens] + [self.eos_token_id])

    def _split(self, text):
        """The text cut around its special tokens (the longest first, as transformers' Trie)."""
        pieces = [text]
        for token in self.special_tokens:
            out = []
            for piece in pieces:
                if piece in self.special_tokens:
                    out.append(piece)
                    continue
                parts = piece.split(token)
                for i, part in enumerate(parts):
                    out += ([token] if i else []) + ([part] if part else [])
            pieces = out
        return pieces


def speaker_embeddings(value, size):
    """``value`` (an array of ``size`` floats, [size] or [1, size], or a .npy file of one) as
    the decoder's float32 [1, size]."""
    wanted = (f"a float array of shape [1, {size}] or [{size}] (an x-vector, e.g. from the "
              "Matthijs/cmu-arctic-xvectors dataset), or the path of a .npy file holding one")
    if value is None:
        raise InputError("SpeechT5 speaks in the voice of the speaker_embeddings it is given and "
                         f"has none of its own: pass speaker_embeddings=, {wanted}")
    if isinstance(value, (str, os.PathLike)):
        if not str(value).endswith(".npy") or not os.path.isfile(value):
            raise InputError(f"speaker_embeddings must be {wanted}; {str(value)!r} is not a "
                             ".npy file")
        value = np.load(value, allow_pickle=False)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InputError(f"speaker_embeddings must be {wanted}; got "
                         f"{type(value).__name__}") from e
    if array.dtype.kind not in "fiu" or array.shape not in ((size,), (1, size)):
        raise InputError(f"speaker_embeddings must be {wanted}; got {array.dtype} of shape "
                         f"{list(array.shape)}")
    array = array.astype(np.float32).reshape(1, size)
    if not np.isfinite(array).all():
        raise InputError("speaker_embeddings hold NaN or infinite values")
    return array


class SpeechT5Speech:
    """The three graphs and generate_speech's loop over them; shared per decoder model
    (pipelines/shared.py), so pipelines over one model share its compiled steps."""

    def __init__(self, encoder, decoder, vocoder, config, cache_size):
        self.config = dict(config)
        self.tokenizer = None  # set by the pipeline (SpeechT5Tokenizer.from_repo)
        self.reduction = int(self.config.get("reduction_factor", 2))
        self.mel_bins = int(self.config.get("num_mel_bins", 80))
        self.max_steps = self.config.get("max_speech_positions")
        inputs = {v.name: v for v in decoder.inputs}
        missing = {"output_sequence", "speaker_embeddings", "encoder_hidden_states"} - set(inputs)
        if missing or not any(n.startswith(_PAST) for n in inputs):
            raise PipelineError(f"{COMPONENTS[1]}.onnx is not SpeechT5's merged decoder with "
                                f"past (it lacks {sorted(missing) or 'past_key_values.*'})")
        self.speaker_size = int(inputs["speaker_embeddings"].shape[-1])
        self.pasts = [v for n, v in inputs.items() if n.startswith(_PAST)]
        self.takes_mask = "encoder_attention_mask" in inputs
        branch = "use_cache_branch" in inputs
        self.backend = decoder.backend
        self.encoder = compile(encoder, cache_size=cache_size)
        self.first, self.step = (
            compile(decoder, cache_size=cache_size, static_inputs={
                "use_cache_branch": np.array([cached])} if branch else None)
            for cached in (False, True))
        self.vocoder = compile(vocoder, cache_size=cache_size)

    def speak_ids(self, ids, speaker, threshold, minlenratio, maxlenratio):
        """The waveform (float32 [samples]) of token ``ids`` in the voice of ``speaker``."""
        if speaker is None:
            speaker_embeddings(None, self.speaker_size)  # the error that says what to pass
        limit = self.config.get("max_text_positions")
        if limit and len(ids) > limit:
            raise InputError(f"The text has {len(ids)} tokens; SpeechT5 reads at most {limit} "
                             "(max_text_positions): split it into sentences")
        with self.backend.scope():
            states, mask = self._encode(ids)
            spectra = self._decode(states, mask, speaker, threshold, minlenratio, maxlenratio)
            out = self.vocoder({"spectrogram": np.concatenate(spectra)})
            return np.asarray(out["waveform"], np.float32)

    def _encode(self, ids):
        feed = {"input_ids": np.asarray([ids], np.int64)}
        if "attention_mask" in {v.name for v in self.encoder.model.inputs}:
            feed["attention_mask"] = np.ones_like(feed["input_ids"])
        out = self.encoder(feed)
        states = out.get("encoder_outputs", out[self.encoder.model.outputs[0].name])
        mask = out.get("encoder_attention_mask")
        return states, np.ones(feed["input_ids"].shape, np.int64) if mask is None else mask

    def _decode(self, states, mask, speaker, threshold, minlenratio, maxlenratio):
        length = int(states.shape[1])
        maxlen = int(length * maxlenratio / self.reduction)
        minlen = int(length * minlenratio / self.reduction)
        feed = {"output_sequence": np.zeros((1, 1, self.mel_bins), np.float32),
                "speaker_embeddings": speaker, "encoder_hidden_states": states,
                **self._empty_past()}
        if self.takes_mask:
            feed["encoder_attention_mask"] = mask
        spectra, step = [], 0
        while True:
            step += 1
            if self.max_steps and step > self.max_steps:
                raise InputError(f"SpeechT5 spoke {self.max_steps} steps (max_speech_positions) "
                                 "without reaching its stop threshold; lower maxlenratio or "
                                 "threshold, or give a shorter text")
            out = (self.first if step == 1 else self.step)(feed)
            spectra.append(np.asarray(out["spectrum"], np.float32))
            for past in self.pasts:  # cross-attention pasts: the first step's are kept
                if step == 1 or ".encoder." not in past.name:
                    feed[past.name] = out["present." + past.name[len(_PAST):]]
            feed["output_sequence"] = out["output_sequence_out"]
            # generate_speech sums the reduction_factor frames' stop probabilities
            if step >= minlen and (step >= maxlen or
                                   np.asarray(out["prob"]).sum() >= threshold):
                return spectra

    def _empty_past(self):
        """Zero-length pasts [1, heads, 0, head size] for the no-past branch."""
        return {v.name: np.zeros((1, int(v.shape[1]), 0, int(v.shape[3])), v.dtype)
                for v in self.pasts}


def options(params, speaker_size):
    """generate_speech's options from the call's; a speaker_embeddings given is checked here,
    a missing one when an input is spoken (a pipeline may be built without one)."""
    unknown = sorted(set(params) - {"speaker_embeddings", *DEFAULTS})
    if unknown:
        raise PipelineError(f"SpeechT5 takes no option(s) {unknown}; it takes "
                            f"speaker_embeddings, {', '.join(DEFAULTS)}")
    out = {k: params.get(k, v) for k, v in DEFAULTS.items()}
    for name, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PipelineError(f"{name} must be a number >= 0, got {value!r}")
        out[name] = float(value)
    speaker = params.get("speaker_embeddings")
    out["speaker"] = None if speaker is None else speaker_embeddings(speaker, speaker_size)
    return out


class SpeechT5TextToAudioPipeline(TextToAudioPipeline):
    """text-to-audio for a model whose config.json says speecht5: the merged decoder is the
    pipeline's model, the encoder and vocoder load beside it."""

    model_type = "speecht5"

    @staticmethod
    def onnx_component(repo):
        """SpeechT5's merged decoder (the encoder and vocoder load beside it)."""
        return COMPONENTS[1]

    def _speech(self, model, config, repo, *, sampling_rate, encoder_variant, cache_size, **_):
        return _speech(model, config, repo, encoder_variant, cache_size), \
            _vocoder_rate(repo, sampling_rate)

    def _speech_options(self, forward_params, generate_kwargs, keywords):
        # transformers: generate_kwargs win over forward_params
        merged = {**forward_params, **generate_kwargs, **keywords}
        return options(merged, self.speech.speaker_size)


def _vocoder_rate(repo, given):
    """SpeechT5's rate is its vocoder's (transformers: vocoder.config.sampling_rate): the repo's
    vocoder/config.json, else ``given``, preprocessor_config.json's, or HiFi-GAN's 16 kHz."""
    vocoder = repo.json("vocoder/config.json", {}) if repo.has("vocoder/config.json") else {}
    rate = vocoder.get("sampling_rate") or given or \
        repo.json("preprocessor_config.json", {}).get("sampling_rate") or 16000
    return int(rate)


def _speech(decoder, config, repo, variant, cache_size):
    """The SpeechT5Speech of ``decoder`` (shared per model), its tokenizer beside it."""
    def make():
        encoder, vocoder = (load_beside(decoder, repo, repo.choose(name, variant).path)
                            for name in (COMPONENTS[0], COMPONENTS[2]))
        return SpeechT5Speech(encoder, decoder, vocoder, config, cache_size)

    speech = shared.per_model(decoder, "speecht5", make)
    speech.tokenizer = SpeechT5Tokenizer.from_repo(repo)
    return speech
