"""Beam search as transformers' ``_beam_search`` (generation/utils.py, 4.57): beams are batch rows.

Each input runs ``num_beams`` rows. Per step: log-softmax, the logits processors, the running
beam scores added; the top ``max(2, 1 + n_eos) * num_beams`` continuations of each input are
split into those that hit a stop (eos or the length limit: candidates for the finished set,
scored by ``score / generated_length ** length_penalty``) and the best ``num_beams`` that go on;
the KV cache rows are reordered to the beams they extend. ``early_stopping`` (True, False,
"never") decides when an input is done, with transformers' heuristic. The arithmetic is float32
and the -1e9 masks are transformers', so ties and order come out the same.

Inputs are independent: each stops on its own condition (what it would do alone), so a batch
gives what each input gives alone.
"""

import numpy as np

from ..backends.numpy import XP as HOST

_MASK = np.float32(-1.0e9)


def _topk(x, k):
    """Indices of the k largest along the last axis of [B, N] ``x``, largest first (ties: lower
    index first, as torch.topk on CPU gives for these sizes): a stable sort's first k. A full sort
    of Whisper's 5 beams x 51,865 scores took 8.8 ms a step (whisper-tiny's whole cache step: 17
    ms); a partition finds the k-th largest value, and only the k kept are sorted."""
    if 16 * k >= x.shape[-1] or np.isnan(x).any():  # small, or NaNs (a sort puts them last)
        return np.argsort(-x, axis=-1, kind="stable")[..., :k]
    n = x.shape[-1]
    kth = np.partition(x, n - k, axis=-1)[:, -k:].min(axis=-1, keepdims=True)
    kept = x >= kth
    extra = kept.sum(axis=-1) - k
    for b in np.nonzero(extra)[0]:  # the k-th value's ties past the k: the highest indices go
        ties = np.flatnonzero(x[b] == kth[b])
        kept[b, ties[len(ties) - extra[b]:]] = False
    idx = (np.flatnonzero(kept) % n).reshape(len(x), k)
    order = np.argsort(-np.take_along_axis(x, idx, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(idx, order, axis=-1)


def _take(x, idx):
    """x [B, N, ...] gathered along axis 1 by idx [B, M]."""
    return np.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


class BeamSearch:
    """One beam search over ``B`` inputs; ``run(stepper, state, processors)``."""

    def __init__(self, config, n, budget):
        self.config, self.k = config, config.num_beams
        self.n, self.budget = np.asarray(n), np.asarray(budget)  # per input
        eos = config.eos_token_id
        self.eos = np.asarray(eos, np.int64)
        self.keep = max(2, 1 + len(eos)) * self.k
        pad = config.pad_token_id
        # generate's output_fill_value: `pad_token_id or eos_token_id[0]` (a pad id of 0 is falsy)
        self.fill = pad if pad else (eos[0] if eos else -1)

    def run(self, stepper, state, processors, logits):
        """(sequences, scores) per input: ``num_return_sequences`` lists of new token ids,
        padded with the fill value to the longest of that input's returned sequences."""
        B, k, keep = len(self.n), self.k, self.keep
        T = state.ids.shape[1]
        running = state.ids.reshape(B, k, T).copy()
        run_scores = np.zeros((B, k), np.float32)
        run_scores[:, 1:] = _MASK
        done_seqs = running.copy()
        done_scores = np.full((B, k), _MASK, np.float32)
        done_len = np.zeros((B, k), np.int64)
        finished = np.zeros((B, k), bool)
        unsat = np.ones((B, 1), bool)
        alive = np.ones(B, bool)
        top_mask = np.arange(keep) < k
        t = 0
        while True:
            logp = HOST.log_softmax(logits.astype(np.float32), axis=-1)
            for proc in processors:
                logp = proc(HOST, state, logp)
            vocab = logp.shape[-1]
            flat = (logp.reshape(B, k, vocab) + run_scores[:, :, None]).reshape(B, k * vocab)
            top = _topk(flat, keep)
            top_scores = np.take_along_axis(flat, top, axis=1)
            src, tokens = top // vocab, top % vocab
            cand = _take(running, src)
            for b in range(B):
                cand[b, :, self.n[b] + t] = tokens[b]
            hits = np.isin(tokens, self.eos) | (t + 1 >= self.budget)[:, None]
            # the running beams: the best num_beams continuations that did not stop
            masked = top_scores + hits.astype(np.float32) * _MASK
            nxt = _topk(masked, k)
            new_running, new_scores = _take(cand, nxt), np.take_along_axis(masked, nxt, axis=1)
            # the finished set: merge in the stopped candidates among the top num_beams
            just = hits & top_mask[None, :]
            scored = top_scores / np.float32((t + 1) ** self.config.length_penalty)
            full = finished.all(axis=1, keepdims=True) & (self.config.early_stopping is True)
            scored = scored + full * _MASK + (~unsat) * _MASK + (~just) * _MASK
            merged = np.concatenate([done_scores, scored.astype(np.float32)], axis=1)
            pick = _topk(merged, k)
            merged_len = np.concatenate([done_len, np.full((B, keep), t + 1)], axis=1)
            upd = alive[:, None]
            done_seqs = np.where(upd[:, :, None], _take(np.concatenate([done_seqs, cand], axis=1),
                                                        pick), done_seqs)
            done_scores = np.where(upd, np.take_along_axis(merged, pick, axis=1), done_scores)
            done_len = np.where(upd, np.take_along_axis(merged_len, pick, axis=1), done_len)
            finished = np.where(upd, np.take_along_axis(
                np.concatenate([finished, just], axis=1), pick, axis=1), finished)
            running, run_scores = new_running, new_scores.astype(np.float32)
            t += 1
            unsat = unsat & self._improvable(run_scores, done_scores, finished, t)
            open_beam = ~(finished.all(axis=1) & (self.config.early_stopping is True))
            alive = alive & unsat[:, 0] & open_beam & ~hits.all(axis=1)
            if not alive.any():
                break
            rows = (np.arange(B)[:, None] * k + _take(src, nxt)).reshape(-1)
            stepper.reorder(rows)
            state.ids[:] = running.reshape(B * k, T)
            state.lengths[:] += 1
            logits = stepper.step(running.reshape(B * k, T)[np.arange(B * k),
                                                            np.repeat(self.n + t - 1, k)])
        self.steps = t
        return self._results(done_seqs, done_scores, done_len)

    def _improvable(self, run_scores, done_scores, finished, t):
        lp = self.config.length_penalty
        if self.config.early_stopping == "never" and lp > 0.0:
            length = self.budget[:, None].astype(np.float32)
        else:
            length = np.float32(t)
        best = run_scores[:, :1] / (length ** lp).astype(np.float32)
        worst = np.where(finished, done_scores.min(axis=1, keepdims=True), _MASK)
        return (best > worst).any(axis=-1, keepdims=True)

    def _results(self, seqs, scores, lengths):
        r = self.config.num_return_sequences
        out, out_scores, self.lengths = [], [], []
        for b in range(len(self.n)):
            longest = int(lengths[b, :r].max())
            new = seqs[b, :r, self.n[b]:self.n[b] + longest].copy()
            for j in range(r):
                new[j, lengths[b, j]:] = self.fill
            out.append(new.tolist())
            self.lengths.append(lengths[b, :r].tolist())
            out_scores.append(scores[b, :r].tolist())
        return out, out_scores
