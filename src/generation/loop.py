"""The decode loop: the prompt once, then one token per step (the cache modes are in steppers.py).

    gen = Generator(model, model_config)              # reads the cache layout from the graph
    new_ids = gen.generate([[1, 5, 9], [1, 7]], config, decode=tokenizer.decode)

Rows keep their own lengths, positions, sampling noise and stop: a batched row gives the same
tokens as alone. Logits come to the host once per step; the processors and the token choice run
there on NumPy. They are written over the array namespace, so ``generate(..., device_loop=True)``
runs them, the stop checks and the decode step inside one compiled while_loop instead
(device_loop.py), with the same tokens.
"""

import functools

import numpy as np

from ..backends.numpy import XP as HOST
from ..engine.compiled import compile
from ..engine.passes.past_mask import PAST_LENGTH
from ..errors import InputError
from ..hub.repo import POSITION_LIMITS
from .cache import CacheLayout, on_buffer, write_presents, write_rows
from .device_loop import DeviceLoop
from .beam import BeamSearch
from .processors import State, build as build_processors
from .sampling import Sampler, build_warpers
from .steppers import FixedCache, GrowingCache
from .stopping import StopStrings, finished


# config.json names of the longest sequence the model's positions cover.
# A growing cache compiles one shape per step; keep a few generations' worth.
_GROW_CACHE_SIZE = 256


class Generator:
    """Greedy and sampled generation over a decoder graph with a KV cache.

    ``cache="grow"`` forces the growing cache on a graph that would use a buffer (tests);
    ``extra_inputs`` names inputs that ``generate(extra=...)`` fills per row (an encoder's
    outputs, see seq2seq.py). ``first``: the decoder without past of a split pair (``model``
    is then the decoder with past; cache.py)."""

    def __init__(self, model, model_config=None, cache_size=16, cache=None, extra_inputs=(),
                 first=None):
        self.model_config = dict(model_config or {})
        self.layout = CacheLayout.from_model(model, cache, extra_inputs) if first is None else \
            CacheLayout.from_split(first, model, extra_inputs)
        grow = self.layout.mode == "grow"
        # a growing cache's graph rewritten to take buffers of a few sizes (cache.py), unless
        # the caller asked for the growing cache itself
        self.model = on_buffer(model, self.layout) if grow and cache is None else model
        self.buffered = self.model is not model
        model = self.model
        size = _GROW_CACHE_SIZE if grow else cache_size
        # an in-place cache's presents replace its pasts: the step writes into their buffers
        donate = [p.name for p, _ in self.layout.pairs] if self.layout.mode == "inplace" else ()
        self.fn = compile(model, static_inputs=self.layout.static_inputs,
                                   cache_size=size, donate=donate)
        first_static = self.layout.first_static
        if self.buffered and first is None:  # the first call has no past: no rows to count
            first_static = {**first_static, PAST_LENGTH: np.array(0, np.int64)}
        if first is not None:
            self.first_fn = compile(first, static_inputs=first_static, cache_size=size)
        elif first_static == self.layout.static_inputs:
            self.first_fn = self.fn
        else:
            self.first_fn = compile(model, static_inputs=first_static, cache_size=size)
        self.dtypes = {v.name: v.dtype for v in model.inputs}
        # the first call's graph: the merged decoder itself, or a split pair's without past
        self.first_dtypes = self.dtypes if first is None else {v.name: v.dtype
                                                                for v in first.inputs}
        # helpers over every layer's cache in one call, made once per generator (a stepper
        # that made its own would trace them again on every generate call)
        xp, write = model.backend.xp, functools.partial(write_rows, model.backend.xp)
        self.write = model.backend.compile(lambda c, p, s: write_presents(write, c, p, s),
                                           donate_argnums=(0,))
        self.take = model.backend.compile(
            lambda c, rows: {k: xp.take(v, rows, axis=0) for k, v in c.items()})
        # a buffered growing cache: caches written at row 0 of larger zero buffers
        self.place = model.backend.compile(
            lambda c, p: {k: write_rows(xp, v, p[k], 0) for k, v in c.items()},
            donate_argnums=(0,))
        self.context = next((self.model_config[k] for k in POSITION_LIMITS
                             if self.model_config.get(k)), None)
        self.stats = None
        self._device = None  # the DeviceLoop, made on first use

    def _lengths(self, prompts, config):
        """Prompt lengths and new-token budgets [B]; a clear error past the model's context."""
        if not prompts or any(not p for p in prompts):
            raise InputError("Each prompt needs at least one token")
        n = np.array([len(p) for p in prompts], np.int64)
        budget = np.array([config.new_tokens(len(p)) for p in prompts], np.int64)
        if self.context and int((n + budget).max()) > self.context:
            raise InputError(f"A prompt of {int(n.max())} tokens plus {int(budget.max())} new "
                             f"tokens exceeds the model's context of {self.context} positions")
        return n, budget

    def stepper(self, prompts, budget, extra=None, width=0):
        """The cache of one generation; ``width``: the fixed caches' least prompt width."""
        if self.layout.mode == "grow":
            return GrowingCache(self, prompts, extra, budget)
        return FixedCache(self, prompts, budget, width)

    def generate(self, prompts, config, decode=None, on_step=None, extra=None, processors=(),
                 device_loop=False):
        """New token ids per row (eos included when generated). ``on_step(tokens, active)`` sees
        each step's tokens [B] and which rows were still running. ``extra``: per-row arrays of
        the graph's ``extra_inputs``. ``processors`` run after those ``config`` asks for (a
        model's own, as transformers appends custom processors: Whisper's timestamp rules).
        ``device_loop``: True runs the decode loop as one compiled while_loop (device_loop.py),
        an int k runs it k tokens per device call (``on_step`` then sees them every k)."""
        prompts = [list(map(int, p)) for p in prompts]
        every = _device_steps(device_loop)
        if config.num_beams > 1 and not device_loop:
            raise InputError("num_beams > 1: use Generator.beam_search")
        n, budget = self._lengths(prompts, config)
        loop = self._device_loop() if device_loop else None  # refused before any work
        if loop is not None and extra:
            raise InputError("device_loop=True takes no extra inputs (an encoder's outputs): "
                             "use device_loop=False")
        if budget.max() <= 0:
            return [[] for _ in prompts]
        with self.model.backend.scope():
            if loop is not None:
                return self._run_device(loop, prompts, n, budget, config, every, on_step,
                                        processors)
            return self._run(prompts, n, budget, config, decode, on_step, extra, processors)

    def check_device_loop(self, device_loop, config):
        """InputError now for a ``device_loop`` value, backend, graph or ``config`` the device
        loop refuses (a pipeline checks its options at construction)."""
        _device_steps(device_loop)
        if device_loop:
            self._device_loop().check(config)

    def _device_loop(self):
        """The DeviceLoop of this generator (its compiled loops), made on first use."""
        if self._device is None:
            self._device = DeviceLoop(self)
        return self._device

    def _run_device(self, loop, prompts, n, budget, config, every, on_step, custom):
        generated, padding = loop.generate(prompts, n, budget, config, _pad_id(config), every,
                                           on_step, custom)
        self.stats = Stats(max(len(g) for g in generated), padding, [[len(g)] for g in generated])
        return generated

    def beam_search(self, prompts, config, extra=None, processors=()):
        """``(sequences, scores)`` per prompt: ``num_return_sequences`` lists of new token ids
        (padded as generate pads them) and their beam scores (beam.py)."""
        prompts = [list(map(int, p)) for p in prompts]
        n, budget = self._lengths(prompts, config)
        budget = np.maximum(budget, 1)  # as generate: a prompt at max_length still gets a token
        k = config.num_beams
        beam = BeamSearch(config, n, budget)
        state = _state([p for p in prompts for _ in range(k)], np.repeat(n, k),
                       np.repeat(budget, k))
        with self.model.backend.scope():
            # each prompt runs once; its beams start from copies of its cache
            stepper = self.stepper(prompts, int(budget.max()), extra)
            logits = np.repeat(stepper.start(next_steps=int(budget.max()) > 1, beams=k), k,
                               axis=0)
            stepper.repeat(k)
            out = beam.run(stepper, state, [*build_processors(config), *processors], logits)
        self.stats = Stats(beam.steps, stepper.prompt_padding()[::k], beam.lengths)
        return out

    def _run(self, prompts, n, budget, config, decode, on_step, extra, custom=()):
        rows = len(prompts)
        processors = [*build_processors(config), *custom, *build_warpers(config)]
        sampler = Sampler(config.do_sample, config.seed, rows)
        stop = StopStrings(config.stop_strings, decode) if config.stop_strings else None
        state = _state(prompts, n, budget)
        stepper = self.stepper(prompts, int(budget.max()), extra)
        logits = stepper.start(next_steps=int(budget.max()) > 1)
        done, generated = np.zeros(rows, bool), [[] for _ in prompts]
        pad = _pad_id(config)
        for _ in range(int(budget.max())):
            scores = logits.astype(np.float32)
            for proc in processors:
                scores = proc(HOST, state, scores)
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
            logits = stepper.step(tokens)
        self.stats = Stats(max(len(g) for g in generated), stepper.prompt_padding(),
                           [[len(g)] for g in generated])
        return generated


class Stats:
    """What the last generation ran: ``steps`` (decode calls, the first included) and each row's
    ``prompt_padding`` (positions its prompt was padded by), and per prompt the ``lengths`` of
    its returned sequences (fill excluded); see ``token_summary``."""

    def __init__(self, steps, prompt_padding, lengths):
        self.steps, self.prompt_padding = int(steps), np.asarray(prompt_padding, np.int64)
        self.lengths = lengths

    def summaries(self, prompt_lengths):
        """Per prompt, a token_summary per returned sequence."""
        return [[token_summary(n, out, self.steps, pad) for out in outs]
                for n, outs, pad in zip(prompt_lengths, self.lengths, self.prompt_padding)]


def token_summary(prompt_tokens, output_tokens, steps, prompt_padding):
    """{"input", "output", "padding"}: padding counts the positions the model ran for a row
    beyond its own tokens (its prompt's padding, and the steps after it stopped while others
    went on)."""
    return {"input": int(prompt_tokens), "output": int(output_tokens),
            "padding": int(prompt_padding) + int(steps) - int(output_tokens)}


def _pad_id(config):
    """The token finished rows are fed (and filled with): pad, else the first eos, else 0."""
    return config.pad_token_id if config.pad_token_id is not None else \
        (config.eos_token_id or [0])[0]


def _device_steps(device_loop):
    """Tokens per device call for ``device_loop`` (None: all of them in one); InputError unless
    it is a bool or a positive int."""
    if isinstance(device_loop, bool):
        return None
    if not isinstance(device_loop, int) or device_loop < 1:
        raise InputError(f"device_loop must be True, False or a positive int (tokens per device "
                         f"call), got {device_loop!r}")
    return device_loop


def _state(prompts, n, budget):
    ids = np.zeros((len(prompts), int(n.max() + budget.max())), np.int64)
    for b, p in enumerate(prompts):
        ids[b, :len(p)] = p
    return State(ids, n.copy(), n.copy(), n + budget)
