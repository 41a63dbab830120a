"""Whisper's temperature fallback, no-speech skip and condition_on_prev_tokens
(pipelines/audio/whisper/fallback.py) against transformers' pipeline on the whisper fixture's
torch model over the 65 s of speech/long.flac (references/whisper_fallback.json, recorded by
tests/support/record_whisper_fallback.py).

Compared: the outputs (texts identical, timestamps within 1e-4 as every audio case), and each
window's decision, in order: its ids, (needs_fallback, should_skip), the compression ratio
(exact: the same bytes through zlib), the mean log-probability within 1e-4 (float32 logits of
another kernel order, ~1e-6 seen; with beams, along the beam each token came from), the no-speech probability within 1e-7 relative 1e-3 (the
threshold sits 2e-3 from the nearest recorded value: the same side or the test fails). A case
with sampled passes (torch's random draws are not reproduced) is compared up to its first
sampled pass.
"""

import json

import numpy as np
import pytest

import transmuter
from transmuter.pipelines.audio.whisper import fallback as F
from transmuter.pipelines.base import PipelineError

from .fixtures import ROOT
from .test_pipelines_audio import TOL, as_recorded, clip
from .test_pipelines_text import assert_close

REFERENCE = json.loads((ROOT / "whisper" / "references" / "whisper_fallback.json").read_text())
CASES = {c["name"]: c for c in REFERENCE["cases"]}
LOGPROB_ATOL = 1e-4  # see the module docstring
_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("automatic-speech-recognition", ROOT / "whisper",
                                              backend=backend, variant="fp32")
    return _PIPES[backend]


def kwargs_of(case):
    kwargs = json.loads(json.dumps(case["call_kwargs"]))
    options = kwargs["generate_kwargs"]
    if isinstance(options.get("temperature"), list):
        options["temperature"] = tuple(options["temperature"])
    return kwargs


def run_recording(p, case, monkeypatch, **extra):
    """The pipeline's output on the case, and its decisions as the reference lists them."""
    decisions, temperature = [], []
    config_at, decide = F.Fallback.config_at, F.Fallback.decide

    def spy_config(self, config, t):
        temperature[:] = [t]
        return config_at(self, config, t)

    def spy_decide(self, ids, logprob, no_speech, vocab_size):
        need, skip = decide(self, ids, logprob, no_speech, vocab_size)
        decisions.append({"temperature": temperature[0], "ids": list(ids), "logprob": logprob,
                          "no_speech_prob": no_speech, "needs_fallback": need,
                          "should_skip": skip})
        return need, skip

    monkeypatch.setattr(F.Fallback, "config_at", spy_config)
    monkeypatch.setattr(F.Fallback, "decide", spy_decide)
    kwargs = kwargs_of(case)
    kwargs["generate_kwargs"].update(extra)
    out = as_recorded(p({"raw": clip(case["audio"]), "sampling_rate": 16000}, **kwargs))
    return out, decisions


def assert_same_decisions(ours, theirs, name):
    for k, (a, b) in enumerate(zip(ours, theirs)):
        where = f"{name} decision {k}"
        assert a["temperature"] == b["temperature"], where
        assert a["ids"] == b["ids"], where
        assert (a["needs_fallback"], a["should_skip"]) == (b["needs_fallback"],
                                                          b["should_skip"]), where
        assert F.compression_ratio(a["ids"], 1924) == b["compression_ratio"], where
        if "logprob" in b:
            assert abs(a["logprob"] - b["logprob"]) <= LOGPROB_ATOL, where
        if "no_speech_prob" in b:
            np.testing.assert_allclose(a["no_speech_prob"], b["no_speech_prob"], rtol=1e-3,
                                       atol=1e-7, err_msg=where)


DETERMINISTIC = [n for n, c in CASES.items() if not c["sampled"]]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("name", DETERMINISTIC)
def test_matches_transformers(name, backend, monkeypatch):
    case = CASES[name]
    out, decisions = run_recording(pipe(backend), case, monkeypatch)
    assert_close(out, case["outputs"], TOL, name)
    assert len(decisions) == len(case["decisions"]), name
    assert_same_decisions(decisions, case["decisions"], name)


def test_sampled_fallback_decides_as_transformers_until_it_samples(monkeypatch):
    case = CASES["fallback_sampled"]
    greedy = [d for d in case["decisions"][:1]]
    assert greedy[0]["temperature"] == 0.0 and greedy[0]["needs_fallback"]
    p = pipe("mlx")
    out, decisions = run_recording(p, case, monkeypatch, seed=7)
    assert_same_decisions(decisions[:1], greedy, "fallback_sampled")
    assert decisions[1]["temperature"] == 0.2  # the window was decoded again, sampled
    again, _ = run_recording(p, case, monkeypatch, seed=7)
    assert again == out  # seeded: the same draws


def test_a_batch_equals_one_by_one():
    p = pipe("mlx")
    long = clip(CASES["condition_on_prev_tokens"]["audio"])
    clips = [long, long[:20 * 16000]]
    for name in ("condition_on_prev_tokens", "no_speech_skip", "fallback_to_greedy_again"):
        kwargs = kwargs_of(CASES[name])
        alone = [as_recorded(p(c, **kwargs)) for c in clips]
        assert as_recorded(p(clips, batch_size=2, **kwargs)) == alone, name


def test_previous_text_as_transformers_cuts_it():
    begin = 100  # timestamps are ids >= 100 here
    windows = [[100, 5, 6, 110, 110, 7, 120, 121], [101, 8, 102]]
    # window 1: segments [100 5 6 110] and [110 7 120 121] (two ending timestamps: the last
    # dropped); window 2: one segment ending on a single timestamp, kept whole
    assert F.segments(windows[0], begin) == [[100, 5, 6, 110], [110, 7, 120, 121]]
    assert F.previous_text(windows, begin, 100) == [100, 5, 6, 110, 110, 7, 120, 101, 8, 102]
    assert F.previous_text(windows, begin, 4) == [120, 101, 8, 102]


@pytest.mark.parametrize("options,message", [
    ({"no_speech_threshold": 0.5}, "needs logprob_threshold"),
    ({"temperature": -0.1}, "temperature must be"),
    ({"temperature": (0.0, "hot")}, "temperature must be"),
    ({"logprob_threshold": "low"}, "logprob_threshold must be a number"),
    ({"condition_on_prev_tokens": "yes"}, "condition_on_prev_tokens must be a bool"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(PipelineError, match=message):
        pipe("mlx")(np.zeros(16000, np.float32), generate_kwargs=options)
