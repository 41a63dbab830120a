"""Whisper's logits processors: transformers' ``WhisperTimeStampLogitsProcessor``, and the list
Whisper's ``generate`` adds (``_retrieve_logit_processors``), with the processors' signature
``proc(xp, state, scores) -> scores`` and no Python branch on array values (see processors.py).

``begin_index`` (where the generated tokens start) is each row's ``state.prompt_lengths``: the
decoder prompt (``<|startoftranscript|>``, language, task, previous text) is the prompt.
"""

import numpy as np

from ..errors import InputError
from .processors import NEG_INF, SuppressTokens, SuppressTokensAtBegin, last_tokens


class WhisperTimestamps:
    """Timestamp rules: ``<|notimestamps|>`` never; timestamps come in pairs (after a pair, or
    after the first token's timestamp, text must follow; after text then one timestamp, another
    timestamp or eos); timestamps never go back (nor repeat, except to close a segment); the
    first token is a timestamp no later than ``max_initial_timestamp_index``; and when the
    probability mass of all timestamps beats the most likely text token, a timestamp it is."""

    def __init__(self, no_timestamps_token_id, eos_token_id, max_initial_timestamp_index=None,
                 detect_timestamp_from_logprob=True):
        for name, value in (("no_timestamps_token_id", no_timestamps_token_id),
                            ("eos_token_id", eos_token_id)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise InputError(f"{name} must be a token id (an int >= 0), got {value!r}")
        if max_initial_timestamp_index is not None and (
                not isinstance(max_initial_timestamp_index, (int, np.integer))
                or max_initial_timestamp_index < 0):
            raise InputError("max_initial_timestamp_index must be an int >= 0 or None, got "
                             f"{max_initial_timestamp_index!r}")
        self.no_timestamps = int(no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps + 1
        self.eos = int(eos_token_id)
        self.max_initial = max_initial_timestamp_index
        self.detect = bool(detect_timestamp_from_logprob)

    @classmethod
    def from_config(cls, generation_config):
        """From generation_config.json's values (a dict): ``no_timestamps_token_id``, eos (else
        bos) and ``max_initial_timestamp_index``, as transformers reads them."""
        config = generation_config or {}
        if config.get("no_timestamps_token_id") is None:
            raise InputError("Timestamps need generation_config.json's no_timestamps_token_id; "
                             "this model's generation config has none")
        eos = config.get("eos_token_id") or config.get("bos_token_id")
        if isinstance(eos, (list, tuple)) and len(eos) == 1:
            eos = eos[0]
        return cls(config["no_timestamps_token_id"], eos,
                   config.get("max_initial_timestamp_index"),
                   config.get("_detect_timestamp_from_logprob", True))

    def __call__(self, xp, state, scores):
        vocab = xp.arange(scores.shape[-1])[None, :]
        is_timestamp = vocab >= self.timestamp_begin  # [1, V]
        banned = vocab == self.no_timestamps
        banned = banned | self._pairing(xp, state, vocab, is_timestamp)
        first = (state.lengths == state.prompt_lengths)[:, None]
        initial = ~is_timestamp
        if self.max_initial is not None:
            initial = initial | (vocab > self.timestamp_begin + self.max_initial)
        banned = banned | (first & initial)
        neg = xp.asarray(NEG_INF, dtype=scores.dtype)
        scores = xp.where(banned, neg, scores)
        if self.detect:
            scores = xp.where(self._timestamp_wins(xp, scores, is_timestamp)[:, None]
                              & ~is_timestamp, neg, scores)
        return scores

    def _pairing(self, xp, state, vocab, is_timestamp):
        """bool [B, V]: what the pairs rule and the no-going-back rule ban in each row."""
        begin = self.timestamp_begin
        generated = state.lengths - state.prompt_lengths
        penultimate, last = (last_tokens(xp, state, 2)[:, k] for k in (0, 1))
        last_was = (generated >= 1) & (last >= begin)
        penultimate_was = (generated < 2) | (penultimate >= begin)
        banned = ((last_was & penultimate_was)[:, None] & is_timestamp) | \
            ((last_was & ~penultimate_was)[:, None] & (vocab < self.eos))
        # the newest timestamp among the generated tokens (its position, then its id)
        t = state.ids.shape[1]
        at = xp.arange(t)[None, :]
        stamps = (at >= state.prompt_lengths[:, None]) & (at < state.lengths[:, None]) & \
            (state.ids >= begin)
        newest = xp.max(xp.where(stamps, at, -1), axis=1)
        newest_id = xp.take_along_axis(state.ids, xp.clip(newest, 0, t - 1)[:, None], axis=1)[:, 0]
        # a segment's closing timestamp may repeat its start; anything else must move forward
        limit = xp.where(last_was & ~penultimate_was, newest_id, newest_id + 1)
        return banned | ((newest >= 0)[:, None] & is_timestamp & (vocab < limit[:, None]))

    def _timestamp_wins(self, xp, scores, is_timestamp):
        """bool [B]: the log-probability mass of the timestamps beats the best text token's
        (float32 log-softmax, as transformers computes it)."""
        logprobs = xp.log_softmax(xp.astype(scores, np.float32), axis=-1)
        neg = xp.asarray(NEG_INF, dtype=np.float32)
        stamps = xp.where(is_timestamp, logprobs, neg)
        top = xp.max(stamps, axis=-1, keepdims=True)
        safe_top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
        total = xp.sum(xp.exp(stamps - safe_top), axis=-1, keepdims=True)
        # logsumexp: -inf (not log(0) with a warning) where every timestamp is banned
        mass = xp.where(total > 0, xp.log(xp.where(total > 0, total, 1)) + safe_top, neg)[:, 0]
        best_text = xp.max(xp.where(is_timestamp, neg, logprobs), axis=-1)
        return mass > best_text


def whisper_processors(generation_config, return_timestamps=False):
    """The processors Whisper's ``generate`` puts after the usual ones, in its order: the
    begin-suppressed tokens (first generated token only), the suppressed tokens, then (with
    timestamps) the timestamp rules, whose mass rule must see both suppressions. Build the
    usual ones (``processors.build``) without suppress_tokens / begin_suppress_tokens, as
    Whisper's generate clears them from its config."""
    config = generation_config or {}
    procs = []
    if config.get("begin_suppress_tokens") is not None:
        procs.append(SuppressTokensAtBegin(config["begin_suppress_tokens"]))
    if config.get("suppress_tokens") is not None:
        procs.append(SuppressTokens(config["suppress_tokens"]))
    if return_timestamps:
        procs.append(WhisperTimestamps.from_config(config))
    return procs
