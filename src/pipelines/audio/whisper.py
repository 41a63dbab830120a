"""Whisper speech recognition: the encoder once per 30 s window (the feature extractor's
``chunk_length``), then the merged decoder from Whisper's prompt, as transformers'
``WhisperGenerationMixin.generate`` runs a short-form window:

- the prompt (``_retrieve_init_tokens``): ``<|startoftranscript|>``, the language (given, or
  detected: the decoder's first step over the language tokens alone), the task (``transcribe``
  / ``translate``), and ``<|notimestamps|>`` unless timestamps are asked for;
- the processors: ``generate``'s usual ones, then Whisper's own in its order: the
  begin-suppressed and suppressed tokens, and the timestamp rules when ``return_timestamps``
  (beam search by default: the pipeline's ``num_beams=5``, as transformers).

The tokens of every window go to the tokenizer's ``_decode_asr`` (whisper_text.py), which merges
chunked windows and turns timestamp tokens into seconds.
"""

import dataclasses

import numpy as np

from ...generation import GenerationConfig
from ...generation.config import check_options
from ...generation.seq2seq import Seq2SeqGenerator
from ..base import PipelineError

# transformers' AutomaticSpeechRecognitionPipeline._default_generation_config
PIPELINE_DEFAULTS = {"max_new_tokens": 256, "num_beams": 5}
WHISPER_OPTIONS = ("language", "task")


def is_whisper(config):
    return (config or {}).get("model_type") == "whisper"


class Head:
    align_to = 1  # Whisper has no inputs_to_logits_ratio: windows are cut at any sample

    def __init__(self, pipe, model, config, *, repo=None, encoder=None, encoder_variant=None):
        from ..text.text2text import _load_encoder

        self.pipe, self.config = pipe, dict(config or {})
        self.generator = model.shared.get("seq2seq")
        if self.generator is None or encoder is not None:
            encoder = encoder or _load_encoder(repo, model, encoder_variant)
            self.generator = model.shared["seq2seq"] = Seq2SeqGenerator(encoder, model, config)
        self.file = repo.json("generation_config.json", {}) if repo else {}
        self.lang_to_id = self.file.get("lang_to_id") or {}
        self.task_to_id = self.file.get("task_to_id") or {}
        self.no_timestamps = self.file.get("no_timestamps_token_id")

    # --- options -------------------------------------------------------------------------------

    def sanitize(self, return_timestamps, return_language, options):
        whisper = {k: options.pop(k) for k in WHISPER_OPTIONS if k in options}
        check_options(self.pipe.task, options)
        if return_timestamps is None:
            return_timestamps = self.file.get("return_timestamps") or None
        if return_timestamps not in (None, False, True, "word"):
            raise PipelineError("Whisper returns segment timestamps (return_timestamps=True) or "
                                f"word timestamps ('word'), got {return_timestamps!r}")
        if return_timestamps == "word":
            raise PipelineError("return_timestamps='word' needs an export with cross-attention "
                                "outputs, which Transmuter does not run yet; use "
                                "return_timestamps=True for segment timestamps")
        config = GenerationConfig.from_dicts(self.file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS, **options)
        if config.pad_token_id is None:
            config.pad_token_id = (config.eos_token_id or [None])[0]
        language = self._language_id(whisper.get("language"))
        task = self._task_id(whisper.get("task"))
        fwd = {"config": config, "language": language, "task": task,
               "timestamps": bool(return_timestamps)}
        return fwd, {"timestamps": return_timestamps or None, "language": return_language}

    def _language_id(self, language):
        """transformers' language_to_id: a token ("<|fr|>"), a code ("fr") or a name
        ("french")."""
        if language is None:
            return None
        if not self.lang_to_id:
            raise PipelineError("This Whisper model is English-only (no lang_to_id in "
                                "generation_config.json): it takes no language=")
        from .whisper_text import TO_LANGUAGE_CODE

        lang = str(language).lower()
        token = lang if lang in self.lang_to_id else \
            f"<|{TO_LANGUAGE_CODE[lang]}|>" if lang in TO_LANGUAGE_CODE else f"<|{lang}|>"
        if token not in self.lang_to_id:
            raise PipelineError(f"Unsupported language {language!r}: this model knows "
                                f"{', '.join(sorted(t.strip('<|>') for t in self.lang_to_id))}")
        return int(self.lang_to_id[token])

    def _task_id(self, task):
        if task is None:
            return None
        if task not in ("transcribe", "translate") or task not in self.task_to_id:
            raise PipelineError(f"task must be 'transcribe' or 'translate' (of this model's "
                                f"{sorted(self.task_to_id)}), got {task!r}")
        return int(self.task_to_id[task])

    # --- features ------------------------------------------------------------------------------

    def features(self, samples):
        return self.pipe.feature_extractor(samples)

    def whole(self, samples):
        fe = self.pipe.feature_extractor
        if len(samples) > fe.n_samples:
            raise PipelineError(
                f"The recording is {len(samples) / fe.sampling_rate:.1f} s long, past Whisper's "
                f"{fe.n_samples / fe.sampling_rate:g} s window: pass chunk_length_s="
                f"{fe.n_samples // fe.sampling_rate} (Transmuter does not run Whisper's "
                "sequential long-form decoding yet)")
        yield {"audio": self.features(samples), "stride": None, "is_last": True}

    # --- generation ----------------------------------------------------------------------------

    def forward(self, chunks, config, language, task, timestamps):
        pipe, gen = self.pipe, self.generator
        items = [c["audio"] for c in chunks]
        encoded = gen.encode(pipe.featurizer.batch(items, pipe._rows(len(items)),
                                                   gen.encoder_inputs, pipe.task))
        encoded = encoded._replace(states=encoded.states[:len(chunks)],
                                   padding=encoded.padding[:len(chunks)])
        prompts = self._prompts(encoded, config, language, task, timestamps)
        processors = self._processors(config, timestamps)
        config = dataclasses.replace(config, suppress_tokens=None, begin_suppress_tokens=None)
        if config.num_beams > 1:
            new = [seqs[0] for seqs in gen.beam_search(prompts, config, encoded, processors)[0]]
        else:
            new = gen.generate(prompts, config, encoded, processors=processors)
        ends = set(config.eos_token_id) | {config.pad_token_id}
        out = []
        for chunk, ids in zip(chunks, new):
            ids = [int(i) for i in ids]
            while ids and ids[-1] in ends:  # generate cuts the padding and eos
                ids.pop()
            out.append({"tokens": np.array([self._segments(ids)], np.int64),
                        "stride": chunk["stride"]})
        return out

    def _segments(self, ids):
        """The tokens generate keeps of a window (``_retrieve_segment``): with timestamp pairs,
        up to the last pair (or the whole when it ends on a single timestamp); the rest is an
        unfinished segment, dropped."""
        if self.no_timestamps is None:
            return ids
        stamp = [i > self.no_timestamps for i in ids]  # timestamp_begin = no_timestamps + 1
        pairs = [i + 1 for i in range(len(ids) - 1) if stamp[i] and stamp[i + 1]]
        if not pairs:
            return ids
        single_ending = stamp[-2:] == [False, True]
        return ids if single_ending else ids[:pairs[-1] + 1]

    def _prompts(self, encoded, config, language, task, timestamps):
        """Each row's prompt, as transformers' _retrieve_init_tokens."""
        start = int(config.decoder_start_token_id)
        forced = self.file.get("forced_decoder_ids") or []
        if language is None and task is None and forced and forced[0][0] == 1:
            head = [start] + [t for _, t in forced]  # the legacy forced ids, None = detect
        else:
            head = [start]
        rows = [list(head) for _ in range(len(encoded.states))]
        lang_undefined = len(head) <= 1 or head[1] is None
        if language is not None:
            langs = [language] * len(rows)
        elif self.lang_to_id and lang_undefined:
            langs = self._detect(encoded, start)
        else:
            langs = None
        for b, row in enumerate(rows):
            if langs is not None:
                if len(row) > 1:
                    row[1] = langs[b]
                else:
                    row.append(langs[b])
            if task is not None:
                row.append(task)
            elif language is not None and self.task_to_id and \
                    not any(t in row for t in self.task_to_id.values()):
                row.append(int(self.task_to_id["transcribe"]))
            if not timestamps and self.no_timestamps is not None and row[-1] != self.no_timestamps:
                row.append(int(self.no_timestamps))
            elif timestamps and row[-1] == self.no_timestamps:
                row.pop()
            rows[b] = [int(t) for t in row if t is not None]
        return rows

    def _detect(self, encoded, start):
        """The language token of each row: the decoder's first step after the start token,
        its logits outside the language tokens masked (transformers' detect_language)."""
        one = GenerationConfig(max_new_tokens=1, eos_token_id=[], decoder_start_token_id=start)
        languages = np.array(sorted(int(i) for i in self.lang_to_id.values()))
        rows = len(encoded.states)
        return [int(t[0]) for t in self.generator.generate([[start]] * rows, one, encoded,
                                                           processors=[_Only(languages)])]

    def _processors(self, config, timestamps):
        """Whisper's own processors (whisper_processors.py), from the call's settings."""
        from ...generation.whisper_processors import whisper_processors

        settings = dict(self.file, suppress_tokens=config.suppress_tokens,
                        begin_suppress_tokens=config.begin_suppress_tokens,
                        eos_token_id=config.eos_token_id)
        return whisper_processors(settings, return_timestamps=timestamps)

    # --- text ----------------------------------------------------------------------------------

    def postprocess(self, outputs, timestamps=None, language=None):
        from .whisper_text import decode_asr

        fe, rate = self.pipe.feature_extractor, self.pipe.sampling_rate
        precision = fe.chunk_length / self.config["max_source_positions"]
        model_outputs = []
        for out in outputs:
            item = {"tokens": out["tokens"]}
            if out["stride"] is not None:
                item["stride"] = tuple(s / rate for s in out["stride"])
            model_outputs.append(item)
        text, optional = decode_asr(self.pipe.tokenizer, model_outputs,
                                    return_timestamps=timestamps, return_language=language,
                                    time_precision=precision)
        return {"text": text, **optional}


class _Only:
    """A processor keeping only ``tokens`` (language detection's mask)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def __call__(self, xp, state, scores):
        keep = np.zeros((1, scores.shape[-1]), bool)
        keep[0, self.tokens[self.tokens < scores.shape[-1]]] = True
        return xp.where(xp.asarray(keep), scores, xp.asarray(-np.inf, dtype=scores.dtype))
