"""text-generation against recorded transformers outputs: greedy text and ids for each KV-cache
mode (merged decoder: gpt2; position_ids: llama, qwen3; GroupQueryAttention: llama-gqa,
qwen3-gqa, whose ORT fp32 greedy ids equal transformers')."""

import json
import os

import pytest

import transmuter
from transmuter.errors import InputError

from .fixtures import pipeline_references

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
_PIPES = {}


def pipe(name):
    # one pipeline per fixture for the whole module: each compiles its prompt and step once
    if name not in _PIPES:
        _PIPES[name] = transmuter.pipeline("text-generation", os.path.join(FIXTURES, name),
                                           variant="fp32")
    return _PIPES[name]


def reference(name, file):
    with open(os.path.join(FIXTURES, name, "references", file)) as f:
        return json.load(f)


@pytest.mark.parametrize("name", [f for f, _ in pipeline_references({"text-generation"})])
def test_greedy_equals_transformers_pipeline(name):
    text_call, ids_call = reference(name, "pipeline_text-generation.json")["calls"]
    p = pipe(name)
    # both inputs in one batch: rows of different lengths give what each gives alone
    assert p(text_call["inputs"], batch_size=2, **text_call["call_kwargs"]) == text_call["outputs"]
    assert p(ids_call["inputs"], batch_size=1, **ids_call["call_kwargs"]) == ids_call["outputs"]


@pytest.mark.parametrize("name", ["llama-gqa", "qwen3-gqa"])
def test_gqa_chat_equals_transformers_generate(name):
    ref = reference(name, "generate.json")
    out = pipe(name)(ref["prompt_messages"], max_new_tokens=ref["max_new_tokens"],
                     do_sample=False, eos_token_id=ref["eos_token_id"], return_tensors=True)
    ids = out[0]["generated_token_ids"]
    assert ids[:len(ref["prompt_ids"])] == ref["prompt_ids"]  # template + tokenization
    assert ids[len(ref["prompt_ids"]):] == ref["transformers"]


def test_chat_output_and_new_text():
    p = pipe("llama-gqa")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    full = p(messages, max_new_tokens=3, do_sample=False)[0]["generated_text"]
    assert full[:-1] == messages and full[-1]["role"] == "assistant"
    new = p({"messages": messages}, max_new_tokens=3, do_sample=False, return_full_text=False)
    assert new == [{"generated_text": full[-1]["content"]}]


def test_seeded_sampling_repeats_and_batched_equals_alone():
    p = pipe("gpt2")
    kwargs = dict(max_new_tokens=6, do_sample=True, top_k=20, temperature=0.8, seed=7,
                  return_tensors=True)
    a = p("The capital of France is", **kwargs)
    assert a == p("The capital of France is", **kwargs)
    assert p("The capital of France is", **dict(kwargs, seed=8)) != a
    both = p(["The capital of France is", "Hello world! This is"], batch_size=2, **kwargs)
    assert both[0] == a


def test_stop_strings_and_bad_options():
    p = pipe("gpt2")
    full = p("Hello world! This is", max_new_tokens=8, return_full_text=False)[0]
    stop = full["generated_text"][3:5]
    short = p("Hello world! This is", max_new_tokens=8, return_full_text=False,
              stop_strings=[stop])[0]["generated_text"]
    assert stop in short and len(short) < len(full["generated_text"])
    with pytest.raises(InputError, match="max_new_tokens"):
        p("Hello", max_new_tokens=0)
    with pytest.raises(InputError, match="top_p"):
        p("Hello", top_p=1.5)
    with pytest.raises(InputError, match="context"):
        p("Hello " * 300, max_new_tokens=4)
    with pytest.raises(Exception, match="takes no option"):
        p("Hello", frobnicate=True)


def test_stream_chunks_join_to_the_new_text():
    p = pipe("gpt2")
    kwargs = dict(max_new_tokens=8, do_sample=False)
    chunks = list(p("Hello world! This is", stream=True, **kwargs))
    new = p("Hello world! This is", return_full_text=False, **kwargs)[0]["generated_text"]
    assert "".join(chunks) == new and len(chunks) >= 1
    with pytest.raises(Exception, match="one input"):
        p(["a", "b"], stream=True)


def test_stream_token_summary():
    """stream=True, token_summary=True: the text chunks, then one dict with the non-streamed
    call's token_summary and why it ended; the greedy ids come from transformers' generate
    (generate_beam.json): 8 new tokens ("length"), and with eos set to the third of them, 3
    ("stop"); a stop string also ends with "stop"."""
    p = pipe("gpt2")
    case = reference("gpt2", "generate_beam.json")["cases"][0]
    assert case["kwargs"] == {"max_new_tokens": 8, "do_sample": False}
    prompt, greedy = case["prompt"], case["sequences"][0]
    eos = greedy[2]
    for kwargs, output, finish in [({}, 8, "length"), ({"eos_token_id": eos}, 3, "stop"),
                                   ({"stop_strings": [p._decode(greedy[1:3], None)]}, 3, "stop")]:
        kwargs = {**case["kwargs"], **kwargs}
        *chunks, last = p(prompt, stream=True, token_summary=True, **kwargs)
        alone = p(prompt, token_summary=True, return_full_text=False, **kwargs)[0]
        assert "".join(chunks) == alone["generated_text"] and all(isinstance(c, str) for c in chunks)
        assert last == {"token_summary": alone["token_summary"], "finish_reason": finish}
        assert last["token_summary"]["output"] == output
    # without the option a stream holds text chunks only
    assert all(isinstance(c, str) for c in p(prompt, stream=True, **case["kwargs"]))


def test_text_streamer_rule():
    from transmuter.generation.streaming import TextStreamer
    pieces = {1: "Hello", 2: " wor", 3: "ld", 4: "\n", 5: "\u4e2d", 6: "\ufffd", 7: " ok"}
    s = TextStreamer(lambda ids: "".join(pieces[i] for i in ids))
    assert [s.put([i]) for i in (1, 2, 3, 4)] == ["", "Hello ", "", "world\n"]
    assert s.put([5]) == "\u4e2d" and s.put([6]) == "" and s.put([7]) == "\ufffd "
    assert s.end() == "ok"


def test_cache_capacity_bounds_the_waste_and_the_shapes():
    from transmuter.generation.steppers import MIN_CAPACITY, cache_capacity

    sizes = [cache_capacity(n) for n in range(1, 4097)]
    for n, size in enumerate(sizes, 1):
        assert size >= max(n, MIN_CAPACITY)
        assert size == MIN_CAPACITY or 2 * size < 3 * n  # under 1.5x the rows needed
    assert sorted(set(sizes)) == [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                                  4096]  # two decode shapes per doubling
