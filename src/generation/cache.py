"""KV-cache modes, read from the graph's inputs and ops (no per-architecture code).

``inplace`` and ``concat`` keep a fixed buffer of ``capacity`` rows per layer, so every decode
step shares one compiled shape (steppers.FixedCache); ``grow`` cannot (steppers.GrowingCache).

- ``inplace`` (a GroupQueryAttention graph, onnx-community / onnxruntime-genai): the op writes the
  new rows into the past buffer itself, at each row's valid length (attention-mask row sums give
  ``seqlens_k``); the prompt is right-padded and runs as the op's first prompt (mask width = its
  length), each step after with a mask of ``capacity`` columns whose valid prefix grows.
- ``concat`` (optimum exports with ``position_ids``, with or without ``use_cache_branch``): the
  graph returns past + new rows. The past is the whole buffer with its free rows masked out by
  the attention mask; positions come from ``position_ids``, so where a row sits in the buffer does
  not matter to attention (RoPE and learned positions follow the ids, and attention sums over keys
  in any order). The step's new rows are copied into the buffer at the shared write slot.

- ``grow`` (merged decoders without ``position_ids``: Xenova/gpt2-style exports, and every
  encoder-decoder decoder): positions come from the past length, which a buffer would shift, so the
  past holds only real rows and grows each step (steppers.GrowingCache). Encoder-decoder graphs
  also take cross-attention pasts (``cross_pairs``: their length axis is the encoder's), computed
  on the first call and kept. GroupQueryAttention graphs whose ``seqlens_k`` counts the valid
  rows from the attention mask's *length* (its Shape, not its row sums: Gemma 3 exports of this
  kind) cannot mask a buffer's free rows either: they grow too, the op's present being past + new.
- a split pair (``decoder_model`` + ``decoder_with_past_model``: optimum's exports with
  ``--no-post-process``, many Xenova / onnx-community repos) grows too: its first call runs the
  graph without past (``CacheLayout.from_split``), every later one the graph with past. The
  with-past graph returns only the self-attention presents: its past inputs with no present of
  their own (the cross-attention KV) are the first graph's presents, kept for the generation,
  as the merged graph's cross pasts.
"""

import dataclasses
import logging

import numpy as np

from ..engine.passes.past_mask import NotApplicable, mask_past
from ..errors import InputError

_LOG = logging.getLogger(__name__)

_PAST_PREFIXES = ("past_key_values.", "past_")


@dataclasses.dataclass
class CacheLayout:
    mode: str  # "inplace", "concat" or "grow"
    pairs: list  # (past input ValueInfo, present output name) of self-attention
    has_positions: bool
    static_inputs: dict  # every call but the first
    logits: str
    cross_pairs: list = dataclasses.field(default_factory=list)  # cross-attention pasts
    first_static: dict = dataclasses.field(default_factory=dict)  # the first call's
    embeds: bool = False  # the graph takes inputs_embeds: the generator's embed() makes them
    # 3: position_ids [3, batch, sequence] (Qwen2-VL's M-RoPE: temporal, height, width)
    position_rank: int = 2
    # a split pair: past input name -> the first graph's present (None: the merged graph's own)
    first_presents: dict = None

    @classmethod
    def from_model(cls, model, mode=None, extra_inputs=(), split=False):
        """The layout of ``model``; ``mode`` forces "grow" on a graph that would buffer (a test
        of the growing cache on a position_ids graph); ``extra_inputs`` are inputs the caller
        fills (an encoder's outputs); ``split``: the with-past graph of a split pair, whose
        past inputs without a present are cross-attention pasts (from_split)."""
        inputs = {v.name: v for v in model.inputs}
        outputs = [v.name for v in model.outputs]
        pairs, cross = [], []
        encoder_axes = _axis_names(inputs.get("encoder_hidden_states"))
        for name, info in inputs.items():
            present = _present_name(name, outputs)
            if present is not None:
                is_cross = _axis_names(info)[2:3] and _axis_names(info)[2] in encoder_axes
                (cross if is_cross else pairs).append((info, present))
            elif split and name.startswith(_PAST_PREFIXES):
                cross.append((info, None))  # the first graph's present, kept
        # a vision-language decoder takes inputs_embeds (its caller embeds the ids: steppers)
        embeds = "input_ids" not in inputs and "inputs_embeds" in inputs
        if not pairs or not ("input_ids" in inputs or embeds) or "logits" not in outputs:
            raise InputError("This graph is not a decoder with a KV cache: it needs input_ids "
                             "(or inputs_embeds), past_key_values.* inputs and logits, present.* "
                             "outputs (export it with past, e.g. optimum's "
                             "text-generation-with-past)")
        gqa = any(n.op_type == "GroupQueryAttention" for n in model.graph.nodes)
        static = {}
        if "use_cache_branch" in inputs:
            static["use_cache_branch"] = np.array([True])
        if "num_logits_to_keep" in inputs:  # 0 keeps every position (rows are right-padded)
            static["num_logits_to_keep"] = np.array(0, inputs["num_logits_to_keep"].dtype)
        known = {"input_ids", "attention_mask", "position_ids", *static, *extra_inputs,
                 *(["inputs_embeds"] if embeds else []),
                 *(p.name for p, _ in pairs + cross)}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise InputError(f"The decoder takes input(s) {unknown} that generation cannot fill"
                             + ("" if "encoder_hidden_states" not in unknown else
                                " (an encoder-decoder decoder: use a text2text-generation, "
                                "summarization or translation pipeline)"))
        if mode not in (None, "grow"):
            raise InputError(f"cache mode must be None (read from the graph) or 'grow', got "
                             f"{mode!r}")
        by_length = gqa and _seqlens_from_mask_length(model.graph)
        grow = split or mode == "grow" or cross or by_length or \
            not (gqa or "position_ids" in inputs)
        if grow and gqa and not by_length:
            raise InputError("A GroupQueryAttention decoder writes its cache in place; it cannot "
                             "run with a growing cache")
        first = dict(static)
        if grow and "use_cache_branch" in inputs:
            first["use_cache_branch"] = np.array([False])  # the no-past branch
        shape = inputs["position_ids"].shape if "position_ids" in inputs else None
        rank = 2 if shape is None else len(shape)  # undeclared: the usual [batch, sequence]
        if rank not in (2, 3):
            raise InputError(f"The decoder's position_ids has rank {rank}; generation fills "
                             "[batch, sequence] or M-RoPE's [3, batch, sequence]")
        return cls("grow" if grow else "inplace" if gqa else "concat", pairs,
                   "position_ids" in inputs, static, "logits", cross, first, embeds, rank)

    @classmethod
    def from_split(cls, first, model, extra_inputs=()):
        """The layout of a split pair: ``first`` the decoder without past (its presents start the
        cache), ``model`` the decoder with past (every later step)."""
        layout = cls.from_model(model, extra_inputs=extra_inputs, split=True)
        inputs = {v.name for v in first.inputs}
        outputs = [v.name for v in first.outputs]
        pasts = sorted(n for n in inputs if n.startswith(_PAST_PREFIXES))
        if pasts or "input_ids" not in inputs or "logits" not in outputs:
            raise InputError("The first graph of a split decoder must be the decoder without past "
                             "(decoder_model.onnx: input_ids in, logits and present.* out)"
                             + (f"; it takes {pasts[:2]}" if pasts else ""))
        presents = {info.name: _present_name(info.name, outputs)
                    for info, _ in layout.pairs + layout.cross_pairs}
        missing = [name for name, present in presents.items() if present is None]
        if missing:
            raise InputError(f"The decoder without past gives no present for {missing[:2]}: "
                             "decoder_model.onnx and decoder_with_past_model.onnx are not a pair")
        unknown = sorted(inputs - {"input_ids", "attention_mask", *extra_inputs})
        if unknown:
            raise InputError(f"The decoder without past takes input(s) {unknown} that generation "
                             "cannot fill")
        return dataclasses.replace(layout, first_presents=presents, first_static={})

    def first_caches(self, rows, model_config, cross_length=0):
        """The first call's past inputs: zero-length ones for a merged graph, none for a split
        pair (its first graph takes none)."""
        if self.first_presents is not None:
            return {}
        return self.empty(rows, 0, model_config, cross_length)

    def first_present(self, info, present):
        """The first call's output for the past ``info`` (``present``: the step graph's)."""
        return present if self.first_presents is None else self.first_presents[info.name]

    def empty(self, rows, capacity, model_config, cross_length=0):
        """Zero caches [rows, heads, capacity, head_dim] from the graph's input metadata
        (symbolic head sizes come from config.json); cross-attention ones ``cross_length``
        long."""
        caches = {}
        for info, _ in self.pairs + [(i, p) for i, p in self.cross_pairs]:
            shape = list(info.shape)
            is_cross = any(info is c for c, _ in self.cross_pairs)
            shape[0], shape[2] = rows, cross_length if is_cross else capacity
            for axis in (1, 3):
                if not isinstance(shape[axis], int) or shape[axis] <= 0:
                    shape[axis] = _dim_from_config(model_config, axis, info)
            caches[info.name] = np.zeros(shape, info.dtype)
        return caches


def on_buffer(model, layout):
    """``model`` rewritten to run its growing cache on buffers whose free rows are masked
    (engine/passes/past_mask.py), or ``model`` itself where the rewrite does not apply (then the
    cache grows a row a step, a compiled shape each: said at DEBUG)."""
    if any(n.op_type == "GroupQueryAttention" for n in model.graph.nodes):
        return model  # a Gemma 3 export whose seqlens_k counts the mask's length: no Concat
    try:
        graph = mask_past(model.graph, [info.name for info, _ in layout.pairs], model.constants,
                          model.params)
    except NotApplicable as e:
        _LOG.debug("The decoder's KV cache grows a row a step (a compiled shape each): it "
                   "cannot run on a masked buffer: %s", e)
        return model
    return model.with_graph(graph)


def _seqlens_from_mask_length(graph):
    """Whether the GroupQueryAttention ops' ``seqlens_k`` (input 5) reads attention_mask only
    through Shape: the valid rows are the mask's length, every row full."""
    producer = {out: node for node in graph.nodes for out in node.outputs}
    seen, stack, reached = set(), [], False
    for node in graph.nodes:
        if node.op_type == "GroupQueryAttention" and len(node.inputs) > 5 and node.inputs[5]:
            stack.append(node.inputs[5])
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            continue
        for source in node.inputs:
            if source == "attention_mask":
                if node.op_type != "Shape":
                    return False  # the mask's values (row sums) count the rows
                reached = True
            elif source:
                stack.append(source)
    return reached


def _present_name(past, outputs):
    for prefix in _PAST_PREFIXES:
        if past.startswith(prefix):
            rest = past[len(prefix):]
            for candidate in (f"present.{rest}", f"present_{rest}", f"present{rest}"):
                if candidate in outputs:
                    return candidate
    return None


def _axis_names(info):
    return [] if info is None else [d if isinstance(d, str) else None for d in info.shape]


def _dim_from_config(config, axis, info):
    config = config or {}
    heads = config.get("num_key_value_heads") or config.get("num_attention_heads") or \
        config.get("decoder_attention_heads") or config.get("num_heads")
    if axis == 1 and heads:
        return int(heads)
    if axis == 3:
        if config.get("head_dim"):
            return int(config["head_dim"])
        if config.get("hidden_size") and config.get("num_attention_heads"):
            return int(config["hidden_size"]) // int(config["num_attention_heads"])
        if config.get("d_kv"):  # T5
            return int(config["d_kv"])
        if config.get("d_model") and heads:  # BART, Marian, M2M100
            return int(config["d_model"]) // int(heads)
    raise InputError(f"Cannot size the empty cache {info!r}: its axis {axis} is symbolic and "
                     "config.json gives no head_dim / num_key_value_heads")


def write_rows(xp, cache, new, slot):
    """``cache`` [B, H, L, D] with ``new`` [B, H, S, D] at rows [slot, slot + S); ``slot`` may be
    a traced scalar, so the write is a gather and a select (no dynamic slice)."""
    length, s = cache.shape[2], new.shape[2]
    rows = xp.arange(length)
    source = xp.clip(rows - slot, 0, s - 1)
    gathered = xp.take(new, source, axis=2)
    inside = xp.reshape((rows >= slot) & (rows < slot + s), (1, 1, length, 1))
    return xp.where(inside, gathered, cache)


def write_presents(write, caches, presents, at):
    """Every layer's cache with the rows its present (the past and the step's new rows
    [B, H, L + S, D]) holds past the cache's L written by ``write(cache, new, at)``. Compiled as
    one call for all layers: a slice and a write per layer cost ~1 ms of eager dispatch each
    step (a 30-layer decoder: 120 calls)."""
    return {name: write(cache, presents[name][:, :, cache.shape[2]:], at)
            for name, cache in caches.items()}
