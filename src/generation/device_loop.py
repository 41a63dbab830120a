"""The whole decode loop on the device: one compiled ``lax.while_loop`` (issue 20 item 6).

    loop = DeviceLoop(gen)          # gen: a Generator over a fixed-cache graph, JAX backend
    new_ids, padding = loop.generate(prompts, n, budget, config, every=None, on_step=None)

The prompt runs as the host loop runs it (steppers.FixedCache.start); then each step — the
logits processors and warpers, the token choice (argmax, or Gumbel-max with the host loop's own
noise: sampling.gumbel), the stop checks (eos ids, each row's length limit) and the graph's
decode step — runs inside one compiled while_loop, so no token comes to the host until the loop
ends, or every ``every`` tokens (the loop then runs ``every`` steps per call: a stream). The
carry is the host loop's state in fixed shapes: caches, the last tokens, the ids and lengths
the processors read, which rows are done, the tokens so far ([B, capacity], pad-filled).

Tokens equal the host loop's: the same processors (written over the array namespace), the same
noise, the same order of operations. The logits of the decode step come from the same graph in
a differently fused program, so they may differ from the host loop's in float rounding (~1e-6):
a token could differ only where two candidates are that close.

What cannot run inside a compiled loop is refused with the fix (``device_loop=False``): the MLX
backend, a growing cache (merged decoders without position_ids), beam search, stop strings
(they decode text), processors of another module, several devices.
"""

import dataclasses

import jax
import numpy as np

from ..engine.compiled import compile
from ..errors import InputError, StaticInputError
from . import processors as _processors, sampling as _sampling
from .cache import write_rows
from .processors import State
from .sampling import Sampler, gumbel, row_keys
from .steppers import FixedCache
from .stopping import finished

# Compiled loops kept per generator: one per distinct processor setting (shapes are jax.jit's).
_LOOP_CACHE_SIZE = 8


class DeviceLoop:
    """Greedy and sampled generation as one compiled while_loop over a Generator's graph."""

    def __init__(self, gen):
        backend, layout = gen.model.backend, gen.layout
        if backend.name != "jax":
            raise InputError(f"device_loop=True needs the JAX backend (this model runs on "
                             f"{backend.name!r}, which has no compiled while_loop here): use "
                             "device_loop=False, the host loop")
        if layout.mode == "grow":
            raise InputError("device_loop=True needs a fixed-cache decoder (GroupQueryAttention "
                             "or position_ids); this graph's cache grows each step (a new shape "
                             "per step cannot loop on the device): use device_loop=False")
        if layout.position_rank != 2 or layout.embeds:
            raise InputError("device_loop=True feeds input_ids and [batch, sequence] positions; "
                             "this decoder takes inputs_embeds or M-RoPE's [3, batch, sequence] "
                             "positions (a vision-language model): use device_loop=False")
        if gen.model.placement is not None:
            raise InputError("device_loop=True runs on one device; this model is split over "
                             "several (devices=): use device_loop=False or one device")
        self.gen, self.layout, self.xp = gen, layout, backend.xp
        # the step is traced inside the loop: its inputs are tracers, so no index checks there
        # (the prompt's ids were checked by the host call that ran it)
        self.fn = compile(gen.model, static_inputs=layout.static_inputs, cache_size=2,
                                   checks=False)
        self._loops = {}
        self.calls = 0  # device calls made (a stream of n tokens: ceil(n / every))

    def check(self, config, custom=()):
        """InputError for a ``config`` (or processors) with no device form."""
        _refuse(config, custom)

    def generate(self, prompts, n, budget, config, pad, every=None, on_step=None, custom=()):
        """New token ids per row, as Generator.generate gives them, and each row's prompt
        padding; ``every``: tokens per device call (None: the whole generation in one)."""
        _refuse(config, custom)
        rows, total = len(prompts), int(budget.max())
        stepper = FixedCache(self.gen, prompts, total)
        logits = stepper.start()
        carry, consts = self._start(stepper, n, budget, config, pad)
        first, run = self._loop(config, custom)
        with self.gen.model.backend.persistent_cache(self.gen.fn.compile_cache):
            carry = first(carry, consts, self.gen.model.backend.asarray(logits))  # token 0
            start, done_at = 0, 1
            while done_at < total and not bool(np.asarray(carry["done"]).all()):
                # a stream's calls end at multiples of ``every`` tokens
                stop_at = total if every is None else min((done_at // every + 1) * every, total)
                carry = run(carry, dict(consts, stop_at=np.int64(stop_at)),
                            self.gen.model.params)
                self.calls += 1
                done_at = int(carry["t"])
                if every is not None:
                    start = _report(on_step, carry, n, start, done_at)
        _report(on_step, carry, n, start, done_at)
        out, counts = np.asarray(carry["out"]), np.asarray(carry["lengths"]) - n
        return [out[b, :counts[b]].tolist() for b in range(rows)], stepper.prompt_padding()

    def _start(self, stepper, n, budget, config, pad):
        """The loop's carry (donated each call) and constants, from the prompt's stepper."""
        rows, capacity = len(n), stepper.capacity
        ids = np.zeros((rows, capacity), np.int64)
        for b, p in enumerate(stepper.prompts):
            ids[b, :len(p)] = p
        mask = stepper.mask if stepper.mask is not None else np.zeros((rows, 0), np.int64)
        asarray = self.gen.model.backend.asarray
        carry = {"caches": stepper.caches, "mask": asarray(mask),
                 "last": asarray(np.zeros(rows, np.int64)), "ids": asarray(ids),
                 "lengths": asarray(n.astype(np.int64)), "done": asarray(np.zeros(rows, bool)),
                 "out": asarray(np.full((rows, capacity), pad, np.int64)),
                 "t": asarray(np.int64(0))}
        keys = row_keys(config.seed, rows) if config.do_sample else np.zeros((rows, 2), np.uint32)
        consts = {"n": n.astype(np.int64), "max_lengths": (n + budget).astype(np.int64),
                  "width": np.int64(stepper.width), "pad": np.int64(pad), "keys": keys}
        return carry, consts

    def _loop(self, config, custom):
        """``(first, run)`` for ``config``'s processors, compiled once per distinct setting:
        ``first`` chooses token 0 from the prompt's logits; ``run`` loops decode step, then
        choice, until ``stop_at`` tokens or every row is done (so, as in the host loop, no step
        runs after the last token, and no branch in the loop copies the caches)."""
        key = (repr(dataclasses.replace(config, max_length=1, max_new_tokens=None, seed=None,
                                        pad_token_id=None, num_return_sequences=1)),
               tuple(id(p) for p in custom))
        loop = self._loops.get(key)
        if loop is None:
            procs = [*_processors.build(config), *custom, *_sampling.build_warpers(config)]
            choose = self._chooser(procs, config)

            def body(c, k, params):
                logits, caches, mask = self._step(c, k, params)
                return choose(dict(c, caches=caches, mask=mask), k, logits)

            def run(carry, consts, params):
                # the weights are arguments, as in every compiled function (design §3): baked
                # in, XLA would fold them into the program (a slow compile, and dequantized
                # 4-bit weights carried as float32 constants)
                return jax.lax.while_loop(
                    lambda c: (c["t"] < consts["stop_at"]) & ~self.xp.all(c["done"]),
                    lambda c: body(c, consts, params), carry)

            compile = self.gen.model.backend.compile
            dots = self.gen.fn._library_dots
            loop = (compile(choose, donate_argnums=(0,)),
                    _guarded(compile(run, donate_argnums=(0,), library_dots=dots)))
            if len(self._loops) >= _LOOP_CACHE_SIZE:
                self._loops.pop(next(iter(self._loops)))
            self._loops[key] = loop
        return loop

    def _chooser(self, procs, config):
        """``choose(carry, consts, logits) -> carry``: the token choice and stop checks of one
        step of the host loop (loop.Generator._run), over jnp."""
        xp, eos, sample = self.xp, config.eos_token_id, config.do_sample

        def choose(c, k, logits):
            t, rows = c["t"], xp.arange(c["ids"].shape[0])
            scores = xp.astype(logits, np.float32)
            state = State(c["ids"], c["lengths"], k["n"], k["max_lengths"])
            for proc in procs:
                scores = proc(xp, state, scores)
            if sample:
                noise = gumbel(k["keys"], xp.astype(t, np.uint32), scores.shape[-1])
                tokens = Sampler.choose(xp, scores, noise)
            else:
                tokens = xp.astype(xp.argmax(scores, axis=-1), np.int64)
            tokens = xp.where(c["done"], k["pad"], tokens)
            active = ~c["done"]
            at = xp.clip(c["lengths"], 0, c["ids"].shape[1] - 1)
            ids = c["ids"].at[rows, at].set(xp.where(active, tokens, c["ids"][rows, at]))
            lengths = c["lengths"] + xp.astype(active, np.int64)
            done = c["done"] | (active & finished(tokens, lengths, k["max_lengths"], eos, xp))
            return dict(c, last=tokens, ids=ids, lengths=lengths, done=done,
                        out=c["out"].at[:, t].set(tokens), t=t + 1)

        return choose

    def _step(self, c, k, params):
        """steppers.FixedCache.step with a traced step count: the last tokens chosen, each at
        its row's own position (prompt length + steps so far), written at the shared slot
        width + steps; returns (logits, caches, mask)."""
        xp, layout, dtypes = self.xp, self.layout, self.gen.dtypes
        caches, mask, tokens, t = c["caches"], c["mask"], c["last"], c["t"] - 1
        capacity = next(iter(caches.values())).shape[2]
        positions, slot = k["n"] + t, k["width"] + t
        feed = {"input_ids": tokens[:, None]}
        if layout.has_positions:
            feed["position_ids"] = positions[:, None]
        if layout.mode == "inplace":
            feed["attention_mask"] = xp.arange(capacity)[None, :] <= positions[:, None]
        else:
            ones = xp.ones((tokens.shape[0], 1), np.int64)
            feed["attention_mask"] = xp.concatenate([mask, ones], axis=1)
        feed = {name: xp.astype(v, dtypes[name]) for name, v in feed.items()}
        out = self.fn({**feed, **caches}, params=params)
        if layout.mode == "inplace":
            caches = {info.name: out[present] for info, present in layout.pairs}
        else:
            caches = {info.name: write_rows(xp, caches[info.name],
                                            out[present][:, :, capacity:], slot)
                      for info, present in layout.pairs}
            mask = xp.where(xp.arange(capacity)[None, :] == slot, xp.ones_like(mask), mask)
        return out[layout.logits][:, -1], caches, mask


def _refuse(config, custom):
    """InputError for what has no device form, naming the way out."""
    if config.num_beams > 1:
        raise InputError("device_loop=True runs greedy and sampled decoding; beam search "
                         "(num_beams > 1) runs on the host: use device_loop=False")
    if config.stop_strings:
        raise InputError("stop_strings need the decoded text, which the device loop never "
                         "sees: use device_loop=False, or stop on eos_token_id")
    for proc in custom:
        if type(proc).__module__ not in (_processors.__name__, _sampling.__name__):
            raise InputError(f"The logits processor {type(proc).__name__} has no device form "
                             "(device_loop=True runs transformers' processors of "
                             "generation.processors / sampling only): use device_loop=False")


def _report(on_step, carry, n, start, stop):
    """``on_step(tokens, active)`` for the steps [start, stop), as the host loop calls it;
    returns ``stop``."""
    if on_step is not None and stop > start:
        counts = np.asarray(carry["lengths"]) - n
        out = np.asarray(carry["out"][:, start:stop])
        for j in range(stop - start):
            on_step(out[:, j], counts > start + j)
    return stop


def _guarded(loop):
    """``loop`` with a graph break in the decode step (a shape read from data) made an
    InputError: inside the compiled loop no value reaches the host."""
    def call(*args):
        try:
            return loop(*args)
        except StaticInputError as e:
            raise InputError(f"device_loop=True cannot run this graph: its decode step has a "
                             f"graph break ({e}); use device_loop=False") from None

    return call
