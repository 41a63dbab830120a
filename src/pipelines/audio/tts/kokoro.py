"""text-to-audio on Kokoro (StyleTTS 2 + iSTFTNet), as kokoro-js runs onnx-community's exports
(config.json's model_type ``style_text_to_speech_2``; ``onnx/model*.onnx``: input_ids [1, T],
style [1, 256], speed [1] -> waveform [samples] at 24 kHz; ``voices/<name>.bin``: float32
[510, 1, 256], one style row per token count; ``tokenizer.json``: one token per phoneme, "$"
around them).

    pipe = transmuter.pipeline("text-to-speech", "onnx-community/Kokoro-82M-v1.0-ONNX",
                               voice="af_heart")
    pipe("Hello world!")                 -> {"audio": float32 [samples], "sampling_rate": 24000}
    pipe({"phonemes": "həlˈoʊ wˈɜːld!"})  # phonemes given directly, as kokoro-js' tokenizer reads
    pipe(text, voice="af_heart:0.6,am_adam:0.4", speed=1.2)
    for part in pipe(text, stream=True): ...   # {"audio", "sampling_rate", "phonemes"} a sentence

Text becomes phonemes through ``preprocess.phonemes.phonemize`` (kokoro-js' phonemize.js), in
the voice's language (its first letter: "a" American, "b" British English).

Long inputs: the model reads at most 510 phonemes (512 positions less the two "$"). Text is split
at line breaks first (the kokoro package's split_pattern), then phonemes over 510 are cut after
the kokoro package's ``KPipeline.waterfall_last``: among the words that fit, at the last sentence
end ('!.?…'), else the last ':;', else the last ',—', else after the last word. ``stream=True`` cuts
at every sentence end (kokoro-js' stream speaks a sentence at a time) and yields each part's audio
as soon as it is made. Without it, the parts' audio is joined.

Compiled shapes: the graph has no mask (its ALBERT attends to every position and its LSTMs run
over all of them), so ids cannot be padded to a length bucket without changing the audio; and the
audio's length follows the predicted durations (a break in the compiled call, engine/compiled.py).
Each new phoneme count and each new frame count compiles once (kept in the compiled call's LRU,
``cache_size``); a text's parts run one by one, as kokoro-js and the kokoro package run them."""

import posixpath
import re

import numpy as np

from ....engine.passes import stft_phase
from ....errors import InputError, PipelineError
from ....preprocess import phonemes as g2p
from ....preprocess.text.tokenizer import Encoding, Tokenizer
from .pipeline import TextToAudioPipeline

SAMPLING_RATE = 24000
STYLE = 256  # the style vector: the decoder's 128, then the predictor's 128
LIMIT = 510  # phonemes per call: 512 positions less the two "$"
# KPipeline.waterfall_last's punctuation, best cut first; a closing bracket or quote after the
# punctuation stays with it
WATERFALL = ("!.?…", ":;", ",—")
BUMPS = ")”"
SENTENCE_END = re.compile(r"(?<=[!.?…])[)”]?\s+")


class KokoroTextToAudioPipeline(TextToAudioPipeline):
    """text-to-audio for a Kokoro export (config.json's model_type style_text_to_speech_2)."""

    model_type = "style_text_to_speech_2"

    def __init__(self, model, config=None, *, torch_stft_phase=True, **kwargs):
        """``torch_stft_phase`` (default True): the vocoder's STFT phases at DC and Nyquist as
        torch computes them (engine/passes/stft_phase.py); False runs the graph as exported."""
        if not isinstance(torch_stft_phase, bool):
            raise PipelineError(f"torch_stft_phase must be True or False, got "
                                f"{torch_stft_phase!r}")
        super().__init__(stft_phase.torch_phase(model)[0] if torch_stft_phase else model,
                         config, **kwargs)

    @classmethod
    def onnx_component(cls, repo):
        """onnx-community's ``onnx/model*.onnx``; in kokoro-onnx's layout, the one .onnx file
        at the root (kokoro-v1.0.onnx, kokoro-v1.0.int8.onnx, ...)."""
        root = [f for f in repo.onnx_files() if "/" not in f]
        if len(root) == 1 and not any(f.startswith("onnx/model") for f in repo.onnx_files()):
            return root[0][:-len(".onnx")]
        return "model"

    def _speech(self, model, config, repo, *, sampling_rate, **_):
        return KokoroSpeech(model, repo, self._run_model), sampling_rate or SAMPLING_RATE

    def _sanitize_parameters(self, forward_params=None, generate_kwargs=None, voice="af_heart",
                             speed=1.0, language=None, **options):
        if generate_kwargs:
            raise PipelineError("Kokoro runs in one pass: it takes no generate_kwargs")
        given = {"voice": voice, "speed": speed, "language": language,
                 **(forward_params or {}), **options}
        unknown = sorted(set(given) - {"voice", "speed", "language"})
        if unknown:
            raise PipelineError(f"text-to-audio with Kokoro takes voice=, speed= and language=; "
                                f"not {unknown}")
        styles, first = self.speech.voice(given["voice"])
        speed = given["speed"]
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0:
            raise PipelineError(f"speed must be a positive number (1 is the voice's own pace), "
                                f"got {speed!r}")
        language = given["language"] or (first[0] if first else "a")
        return {"language": language}, {"styles": styles, "speed": float(speed)}, {}

    def __call__(self, inputs, *, stream=False, **kwargs):
        """``stream=True``: a generator over one input's sentences, each part's
        {"audio", "sampling_rate", "phonemes"} as soon as it is spoken."""
        if not stream:
            return super().__call__(inputs, **kwargs)
        if not self._is_single(inputs):
            raise PipelineError("stream=True speaks one input (a string or {'phonemes': ...}); "
                                f"got {type(inputs).__name__}")
        pre, forward, _ = self._sanitize_parameters(**{**self._defaults, **kwargs})
        return self._stream(inputs, pre, forward)

    def _stream(self, inputs, pre, forward):
        for chunk in self.preprocess(inputs, sentences=True, **pre):
            audio = self._forward([chunk], **forward)[0]["audio"]
            yield {"audio": audio, "sampling_rate": self.sampling_rate,
                   "phonemes": chunk["phonemes"]}

    def preprocess(self, inputs, language="a", sentences=False):
        for phonemes in self._phonemes(inputs, language):
            for part in split(phonemes, self.speech.count, sentences=sentences):
                yield {"ids": self.speech.ids(part), "phonemes": part}

    def _phonemes(self, inputs, language):
        """The input's phonemes: a text's a line at a time (the kokoro package's split_pattern),
        phonemes as given."""
        if isinstance(inputs, dict):
            if set(inputs) != {"phonemes"} or not isinstance(inputs["phonemes"], str):
                raise InputError("Kokoro takes a string of text or {'phonemes': a string}; got "
                                 f"a dict with keys {sorted(inputs)}")
            given = [inputs["phonemes"]]
        else:
            text = _text(inputs)
            given = [_phonemize(p, language) for p in re.split(r"\n+", text.strip())
                     if p.strip()]
        kept = [p for p in given if self.speech.count(p)]
        if not kept:
            raise InputError(f"No Kokoro phoneme is left of the input {inputs!r:.60}; give "
                             "text, or phonemes of its vocabulary (tokenizer.json)")
        return kept

    def _forward(self, chunks, styles, speed):
        return [dict(c, audio=self.speech.speak_ids(c["ids"], styles, speed)) for c in chunks]

    def postprocess(self, outputs):
        audio = np.concatenate([o["audio"] for o in outputs]).astype(np.float32, copy=False)
        return {"audio": audio, "sampling_rate": self.sampling_rate}


def _text(inputs):
    if not isinstance(inputs, str):
        raise InputError(f"Kokoro takes a string of text or {{'phonemes': a string}}; got "
                         f"{type(inputs).__name__}: {inputs!r:.60}")
    if not inputs.strip():
        raise InputError("The input is an empty string; give some text")
    return inputs


def _phonemize(text, language):
    try:
        return g2p.phonemize(text, language=language)
    except NotImplementedError as e:
        raise PipelineError(f"Kokoro's text input needs the phonemizer "
                            f"(transmuter.preprocess.phonemes), which this install lacks ({e}); "
                            "give phonemes directly: pipe({'phonemes': 'həlˈoʊ'})") from e


class KokoroSpeech:
    """A Kokoro graph, its phoneme tokenizer and its voices; ``run`` is the pipeline's compiled
    call of the graph."""

    def __init__(self, model, repo, run):
        names = {v.name for v in model.inputs}
        ids = [n for n in ("input_ids", "tokens") if n in names]
        if not ids or not {"style", "speed"} <= names:
            raise PipelineError(f"A Kokoro graph takes input_ids (or tokens), style and speed; "
                                f"this one takes {sorted(names)}")
        self.ids_name, self.run, self.repo = ids[0], run, repo
        self.tokenizer = Tokenizer.from_repo(repo) if repo.has("tokenizer.json") else \
            PhonemeVocabulary.from_repo(repo)
        self._styles = {}
        # onnx-community: voices/<name>.bin, float32 rows; kokoro-onnx: one .npz of them all
        # (its voices-v1.0.bin is an .npz too)
        self.voices = sorted(posixpath.splitext(posixpath.basename(f))[0] for f in repo.files()
                             if posixpath.dirname(f) == "voices" and f.endswith(".bin"))
        packed = [f for f in repo.files() if "/" not in f and (
            f.endswith(".npz") or f.startswith("voices") and f.endswith(".bin"))]
        if not self.voices and packed:
            with np.load(repo.file(packed[0])) as pack:
                self._styles = {k: pack[k].astype(np.float32).reshape(-1, STYLE) for k in pack}
            self.voices = sorted(self._styles)

    def count(self, phonemes):
        """Tokens of ``phonemes`` (characters outside the vocabulary are dropped)."""
        return len(self.tokenizer.encode(phonemes, add_special_tokens=False).ids)

    def ids(self, phonemes):
        return self.tokenizer.encode(phonemes).ids

    def voice(self, voice):
        """(style rows [rows, 256] float32, the first voice's name or None) of a voice name, a
        blend ("af_heart:0.6,am_adam:0.4", or "af_heart,am_adam" for the mean, as the kokoro
        package averages), a dict of name -> weight, or an array ([rows, 1, 256], [rows, 256] or
        one style [256]). Blend weights are normalized to sum to 1."""
        if isinstance(voice, str):
            parts = [p.strip() for p in voice.split(",") if p.strip()]
            if not parts:
                raise PipelineError(f"voice must name a voice; got {voice!r}")
            weights = {}
            for part in parts:
                name, _, weight = part.partition(":")
                weights[name.strip()] = _weight(weight, part) if weight else 1.0
            voice = weights
        if isinstance(voice, dict):
            return self._blend(voice), next(iter(voice), None)
        array = np.asarray(voice, dtype=np.float32) if voice is not None else None
        if array is None or array.shape[-1] != STYLE or array.ndim not in (1, 2, 3) or \
                array.ndim == 3 and array.shape[1] != 1:
            raise PipelineError(f"voice must be a voice's name ({self._available()}), a blend "
                                f"'a:0.6,b:0.4', or an array [rows, 1, {STYLE}], [rows, {STYLE}]"
                                f" or [{STYLE}]; got {getattr(array, 'shape', voice)!r}")
        return array.reshape(-1, STYLE), None

    def _blend(self, weights):
        if not weights or any(isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0
                              for w in weights.values()) or not sum(weights.values()) > 0:
            raise PipelineError(f"A voice blend needs weights >= 0, not all 0; got {weights!r}")
        rows = [self._rows(name) for name in weights]
        if len({r.shape for r in rows}) > 1:
            raise PipelineError(f"The voices {sorted(weights)} have different row counts")
        total = sum(weights.values())
        return sum(r * np.float32(w / total) for r, w in zip(rows, weights.values()))

    def _rows(self, name):
        if name not in self._styles:
            if name not in self.voices:
                raise PipelineError(f"Unknown voice {name!r}; {self._available()}")
            data = np.fromfile(self.repo.file(f"voices/{name}.bin"), dtype="<f4")
            if data.size == 0 or data.size % STYLE:
                raise PipelineError(f"voices/{name}.bin holds {data.size} floats, not rows of "
                                    f"{STYLE}: fetch it again")
            self._styles[name] = data.reshape(-1, STYLE)
        return self._styles[name]

    def _available(self):
        return (f"this model's voices: {', '.join(self.voices)}" if self.voices else
                "this model has no voices (voices/*.bin, or a voices .npz): give a style array")

    def speak_ids(self, ids, styles, speed):
        """The waveform of ``ids`` ("$" included) in the style row kokoro-js picks: the
        phoneme count, clamped to the voice's last row (509 in the real voices)."""
        row = min(max(len(ids) - 2, 0), len(styles) - 1)
        feed = {self.ids_name: np.array([ids], np.int64),
                "style": styles[row][None].astype(np.float32, copy=False),
                "speed": np.array([speed], np.float32)}
        out = self.run(feed)  # onnx-community's output is waveform, kokoro-onnx's audio
        audio = out["waveform"] if "waveform" in out else out.get("audio", next(iter(
            out.values())))
        return audio.reshape(-1).astype(np.float32, copy=False)


class PhonemeVocabulary:
    """kokoro-onnx's vocabulary (vocab.json's, or config.json's, "vocab": phoneme -> id) read as
    the kokoro package's KModel.forward reads it: a token per character it has, others dropped,
    0 ("$") before and after. onnx-community's tokenizer.json encodes the same ids."""

    def __init__(self, vocab):
        self.vocab = vocab

    @classmethod
    def from_repo(cls, repo):
        vocab = repo.json("vocab.json", {}).get("vocab") or repo.config().get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise PipelineError(f"{repo.label} has no phoneme vocabulary: Kokoro needs "
                                "tokenizer.json, vocab.json or config.json's 'vocab'")
        return cls(vocab)

    def encode(self, phonemes, add_special_tokens=True):
        ids = [self.vocab[c] for c in phonemes if c in self.vocab]
        return Encoding([0, *ids, 0] if add_special_tokens else ids)


def _weight(text, part):
    try:
        return float(text)
    except ValueError:
        raise PipelineError(f"A voice blend's weight must be a number: {part!r}") from None


def split(phonemes, count, *, sentences=False, limit=LIMIT):
    """``phonemes`` in parts of at most ``limit`` tokens (``count`` counts them), cut as the
    kokoro package's KPipeline.waterfall_last cuts; with ``sentences``, also at every sentence
    end."""
    pieces = SENTENCE_END.split(phonemes.strip()) if sentences else [phonemes.strip()]
    parts = []
    for piece in pieces:
        words = piece.split()
        while words:
            if count(" ".join(words)) <= limit:
                parts.append(" ".join(words))
                break
            cut = _cut(words, count, limit)
            parts.append(" ".join(words[:cut]))
            words = words[cut:]
    return [p for p in parts if count(p)]


def _cut(words, count, limit):
    """How many leading words the next part takes: the most that fit, cut at the last sentence
    end, else clause end, else comma, else the last word that fits (a word past the limit alone
    is cut between characters)."""
    fit = 0
    while fit < len(words) and count(" ".join(words[:fit + 1])) <= limit:
        fit += 1
    if fit == 0:  # one word longer than the limit
        word = words[0]
        end = max(i for i in range(1, len(word) + 1) if count(word[:i]) <= limit)
        words[0:1] = [word[:end], word[end:]]
        return 1
    for marks in WATERFALL:
        for z in range(fit, 0, -1):
            word = words[z - 1].rstrip(BUMPS)
            if word and word[-1] in marks:
                return z
    return fit
