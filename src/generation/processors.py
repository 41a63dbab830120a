"""Logits processors: transformers' ``logits_process.py``, as small validated callables.

Each processor is ``proc(xp, state, scores) -> scores`` over an array namespace ``xp`` (the host's
NumPy namespace, or a backend's under jit). They never branch in Python on array values: every
condition that depends on the step (a row's length, its tokens) is an ``xp.where``, so the same
code runs eagerly and inside a compiled step. ``state`` is the fixed-shape generation state:

    ids          int64 [B, T]  prompt then generated tokens, left-aligned; rows padded after
    lengths      int64 [B]     valid tokens per row (prompt + generated so far)
    prompt_lengths int64 [B]   where each row's generated tokens start
    max_lengths  int64 [B]     the length at which each row must stop

Lengths count the prompt, as transformers counts them for decoder-only models (min_length and
n-grams include the prompt).
"""

import collections

import numpy as np

from ..errors import InputError

NEG_INF = -np.inf

State = collections.namedtuple("State", "ids lengths prompt_lengths max_lengths")


def _ban(xp, scores, mask):
    return xp.where(mask, xp.asarray(NEG_INF, dtype=scores.dtype), scores)


def _token_mask(xp, scores, token_ids):
    """bool [1, V]: True at ``token_ids`` (fixed, known when the processor is built)."""
    mask = np.zeros((1, scores.shape[-1]), bool)
    mask[0, [i for i in token_ids if i < scores.shape[-1]]] = True
    return xp.asarray(mask)


def _ban_tokens(xp, scores, token_ids, rows=None):
    """``scores`` with the columns ``token_ids`` at -inf, in the rows where ``rows`` (bool [B])
    is True, or in all. Only those columns are read and written: a mask as wide as the
    vocabulary cost three passes over [B, V] per processor (Whisper's 51,865 columns at batch 4:
    0.4-0.5 ms a processor a step on the host)."""
    cols = np.asarray(sorted({i for i in token_ids if 0 <= i < scores.shape[-1]}), np.int64)
    if not cols.size:
        return scores
    banned = xp.asarray(NEG_INF, dtype=scores.dtype)
    if rows is not None:
        banned = xp.where(rows[:, None], banned, scores[:, cols])
    return xp.index_update(scores, (slice(None), cols),
                           xp.broadcast_to(banned, (scores.shape[0], cols.size)))


def _row_mask(xp, shape, rows, cols, valid):
    """bool [B, V]: True at (rows[i], cols[i]) wherever ``valid[i]`` (a scatter of flags)."""
    flags = xp.zeros(shape, dtype=np.int32)
    flags = xp.index_update(flags, (rows, xp.clip(cols, 0, shape[1] - 1)),
                            xp.astype(valid, np.int32), mode="max")
    return flags > 0


def _present(xp, state, vocab):
    """bool [B, V]: tokens present among each row's valid ids."""
    b, t = state.ids.shape
    rows = xp.broadcast_to(xp.arange(b)[:, None], (b, t))
    valid = xp.arange(t)[None, :] < state.lengths[:, None]
    return _row_mask(xp, (b, vocab), xp.reshape(rows, (-1,)), xp.reshape(state.ids, (-1,)),
                     xp.reshape(valid, (-1,)))


def last_tokens(xp, state, n):
    """int64 [B, n]: each row's last n valid tokens (clipped at the row start)."""
    at = state.lengths[:, None] - n + xp.arange(n)[None, :]
    return xp.take_along_axis(state.ids, xp.clip(at, 0, state.ids.shape[1] - 1), axis=1)


class RepetitionPenalty:
    """Divide positive (multiply negative) scores of tokens already in the row (CTRL paper)."""

    def __init__(self, penalty):
        if not isinstance(penalty, (int, float)) or penalty <= 0:
            raise InputError(f"repetition_penalty must be a positive number, got {penalty!r}")
        self.penalty = float(penalty)

    def __call__(self, xp, state, scores):
        p = xp.asarray(self.penalty, dtype=scores.dtype)
        penalized = xp.where(scores < 0, scores * p, scores / p)
        return xp.where(_present(xp, state, scores.shape[-1]), penalized, scores)


class NoRepeatNGram:
    """Ban every token that would repeat an n-gram already in the row."""

    def __init__(self, n):
        if not isinstance(n, int) or n < 1:
            raise InputError(f"no_repeat_ngram_size must be a positive int, got {n!r}")
        self.n = n

    def __call__(self, xp, state, scores):
        n, (b, t) = self.n, state.ids.shape
        if t < n:
            return scores
        starts = t - n + 1  # candidate n-gram starts i: ids[i:i+n]
        prefix = last_tokens(xp, state, n - 1)  # the n-1 tokens the next token follows
        match = xp.ones((b, starts), dtype=bool)
        for k in range(n - 1):
            match = match & (state.ids[:, k:k + starts] == prefix[:, k:k + 1])
        # an n-gram counts only when it lies inside the row's valid tokens
        match = match & (xp.arange(starts)[None, :] <= state.lengths[:, None] - n)
        rows = xp.broadcast_to(xp.arange(b)[:, None], (b, starts))
        banned = _row_mask(xp, scores.shape, xp.reshape(rows, (-1,)),
                           xp.reshape(state.ids[:, n - 1:], (-1,)), xp.reshape(match, (-1,)))
        return _ban(xp, scores, banned)


class BadWords:
    """Ban single-token bad words always, and a multi-token one's last token after its prefix."""

    def __init__(self, bad_words_ids, eos_token_id=()):
        eos = [list(e) if isinstance(e, (list, tuple)) else [e] for e in eos_token_id]
        words = [list(w) for w in bad_words_ids if list(w) not in eos]
        if not words:
            raise InputError("bad_words_ids has no word (besides eos_token_id)")
        self.single = [w[0] for w in words if len(w) == 1]
        self.multi = [w for w in words if len(w) > 1]

    def __call__(self, xp, state, scores):
        banned = _token_mask(xp, scores, self.single)
        for word in self.multi:
            prefix = xp.asarray(np.array(word[:-1], np.int64))[None, :]
            follows = xp.all(last_tokens(xp, state, len(word) - 1) == prefix, axis=1)
            follows = follows & (state.lengths >= len(word) - 1)
            banned = banned | (follows[:, None] & _token_mask(xp, scores, [word[-1]]))
        return _ban(xp, scores, banned)


class MinLength:
    """No eos while the row (prompt included) is shorter than ``min_length``."""

    def __init__(self, min_length, eos_token_id):
        self.min_length, self.eos = min_length, list(eos_token_id)

    def __call__(self, xp, state, scores):
        return _ban_tokens(xp, scores, self.eos, state.lengths < self.min_length)


class MinNewTokens:
    """No eos before ``min_new_tokens`` tokens were generated."""

    def __init__(self, min_new_tokens, eos_token_id):
        self.min_new_tokens, self.eos = min_new_tokens, list(eos_token_id)

    def __call__(self, xp, state, scores):
        return _ban_tokens(xp, scores, self.eos,
                           state.lengths - state.prompt_lengths < self.min_new_tokens)


class _Forced:
    """Only ``token_ids`` stay possible (score 0) on the steps ``when`` selects."""

    def __init__(self, token_ids):
        self.tokens = [token_ids] if isinstance(token_ids, int) else list(token_ids)

    def __call__(self, xp, state, scores):
        only = _token_mask(xp, scores, self.tokens)
        forced = xp.where(only, xp.zeros_like(scores), xp.asarray(NEG_INF, dtype=scores.dtype))
        return xp.where(self.when(xp, state)[:, None], forced, scores)


class ForcedBOS(_Forced):
    """The first token after a single start token is ``forced_bos_token_id`` (mBART, NLLB)."""

    def when(self, xp, state):
        return state.lengths == 1


class ForcedEOS(_Forced):
    """The last token before ``max_length`` is ``forced_eos_token_id``."""

    def when(self, xp, state):
        return state.lengths == state.max_lengths - 1


class SuppressTokens:
    """These tokens are never generated."""

    def __init__(self, token_ids):
        self.tokens = list(token_ids)

    def __call__(self, xp, state, scores):
        return _ban_tokens(xp, scores, self.tokens)


class SuppressTokensAtBegin:
    """These tokens are not generated as the first new token (Whisper's blank and eos)."""

    def __init__(self, token_ids, offset=0):
        self.tokens, self.offset = list(token_ids), offset

    def __call__(self, xp, state, scores):
        return _ban_tokens(xp, scores, self.tokens,
                           state.lengths == state.prompt_lengths + self.offset)


def build(config):
    """The processors ``config`` asks for, in transformers' order (``_get_logits_processor``)."""
    procs, eos = [], config.eos_token_id
    if config.repetition_penalty != 1.0:
        procs.append(RepetitionPenalty(config.repetition_penalty))
    if config.no_repeat_ngram_size > 0:
        procs.append(NoRepeatNGram(config.no_repeat_ngram_size))
    if config.bad_words_ids:
        procs.append(BadWords(config.bad_words_ids, eos))
    if config.min_length > 0 and eos:
        procs.append(MinLength(config.min_length, eos))
    if config.min_new_tokens and eos:
        procs.append(MinNewTokens(config.min_new_tokens, eos))
    if config.forced_bos_token_id is not None:
        procs.append(ForcedBOS(config.forced_bos_token_id))
    if config.forced_eos_token_id is not None:
        procs.append(ForcedEOS(config.forced_eos_token_id))
    if config.suppress_tokens:
        procs.append(SuppressTokens(config.suppress_tokens))
    if config.begin_suppress_tokens:
        offset = 1 if config.forced_bos_token_id is not None else 0
        procs.append(SuppressTokensAtBegin(config.begin_suppress_tokens, offset))
    return procs
