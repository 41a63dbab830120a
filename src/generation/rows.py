"""The rows of a continuous batch (continuous.py): one KV buffer of ``rows`` rows, prefills
copied into free rows, and one decode step over all of them with each row at its own position.

    rows = Rows(gen, 8)
    logits = rows.prefill(requests)     # each request's prompt; its sequences take free rows
    logits = rows.step()                # [rows, V]: every busy row's last token, fed at its place
    rows.free_row(seq)                  # the row is the next request's

Rows hold ``_Sequence``s (continuous.py): ``generated``, ``position``, ``request.chunk`` and
``request.budget`` are what a row reads of them.
"""

import functools

import numpy as np

from ..buckets import next_pow2
from .cache import write_presents
from .steppers import FixedCache, Stepper


class Rows(Stepper):
    """``rows`` rows of one KV cache ``capacity`` positions long: prefills copied in, one decode
    step over all of them, each row at its own position (free rows run a dummy token)."""

    def __init__(self, gen, rows):
        super().__init__(gen)
        self.rows, self.capacity, self.caches = rows, 0, None
        self.owner = [None] * rows
        self._put_row, self._write_at = _helpers(gen.model.backend)

    def busy(self):
        return any(s is not None for s in self.owner)

    def free(self):
        return self.owner.count(None)

    def free_row(self, seq):
        if seq.row is not None and self.owner[seq.row] is seq:
            self.owner[seq.row] = None
        seq.row = None

    def release(self, request):
        for seq in request.sequences:
            self.free_row(seq)

    def prefill(self, requests):
        """The requests' prompts in one FixedCache call (as the pipeline runs a batch; its
        buffer as long as the rows', which grow first for a longer one), each copied into a free
        row per sequence; each request's last-token logits [V]."""
        prompts = [r.chunk["ids"] for r in requests]
        # rows padded to a power of two (copies of the first): few prefill shapes to compile
        prompts += [prompts[0]] * (next_pow2(len(prompts)) - len(prompts))
        budget = max(r.budget for r in requests)
        # prompts padded to a power of two (masked, as GroupQueryAttention's are): concat graphs
        # would run each group's longest in its own chunks (buckets.prompt_chunks: 37 as 48,
        # 129 as 128 + 1), and groups of other rows and lengths as ever new shapes
        width = next_pow2(max(len(p) for p in prompts))
        stepper = FixedCache(self.gen, prompts, budget, width)  # sized as the pipeline sizes it
        if stepper.capacity > self.capacity:
            self.grow(stepper.capacity)
        elif stepper.capacity < self.capacity:  # cache_capacity(capacity) is capacity itself
            stepper = FixedCache(self.gen, prompts, self.capacity - stepper.width, width)
        logits = stepper.start()
        padding = stepper.prompt_padding()
        for j, request in enumerate(requests):
            source = self._device(j)
            for seq in request.sequences:
                seq.row, seq.padding = self.owner.index(None), int(padding[j])
                self.owner[seq.row] = seq
                self.caches = self._put_row(self.caches, stepper.caches, source,
                                            self._device(seq.row))
        return logits

    def step(self):
        """Logits [rows, V] of each row's last token fed at its position."""
        tokens, positions = np.zeros(self.rows, np.int64), np.zeros(self.rows, np.int64)
        for row, seq in enumerate(self.owner):
            if seq is not None:
                tokens[row], positions[row] = seq.generated[-1], seq.position
        columns = np.arange(self.capacity)[None, :]
        feed = {"input_ids": tokens[:, None]}
        if self.layout.has_positions:
            feed["position_ids"] = positions[:, None]
        if self.layout.mode == "inplace":  # the op writes at each row's valid length
            feed["attention_mask"] = (columns <= positions[:, None]).astype(np.int64)
        else:  # the row's past, then the new token's column
            feed["attention_mask"] = np.concatenate(
                [columns < positions[:, None], np.ones((self.rows, 1), bool)], 1).astype(np.int64)
        out = self._call(self.gen.fn, feed, self.caches)
        if self.layout.mode == "inplace":
            self.caches = {info.name: out[present] for info, present in self.layout.pairs}
        else:  # each row's new key/value at its own position (its slot in the buffer)
            presents = {info.name: out[present] for info, present in self.layout.pairs}
            self.caches = self._write_at(self.caches, presents, self._device(positions))
        return np.asarray(out[self.layout.logits])[:, -1]

    def grow(self, capacity):
        """Longer buffers, the rows' contents kept (positions are where they were)."""
        xp = self.gen.model.backend.xp
        empty = self.layout.empty(self.rows, capacity, self.gen.model_config)
        if self.caches is None:
            self.caches = {k: self.gen.model.backend.asarray(v) for k, v in empty.items()}
        else:
            self.caches = {k: xp.concatenate([v, xp.asarray(empty[k][:, :, self.capacity:])],
                                             axis=2) for k, v in self.caches.items()}
        self.capacity = capacity


@functools.cache
def _helpers(backend):
    """The compiled row copy and per-row write of ``backend``, each over every layer's cache in
    one call, shared by every server (a new server would trace them again)."""
    xp, write = backend.xp, functools.partial(_write_at, backend.xp)
    return (backend.compile(lambda c, new, j, r: {k: _put_row(xp, v, new[k], j, r)
                                                  for k, v in c.items()}, donate_argnums=(0,)),
            backend.compile(lambda c, p, at: write_presents(write, c, p, at), donate_argnums=(0,)))


def _put_row(xp, cache, new, j, row):
    """``cache`` [R, ...] with row ``j`` of ``new`` [P, ...] as its row ``row`` (traced
    scalars)."""
    hit = xp.arange(cache.shape[0]) == row
    one = xp.take(new, xp.reshape(j, (1,)), axis=0)
    return xp.where(xp.reshape(hit, (-1,) + (1,) * (cache.ndim - 1)), one, cache)


def _write_at(xp, cache, new, at):
    """``cache`` [R, H, L, D] with ``new`` [R, H, 1, D] at position ``at[r]`` of each row."""
    hit = xp.arange(cache.shape[2])[None, :] == at[:, None]
    return xp.where(xp.reshape(hit, (cache.shape[0], 1, cache.shape[2], 1)), new, cache)
