"""Word timestamps over Whisper's sequential long-form decoding (whisper.py: each window's token
times from the decoder's cross-attentions, num_frames = the recording's frames - seek, offset by
the window's start) against transformers' pipeline on the whisper-timestamped fixture's torch
model (references/longform_words.json, tests/support/record_whisper_longform_words.py): 65 s and
20 s of speech, with and without condition_on_prev_tokens. Tolerance: test_pipelines_audio's
(timestamps are frame multiples of 0.02 s plus offsets: the same DTW path gives the same
floats, another path differs by 0.02)."""

import json

import pytest

import transmuter

from .fixtures import ROOT
from .test_pipelines_audio import TOL, as_recorded, inputs, run
from .test_pipelines_text import assert_close

FIXTURE = ROOT / "whisper-timestamped"
CASES = json.loads((FIXTURE / "references" / "longform_words.json").read_text())["cases"]
_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("automatic-speech-recognition", FIXTURE,
                                              backend=backend, variant="fp32")
    return _PIPES[backend]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_transformers(case, backend, monkeypatch):
    from transmuter.pipelines.audio.whisper.pipeline import Head

    seen, forward = [], Head.forward

    def spy(self, chunks, **params):
        out = forward(self, chunks, **params)
        seen.extend(o["token_timestamps"][0].tolist() for o in out)
        return out

    monkeypatch.setattr(Head, "forward", spy)
    got = run(pipe(backend), inputs(case), case)
    assert len(got[0]["chunks"]) > 1  # several windows, each with its offset
    assert_close(got, case["outputs"], TOL, case["name"])
    # every kept token's time, as generate returned them to the pipeline
    assert_close(seen, [call[0]["token_timestamps"][0] for call in case["generate_calls"]],
                 TOL, case["name"] + " token_timestamps")


def test_a_batch_equals_one_by_one():
    p = pipe("mlx")
    clips = [c for case in CASES[:2] for c in inputs(case)]
    kwargs = CASES[0]["call_kwargs"]
    alone = [as_recorded(p(dict(c), **kwargs)) for c in clips]
    assert as_recorded(p([dict(c) for c in clips], batch_size=2, **kwargs)) == alone
