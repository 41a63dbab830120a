"""The decode loop as one compiled while_loop (generation/device_loop.py) against the host loop,
which test_generation_pipeline.py ties to transformers, on a GroupQueryAttention graph
(llama-gqa: the op writes its cache in place) and a position_ids graph (llama: a masked buffer).
Token ids must be exactly equal, greedy and seeded sampling with processors, batch 1 and a batch
of prompts of different lengths, eos stopping mid-batch, per-row length limits, a stream every k
tokens; and greedy ids through the pipeline equal transformers' generate (recorded)."""

import json
import os

import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.generation import GenerationConfig, Generator

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
_PIPES = {}

# ids under both fixtures' vocabularies (llama: 700); lengths 5, 2, 9: unequal rows
ALONE = [[1, 5, 9, 33, 12]]
BATCH = [[1, 5, 9, 33, 12], [1, 7], [1, 100, 200, 300, 400, 50, 60, 70, 8]]
# every processor and warper the pipeline supports, with eos reachable after min_new_tokens
SAMPLED = dict(do_sample=True, seed=5, temperature=0.8, top_k=20, top_p=0.9, min_p=0.02,
               repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=4,
               suppress_tokens=[3, 4], bad_words_ids=[[7], [9, 10]], eos_token_id=[2])


def pipe(name):
    # one pipeline per fixture: the host loop and the device loops compile once per shape
    if name not in _PIPES:
        _PIPES[name] = transmuter.pipeline("text-generation", os.path.join(FIXTURES, name),
                                           variant="fp32")
    return _PIPES[name]


def config(name, **options):
    return GenerationConfig.from_dicts({}, pipe(name).generator.model_config, **options)


def both(name, prompts, cfg, every=True):
    """(host loop ids, device loop ids) and the steps each showed its on_step."""
    gen, seen = pipe(name).generator, ([], [])
    host = gen.generate(prompts, cfg, on_step=lambda t, a: seen[0].append((list(t), list(a))))
    device = gen.generate(prompts, cfg, device_loop=every,
                          on_step=lambda t, a: seen[1].append((list(t), list(a))))
    return host, device, seen


@pytest.mark.parametrize("name", ["llama-gqa", "llama"])
@pytest.mark.parametrize("prompts", [ALONE, BATCH], ids=["alone", "batch"])
@pytest.mark.parametrize("options", [dict(max_new_tokens=10, eos_token_id=[]),
                                     dict(max_new_tokens=10, **SAMPLED)],
                         ids=["greedy", "sampled"])
def test_device_loop_equals_host_loop(name, prompts, options):
    host, device, seen = both(name, prompts, config(name, **options))
    assert device == host
    assert seen[1] == seen[0]  # the same steps, tokens and active rows, reported at the end
    assert pipe(name).generator.stats.lengths == [[len(g)] for g in host]


@pytest.mark.parametrize("name", ["llama-gqa", "llama"])
def test_eos_mid_batch_and_per_row_limits(name):
    """eos set to a token row 0 makes early: rows stop at different steps; max_length (not
    max_new_tokens) gives each row its own budget."""
    free = pipe(name).generator.generate(BATCH, config(name, max_new_tokens=8, eos_token_id=[]))
    eos = free[0][2]
    cfg = config(name, max_length=15, eos_token_id=[eos])
    host, device, _ = both(name, BATCH, cfg)
    assert len({len(g) for g in host}) > 1 and host[0][-1] == eos  # the case is what it says
    assert device == host


@pytest.mark.parametrize("name", ["llama-gqa", "llama"])
def test_stream_every_k_tokens(name):
    """device_loop=3: the loop runs 3 steps per device call, so 10 tokens take 4 calls; what the
    stream sees is the host loop's steps, in order."""
    loop = pipe(name).generator._device_loop()
    before = loop.calls
    host, device, seen = both(name, ALONE, config(name, max_new_tokens=10, eos_token_id=[]),
                              every=3)
    assert device == host and seen[1] == seen[0] and len(host[0]) == 10
    assert loop.calls - before == 4


def test_pipeline_greedy_equals_transformers_generate():
    """Through the pipeline (chat template, generation_config.json) with device_loop=True: the
    ids transformers' generate recorded (references/generate.json)."""
    with open(os.path.join(FIXTURES, "llama-gqa", "references", "generate.json")) as f:
        ref = json.load(f)
    out = pipe("llama-gqa")(ref["prompt_messages"], max_new_tokens=ref["max_new_tokens"],
                            do_sample=False, eos_token_id=ref["eos_token_id"],
                            return_tensors=True, device_loop=True)
    assert out[0]["generated_token_ids"][len(ref["prompt_ids"]):] == ref["transformers"]


def test_pipeline_stream_joins_to_the_host_text():
    p = pipe("llama-gqa")
    kwargs = dict(max_new_tokens=8, do_sample=False)
    chunks = list(p("Hello world! This is", stream=True, device_loop=True, **kwargs))
    new = p("Hello world! This is", return_full_text=False, **kwargs)[0]["generated_text"]
    assert "".join(chunks) == new


@pytest.mark.parametrize("options, match", [
    ({"stop_strings": ["x"]}, "stop_strings"), ({"num_beams": 2}, "beam search"),
    ({"device_loop": 0}, "device_loop must be"), ({"device_loop": "yes"}, "device_loop must be")])
def test_refused_options(options, match):
    options = {"device_loop": True, **options}
    with pytest.raises(InputError, match=match):
        pipe("llama-gqa")("Hello", max_new_tokens=4, **options)


def test_refused_processor_backend_and_graph():
    gen = pipe("llama").generator
    with pytest.raises(InputError, match="no device form"):
        gen.generate(ALONE, config("llama", max_new_tokens=2), device_loop=True,
                     processors=[lambda xp, state, scores: scores])
    with pytest.raises(InputError, match="JAX backend"):
        transmuter.pipeline("text-generation", os.path.join(FIXTURES, "llama-gqa"),
                            variant="fp32", backend="mlx", device_loop=True)
    # a growing cache (merged decoders without position_ids): a new shape every step
    grow = Generator(gen.model, gen.model_config, cache="grow")
    with pytest.raises(InputError, match="fixed-cache"):
        grow.generate(ALONE, config("llama", max_new_tokens=2), device_loop=True)
