"""Logits processors and warpers: transformers' semantics on small hand-checked cases, the same
results under jax.jit (no Python branch on values), and config validation."""

import numpy as np
import pytest

from transmuter.backends.numpy import XP as HOST
from transmuter.errors import InputError
from transmuter.generation import GenerationConfig
from transmuter.generation import processors as P
from transmuter.generation import sampling as S
from transmuter.generation.stopping import StopStrings

INF = -np.inf


def state(ids, length, prompt=1, max_length=10):
    ids = np.array([ids], np.int64)
    return P.State(ids, np.array([length]), np.array([prompt]), np.array([max_length]))


def scores(*values):
    return np.array([values], np.float32)


def test_repetition_penalty_divides_positive_multiplies_negative():
    out = P.RepetitionPenalty(2.0)(HOST, state([0, 1, 3], 2), scores(1, -1, 2, 0.5))
    np.testing.assert_allclose(out, scores(0.5, -2, 2, 0.5))  # id 3 is past the row's length


def test_no_repeat_ngram_bans_the_completing_token():
    out = P.NoRepeatNGram(2)(HOST, state([1, 2, 3, 1, 0], 4), scores(0, 0, 0, 0))
    np.testing.assert_array_equal(out, scores(0, 0, INF, 0))
    out = P.NoRepeatNGram(3)(HOST, state([1, 2, 3, 1, 0], 4), scores(0, 0, 0, 0))
    np.testing.assert_array_equal(out, scores(0, 0, 0, 0))  # [3, 1] never seen before


def test_bad_words_single_and_after_prefix():
    proc = P.BadWords([[3], [1, 2], [0]], eos_token_id=[0])
    np.testing.assert_array_equal(proc(HOST, state([2, 1], 2), scores(0, 0, 0, 0)),
                                  scores(0, 0, INF, INF))
    np.testing.assert_array_equal(proc(HOST, state([1, 2], 2), scores(0, 0, 0, 0)),
                                  scores(0, 0, 0, INF))


def test_min_length_min_new_tokens_forced_and_suppressed():
    s = scores(1, 2, 3, 4)
    np.testing.assert_array_equal(P.MinLength(3, [3])(HOST, state([1, 1], 2), s),
                                  scores(1, 2, 3, INF))
    np.testing.assert_array_equal(P.MinLength(2, [3])(HOST, state([1, 1], 2), s), s)
    np.testing.assert_array_equal(P.MinNewTokens(2, [3])(HOST, state([1, 1], 2), s),
                                  scores(1, 2, 3, INF))
    np.testing.assert_array_equal(P.ForcedEOS(2)(HOST, state([1, 1], 9), s), scores(INF, INF, 0, INF))
    np.testing.assert_array_equal(P.ForcedEOS(2)(HOST, state([1, 1], 8), s), s)
    np.testing.assert_array_equal(P.ForcedBOS(1)(HOST, state([5], 1), s), scores(INF, 0, INF, INF))
    np.testing.assert_array_equal(P.SuppressTokens([0, 2])(HOST, state([1], 1), s),
                                  scores(INF, 2, INF, 4))
    begin = P.SuppressTokensAtBegin([1])
    np.testing.assert_array_equal(begin(HOST, state([1, 1], 1), s), scores(1, INF, 3, 4))
    np.testing.assert_array_equal(begin(HOST, state([1, 1], 2), s), s)


def test_warpers():
    s = scores(1, 4, 3, 2)
    np.testing.assert_array_equal(S.TopK(2)(HOST, None, s), scores(INF, 4, 3, INF))
    np.testing.assert_allclose(S.Temperature(2.0)(HOST, None, s), s / 2)
    p = np.exp(s) / np.exp(s).sum()  # [0.032, 0.644, 0.237, 0.087]
    np.testing.assert_array_equal(S.TopP(0.7)(HOST, None, s), scores(INF, 4, 3, INF))
    np.testing.assert_array_equal(S.TopP(0.5)(HOST, None, s), scores(INF, 4, INF, INF))
    np.testing.assert_array_equal(S.MinP(0.2)(HOST, None, s), scores(INF, 4, 3, INF))
    assert p[0, 2] / p[0, 1] > 0.2 > p[0, 3] / p[0, 1]


def test_processors_jit_under_jax():
    import jax

    from transmuter.backends.jax import JaxNamespace
    config = GenerationConfig.from_dicts(
        {}, {}, repetition_penalty=1.3, no_repeat_ngram_size=2, bad_words_ids=[[5, 6], [7]],
        min_new_tokens=2, eos_token_id=[0], suppress_tokens=[9], begin_suppress_tokens=[8],
        forced_eos_token_id=0, do_sample=True, top_k=5, top_p=0.9, min_p=0.05, temperature=0.7)
    procs, warpers = P.build(config), S.build_warpers(config)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 12, (3, 10)).astype(np.int64)
    st = P.State(ids, np.array([4, 6, 9]), np.array([3, 3, 5]), np.array([10, 7, 12]))
    logits = rng.standard_normal((3, 12)).astype(np.float32)

    def apply(xp, st, x):
        for proc in procs:
            x = proc(xp, st, x)
        for warp in warpers:
            x = warp(xp, st, x)
        return x

    expected = apply(HOST, st, logits)
    with jax.enable_x64(True):
        got = jax.jit(lambda st, x: apply(JaxNamespace(), P.State(*st), x))(tuple(st), logits)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)
    assert np.isinf(expected).any()


def test_sampler_is_seeded_per_row():
    a = S.Sampler(True, 3, 2).noise(2, 50)
    b = S.Sampler(True, 3, 2).noise(2, 50)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(S.Sampler(True, 3, 1).noise(1, 50), a[:1])
    assert S.Sampler(True, 4, 1).noise(1, 50)[0, 0] != a[0, 0]


def test_stop_strings_end_inside_the_newest_token():
    vocab = {1: "Hel", 2: "lo", 3: " wor", 4: "ld"}
    stop = StopStrings(["o w"], lambda ids: "".join(vocab[i] for i in ids))
    assert list(stop([[1, 2], [1, 2, 3]])) == [False, True]
    assert list(stop([[1, 2, 3, 4]])) == [False]  # "o w" ended before the newest token


@pytest.mark.parametrize("options, match", [
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"temperature": 0}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"min_p": 2}, "min_p"), ({"eos_token_id": [-1]}, "eos_token_id"),
    ({"bad_words_ids": [[]]}, "bad_words_ids"), ({"stop_strings": [""]}, "stop_strings"),
    ({"num_beams": 2, "do_sample": True}, "beam sampling"),
    ({"num_beams": 2, "stop_strings": ["x"]}, "stop_strings"),
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences"),
    ({"num_beams": 2, "early_stopping": "sometimes"}, "early_stopping"),
    ({"bogus": 1}, "Unknown generation option")])
def test_config_validation(options, match):
    with pytest.raises(InputError, match=match):
        GenerationConfig.from_dicts({}, {}, **options)


def test_config_layers_file_then_options():
    config = GenerationConfig.from_dicts({"do_sample": True, "top_k": 20, "eos_token_id": [2, 3]},
                                         {"eos_token_id": 9, "pad_token_id": 0}, top_k=5)
    assert (config.do_sample, config.top_k, config.eos_token_id, config.pad_token_id) == \
        (True, 5, [2, 3], 0)
    assert config.new_tokens(15) == 5 and GenerationConfig(max_new_tokens=3).new_tokens(99) == 3


def test_config_pipeline_defaults_yield_to_the_model_then_options():
    # transformers' Pipeline.__init__ + _prepare_generation_config(use_model_defaults=True)
    defaults = {"max_new_tokens": 256, "num_beams": 4}
    config = GenerationConfig.from_dicts({"num_beams": 1, "length_penalty": 2.0}, {},
                                         pipeline_defaults=defaults)
    assert (config.num_beams, config.max_new_tokens, config.length_penalty) == (4, 256, 2.0)
    config = GenerationConfig.from_dicts({"num_beams": 2, "max_length": 448}, {},
                                         pipeline_defaults=defaults)
    assert (config.num_beams, config.max_new_tokens, config.max_length) == (2, None, 448)
    config = GenerationConfig.from_dicts({}, {}, pipeline_defaults=defaults,
                                         task_options={"num_beams": 3}, max_new_tokens=5)
    assert (config.num_beams, config.max_new_tokens) == (3, 5)
