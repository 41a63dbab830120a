"""The decode loop: prompt once (right-padded to a power of two), then one token per step.

    gen = Generator(model, model_config)              # reads the cache layout from the graph
    new_ids = gen.generate([[1, 5, 9], [1, 7]], config, decode=tokenizer.decode)

Rows keep their own lengths, positions, sampling noise and stop: a batched row gives the same
tokens as alone. Logits come to the host once per step; the processors and the token choice run
there on NumPy (they are written over the array namespace, so a backend may fuse them into the
compiled step later).
"""

import numpy as np

from ..backends.numpy import XP as HOST
from ..compiled import CompiledFunction
from ..errors import InputError
from .cache import CacheLayout, write_rows
from .processors import State, build as build_processors
from .sampling import Sampler, build_warpers
from .stopping import StopStrings, finished


# config.json names of the longest sequence the model's positions cover.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")
# Cache buffers are at least this long, so short prompts of any length share one decode shape.
MIN_CAPACITY = 64


def next_pow2(n):
    return 1 << max(int(n) - 1, 0).bit_length()


class Generator:
    """Greedy and sampled generation over a decoder graph with a KV cache."""

    def __init__(self, model, model_config=None, cache_size=16):
        self.model, self.model_config = model, dict(model_config or {})
        self.layout = CacheLayout.from_model(model)
        self.fn = CompiledFunction(model, static_inputs=self.layout.static_inputs,
                                   cache_size=cache_size)
        self._dtypes = {v.name: v.dtype for v in model.inputs}
        self._write = model.backend.compile(lambda c, n, s: write_rows(model.backend.xp, c, n, s))
        self.context = next((self.model_config[k] for k in _CONTEXT_KEYS
                             if self.model_config.get(k)), None)

    def generate(self, prompts, config, decode=None, on_step=None):
        """New token ids per row (eos included when generated). ``on_step(tokens, active)`` sees
        each step's tokens [B] and which rows were still running."""
        prompts = [list(map(int, p)) for p in prompts]
        if not prompts or any(not p for p in prompts):
            raise InputError("Each prompt needs at least one token")
        n = np.array([len(p) for p in prompts], np.int64)
        budget = np.array([config.new_tokens(len(p)) for p in prompts], np.int64)
        if self.context and int((n + budget).max()) > self.context:
            raise InputError(f"A prompt of {int(n.max())} tokens plus {int(budget.max())} new "
                             f"tokens exceeds the model's context of {self.context} positions")
        if budget.max() <= 0:
            return [[] for _ in prompts]
        with self.model.backend.scope():
            return self._run(prompts, n, budget, config, decode, on_step)

    def _run(self, prompts, n, budget, config, decode, on_step):
        rows, width = len(prompts), next_pow2(n.max())
        capacity = max(next_pow2(width + budget.max()), MIN_CAPACITY)
        processors = build_processors(config) + build_warpers(config)
        sampler = Sampler(config.do_sample, config.seed, rows)
        stop = StopStrings(config.stop_strings, decode) if config.stop_strings else None
        ids = np.zeros((rows, int(n.max() + budget.max())), np.int64)
        for b, p in enumerate(prompts):
            ids[b, :len(p)] = p
        state = State(ids, n.copy(), n.copy(), n + budget)
        caches = {k: self.model.backend.asarray(v) for k, v in
                  self.layout.empty(rows, capacity, self.model_config).items()}
        logits, caches, mask = self._prompt(prompts, n, width, capacity, caches)
        done, generated = np.zeros(rows, bool), [[] for _ in prompts]
        pad = config.pad_token_id if config.pad_token_id is not None else \
            (config.eos_token_id or [0])[0]
        for step in range(int(budget.max())):
            scores = logits.astype(np.float32)
            for proc in processors:
                scores = proc(HOST, state, scores) if _takes_state(proc) else proc(HOST, scores)
            noise = sampler.noise(rows, scores.shape[-1])
            tokens = Sampler.choose(HOST, scores, noise) if config.do_sample else \
                np.argmax(scores, axis=-1).astype(np.int64)
            tokens = np.where(done, pad, tokens)
            active = ~done
            for b in np.nonzero(active)[0]:
                state.ids[b, state.lengths[b]] = tokens[b]
                generated[b].append(int(tokens[b]))
            state.lengths[active] += 1
            ended = finished(tokens, state.lengths, state.max_lengths, config.eos_token_id)
            if stop is not None:
                ended |= stop(generated)
            done |= active & ended
            if on_step is not None:
                on_step(tokens, active)
            if done.all():
                break
            logits, caches, mask = self._decode(tokens, n + step, width + step, caches, mask)
        return generated

    # --- the graph ----------------------------------------------------------------------------

    def _prompt(self, prompts, n, width, capacity, caches):
        rows = len(prompts)
        input_ids = np.zeros((rows, width), np.int64)
        real = np.zeros((rows, width), np.int64)
        for b, p in enumerate(prompts):
            input_ids[b, :len(p)], real[b, :len(p)] = p, 1
        feed = {"input_ids": input_ids}
        if self.layout.has_positions:
            feed["position_ids"] = np.broadcast_to(np.arange(width), (rows, width)).copy()
        if self.layout.mode == "inplace":
            feed["attention_mask"] = real  # the op's first prompt: mask as wide as the prompt
            mask = None
        else:
            mask = np.zeros((rows, capacity), np.int64)
            feed["attention_mask"] = np.concatenate([mask, real], axis=1)
        out = self._call(feed, caches)
        caches = self._store(out, caches, 0, capacity)
        if mask is not None:
            mask[:, :width] = real
        logits = np.asarray(out[self.layout.logits])[np.arange(rows), n - 1]
        return logits, caches, mask

    def _decode(self, tokens, positions, slot, caches, mask):
        """One step: each row's token at its own position; returns its logits [B, V]."""
        rows = len(tokens)
        feed = {"input_ids": tokens[:, None].astype(np.int64)}
        if self.layout.has_positions:
            feed["position_ids"] = positions[:, None].astype(np.int64)
        capacity = next(iter(caches.values())).shape[2]
        if self.layout.mode == "inplace":
            feed["attention_mask"] = (np.arange(capacity)[None, :] <= positions[:, None]) \
                .astype(np.int64)
        else:
            feed["attention_mask"] = np.concatenate([mask, np.ones((rows, 1), np.int64)], axis=1)
        out = self._call(feed, caches)
        caches = self._store(out, caches, slot, capacity)
        if mask is not None:
            mask[:, slot] = 1
        return np.asarray(out[self.layout.logits])[:, -1], caches, mask

    def _call(self, feed, caches):
        feed = {k: v.astype(self._dtypes[k], copy=False) for k, v in feed.items()}
        feed.update(caches)
        return self.fn(feed)

    def _store(self, out, caches, slot, capacity):
        """The caches after a call: in place, the presents themselves; concat, the new rows
        (those past ``capacity``) written into the buffer at ``slot``."""
        if self.layout.mode == "inplace":
            return {info.name: out[present] for info, present in self.layout.pairs}
        at = np.asarray(slot, np.int64)
        return {info.name: self._write(caches[info.name], out[present][:, :, capacity:], at)
                for info, present in self.layout.pairs}


def _takes_state(proc):
    # logits processors read the state; warpers (sampling.py) only the scores
    return not hasattr(proc, "__module__") or not proc.__module__.endswith("sampling")
