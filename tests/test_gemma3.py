"""Gemma 3 GroupQueryAttention decoders (tests/fixtures/gemma3-gqa, families_gemma3.py: the genai
builder's graph with full caches; sliding layers with a window of 8, prompts of 25 and 17
tokens) against transformers' ``generate`` on the torch model (references/generate.json, equal
to onnxruntime's greedy ids). Ids are compared exactly: argmax decisions, our logits match
onnxruntime's to ~1e-5.

The same graph with ``seqlens_k`` taken from the attention mask's length (every row full, as
Gemma 3 exports of that kind count it) cannot use a buffer with masked free rows: it runs with a
growing cache (cache.py), and gives the same ids."""

import json

import numpy as np
import onnx
import pytest
from onnx import helper

import transmuter
from transmuter.generation import GenerationConfig, Generator

from .fixtures import ROOT

FIXTURE = ROOT / "gemma3-gqa"
REFERENCE = json.loads((FIXTURE / "references" / "generate.json").read_text())


def _config():
    return json.loads((FIXTURE / "config.json").read_text())


def _greedy(generator, prompts):
    config = GenerationConfig.from_dicts({}, _config(), max_new_tokens=REFERENCE["max_new_tokens"],
                                         do_sample=False, eos_token_id=REFERENCE["eos_token_id"])
    return generator.generate(prompts, config)


def _expected(new):
    """transformers' ids up to (and with) the first eos, as our generate returns them."""
    eos = REFERENCE["eos_token_id"]
    return new[:next((i + 1 for i, t in enumerate(new) if t in eos), len(new))]


def test_chat_equals_transformers_generate():
    pipe = transmuter.pipeline("text-generation", FIXTURE)
    assert pipe.generator.layout.mode == "inplace"
    case = REFERENCE["cases"][0]
    out = pipe(REFERENCE["prompt_messages"], max_new_tokens=REFERENCE["max_new_tokens"],
               do_sample=False, eos_token_id=REFERENCE["eos_token_id"], return_tensors=True)
    ids = out[0]["generated_token_ids"]
    assert ids[:len(case["prompt_ids"])] == case["prompt_ids"]  # template + tokenization
    assert ids[len(case["prompt_ids"]):] == _expected(case["transformers"])


def test_prompts_past_the_window_batched():
    """Both prompts (longer than the sliding window) in one batch give transformers' ids."""
    model = transmuter.load(FIXTURE / "onnx" / "model.onnx")
    prompts = [c["prompt_ids"] for c in REFERENCE["cases"]]
    assert min(map(len, prompts)) > REFERENCE["window"]
    got = _greedy(Generator(model, _config()), prompts)
    assert got == [_expected(c["transformers"]) for c in REFERENCE["cases"]]


def _counting_mask_length(tmp_path):
    """The fixture graph with every GroupQueryAttention's seqlens_k = mask width - 1 per row."""
    graph = onnx.load(str(FIXTURE / "onnx" / "model.onnx"))
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["len/shape"]),
        helper.make_node("Gather", ["len/shape", "len/one"], ["len/width"], axis=0),
        helper.make_node("Sub", ["len/width", "len/one"], ["len/last"]),
        helper.make_node("Slice", ["len/shape", "len/zero1", "len/one1"], ["len/rows"]),
        helper.make_node("Expand", ["len/last", "len/rows"], ["len/per_row"]),
        helper.make_node("Cast", ["len/per_row"], ["len/seqlens_k"], to=onnx.TensorProto.INT32),
    ]
    graph.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.array(1, np.int64), "len/one"),
        onnx.numpy_helper.from_array(np.array([0], np.int64), "len/zero1"),
        onnx.numpy_helper.from_array(np.array([1], np.int64), "len/one1"),
    ])
    for node in graph.graph.node:
        if node.op_type == "GroupQueryAttention":
            node.input[5] = "len/seqlens_k"
    rest = list(graph.graph.node)
    del graph.graph.node[:]
    graph.graph.node.extend(nodes + rest)
    path = tmp_path / "model.onnx"
    onnx.save(graph, str(path))
    return path


def test_seqlens_from_the_mask_length_grow_the_cache(tmp_path):
    model = transmuter.load(_counting_mask_length(tmp_path))
    generator = Generator(model, _config())
    assert generator.layout.mode == "grow"
    prompts = [c["prompt_ids"] for c in REFERENCE["cases"]]
    assert _greedy(generator, prompts) == [_expected(c["transformers"])
                                           for c in REFERENCE["cases"]]


def test_forcing_a_buffer_mode_on_it_is_refused(tmp_path):
    """Only 'grow' (or the graph's own mode) may be asked for."""
    model = transmuter.load(_counting_mask_length(tmp_path))
    with pytest.raises(Exception, match="cache mode"):
        Generator(model, _config(), cache="inplace")
