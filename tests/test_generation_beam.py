"""Beam search and the growing KV cache on decoder-only fixtures, against transformers' ``generate``
on the PyTorch models (references/generate_beam.json, tests/support/record_generation.py): greedy,
3 beams with num_return_sequences, length_penalty, early_stopping (True / "never") and an eos that
makes beams finish at different steps. Ids are compared exactly (argmax / top-k decisions; our
logits match onnxruntime to ~1e-5, far from the recorded score gaps).

Cache modes: gpt2's merged decoder with position_ids (fixed buffer), the same graph forced to the
growing cache (as Xenova/gpt2 exports without position_ids need), llama (position_ids, one graph),
llama-gqa and qwen3-gqa (GroupQueryAttention writing the cache in place: reordering beams moves
whole buffer rows; references from tests/support/families_genai.py --record-beam, transformers 5);
gpt2 greedy and beams on MLX too.
"""

import json
import os

import numpy as np
import pytest

import transmuter
from transmuter.generation import GenerationConfig, Generator
from transmuter.generation.beam import _topk
from transmuter import buckets
from transmuter.pipelines.base import PipelineError

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
_PIPES, _GROW = {}, {}


def pipe(name):
    if name not in _PIPES:
        _PIPES[name] = transmuter.pipeline("text-generation", os.path.join(FIXTURES, name),
                                           variant="fp32")
    return _PIPES[name]


def generator(name, cache):
    p = pipe(name)
    if cache is None:
        return p.generator
    if name not in _GROW:
        _GROW[name] = Generator(p.model, p.config, cache=cache)
    return _GROW[name]


def cases(name):
    with open(os.path.join(FIXTURES, name, "references", "generate_beam.json")) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("name, cache", [("gpt2", None), ("llama", None), ("gpt2", "grow")])
def test_greedy_and_beams_equal_transformers_generate(name, cache):
    p, gen = pipe(name), generator(name, cache)
    assert gen.layout.mode == (cache or "concat")
    # growing: every step of each prompt length compiles; one prompt covers the mode
    for case in cases(name)[:5] if cache == "grow" else cases(name):
        assert p.tokenizer.encode(case["prompt"]).ids == case["prompt_ids"]
        config = GenerationConfig.from_dicts(p.generation_file, p.config, **case["kwargs"])
        if config.num_beams > 1:
            got = gen.beam_search([case["prompt_ids"]], config)[0][0]
        else:
            got = [gen.generate([case["prompt_ids"]], config)[0]]
        assert got == case["sequences"], case["kwargs"]


@pytest.mark.parametrize("name", ["llama-gqa", "qwen3-gqa"])
def test_inplace_cache_beams_equal_transformers_generate(name):
    # every call runs the chat prompt and a short one (59 / 22 and 6 tokens) together, 6 rows
    # (2 prompts x 3 beams; greedy: the pair 3 times), so one prompt shape and one step shape
    # compile: each row writes its keys at its own length, and reordering beams must carry whole
    # buffer rows. transformers ran each prompt alone; rows are independent, so a case whose
    # options (its own eos) belong to one prompt checks that prompt's row only. Exact ids: the
    # fp32 graphs match torch to 1.1e-5 (manifest torch_max_abs_diff), far below the gaps
    # between recorded beam scores.
    p, gen = pipe(name), generator(name, None)
    assert gen.layout.mode == "inplace"
    prompts, groups = [], {}
    for case in cases(name):
        assert p.tokenizer.encode(case["prompt"]).ids == case["prompt_ids"]
        if case["prompt_ids"] not in prompts:
            prompts.append(case["prompt_ids"])
        groups.setdefault(json.dumps(case["kwargs"], sort_keys=True), []).append(case)
    assert len(prompts) == 2 and len({len(x) for x in prompts}) == 2
    for group in groups.values():
        config = GenerationConfig.from_dicts(p.generation_file, p.config, **group[0]["kwargs"])
        if config.num_beams > 1:
            got = gen.beam_search(prompts, config)[0]
        else:
            got = [[g] for g in gen.generate(prompts * 3, config)[:2]]
        for case in group:
            assert got[prompts.index(case["prompt_ids"])] == case["sequences"], case["kwargs"]


def test_growing_cache_groups_rows_by_prompt_length():
    # prompts of different lengths in one batch: each group grows its own cache; same as alone
    greedy = [c for c in cases("gpt2") if "num_beams" not in c["kwargs"]]
    assert len({len(c["prompt_ids"]) for c in greedy}) == 2
    config = GenerationConfig.from_dicts({}, pipe("gpt2").config, **greedy[0]["kwargs"])
    got = generator("gpt2", "grow").generate([c["prompt_ids"] for c in greedy], config)
    assert [[g] for g in got] == [c["sequences"] for c in greedy]


@pytest.mark.parametrize("cache", [None, "grow"])
def test_beams_start_from_one_prompt_run(cache):
    # 3 inputs x 3 beams: each prompt runs once (3 rows; a growing cache pads them to 4), then
    # its row is repeated for its beams (9 rows; a growing cache pads whole inputs: 12, not 16).
    # The recorded prompt equals transformers, which ran it alone; another prompt of its length
    # in the middle equals itself alone
    case = next(c for c in cases("gpt2") if c["kwargs"].get("num_beams", 1) > 1)
    gen = generator("gpt2", cache)
    config = GenerationConfig.from_dicts(pipe("gpt2").generation_file, pipe("gpt2").config,
                                         **case["kwargs"])
    other = case["prompt_ids"][::-1]
    got = gen.beam_search([case["prompt_ids"], other, case["prompt_ids"]], config)[0]
    assert got[0] == got[2] == case["sequences"] != got[1]
    assert got[1] == gen.beam_search([other], config)[0][0]
    with gen.model.backend.scope():
        stepper = gen.stepper([case["prompt_ids"]] * 3, 4)
        stepper.start()
        assert _cache_rows(stepper) == ({4} if cache else {3})
        stepper.repeat(3)
        assert _cache_rows(stepper) == ({12} if cache else {9})


def _cache_rows(stepper):
    """The row counts of a stepper's cache buffers (a growing cache keeps one dict a group)."""
    groups = stepper.caches if isinstance(stepper.caches, list) else [stepper.caches]
    return {v.shape[0] for caches in groups for v in caches.values()}


def test_topk_is_the_stable_sorts_first_k():
    # the beam's top-k takes a partition past 16 k columns; the stable sort it replaces (whose
    # order the transformers references above fix) is the reference: ties lower index first,
    # -inf, NaN (sorted last) and every tie count at the k-th value
    rng = np.random.default_rng(0)
    for trial in range(600):
        n, k = int(rng.integers(1, 2000)), int(rng.integers(1, 12))
        k = min(k, n)
        x = [rng.standard_normal((3, n)), rng.integers(0, 4, (3, n)),
             np.where(rng.random((3, n)) < 0.9, -np.inf, rng.integers(0, 3, (3, n))),
             np.where(rng.random((3, n)) < 0.01, np.nan, rng.standard_normal((3, n)))][trial % 4]
        x = x.astype(np.float32)
        assert _topk(x, k).tolist() == np.argsort(-x, -1, kind="stable")[:, :k].tolist()


def test_beam_pipeline_outputs_and_errors():
    p = pipe("gpt2")
    case = next(c for c in cases("gpt2") if c["kwargs"].get("num_return_sequences") == 3)
    out = p(case["prompt"], return_tensors=True, **case["kwargs"])
    assert [o["generated_token_ids"] for o in out] == \
        [case["prompt_ids"] + s for s in case["sequences"]]
    texts = p([case["prompt"]], return_full_text=False, **case["kwargs"])[0]
    assert len(texts) == 3 and all(set(t) == {"generated_text"} for t in texts)
    with pytest.raises(PipelineError, match="beam"):
        p(case["prompt"], stream=True, num_beams=3, do_sample=False)


def test_token_summary():
    # counts by hand: no eos in 8 greedy tokens (see the reference); a prompt runs in chunks
    # whose last may be padded (buckets.prompt_chunks), a shorter row beside a longer one is
    # padded to the longer one's chunks; with an eos, beams that end early count fewer outputs
    p = pipe("gpt2")
    greedy = next(c for c in cases("gpt2") if "num_beams" not in c["kwargs"])
    n = len(greedy["prompt_ids"])
    width = lambda k: sum(buckets.prompt_chunks(k))  # noqa: E731
    out = p(greedy["prompt"], token_summary=True, **greedy["kwargs"])[0]["token_summary"]
    assert out == {"input": n, "output": 8, "padding": width(n) - n}
    both = p([greedy["prompt"], "word " * 20], token_summary=True, batch_size=2,
             **greedy["kwargs"])
    m = len(p.tokenizer.encode("word " * 20).ids)
    assert width(m) > m > n  # both rows are padded
    assert both[0][0]["token_summary"] == {"input": n, "output": 8, "padding": width(m) - n}
    second = both[1][0]["token_summary"]  # idle steps after an early eos count as padding
    assert second["input"] == m
    assert second["padding"] == width(m) - m + 8 - second["output"]
    case = next(c for c in cases("gpt2") if "eos_token_id" in c["kwargs"]
                and c["prompt"] == greedy["prompt"])
    eos = case["kwargs"]["eos_token_id"]
    outs = p(case["prompt"], token_summary=True, **case["kwargs"])
    lengths = [s.index(eos) + 1 if eos in s else len(s) for s in case["sequences"]]
    assert [o["token_summary"]["output"] for o in outs] == lengths


def test_mlx_greedy_and_beam():
    pytest.importorskip("mlx.core")
    p = transmuter.pipeline("text-generation", os.path.join(FIXTURES, "gpt2"), variant="fp32",
                            backend="mlx")
    with open(os.path.join(FIXTURES, "gpt2", "references", "pipeline_text-generation.json")) as f:
        call = json.load(f)["calls"][0]
    assert p(call["inputs"], batch_size=2, **call["call_kwargs"]) == call["outputs"]
    case = next(c for c in cases("gpt2") if c["kwargs"].get("num_return_sequences") == 3)
    out = p(case["prompt"], return_tensors=True, **case["kwargs"])
    assert [o["generated_token_ids"][len(case["prompt_ids"]):] for o in out] == case["sequences"]


def test_prompt_chunks_equal_the_whole_prompt():
    # prompts run in chunks into the buffer (concat mode; 75 tokens as 64 + a padded 12, 100 as
    # one padded 128, 37 as one padded 48); the growing cache runs them whole: both were
    # checked against transformers above, here on long prompts with rows of two lengths
    config = GenerationConfig.from_dicts({}, pipe("gpt2").config, max_new_tokens=4)
    assert buckets.prompt_chunks(75) == [64, 12]
    for lengths in [(100, 37), (75, 37)]:
        prompts = [[(k * i) % 500 + 3 for i in range(n)] for k, n in zip((7, 11), lengths)]
        assert generator("gpt2", None).generate(prompts, config) == \
            generator("gpt2", "grow").generate(prompts, config)
