"""Whisper's temperature fallback and previous-text conditioning, as transformers 4.57's
``WhisperGenerationMixin`` runs them (models/whisper/generation_whisper.py):

- ``temperature``: a float or a tuple of them; each window is decoded at the first, and a row
  that ``needs_fallback`` is decoded again at the next (``generate_with_fallback``). A
  temperature of 0 is greedy (or beam search), above 0 sampling (one beam): Whisper's
  ``do_sample`` is ``temperature > 0`` whatever the call's do_sample says;
- ``compression_ratio_threshold``: the window's ids (eos included) as bytes compress by zlib
  less than this, or it falls back (``_retrieve_compression_ratio``);
- ``logprob_threshold``: the mean log-probability of its tokens (eos included) under the
  processed scores is at least this, or it falls back (``_retrieve_avg_logprobs``; with beams,
  the scores of the beam each token came from, renormalized, as its ``beam_indices`` pick them);
- ``no_speech_threshold`` (with logprob_threshold): a window whose mean log-probability is
  under logprob_threshold and whose ``<|nocaptions|>`` probability after
  ``<|startoftranscript|>`` is over this is silence: skipped, nothing kept
  (``WhisperNoSpeechDetection``);
- ``condition_on_prev_tokens``: each window's prompt starts with ``<|startofprev|>`` and the
  last ``max_target_positions // 2 - 1`` tokens kept so far (a segment ending on two
  timestamps gives only the first), while the row's last window ran under temperature 0.5
  (``_prepare_decoder_input_ids``).

transformers decides conditioning for a batch by its first row's segments; here each row
decides by its own, so a batch equals its rows one by one.
"""

import dataclasses
import math
import zlib

import numpy as np

from ....generation import GenerationConfig
from ....errors import PipelineError

OPTIONS = ("temperature", "compression_ratio_threshold", "logprob_threshold",
           "no_speech_threshold", "condition_on_prev_tokens")


@dataclasses.dataclass
class Fallback:
    temperatures: tuple = (None,)
    compression_ratio_threshold: float = None
    logprob_threshold: float = None
    no_speech_threshold: float = None
    condition_on_prev_tokens: bool = False

    @classmethod
    def from_options(cls, options, file):
        """From the call's options (popped) and generation_config.json's values."""
        given = {k: options.pop(k) for k in OPTIONS if k in options}
        values = {k: given.get(k, file.get(k)) for k in OPTIONS}
        temperature = values.pop("temperature")
        temperatures = tuple(temperature) if isinstance(temperature, (list, tuple)) else \
            (temperature,)
        if not temperatures or not all(t is None or _number(t) and t >= 0 for t in temperatures):
            raise PipelineError(f"temperature must be a number >= 0 or a tuple of them, got "
                                f"{temperature!r}")
        for name in OPTIONS[1:4]:
            if values[name] is not None and not _number(values[name]):
                raise PipelineError(f"{name} must be a number, got {values[name]!r}")
        if values["no_speech_threshold"] is not None and values["logprob_threshold"] is None:
            raise PipelineError("no_speech_threshold needs logprob_threshold: a window is "
                                "silence when its mean log-probability is under "
                                "logprob_threshold and its no-speech probability is over "
                                "no_speech_threshold (transformers fails without it)")
        condition = values.pop("condition_on_prev_tokens")
        if condition not in (None, True, False):
            raise PipelineError(f"condition_on_prev_tokens must be a bool, got {condition!r}")
        return cls(temperatures, condition_on_prev_tokens=bool(condition), **values)

    def config_at(self, config, temperature):
        """``config`` for one pass: sampling at ``temperature`` > 0 (one beam), else greedy."""
        sample = temperature is not None and temperature > 0.0
        return dataclasses.replace(config, do_sample=sample,
                                   temperature=temperature if sample else 1.0,
                                   num_beams=1 if sample else config.num_beams)

    @property
    def scores_needed(self):
        return self.logprob_threshold is not None

    def decide(self, ids, logprob, no_speech, vocab_size):
        """(needs fallback, skip) of a window's ``ids`` (eos included), as ``_need_fallback``."""
        fallback = skip = False
        if self.compression_ratio_threshold is not None and \
                compression_ratio(ids, vocab_size) > self.compression_ratio_threshold:
            fallback = True
        if self.logprob_threshold is not None and logprob < self.logprob_threshold:
            fallback = True
        if self.no_speech_threshold is not None and logprob < self.logprob_threshold and \
                no_speech > self.no_speech_threshold:
            fallback, skip = False, True
        return fallback, skip


def compression_ratio(ids, vocab_size):
    """Bytes of the ids (little-endian, as few bytes as the vocabulary needs) over their zlib
    compression's."""
    width = int(math.log2(vocab_size) / 8) + 1
    raw = b"".join(int(t).to_bytes(width, "little") for t in ids)
    return len(raw) / len(zlib.compress(raw))


def mean_logprob(steps, ids, temperature, top_k=None):
    """The mean log-probability of ``ids`` under ``steps`` (each step's processed scores [V],
    before any temperature; a sampled pass masks all but its top_k, as its warper did)."""
    steps = np.asarray(steps, np.float32)[:len(ids)]
    ids = list(ids)[-len(steps):]
    if temperature and top_k:  # TopKLogitsWarper: under the k-th best score is out
        k = min(int(top_k), steps.shape[-1])
        kth = -np.sort(-steps, axis=-1)[:, k - 1:k]
        steps = np.where(steps < kth, -np.inf, steps)
    top = steps.max(axis=-1, keepdims=True)
    logprobs = steps - top - np.log(np.exp(steps - top).sum(axis=-1, keepdims=True))
    return float(sum(logprobs[i, t] for i, t in enumerate(ids)) / len(ids))


def previous_text(windows, timestamp_begin, limit):
    """The tokens a conditioned prompt repeats: each window's kept segments (a segment ending
    on two timestamps without its last), joined, the last ``limit`` of them."""
    tokens = []
    for kept in windows:
        for segment in segments(kept, timestamp_begin):
            ends_double = len(segment) > 2 and segment[-2] >= timestamp_begin
            tokens += segment[:-1] if ends_double else segment
    return tokens[-limit:] if limit > 0 else []


def segments(ids, timestamp_begin):
    """``ids`` cut where two timestamps follow each other, as ``_retrieve_segment`` slices."""
    stamp = [i >= timestamp_begin for i in ids]
    cuts = [i + 1 for i in range(len(ids) - 1) if stamp[i] and stamp[i + 1]]
    if not cuts:
        return [list(ids)]
    if stamp[-2:] == [False, True]:  # a single timestamp ending
        cuts.append(len(ids))
    else:
        cuts[-1] += 1
    out, at = [], 0
    for cut in cuts:
        out.append(list(ids[at:cut]))
        at = cut
    return out


def conditioned(head, prompt, windows, condition, bos=None):
    """``prompt`` after ``<|startofprev|>`` (or ``bos``: a given prompt of ``all-segments``)
    and the text kept so far, when the row conditions on it (module docstring)."""
    if not (condition and windows) or head.no_timestamps is None:
        return prompt
    if bos is None:
        prev = prev_sot(head.file)
        bos = [int(prev)] if prev is not None else []
    limit = int(head.config["max_target_positions"]) // 2 - 1
    text = previous_text(windows, head.no_timestamps + 1, limit)
    return list(bos) + text + prompt


def prev_sot(file):
    """``<|startofprev|>``: the generation config's, else (as transformers) the second last
    suppressed token."""
    prev = file.get("prev_sot_token_id")
    if prev is None:
        suppressed = file.get("suppress_tokens") or []
        prev = suppressed[-2] if len(suppressed) >= 2 else None
    return prev


def generate_with_fallback(head, prompts, config, encoded, processors, fallback):
    """Each row's ids (eos included), whether it is silence, and the temperature that made
    them: transformers' ``generate_with_fallback`` (module docstring)."""
    rows = len(prompts)
    ids, skip, used = [None] * rows, [False] * rows, [None] * rows
    no_speech = _no_speech(head, prompts, encoded) \
        if fallback.no_speech_threshold is not None else [0.0] * rows
    todo = list(range(rows))
    for k, temperature in enumerate(fallback.temperatures):
        step = fallback.config_at(config, temperature)
        record = Recorder() if fallback.scores_needed else None
        part = encoded._replace(states=encoded.states[todo], padding=encoded.padding[todo],
                                mask=None if encoded.mask is None else encoded.mask[todo])
        got = head._generate([prompts[i] for i in todo], step, part,
                             [*processors, *([record] if record else [])])
        again = []
        for j, i in enumerate(todo):
            logprob = None
            if record is not None:
                logprob = mean_logprob(record.rows(j, step.num_beams, prompts[i] + got[j]),
                                       got[j], temperature, step.top_k if step.do_sample else None)
            need, skip[i] = fallback.decide(got[j], logprob, no_speech[i],
                                            int(head.config["vocab_size"]))
            ids[i], used[i] = got[j], temperature
            if need:
                again.append(i)
        todo = again
        if not todo or k == len(fallback.temperatures) - 1:
            break
    return ids, skip, used


def _no_speech(head, prompts, encoded):
    """Each row's ``<|nocaptions|>`` probability after ``<|startoftranscript|>`` (the raw
    logits' softmax), as transformers' WhisperNoSpeechDetection."""
    start = int(head.file.get("decoder_start_token_id") or head.config["decoder_start_token_id"])
    # up to the last start token: a conditioned prompt's previous text comes before it
    heads = [p[:len(p) - p[::-1].index(start)] for p in prompts]
    record = Recorder()
    one = GenerationConfig(max_new_tokens=1, eos_token_id=[], decoder_start_token_id=start)
    head.generator.generate(heads, one, encoded, processors=[record])
    logits = record.steps[0][0].astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return [float(p) for p in probs[:, head.no_timestamps - 1]]


class Recorder:
    """A processor that keeps each step's scores and rows' ids (the last of a pass's
    processors)."""

    def __init__(self):
        self.steps = []

    def __call__(self, xp, state, scores):
        self.steps.append((np.array(scores, np.float32), np.array(state.ids),
                           np.array(state.lengths)))
        return scores

    def rows(self, b, beams, sequence):
        """Input ``b``'s scores at each step of ``sequence`` (its prompt and new ids): with
        beams, the row of the beam that held the sequence's prefix then (beams with one prefix
        have the same scores)."""
        out = []
        for scores, ids, lengths in self.steps:
            rows = range(b * beams, (b + 1) * beams)
            row = next((r for r in rows if list(ids[r, :lengths[r]]) == sequence[:lengths[r]]),
                       None)
            if row is None:
                break
            out.append(scores[row])
        return out


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
