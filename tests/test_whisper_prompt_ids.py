"""Whisper's ``prompt_ids`` / ``prompt_condition_type`` (pipelines/audio/whisper/prompt_ids.py)
against transformers' pipeline on the whisper fixture's torch model
(references/whisper_prompt_ids.json, recorded by tests/support/record_whisper_prompt_ids.py):
short form (greedy, timestamps, beams, detected language, a batch, chunked) and sequential long
form with and without ``condition_on_prev_tokens``, both condition types; word timestamps with
a prompt on whisper-timestamped (the prompt counts in the alignment's input rows).

Compared: the outputs (texts identical, timestamps within 1e-4 as every audio case), the token
ids generate returned (the prompt stripped: identical), and every window's decoder input ids
(prompt, previous text, start tokens: identical). transformers' own
``_prepare_decoder_input_ids`` on made-up segments (the ``prepared`` cases) checks the
previous-text cut of both condition types, which the tiny model's windows seldom reach.
"""

import json

import numpy as np
import pytest

import transmuter
from transmuter.pipelines.audio.whisper import pipeline as W
from transmuter.pipelines.audio.whisper.prompt_ids import GivenPrompt, get_prompt_ids
from transmuter.pipelines.base import PipelineError

from .fixtures import ROOT
from .test_pipelines_audio import TOL, as_recorded, clip
from .test_pipelines_text import assert_close

REFERENCE = json.loads((ROOT / "whisper" / "references" / "whisper_prompt_ids.json").read_text())
CASES = {c["name"]: c for c in REFERENCE["cases"]}
RUNS = [n for n, c in CASES.items() if "error" not in c]
ERRORS = {"longform_all_segments_without_condition_is_an_error": "condition_on_prev_tokens=True",
          "unknown_condition_type_is_an_error": "prompt_condition_type must be one of",
          "prompt_too_long_is_an_error": "shorten prompt_ids"}
_PIPES = {}


def pipe(backend, fixture="whisper"):
    if (backend, fixture) not in _PIPES:
        _PIPES[backend, fixture] = transmuter.pipeline("automatic-speech-recognition",
                                                       ROOT / fixture, backend=backend,
                                                       variant="fp32")
    return _PIPES[backend, fixture]


def run_case(p, case, monkeypatch):
    """The pipeline's outputs on the case, the token ids of each call and every window's decoder
    input rows."""
    tokens, inputs = [], []
    forward, fallback = W.Head.forward, W.generate_with_fallback

    def spy_forward(self, chunks, **params):
        out = forward(self, chunks, **params)
        tokens.append([o["tokens"][0].tolist() for o in out])
        return out

    def spy_fallback(head, prompts, *args):
        inputs.append([list(map(int, p)) for p in prompts])
        return fallback(head, prompts, *args)

    monkeypatch.setattr(W.Head, "forward", spy_forward)
    monkeypatch.setattr(W, "generate_with_fallback", spy_fallback)
    kwargs = json.loads(json.dumps(case["call_kwargs"]))
    clips = [clip(a) for a in case["audio"]]
    if case.get("batch_size"):
        out = as_recorded(p(clips, batch_size=case["batch_size"], **kwargs))
    else:
        out = [as_recorded(p(c, **kwargs)) for c in clips]
    return out, tokens, inputs


def rows(entries):
    return [row for entry in entries for row in entry]


# JAX compiles the steps of each prompt length (10-100 s a case on 2 loaded cores, 630 s for
# all); MLX runs the same ids in seconds. The JAX twins are slow tests.
@pytest.mark.parametrize("backend", [pytest.param("jax", marks=pytest.mark.slow), "mlx"])
@pytest.mark.parametrize("name", RUNS)
def test_matches_transformers(name, backend, monkeypatch):
    case = CASES[name]
    out, tokens, inputs = run_case(pipe(backend, case["fixture"]), case, monkeypatch)
    assert_close(out, case["outputs"], TOL, name)
    # transformers' token ids: one list per pipeline call, one entry per generate call
    assert rows(tokens) == [row for call in case["token_ids"] for entry in call for row in entry]
    if case["call_kwargs"].get("return_timestamps"):
        assert rows(inputs) == rows(case["decoder_inputs"]), name
    else:  # the recorder reran greedy short-form generate calls (their scores): same inputs
        assert {tuple(r) for r in rows(inputs)} == {tuple(r) for r in
                                                    rows(case["decoder_inputs"])}, name


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_refused_as_transformers_refuses(name):
    case = CASES[name]
    assert "error" in case  # transformers raised too
    with pytest.raises(PipelineError, match=ERRORS[name]):
        pipe("mlx")(clip(case["audio"][0]), **json.loads(json.dumps(case["call_kwargs"])))


def test_prompt_ids_of_a_text_equal_transformers_get_prompt_ids():
    tok = pipe("mlx").tokenizer
    for case in REFERENCE["cases"]:
        ids = get_prompt_ids(tok, case["prompt_text"])
        assert ids.dtype == np.int64
        assert ids.tolist() == case["generate_kwargs"]["prompt_ids"], case["prompt_text"]
    with pytest.raises(PipelineError, match="special token"):
        get_prompt_ids(tok, "hello <|endoftext|>")


def test_window_inputs_equal_transformers_prepare_decoder_input_ids():
    head = pipe("mlx").head
    prev = head.file.get("prev_sot_token_id")
    for k, case in enumerate(REFERENCE["prepared"]):
        prompt = GivenPrompt(tuple(case["prompt_ids"]), case["condition_type"])
        windows = prompt.first_windows(prev) + case["segments"]
        got = prompt.window(head, case["init_tokens"], windows, case["condition"])
        assert got == case["decoder_input_ids"], k


@pytest.mark.parametrize("ids", [[], [[420, 262]], [420.0, 262.5], ["<|startofprev|>"], [420, 10**6],
                                 [-1], "hello"])
def test_bad_prompt_ids_are_refused(ids):
    with pytest.raises(PipelineError, match="prompt_ids"):
        pipe("mlx")(clip(CASES["short_greedy"]["audio"][0]),
                    generate_kwargs={"max_new_tokens": 4, "prompt_ids": ids})
