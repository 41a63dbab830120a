"""Whisper speech recognition: the encoder once per 30 s window (the feature extractor's
``chunk_length``), then the decoder (merged, or a split pair) from Whisper's prompt, as
transformers' ``WhisperGenerationMixin.generate`` runs each window (a recording past one window,
with ``return_timestamps``, is decoded window after window, each starting at the last timestamp
of the one before: transformers' sequential long-form decoding):

- the prompt (``_retrieve_init_tokens``): ``<|startoftranscript|>``, the language (given, or
  detected: the decoder's first step over the language tokens alone), the task (``transcribe``
  / ``translate``), and ``<|notimestamps|>`` unless timestamps are asked for;
- the processors: ``generate``'s usual ones, then Whisper's own in its order: the
  begin-suppressed and suppressed tokens, and the timestamp rules when ``return_timestamps``
  (beam search by default: the pipeline's ``num_beams=5``, as transformers).

The tokens of every window go to the tokenizer's ``_decode_asr`` (pipelines/audio/whisper/text.py),
which merges chunked windows and turns timestamp tokens into seconds.
"""

import dataclasses

import numpy as np

from ....generation import GenerationConfig
from ....generation.config import check_options
from ....generation.whisper_processors import whisper_processors
from ... import encoder_decoder
from ....errors import PipelineError
from .fallback import Fallback, generate_with_fallback, prev_sot
from .prompt_ids import GivenPrompt
from .text import TO_LANGUAGE_CODE, decode_asr
from .words import token_timestamps

# transformers' AutomaticSpeechRecognitionPipeline._default_generation_config
PIPELINE_DEFAULTS = {"max_new_tokens": 256, "num_beams": 5}
WHISPER_OPTIONS = ("language", "task")


def is_whisper(config):
    return (config or {}).get("model_type") == "whisper"


class Head:
    align_to = 1  # Whisper has no inputs_to_logits_ratio: windows are cut at any sample

    def __init__(self, pipe, model, config, *, repo=None, encoder=None, encoder_variant=None):
        self.pipe, self.config = pipe, dict(config or {})
        self.generator = encoder_decoder.generator(model, config, repo, encoder, encoder_variant)
        self.file = repo.json("generation_config.json", {}) if repo else {}
        self.lang_to_id = self.file.get("lang_to_id") or {}
        self.task_to_id = self.file.get("task_to_id") or {}
        self.no_timestamps = self.file.get("no_timestamps_token_id")
        self.decoder_file = (getattr(model, "origin", None) or (None, None))[1]
        # per decoder layer, in order: what word timestamps align (pipelines/audio/whisper/
        # words.py); a split pair's are its decoder_model's, which _cross_attentions runs
        self.attention_outputs = sorted(
            (v.name for v in model.outputs if v.name.startswith("cross_attentions.")),
            key=lambda n: int(n.rsplit(".", 1)[1]))

    # --- options -------------------------------------------------------------------------------

    def sanitize(self, return_timestamps, return_language, options):
        whisper = {k: options.pop(k) for k in WHISPER_OPTIONS if k in options}
        fallback = Fallback.from_options(options, self.file)
        prompt = GivenPrompt.from_options(options, fallback, int(self.config["vocab_size"]))
        check_options(self.pipe.task, options)
        if return_timestamps is None:
            return_timestamps = self.file.get("return_timestamps") or None
        if return_timestamps not in (None, False, True, "word"):
            raise PipelineError("Whisper returns segment timestamps (return_timestamps=True) or "
                                f"word timestamps ('word'), got {return_timestamps!r}")
        if return_timestamps == "word" and not self.attention_outputs:
            raise PipelineError(self._no_attentions_message())
        config = GenerationConfig.from_dicts(self.file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS, **options)
        if config.pad_token_id is None:
            config.pad_token_id = (config.eos_token_id or [None])[0]
        language = self._language_id(whisper.get("language"))
        task = self._task_id(whisper.get("task"))
        fwd = {"config": config, "language": language, "task": task,
               "timestamps": bool(return_timestamps), "words": return_timestamps == "word",
               "fallback": fallback, "prompt": prompt}
        return fwd, {"timestamps": return_timestamps or None, "language": return_language}

    def _no_attentions_message(self):
        """Which file word timestamps need: the first decoder call's graph (the merged decoder,
        or a split pair's decoder_model, which the alignment is read from) with outputs
        cross_attentions.*."""
        name = str(self.decoder_file).replace("\\", "/").rsplit("/", 1)[-1] \
            if self.decoder_file else "the decoder"
        split = self.generator.decoder.layout.first_presents is not None
        wanted = "onnx/decoder_model.onnx (with its decoder_with_past_model.onnx)" if split else \
            "onnx/decoder_model_merged.onnx"
        return (f"return_timestamps='word' reads the alignment heads' cross-attentions, and {name} "
                "has no cross_attentions.* outputs: use an export whose "
                f"{wanted} outputs them (the 'timestamped' Whisper repos of transformers.js / "
                "onnx-community, e.g. onnx-community/whisper-base_timestamped), or "
                "return_timestamps=True for segment timestamps")

    def _language_id(self, language):
        """transformers' language_to_id: a token ("<|fr|>"), a code ("fr") or a name
        ("french")."""
        if language is None:
            return None
        if not self.lang_to_id:
            raise PipelineError("This Whisper model is English-only (no lang_to_id in "
                                "generation_config.json): it takes no language=")
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
        """One chunk for the recording: a window's features, or past one window the whole
        recording's (``truncation=False``, as transformers' pipeline makes them for Whisper's
        sequential long-form decoding)."""
        fe = self.pipe.feature_extractor
        if len(samples) > fe.n_samples:
            features = fe(samples, truncation=False, padding="longest")
        else:
            features = self.features(samples)
        yield {"audio": features, "stride": None, "is_last": True}

    # --- generation ----------------------------------------------------------------------------

    def forward(self, chunks, config, language, task, timestamps, words=False, fallback=None,
                prompt=GivenPrompt()):
        """transformers' seek loop (``WhisperGenerationMixin.generate``): each row's features
        are cut into windows of ``num_segment_frames``, zero-padded; a window's tokens up to its
        last timestamp pair are kept, and the next window starts at that timestamp (or after the
        window). A short clip is one window; without timestamps, every window is. A given
        ``prompt`` (pipelines/audio/whisper/prompt_ids.py) goes before each window's start
        tokens."""
        features = [c["audio"]["input_features"] for c in chunks]
        frames = [f.shape[-1] for f in features]
        window = self.num_segment_frames
        if max(frames) > window and not timestamps:
            raise PipelineError(
                f"The recording is past Whisper's {window} frames (its long-form transcription "
                "predicts timestamp tokens): pass return_timestamps=True, or chunk_length_s to "
                "cut it into windows")
        seek, stamps = [0] * len(chunks), [[] for _ in chunks]
        # each row's kept tokens, window by window, after what it holds from the prompt
        given = prompt.first_windows(prev_sot(self.file))
        kept_windows = [list(given) for _ in chunks]
        condition = [fallback.condition_on_prev_tokens] * len(chunks)
        prompts = None
        processors = self._processors(config, timestamps)
        config = dataclasses.replace(config, suppress_tokens=None, begin_suppress_tokens=None)
        while any(s < n for s, n in zip(seek, frames)):
            rows = [b for b in range(len(chunks)) if seek[b] < frames[b]]
            spans = [min(frames[b] - seek[b], window) for b in rows]
            encoded = self._encode([_window(features[b], seek[b], n, window)
                                    for b, n in zip(rows, spans)])
            if prompts is None:  # the language is detected once, on the first window
                prompts = self._prompts(encoded, config, language, task, timestamps)
            window_prompts = [prompt.window(self, prompts[b], kept_windows[b], condition[b])
                              for b in rows]
            self._check_length(max(window_prompts, key=len), config)
            generated, skip, used = generate_with_fallback(self, window_prompts, config,
                                                           encoded, processors, fallback)
            if words:
                times = self._token_times([chunks[b] for b in rows], window_prompts,
                                          generated, encoded, config, [seek[b] for b in rows])
            ends = set(config.eos_token_id) | {config.pad_token_id}
            for i, (b, n, ids) in enumerate(zip(rows, spans, generated)):
                condition[b] = fallback.condition_on_prev_tokens and (used[i] is None or
                                                                      used[i] < 0.5)
                if skip[i]:  # silence: nothing kept, the next window after this one
                    seek[b] += n
                    continue
                kept, advance = self._segment(_cut(ids, ends), n)
                if words:  # the kept tokens' times, offset by the window's start (10 ms frames)
                    at = len(window_prompts[i])
                    stamps[b].append(times[i][at:at + len(kept)] + seek[b] * 0.02 / 2)
                kept_windows[b].append(kept)
                seek[b] += advance
        out = [{"tokens": np.array([sum(w[len(given):], [])], np.int64), "stride": c["stride"]}
               for c, w in zip(chunks, kept_windows)]
        if words:
            for o, parts in zip(out, stamps):
                o["token_timestamps"] = np.concatenate(parts)[None].astype(np.float32)
        return out

    def _token_times(self, chunks, prompts, generated, encoded, config, seeks):
        """Each row's token times from the decoder's cross-attentions
        (pipelines/audio/whisper/words.py), as transformers' ``_extract_token_timestamps`` takes
        them: the prompt and the generated tokens but the last fed again in one teacher-forced
        call (the same attention rows as the steps); greedy rows padded to the batch's steps with
        the pad token, as generate keeps feeding a finished row; a beam's sequence alone."""
        fe = self.pipe.feature_extractor
        # the frames left from the window's start (generate's num_frames - seek), at most one
        # window's: the attention is cut to half of them
        frames = [min(-(-c["samples"] // fe.hop_length) - s, fe.nb_max_frames)
                  for c, s in zip(chunks, seeks)]
        beams = config.num_beams > 1
        steps = max(len(g) for g in generated)
        sequences = [p + (g if beams else g + [config.pad_token_id] * (steps - len(g)))
                     for p, g in zip(prompts, generated)]
        groups = [[b] for b in range(len(chunks))] if beams else [list(range(len(chunks)))]
        times = [None] * len(chunks)
        for rows in groups:
            layers = self._cross_attentions([sequences[b][:-1] for b in rows],
                                            encoded.states[rows])
            got = token_timestamps(layers, self.file["alignment_heads"],
                                   num_frames=[frames[b] for b in rows],
                                   num_input_ids=len(prompts[rows[0]]),
                                   median_filter_width=self.config.get("median_filter_width", 7))
            for i, b in enumerate(rows):
                times[b] = got[i]
        return times

    def _cross_attentions(self, sequences, states):
        """The decoder's cross-attentions over ``sequences`` (rows of one length), per layer."""
        dec = self.generator.decoder
        feed = {"input_ids": np.array(sequences, np.int64), "encoder_hidden_states": states}
        if "attention_mask" in dec.first_dtypes:
            feed["attention_mask"] = np.ones(feed["input_ids"].shape, np.int64)
        feed = {k: np.asarray(v).astype(dec.first_dtypes[k], copy=False) for k, v in feed.items()}
        caches = dec.layout.first_caches(len(sequences), dec.model_config,
                                         cross_length=states.shape[1])
        with dec.model.backend.scope():
            out = dec.first_fn({**feed, **caches})
        return [np.asarray(out[name], np.float32) for name in self.attention_outputs]

    @property
    def num_segment_frames(self):
        """Frames of one window: the encoder's positions times its conv stride (2)."""
        return 2 * int(self.config["max_source_positions"])

    def _encode(self, windows):
        pipe, gen = self.pipe, self.generator
        items = [{"input_features": w} for w in windows]
        encoded = gen.encode(pipe.featurizer.batch(items, pipe._rows(len(items)),
                                                   gen.encoder_inputs, pipe.task))
        return encoded._replace(states=encoded.states[:len(items)],
                                padding=encoded.padding[:len(items)])

    def _generate(self, prompts, config, encoded, processors):
        """Each row's new tokens (eos included when generated)."""
        gen = self.generator
        if config.num_beams > 1:
            new = [seqs[0] for seqs in gen.beam_search(prompts, config, encoded, processors)[0]]
        else:
            new = gen.generate(prompts, config, encoded, processors=processors)
        return [[int(i) for i in ids] for ids in new]

    def _check_length(self, prompt, config):
        limit = self.config.get("max_target_positions")
        new = config.max_new_tokens or 0
        if limit and new + len(prompt) > limit:
            raise PipelineError(f"The decoder's {len(prompt)} input tokens (start tokens, "
                                f"prompt_ids and previous text) and max_new_tokens={new} "
                                f"exceed Whisper's {limit} decoder positions: shorten "
                                "prompt_ids or reduce max_new_tokens")

    def _segment(self, ids, frames):
        """(tokens kept, frames to advance) of a window of ``frames`` frames, as
        ``_retrieve_segment``: with timestamp pairs, the tokens up to the last pair (all of them
        when the window ends on a single timestamp); the next window starts at the last pair's
        first timestamp, or after this one."""
        if self.no_timestamps is None:
            return ids, frames
        begin = self.no_timestamps + 1  # timestamp_begin
        stamp = [i >= begin for i in ids]
        pairs = [i + 1 for i in range(len(ids) - 1) if stamp[i] and stamp[i + 1]]
        if not pairs:
            return ids, frames
        if stamp[-2:] == [False, True]:  # a single timestamp ending
            return ids, frames
        end = pairs[-1] + 1
        return ids[:end], (ids[end - 2] - begin) * 2  # timestamp positions count 2 frames

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
        settings = dict(self.file, suppress_tokens=config.suppress_tokens,
                        begin_suppress_tokens=config.begin_suppress_tokens,
                        eos_token_id=config.eos_token_id)
        return whisper_processors(settings, return_timestamps=timestamps)

    # --- text ----------------------------------------------------------------------------------

    def postprocess(self, outputs, timestamps=None, language=None):
        fe, rate = self.pipe.feature_extractor, self.pipe.sampling_rate
        precision = fe.chunk_length / self.config["max_source_positions"]
        model_outputs = []
        for out in outputs:
            item = {k: out[k] for k in ("tokens", "token_timestamps") if k in out}
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


def _window(features, seek, frames, window):
    """features[:, seek:seek + frames], zero-padded to ``window`` frames (_get_input_segment)."""
    part = features[:, seek:seek + frames]
    if part.shape[-1] < window:
        part = np.pad(part, ((0, 0), (0, window - part.shape[-1])))
    return part


def _cut(ids, ends):
    """``ids`` without the trailing padding and eos (as generate_with_fallback cuts them)."""
    ids = list(ids)
    while ids and ids[-1] in ends:
        ids.pop()
    return ids
