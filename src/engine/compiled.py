"""Compiled execution: the graph cut into segments at breaks, each compiled per signature (LRU).

A segment runs nodes[start:stop] under the backend's compiler. Tracing it discovers where it must
stop: the first node that needs a host value it cannot have (NeedsHost). The segment is compiled up
to there, run, and the break node runs eagerly on concrete values; the next segment starts after
it. Static values a segment computes (shapes, folded constants) depend only on its key, so they are
recorded at trace time and replayed on cache hits."""

import collections
import contextlib
import dataclasses
import itertools
import logging
import os

import numpy as np

from ..backends import NotConcrete
from ..backends.compile_cache import check_option
from ..errors import InputError, StaticInputError
from . import compile_ahead as background, compile_notice
from .inputs import check_value
from .graph import node_reads, walk
from .live_bytes import LiveBytes, last_reads
from ..ops.values import NeedsHost, is_static
from .runner import Runner
from .sharding import batch_inputs


RNG = "__transmuter_rng__"  # the name of the random key in a run's values
LARGE_WEIGHT = 1 << 22  # elements (an lm_head of a vocabulary past ~8k)
_CALLS = itertools.count(int.from_bytes(os.urandom(4), "little"))
_LOG = logging.getLogger("transmuter.compile")


@dataclasses.dataclass
class Segment:
    fn: object  # compiled (params, dynamic values, donated values) -> dynamic values at stop
    stop: int  # index of the break node, or len(nodes)
    static_out: dict  # static values defined by the segment and live at stop
    donated: frozenset = frozenset()  # inputs whose buffers the segment may reuse
    # compiled ahead from a lowering (fn a compile_ahead.Job until taken): it takes concrete
    # arrays of its shapes only; ``unused`` until its first call
    ahead: bool = False
    unused: bool = False


CacheInfo = collections.namedtuple("CacheInfo", "hits misses maxsize currsize")
# Shapes compiled ahead (compile_ahead.py): started, then called by the caller (used), or failed
AheadInfo = collections.namedtuple("AheadInfo", "started used failed")


class CompiledFunction:
    """``fn(inputs) -> {output name: array}``, compiling each new signature on its first call."""

    def __init__(self, model, static_inputs=None, cache_size=8, donate=(), checks=None,
                 compile_cache=None, compile_ahead=None):
        """``donate``: names of inputs whose buffers the caller gives up on each call (a KV cache
        it replaces with the outputs): the compiled code may write its outputs into them.
        ``checks``: refuse out-of-range index inputs before each call (None: the model's own
        ``load(checks=)``). ``compile_cache``: JAX's persistent cache for this function's
        compiles (None: the model's own ``load(compile_cache=)``; backends/compile_cache.py).
        ``compile_ahead``: whether ``compile_ahead(inputs)`` compiles in the background (None:
        the model's own ``load(compile_ahead=)``; engine/compile_ahead.py)."""
        self.model = model
        self.checks = model.checks if checks is None else bool(checks)
        self.compile_cache = (model.compile_cache if compile_cache is None
                              else check_option(compile_cache))
        self.ahead = (getattr(model, "compile_ahead", None) if compile_ahead is None
                      else background.check_option(compile_ahead))
        self._ahead = collections.Counter()  # AheadInfo's counts
        self.donate = frozenset(donate)
        self.static_inputs = {k: np.asarray(v) for k, v in (static_inputs or {}).items()}
        declared = {v.name: v for v in model.inputs}
        for name, value in self.static_inputs.items():
            if name not in declared:
                raise InputError(f"static_inputs names unknown input {name!r}; the graph takes: "
                                 f"{', '.join(declared)}")
            check_value(declared[name], value)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise InputError(f"cache_size must be a positive int (compiled signatures kept), "
                             f"got {cache_size!r}")
        self.cache_size = cache_size
        self._cache = collections.OrderedDict()
        self._hits = self._misses = 0
        self._runner = Runner(model.backend, model.opsets)
        self._live = {}
        self._ends = None  # live_bytes.last_reads of the graph, on the first trace
        self._names = {}  # start -> how the live names split, for one params dict
        self._checked = set()  # input signatures that passed check_inputs
        # Graphs that draw random values get a new key each call (a dynamic input of every
        # segment), so compiled draws differ between calls as eager ones do.
        self._random = any(node.opdef.random for node in walk(model.graph))
        self._library_dots = library_dots(model)
        self._batched = batch_inputs(model)  # inputs split over model.placement's devices

    def _without_static(self, inputs):
        """``inputs`` less those fixed by static_inputs, which may come again only unchanged (a
        feed dict reused from the example)."""
        for name in set(inputs) & set(self.static_inputs):
            value, fixed = np.asarray(inputs.pop(name)), self.static_inputs[name]
            if value.shape != fixed.shape or not np.array_equal(value, fixed):
                raise InputError(f"Input {name!r} was fixed by static_inputs={{{name!r}: ...}} "
                                 "when compiling, and this call gives it another value: compile "
                                 "another function for it, or leave it out")
        return inputs

    def cache_info(self):
        """hits and misses (compiles) of the segment cache, as functools.lru_cache reports them;
        a compile ahead is a miss when it starts, and its first call no hit."""
        return CacheInfo(self._hits, self._misses, self.cache_size, len(self._cache))

    def cache_clear(self):
        self._cache.clear()
        self._hits = self._misses = 0

    def ahead_info(self):
        """Shapes compiled ahead (``compile_ahead``): started, used by a call, failed."""
        return AheadInfo(*(self._ahead[k] for k in AheadInfo._fields))

    def compile_ahead(self, inputs):
        """Start compiling, off this thread, the first segment of a call on ``inputs`` (name ->
        anything with ``shape`` and ``dtype``: the arrays, or the shapes, of a call the caller
        will certainly make); the call that comes finds it compiled (or waits for it). Tracing
        runs here, now; XLA's compile in compile_ahead's worker. Nothing is done (False) when
        that signature is compiled or under way, compiling ahead is off (``compile_ahead=``,
        TRANSMUTER_COMPILE_AHEAD), the backend compiles at the first call (MLX), the model is
        placed on several devices, or compile_ahead.MAX_AHEAD compiles wait already."""
        model, backend = self.model, self.model.backend
        specs = {k: v for k, v in inputs.items() if k not in self.static_inputs}
        if not background.enabled(self.ahead) or not getattr(backend, "lowers", False) \
                or model.placement is not None \
                or not all(hasattr(v, "shape") and np.dtype(v.dtype) != object
                           for v in specs.values()):
            return False
        params = model.full_params(None)
        seg_params, host_params, rest = self._split_live(0, params)
        signature = {k: _Spec(v) for k, v in specs.items() if k in rest}
        if self._random and RNG in rest:
            signature[RNG] = _Spec(backend.random_key(0))
        static = {k: v for k, v in self.static_inputs.items() if k in rest}
        key = (0, _signature(signature), _static_key(static), host_params, _signature({}))
        if key in self._cache or not background.WORKER.reserve():
            return False
        try:
            with backend.scope():
                dynamic = {k: backend.abstract(v.shape, v.dtype) for k, v in signature.items()}
                if RNG in signature:
                    dynamic[RNG] = backend.random_key(0)
                base = {k: v for k, v in {**model.constants, **params,
                                          **self.static_inputs}.items() if is_static(v)}
                lowered, segment = self._lower(base, dynamic, seg_params)
        except Exception as e:  # the call itself will compile it, or say what is wrong
            background.WORKER.release()
            _LOG.debug("not compiling %s ahead: tracing it failed (%s: %s)",
                       self._label(specs), type(e).__name__, e)
            return False
        option = self.compile_cache
        segment.fn = background.Job(
            lowered, lambda: (backend.scope(), backend.persistent_cache(option)),
            self._label(specs))
        self._cache[key] = segment
        self._trim()
        background.WORKER.submit(segment.fn)
        self._ahead["started"] += 1
        self._misses += 1
        return True

    def _lower(self, base, dynamic, seg_params, stop=None):
        """(jit's Lowered, its Segment less fn) of the first segment on abstract ``dynamic``
        values, cut at a break as _build cuts it."""
        nodes = self.model.graph.nodes
        end = len(nodes) if stop is None else stop
        if end == 0:
            raise ValueError("its first node needs host values (a break): nothing to compile")
        live_out = self._live_at(end)
        donated = frozenset(k for k in dynamic if k in self.donate and k not in live_out)
        recorded = {}
        fn = self.model.backend.compile(self._segment_fn(0, end, base, live_out, recorded),
                                        donate_argnums=(2,) if donated else (),
                                        library_dots=self._library_dots)
        try:
            lowered = fn.lower(seg_params, *_split(dynamic, donated))
        except NeedsHost as brk:
            return self._lower(base, dynamic, seg_params, stop=brk.index)
        return lowered, Segment(None, end, dict(recorded), donated, ahead=True, unused=True)

    def _take_ahead(self, key, segment):
        """The segment compiled ahead under ``key``, its executable taken from its job (waited
        for, announced if slow); None, and the entry dropped, when that compile failed."""
        job = segment.fn
        with contextlib.nullcontext() if job.started and job.result is not None else \
                compile_notice.compiling(job.label):
            segment.fn = job.take()
        if segment.fn is None:
            self._ahead["failed"] += 1
            del self._cache[key]
            return None
        return segment

    def _trim(self):
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def __call__(self, inputs=None, params=None, *, rng_seed=None, **kwargs):
        """The graph's outputs for ``inputs``. A graph with random ops draws from a new key each
        call; ``rng_seed`` (an int) fixes the key, so a seeded call repeats its draws."""
        inputs = self._without_static(self.model.host_inputs(dict(inputs or {}, **kwargs)))
        model, nodes = self.model, self.model.graph.nodes
        # arrays of a signature that passed are not checked again (a decode loop's one shape)
        arrays = all(hasattr(v, "shape") and hasattr(v, "dtype") for v in inputs.values())
        signature = _signature(inputs) if arrays else None
        if signature is None or signature not in self._checked:
            model.check_inputs(inputs, static=self.static_inputs)
            if len(self._checked) > 4 * self.cache_size:
                self._checked.clear()
            if signature is not None:
                self._checked.add(signature)
        if self.checks:  # index values change every call: checked every call
            model.check_indices(self._on_host(inputs))
        params = model.full_params(params)
        with model.backend.scope():
            env = dict(model.constants)
            env.update(params)
            env.update(self.static_inputs)
            direct = self._direct_inputs(inputs)
            if model.placement is not None:  # several devices: rows split over them
                env.update(model.placement.put_inputs(inputs, self._batched))
            else:
                env.update({k: v if k in direct else self._runner.to_device(v)
                            for k, v in inputs.items()})
            data = {k for k in inputs if self._lacked(env[k])}
            if self._random:
                seed = next(_CALLS) if rng_seed is None else _seed(rng_seed)
                env[RNG] = model.backend.random_key(seed)
                self._runner.rng = env[RNG]
            start = 0
            while start < len(nodes):
                start = self._run_segment(start, env, params, data, direct)
                if start < len(nodes):  # a break: this node runs eagerly, on concrete values
                    env.update({k: self._runner.to_device(env[k]) for k in direct})
                    direct = frozenset()
                    self._run_break(nodes[start], env, data)
                    start += 1
            return {name: env[name] for name in model.graph.output_names}

    def _direct_inputs(self, inputs):
        """Host arrays the first segment takes as they are: JAX's compiled call moves them to
        the device itself, faster than an array made first (~0.3 ms each on a 2-core CPU).
        They stay arguments (never folded into the trace); a break sends them to the device
        first, so eager nodes see the arrays they always see."""
        if not getattr(self.model.backend, "takes_host_arrays", False) or \
                self.model.placement is not None:  # placed inputs are device arrays already
            return frozenset()
        return frozenset(k for k, v in inputs.items() if isinstance(v, np.ndarray)
                         and v.dtype != object and k not in self.donate)

    def _on_host(self, inputs):
        """``inputs`` readable on the host for the index checks; a traced one (the call runs
        inside the caller's jax.jit or mx.compile) is refused: its values are unknown here."""
        for name in {use.input for use in self.model.input_indices.uses} & set(inputs):
            value = inputs[name]
            if not is_static(value):
                try:
                    self.model.backend.to_host(value)
                except NotConcrete:
                    raise InputError(
                        f"Input {name!r} is traced (this call runs inside jax.jit or "
                        "mx.compile), so its indices cannot be checked against the table it "
                        "picks from: check the batch before the compiled step and load (or "
                        "compile) with checks=False") from None
        return inputs

    def _run_break(self, node, env, data):
        opdef = node.opdef
        for i, name in enumerate(node.inputs):
            if name and (opdef.host or opdef.needs_static(i, len(node.inputs))):
                env[name] = self._host_value(env[name], node, name)
        self._runner.rng = env.get(RNG)  # the concrete key (a trace may have left a tracer)
        reads_data = bool(data) and bool(data & node_reads(node))
        self._runner.run_node(node, env)
        for name in node.outputs:
            if name and self._lacked(env[name]):
                data.add(name)
            elif name and reads_data and isinstance(env[name], np.ndarray):
                env[name] = self._runner.to_device(env[name])  # back to the device: an argument

    def _host_value(self, value, node, name):
        """A break reads ``name`` on the host; StaticInputError when it is traced."""
        try:
            return self._runner.to_host(value, node)
        except NeedsHost:
            raise StaticInputError(
                f"{node.label} needs {name!r} on the host (a graph break: it sets a shape, a "
                "count or an index), and here it is traced: either the call runs inside "
                "jax.jit / mx.compile, where data values are unknown (call the model outside "
                "jit: jax.grad and value_and_grad alone work, and its own segments are "
                "compiled), or the value depends on the parameters being differentiated, which "
                "no gradient can pass through. Giving the input that decides it in "
                "static_inputs= (compile) removes the break.") from None

    def _lacked(self, value):
        """A host array of a type the backend has no arrays of (MLX: float8, int4, ...)."""
        lacks = getattr(self.model.backend, "lacks", None)
        return lacks is not None and isinstance(value, np.ndarray) and lacks(value.dtype)

    def _last_reads(self):
        if self._ends is None:
            self._ends = last_reads(self.model.graph.nodes)
        return self._ends

    def _live_at(self, index):
        """Names read by nodes[index:] or returned by the graph."""
        if index not in self._live:
            graph = self.model.graph
            live = set(graph.output_names) | {RNG}
            for node in graph.nodes[index:]:
                live |= node_reads(node)
            self._live[index] = live
        return self._live[index]

    def _defined_before(self, index):
        """The graph's inputs, the random key and the outputs of nodes[:index]."""
        graph = self.model.graph
        defined = set(graph.input_names) | {RNG}
        for node in graph.nodes[:index]:
            defined.update(node.outputs)
        return defined

    def _split_live(self, start, params):
        """The names live at ``start``: (the params passed to the segment, the key of the params
        folded into it, the other names), worked out once per start and params dict."""
        cached = self._names.get(start)
        if cached is None or cached[0] is not params:
            live = self._live_at(start)
            seg_params = {k: params[k] for k in live if k in params and not is_static(params[k])}
            # Params of a type the backend lacks (MLX: int4, float8 weights) stay on the host and
            # fold into the trace like constants; keyed by identity, not by their bytes each call.
            host_params = tuple(sorted((k, id(params[k])) for k in live
                                       if k in params and is_static(params[k])))
            # only names a run can have set by ``start`` (a decoder's live names are thousands,
            # and filtering them each call cost 0.4-0.8 ms a decode step)
            defined = self._defined_before(start)
            rest = [k for k in live if k in defined and k not in params
                    and k not in self.model.constants]
            cached = self._names[start] = (params, seg_params, host_params, rest)
        return cached[1:]

    def _run_segment(self, start, env, params, data, direct=frozenset()):
        """Run the segment that starts at ``start`` (compiling it on a miss); return its stop.

        ``data`` names host values of types the backend lacks computed from the inputs (float8
        activations on MLX): a segment stops before a node that reads one (that node runs on the
        host, and what it makes of a type the backend has goes back to the device), so they are
        keyed by shape and never baked into a trace, and new values do not recompile.
        ``direct`` names host inputs passed to the compiled call as they are (_direct_inputs)."""
        seg_params, host_params, rest = self._split_live(start, params)
        present = [k for k in rest if k in env]
        host_data = {k: env[k] for k in present if k in data}
        dynamic = {k: env[k] for k in present
                   if k not in data and (k in direct or not is_static(env[k]))}
        static = {k: env[k] for k in present if k not in data and k not in dynamic}
        key = (start, _signature(dynamic), _static_key(static), host_params,
               _signature(host_data))
        segment = self._cache.get(key)
        if segment is not None and isinstance(segment.fn, background.Job):
            segment = self._take_ahead(key, segment)
        if segment is not None:
            try:
                outputs = None if segment.fn is None else segment.fn(
                    seg_params, *_split(dynamic, segment.donated))
            except Exception as e:
                if not segment.ahead:
                    raise
                # an executable compiled ahead takes concrete arrays of its shapes only (not
                # the tracers of a call inside the caller's jit): compiled here as usual
                _LOG.debug("the shape compiled ahead refused this call (%s: %s); compiling it",
                           type(e).__name__, e)
                self._ahead["failed"] += segment.unused
                del self._cache[key]
                segment = None
        if segment is not None:
            self._cache.move_to_end(key)
            if segment.unused:
                segment.unused = False
                self._ahead["used"] += 1
            else:
                self._hits += 1
        else:
            self._misses += 1
            stop = next((i for i in range(start, len(self.model.graph.nodes))
                         if data & node_reads(self.model.graph.nodes[i])), None) if data else None
            segment, outputs = self._build(start, env, dynamic, seg_params, stop)
            self._cache[key] = segment
            self._trim()
        if segment.fn is not None:
            env.update(outputs)
            env.update(segment.static_out)
        return segment.stop

    def _build(self, start, env, dynamic, seg_params, stop=None):
        """Compile and run nodes[start:stop]; when tracing finds a break, stop there instead."""
        model, nodes = self.model, self.model.graph.nodes
        end = len(nodes) if stop is None else stop
        if end == start:
            return Segment(None, start, {}), None
        base = {k: v for k, v in env.items() if is_static(v)}
        live_out = self._live_at(end)
        # a donated input is given up only by the last segment that reads it
        donated = frozenset(k for k in dynamic if k in self.donate and k not in live_out)
        recorded = {}
        fn = model.backend.compile(self._segment_fn(start, end, base, live_out, recorded),
                                   donate_argnums=(2,) if donated else (),
                                   library_dots=self._library_dots)
        try:
            with model.backend.persistent_cache(self.compile_cache), \
                    compile_notice.compiling(self._label(dynamic)):
                outputs = fn(seg_params, *_split(dynamic, donated))  # traces, compiles and runs
        except NeedsHost as brk:
            return self._build(start, env, dynamic, seg_params, stop=brk.index)
        return Segment(fn, end, dict(recorded), donated), outputs

    def _segment_fn(self, start, end, base, live_out, recorded):
        """The function of nodes[start:end] that the backend compiles: (params, values, donated
        values) -> the dynamic values live at ``end``; the static ones go into ``recorded``."""
        nodes = self.model.graph.nodes

        def segment(p, values, given):
            self._runner.rng = values.get(RNG)
            scope = dict(base)
            scope.update(p)
            scope.update(values)
            scope.update(given)
            live = LiveBytes(self._last_reads(), keep=live_out)  # traced: shapes only
            for index in range(start, end):
                try:
                    self._runner.run_node(nodes[index], scope)
                except NeedsHost as brk:
                    brk.index = index
                    raise
                live.count(index, nodes[index], scope)
            # sorted: a set's order follows the process's hash seed, and mx.compile failed
            # (IndexError: _Map_base::at) on gemma3-gqa's second step in some orders
            out = {k: scope[k] for k in sorted(live_out) if k in scope}
            recorded.clear()
            recorded.update({k: v for k, v in out.items() if is_static(v) and k not in base})
            return {k: v for k, v in out.items() if not is_static(v) and k not in p}

        return segment

    def _label(self, dynamic):
        """The shape a compile is announced by: the graph's first input among ``dynamic`` (a
        segment after a break takes values of its own: the first of those)."""
        names = [n for n in self.model.graph.input_names if n in dynamic] or list(dynamic)
        return compile_notice.shape_label(getattr(dynamic[n], "shape", ()) for n in names)


def library_dots(model):
    """Whether the model's products run faster as library calls (backends' ``compile``): it
    dequantizes weights in the graph, or multiplies by a large weight transposed (a tied
    embedding as the lm_head, Gemm transB=1), whose [N, K] layout XLA's own emitter is slow at
    for a few rows (a classifier head's is too small to matter)."""
    if any(node.opdef.dequantizes for node in walk(model.graph)):
        return True
    weights = {name for name, value in {**model.constants, **model.params}.items()
               if np.size(value) >= LARGE_WEIGHT}
    transposed = {out for node in walk(model.graph)
                  if node.op_type == "Transpose" and node.inputs[0] in weights
                  for out in node.outputs}
    gemm_b = weights | transposed  # Gemm transB=1 reads either as (N, K)
    return any((node.op_type == "MatMul" and node.inputs[1] in transposed)
               or (node.op_type == "Gemm" and node.attrs.get("transB") == 1
                   and node.inputs[1] in gemm_b)
               for node in walk(model.graph))


def _split(values, donated):
    """(kept, donated) halves of a segment's dynamic values."""
    if not donated:
        return values, {}
    return ({k: v for k, v in values.items() if k not in donated},
            {k: v for k, v in values.items() if k in donated})


def _signature(values):
    def sig(v):
        if isinstance(v, list):  # a sequence
            return tuple(sig(x) for x in v)
        return None if v is None else (tuple(v.shape), v.dtype)

    return tuple(sorted((k, sig(v)) for k, v in values.items()))


def _static_key(values):
    def key(v):
        if isinstance(v, list):
            return tuple(key(x) for x in v)
        if v is None:
            return None
        a = np.asarray(v)
        return (a.dtype.str, a.shape, a.tobytes() if a.dtype != object else tuple(a.flat))

    return tuple(sorted((k, key(v)) for k, v in values.items()))


def compile(model, example_inputs=None, *, static_inputs=None, cache_size=8, checks=None,
            compile_cache=None, donate=(), compile_ahead=None):
    """A function of the model's inputs, compiled for each new signature on its first call
    (keeping the ``cache_size`` most recently used); with ``example_inputs``, compiled for the
    example's shapes now. The one way in to compiled code: the pipelines, generation and training
    get their compiled functions here too.

    ``checks`` (default: the model's ``load(checks=)``, True unless turned off) refuses inputs
    that index past a table before each call (``input_ids`` past the vocabulary: an InputError,
    where the compiled gather would read NaN or garbage); ``checks=False`` skips it.

    ``compile_cache`` (default: the model's ``load(compile_cache=)``): a folder, or False, for
    JAX's persistent compilation cache (docs/compile-cache.md). ``donate``: names of inputs whose
    buffers each call gives up (a KV cache replaced by the outputs). ``compile_ahead`` (default:
    the model's ``load(compile_ahead=)``): False makes ``fn.compile_ahead(inputs)`` do nothing
    (engine/compile_ahead.py)."""
    fn = CompiledFunction(model, static_inputs=static_inputs, cache_size=cache_size,
                          donate=donate, checks=checks, compile_cache=compile_cache,
                          compile_ahead=compile_ahead)
    if example_inputs is not None:
        fn(example_inputs)
    return fn


class _Spec:
    """The shape and NumPy dtype of a value to come (what _signature reads)."""

    def __init__(self, value):
        self.shape, self.dtype = tuple(value.shape), np.dtype(value.dtype)


def _seed(value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"rng_seed must be an int, got {value!r}")
    return int(value)
