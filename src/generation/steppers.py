"""Steppers: one generation's KV caches in one cache mode, and the graph calls that feed them.

    stepper = FixedCache(gen, prompts, budget)   # or GrowingCache(gen, prompts, extra, budget)
    logits = stepper.start(next_steps=True)       # the prompts: [B, V] logits of each last token
    logits = stepper.step(tokens)                 # one token per row
    stepper.reorder(beam_indices)                 # row i takes row beam_indices[i]'s cache
    stepper.repeat(k)                             # after start: each row becomes k rows

The loop (loop.py, beam.py) only sees these calls (beam search runs each prompt once, then
repeats its row for the beams); what differs between modes (buffers, masks, positions, groups)
stays here. ``gen`` is the Generator: it holds the layout, the compiled functions and the
model config.

Compiling ahead (engine/compile_ahead.py): a shape a generation will certainly run compiles in
the background while the current call runs: the prompt's later chunk shapes while its first
runs, the decode step while the prompt runs (``start(next_steps=True)``: the caller steps next,
``beams=k`` after ``repeat(k)``), and a growing cache's next buffer once the current one is
AHEAD_FILL full and the budget reaches past it (only an end of sequence before then leaves it
unused).

Positions: a prompt token's is its index, unless ``gen.row_positions`` gives a row its own
([3, n]: M-RoPE's temporal / height / width of each token, transformers' ``get_rope_index``);
a graph whose position_ids is rank 3 gets them as [3, batch, sequence] (text positions the same
on all three). A generated token's position continues from the row's largest prompt position
+ 1 (its index, for plain positions; get_rope_index's rope_deltas, for M-RoPE).
"""

import numpy as np

from ..engine.passes.past_mask import PAST_LENGTH
from ..errors import InputError
from ..buckets import next_pow2, prompt_chunks

# Cache buffers are at least this long, so short prompts of any length share one decode shape.
MIN_CAPACITY = 64
# A growing cache's next buffer compiles ahead once this much of the current one is filled: from
# the 64-row buffer, 32 steps before the move to 96 rows. whisper-tiny's decoder compiles a step
# shape in ~0.35 s (30-34 s of XLA for 87 shapes, issue #44) and runs a step in ~9 ms
# (backends/jax.py), so 32 steps hide most of it; starting earlier compiles more often for a
# generation that ends (end of sequence) before the move, the one case where it goes unused.
AHEAD_FILL = 0.5


def cache_capacity(n):
    """Rows of a cache buffer for ``n`` positions: the next power of two or 1.5 times one (64,
    96, 128, 192, 256, 384, ...), at least MIN_CAPACITY. Attention reads every row each step:
    under 1.5x the rows needed (under 2x with powers of two alone), for twice as many compiled
    decode shapes."""
    p = next_pow2(max(int(n), MIN_CAPACITY))
    return p * 3 // 4 if p * 3 // 4 >= n and p > MIN_CAPACITY else p


class Stepper:
    """What the cache modes share: the generator and its cache layout."""

    def __init__(self, gen):
        self.gen, self.layout = gen, gen.layout

    def _call(self, fn, feed, caches, dtypes=None, index=None):
        """``index`` [B, S]: each fed prompt token's index in its prompt (None: new tokens,
        after ``repeat`` rows no longer match the prompts one to one)."""
        if self.layout.embeds:  # input_ids -> inputs_embeds (a vision-language decoder)
            feed = self.gen.embed(feed, index)
        dtypes = dtypes or self.gen.dtypes
        feed = {k: v.astype(dtypes[k], copy=False) for k, v in feed.items()}
        feed.update(caches)
        return fn(feed)

    def _ahead(self, fn, shapes, dtypes=None):
        """Compile ``fn``'s call on inputs of ``shapes`` (name -> shape, in the graph's dtypes)
        in the background: a call this generation will certainly make (compile_ahead.py)."""
        if self.layout.embeds:  # _call turns the ids into embeddings: its feed is not known here
            return
        dtypes = dtypes or self.gen.dtypes
        fn.compile_ahead({k: np.broadcast_to(np.zeros((), dtypes[k]), shape)  # shapes only
                          for k, shape in shapes.items()})

    def _positions_shape(self, rows, width):
        return (rows, width) if self.layout.position_rank == 2 else (3, rows, width)

    def _device(self, x):
        """Int64 ``x`` for a compiled helper (take, write): NumPy where a jitted call moves it to
        the device itself (JAX), a device array elsewhere (mx.compile refuses NumPy arguments).
        jnp.asarray compiles an identity per shape and dtype, none of them persisted: whisper-tiny's
        first transcription made two (int64[5] rows, int64[] slot), ~0.04 s of every process."""
        x = np.asarray(x, np.int64)
        backend = self.gen.model.backend
        return x if getattr(backend, "takes_host_arrays", False) else backend.asarray(x)

    def _reorder(self, caches, rows):
        return self.gen.take(caches, self._device(rows)) if caches else caches

    def _prompt_positions(self, width, longest):
        """[R, B, width] positions of the prompts' tokens (R = 1, or 3 for M-RoPE) and each
        row's next position (its largest + 1) [B]. Padding past the ``longest`` prompt stays at
        its last position: a chunk padded past the model's context would index position tables
        out of range (its rows are masked, but a NaN there would reach every row as 0 x NaN)."""
        rank, rows = self.layout.position_rank, len(self.prompts)
        positions = np.broadcast_to(np.minimum(np.arange(width), longest - 1),
                                    (1 if rank == 2 else 3, rows, width)).copy()
        given = getattr(self.gen, "row_positions", None)
        for b, row in enumerate(given or ()):
            if row is not None:
                positions[:, b, :row.shape[-1]] = row
        n = np.array([len(p) for p in self.prompts], np.int64)
        after = np.array([positions[:, b, :k].max() + 1 for b, k in enumerate(n)], np.int64)
        return positions, after

    def _positions(self, positions):
        """The position_ids feed of [R, B, S] ``positions`` in the graph's rank."""
        if self.layout.position_rank == 2:
            return np.ascontiguousarray(positions[0])
        return np.ascontiguousarray(np.broadcast_to(positions, (3,) + positions.shape[1:]))


class FixedCache(Stepper):
    """``inplace`` and ``concat`` modes (cache.py): one buffer of ``capacity`` rows per layer.

    concat: the prompt runs in chunks (buckets.prompt_chunks: powers of two, the last padded up
    where a call costs more than its padding; 81 tokens as one 96, 520 as 512 + 8), each written
    into the buffer after the last, so a few chunk shapes cover every prompt length.
    inplace: the op takes its first prompt whole, right-padded to a power of two. Every decode
    step shares one compiled shape. ``width``: pad the prompts to at least this many positions
    (a scorer's prompts of 200-256 tokens then share one prompt shape)."""

    def __init__(self, gen, prompts, budget, width=0):
        super().__init__(gen)
        self.prompts = prompts
        self.n = np.array([len(p) for p in prompts], np.int64)
        self.chunked = self.layout.mode == "concat"
        longest = max(int(self.n.max()), int(width))
        self.chunks = prompt_chunks(longest) if self.chunked else [next_pow2(longest)]
        self.width = sum(self.chunks)
        self.capacity = cache_capacity(self.width + int(budget))
        self.caches = {k: gen.model.backend.asarray(v) for k, v in
                       self.layout.empty(len(prompts), self.capacity, gen.model_config).items()}
        self.mask, self.steps = None, 0
        self.positions, self.after = self._prompt_positions(self.width, longest)

    def prompt_padding(self):
        return self.width - self.n

    def start(self, next_steps=False, beams=1):
        """``next_steps``: the caller steps next, after ``repeat(beams)`` where ``beams`` > 1
        (its step compiles ahead while the prompt runs)."""
        rows, width = len(self.prompts), self.width
        for size in dict.fromkeys(self.chunks[1:] if self.chunked else []):
            self._ahead(self.gen.fn, self._shapes(rows, size, self.capacity + size))
        if next_steps:
            mask = self.capacity if self.layout.mode == "inplace" else self.capacity + 1
            self._ahead(self.gen.fn, self._shapes(rows * beams, 1, mask))
        input_ids = np.zeros((rows, width), np.int64)
        real = np.zeros((rows, width), np.int64)
        for b, p in enumerate(self.prompts):
            input_ids[b, :len(p)], real[b, :len(p)] = p, 1
        if not self.chunked:
            feed = {"input_ids": input_ids, "attention_mask": real}  # mask as wide as the prompt
            if self.layout.has_positions:
                feed["position_ids"] = self._positions(self.positions)
            index = np.broadcast_to(np.arange(width), (rows, width))
            out = self._call(self.gen.fn, feed, self.caches, index=index)
            self._store(out, 0)
            return np.asarray(out[self.layout.logits])[np.arange(rows), self.n - 1]
        self.mask = np.zeros((rows, self.capacity), np.int64)
        logits, at = None, 0
        for size in self.chunks:
            part = slice(at, at + size)
            # the buffer's free rows are masked; causality inside the chunk is the graph's own
            feed = {"input_ids": input_ids[:, part],
                    "attention_mask": np.concatenate([self.mask, real[:, part]], axis=1)}
            if self.layout.has_positions:
                feed["position_ids"] = self._positions(self.positions[:, :, part])
            index = np.broadcast_to(np.arange(at, at + size), (rows, size))
            out = self._call(self.gen.fn, feed, self.caches, index=index)
            self._store(out, at)
            self.mask[:, part] = real[:, part]
            last = self.n - 1 - at  # each row's last prompt token, where it is in this chunk
            inside = (last >= 0) & (last < size)
            chunk = np.asarray(out[self.layout.logits])
            if logits is None:
                logits = np.zeros((rows, chunk.shape[-1]), chunk.dtype)
            logits[inside] = chunk[np.nonzero(inside)[0], last[inside]]
            at += size
        return logits

    def step(self, tokens):
        """Each row's token at its own index (its prompt length + steps so far) and position
        (its prompt's next position + steps so far)."""
        rows, index = len(tokens), self.n + self.steps
        slot = self.width + self.steps
        feed = {"input_ids": tokens[:, None].astype(np.int64)}
        if self.layout.has_positions:
            feed["position_ids"] = self._positions((self.after + self.steps)[None, :, None])
        if self.layout.mode == "inplace":
            feed["attention_mask"] = (np.arange(self.capacity)[None, :] <= index[:, None]) \
                .astype(np.int64)
        else:
            feed["attention_mask"] = np.concatenate([self.mask, np.ones((rows, 1), np.int64)],
                                                    axis=1)
        out = self._call(self.gen.fn, feed, self.caches)
        self._store(out, slot)
        if self.mask is not None:
            self.mask[:, slot] = 1
        self.steps += 1
        return np.asarray(out[self.layout.logits])[:, -1]

    def _shapes(self, rows, width, mask):
        """A call's input shapes: ``rows`` rows of ``width`` tokens, an attention mask ``mask``
        wide."""
        shapes = {"input_ids": (rows, width), "attention_mask": (rows, mask)}
        if self.layout.has_positions:
            shapes["position_ids"] = self._positions_shape(rows, width)
        shapes.update({k: (rows,) + v.shape[1:] for k, v in self.caches.items()})
        return shapes

    def reorder(self, rows):
        self.caches = self._reorder(self.caches, rows)
        self.after = self.after[rows]
        if self.mask is not None:
            self.mask = self.mask[rows]

    def repeat(self, k):
        rows = np.repeat(np.arange(len(self.prompts)), k)
        self.reorder(rows)
        self.prompts, self.n = [self.prompts[i] for i in rows], self.n[rows]

    def _store(self, out, slot):
        """In place, the presents themselves; concat, the new rows (those past ``capacity``)
        written into the buffer at ``slot``."""
        pairs = self.layout.pairs
        if self.layout.mode == "inplace":
            self.caches = {info.name: out[present] for info, present in pairs}
            return
        presents = {info.name: out[present] for info, present in pairs}
        self.caches = self.gen.write(self.caches, presents, self._device(slot))


class GrowingCache(Stepper):
    """``grow`` mode: the graph derives positions from the past length, so the past holds only
    real rows and grows by one each step, so every step is a new shape (compiled once, then
    cached). Rows are grouped by prompt length (one graph call per group per step) so no row
    needs padding; a group's row count is padded to ``unit`` times a power of two (copies of
    its first row) so that batches of different sizes share compiled shapes. After
    ``repeat(k)`` (beam search) the unit is k, whose rows always come whole: Whisper's default 5
    beams run 5 rows, not 8 (whisper-tiny's shape, a 20 s clip, 40 tokens: 2.0-2.1 s as 5 rows,
    2.7-3.3 s as 8). The first call runs the graph's no-past branch (``use_cache_branch``
    False); encoder-decoder graphs compute the cross-attention KV there, and it is kept: their
    cache steps return dummy encoder presents.

    ``extra``: per-row inputs every call takes (encoder_hidden_states, encoder_attention_mask).
    The k rows of a repeated row share its prompt and extra inputs, so their cross-attention KV
    rows are equal, and reordering beams leaves them where they are (whisper-tiny's 5 beams used
    to copy 92 MB of them a step: 30 -> 17 ms a cache step)."""

    def __init__(self, gen, prompts, extra=None, budget=0):
        """``budget``: new tokens at most (the steps' buffers compile ahead within it)."""
        super().__init__(gen)
        if getattr(gen, "row_positions", None):
            raise InputError("A decoder whose cache grows takes text positions only (its past "
                             "length); prompts with their own positions (M-RoPE) need a "
                             "position_ids graph with a fixed cache")
        self.prompts, self.extra, self.unit = prompts, dict(extra or {}), 1
        lengths = np.array([len(p) for p in prompts])
        self.groups = [np.nonzero(lengths == n)[0] for n in sorted(set(lengths.tolist()))]
        self.caches = [None] * len(self.groups)
        self.cross = [{} for _ in self.groups]
        self.past = [0] * len(self.groups)
        self._extras = {}  # (group, name) -> its rows of an extra input, on the device
        # a group's rows at its last step: its prompt, then every new token but the last
        self.limit = [len(prompts[rows[0]]) + int(budget) - 1 for rows in self.groups]
        self._asked = set()  # (group, capacity) compiled ahead

    def prompt_padding(self):
        return np.zeros(len(self.prompts), np.int64)  # grouped by length: never padded

    def start(self, next_steps=False, beams=1):
        """``next_steps``: the caller steps next, after ``repeat(beams)`` where ``beams`` > 1
        (its step compiles ahead while the prompt runs)."""
        if next_steps and self.gen.buffered:
            for g, rows in enumerate(self.groups):
                width = len(self.prompts[rows[0]])
                if self.limit[g] > width:  # repeat's rows: ``beams`` x a power of two
                    self._ahead_step(g, beams * next_pow2(len(rows)),
                                     cache_capacity(width + 1))
        return self._each(lambda g, rows: np.array([self.prompts[i] for i in rows], np.int64),
                          first=True)

    def _ahead_step(self, g, rows, capacity):
        """Compile group ``g``'s step on buffers of ``capacity`` rows ahead, once."""
        if (g, capacity) in self._asked:
            return
        self._asked.add((g, capacity))
        dtypes, layout = self.gen.dtypes, self.layout
        shapes = {"input_ids": (rows, 1)}
        if "attention_mask" in dtypes:
            shapes["attention_mask"] = (rows, capacity + 1)
        if PAST_LENGTH in dtypes:
            shapes[PAST_LENGTH] = ()
        if layout.has_positions:
            shapes["position_ids"] = self._positions_shape(rows, 1)
        empty = layout.empty(rows, capacity, self.gen.model_config, self._cross_length())
        shapes.update({k: v.shape for k, v in empty.items()})  # np.zeros: no pages touched
        shapes.update({k: (rows,) + np.shape(self.extra[k])[1:] for k in self.extra
                       if k in dtypes})
        self._ahead(self.gen.fn, shapes)

    def _ahead_next_buffer(self, g, rows):
        """Group ``g``'s next buffer compiles ahead once the current one is AHEAD_FILL full and
        the group's steps reach past it."""
        capacity = self._length(g)
        if self.gen.buffered and self.past[g] + 1 >= AHEAD_FILL * capacity and \
                self.limit[g] > capacity:
            self._ahead_step(g, rows, cache_capacity(capacity + 1))

    def step(self, tokens):
        return self._each(lambda g, rows: tokens[rows][:, None].astype(np.int64), first=False)

    def reorder(self, rows):
        rows = np.asarray(rows)
        for g, members in enumerate(self.groups):
            # beams never leave their input, so a group's rows come from the same group
            local = _padded(np.searchsorted(members, rows[members]), self.unit)
            self.caches[g] = self._reorder(self.caches[g], local)
            if self.unit == 1:  # a unit's cross KV rows are equal: nothing to move
                self.cross[g] = self._reorder(self.cross[g], local)

    def repeat(self, k):
        for g, members in enumerate(self.groups):
            local = _padded(np.repeat(np.arange(len(members)), k), k)
            self.caches[g] = self._reorder(self.caches[g], local)
            self.cross[g] = self._reorder(self.cross[g], local)
            self.groups[g] = (members[:, None] * k + np.arange(k)).reshape(-1)
        self.prompts = [p for p in self.prompts for _ in range(k)]
        self.extra = {name: np.repeat(np.asarray(v), k, axis=0) for name, v in self.extra.items()}
        self._extras, self.unit = {}, k

    def _each(self, ids_of, first):
        logits = None
        for g, rows in enumerate(self.groups):
            out = self._group(g, rows, ids_of(g, rows), first)
            if logits is None:
                logits = np.zeros((len(self.prompts), out.shape[-1]), out.dtype)
            logits[rows] = out
        return logits

    def _group(self, g, rows, ids, first):
        layout, past, width, real = self.layout, self.past[g], ids.shape[1], len(rows)
        rows, ids = _padded(rows, self.unit), _padded(ids, self.unit)
        # a split pair's graphs differ in inputs (its with-past graph takes no encoder states)
        dtypes = self.gen.first_dtypes if first else self.gen.dtypes
        if not first:
            self._make_room(g, past + width)
        feed = {"input_ids": ids}
        if "attention_mask" in dtypes:  # a buffer's free rows are 0 (positions may count 1s)
            mask = np.ones((len(rows), self._length(g) + width), np.int64)
            mask[:, past:self._length(g)] = 0
            feed["attention_mask"] = mask
        if PAST_LENGTH in dtypes:  # a buffer: its valid rows (past_mask.py)
            feed[PAST_LENGTH] = np.array(past, np.int64)
        index = np.broadcast_to(past + np.arange(width), ids.shape)
        if layout.has_positions:  # text positions only: Generator.stepper refuses row_positions
            feed["position_ids"] = self._positions(index[None])
        if first:
            caches = layout.first_caches(len(rows), self.gen.model_config,
                                         cross_length=self._cross_length())
        else:
            caches = {**self.caches[g], **self.cross[g]}
        extras = {k: self._extra(g, k, rows, dtypes[k]) for k in self.extra if k in dtypes}
        out = self._call(self.gen.first_fn if first else self.gen.fn, feed,
                         {**caches, **extras}, dtypes, index=index if first else None)
        name = layout.first_present if first else (lambda info, present: present)
        presents = {info.name: out[name(info, present)] for info, present in layout.pairs}
        if not self.gen.buffered or (first and self.limit[g] <= past + width):
            # a first call no step follows (Whisper's language detection: one token) keeps its
            # presents as they are: a buffer would cost a copy and a compile of `place` for
            # that prompt length (whisper-tiny, warm cache: ~0.1 s of the first transcription);
            # a step that comes after all the same moves them into one (_make_room)
            self.caches[g] = presents
        elif first:  # the prompt's rows, at the start of a buffer
            self.caches[g] = self._buffers(presents, cache_capacity(past + width))
        else:  # the step's rows (after the buffer in the presents) written at its valid length
            self.caches[g] = self.gen.write(self.caches[g], presents, self._device(past))
        if first:
            self.cross[g] = {info.name: out[name(info, present)]
                             for info, present in layout.cross_pairs}
        self.past[g] += width
        if not first:
            self._ahead_next_buffer(g, len(rows))
        return np.asarray(out[layout.logits])[:real, -1]

    def _length(self, g):
        """The rows of group ``g``'s past as the graph sees them: a buffer's capacity."""
        if not self.gen.buffered or self.caches[g] is None:
            return self.past[g]
        return next(iter(self.caches[g].values())).shape[2]

    def _make_room(self, g, rows):
        """Group ``g``'s buffers moved into the next capacity when ``rows`` no longer fit
        (cache_capacity: a few sizes, each a compiled step shape)."""
        if self.gen.buffered and self._length(g) < rows:
            self.caches[g] = self._buffers(self.caches[g], cache_capacity(rows))

    def _buffers(self, caches, capacity):
        """Zero buffers of ``capacity`` rows with ``caches`` at their start. The zeros are made
        on the host where a jitted call takes NumPy arguments (JAX): jnp.zeros compiles a
        broadcast per shape (and a cast), none persisted, ~0.06 s of whisper-tiny's first
        transcription in every process; moving its 8 zero buffers of [5, 6, 64, 64] costs ~1 ms."""
        backend = self.gen.model.backend
        xp = np if getattr(backend, "takes_host_arrays", False) else backend.xp
        zeros = {k: xp.zeros(v.shape[:2] + (capacity,) + v.shape[3:], backend.xp.dtype_of(v))
                 for k, v in caches.items()}
        return self.gen.place(zeros, caches)

    def _extra(self, g, name, rows, dtype):
        """Group ``g``'s rows of the extra input ``name``, moved to the device on its first call:
        a group's rows never change (beams reorder within it), and Whisper's encoder states
        copied and sent again every step cost 0.75 ms of a 9 ms step at batch 4."""
        if (g, name) not in self._extras:
            rows_of = np.asarray(self.extra[name])[rows].astype(dtype, copy=False)
            # a fresh array nobody writes to: put_weight moves it without jnp.asarray's compile
            # of an identity per shape (whisper-tiny: [1, 1500, 384], [5, 1500, 384], ~0.04 s)
            self._extras[g, name] = self.gen.model.backend.put_weight(rows_of)
        return self._extras[g, name]

    def _cross_length(self):
        states = self.extra.get("encoder_hidden_states")
        return 0 if states is None else np.asarray(states).shape[1]


def _padded(x, unit=1):
    """``x`` with rows appended (copies of row 0) up to ``unit`` times a power of two."""
    extra = unit * next_pow2(-(-len(x) // unit)) - len(x)
    return x if not extra else np.concatenate([x, np.repeat(x[:1], extra, axis=0)])
