"""Whisper token timestamps (pipelines/audio/whisper_words.py) against transformers'
``WhisperGenerationMixin._extract_token_timestamps``, recorded by
tests/support/record_whisper_words.py on seeded cross-attentions (batches, num_frames forms,
beams, NaN and tied cases: see there).

Tolerance 1e-6: a timestamp is a frame index times time_precision, rounded to float32 as
transformers rounds it, so the same DTW path gives the same float; a different path differs by
at least one frame (0.02 s). The normalisation may round an ulp apart from torch's kernels,
which could only matter on an exact tie in the DTW, and the recorded ties come out the same.
"""

import json
import pathlib

import numpy as np
import pytest

from transmuter.errors import InputError
from transmuter.pipelines.audio import whisper_words as W

ROOT = pathlib.Path(__file__).resolve().parent
REFERENCE = np.load(ROOT / "fixtures" / "whisper" / "references" / "whisper_words.npz")
META = json.loads(str(REFERENCE["meta"]))
ATOL = 1e-6  # see the module docstring


def layers(name):
    spec = META[name]
    return [REFERENCE[f"{name}/layer{i}"].astype(np.float32) for i in range(spec["layers"])]


def options(name):
    spec = META[name]
    kwargs = {"num_input_ids": spec["prompt"]}
    if f"{name}/num_frames" in REFERENCE:
        frames = REFERENCE[f"{name}/num_frames"]
        kwargs["num_frames"] = int(frames) if frames.ndim == 0 else frames
    if f"{name}/beam_indices" in REFERENCE:
        kwargs["beam_indices"] = REFERENCE[f"{name}/beam_indices"]
    for key in ("time_precision", "median_filter_width"):
        if key in spec:
            kwargs[key] = spec[key]
    return kwargs


@pytest.mark.parametrize("name", sorted(META))
def test_token_timestamps_equal_transformers(name):
    got = W.token_timestamps(layers(name), META[name]["alignment_heads"], **options(name))
    want = REFERENCE[f"{name}/timestamps"]
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", ["one_row", "beams", "per_row_frames"])
def test_stacked_steps_equal_transformers(name):
    """The decode steps' outputs (the prompt's rows, then a row a step) through stack_steps."""
    spec, whole = META[name], layers(name)
    cuts = np.cumsum([spec["prompt"]] + [1] * (spec["tokens"] - spec["prompt"]))[:-1]
    steps = [list(rows) for rows in zip(*(np.split(a, cuts, axis=2) for a in whole))]
    assert len(steps) == spec["tokens"] - spec["prompt"] + 1
    got = W.token_timestamps(W.stack_steps(steps), spec["alignment_heads"], **options(name))
    np.testing.assert_allclose(got, REFERENCE[f"{name}/timestamps"], rtol=0, atol=ATOL)


def test_the_cases_move_through_time():
    """Most recorded cases give several distinct times (a DTW stuck at one frame proves less)."""
    moving = [n for n in META if len(np.unique(REFERENCE[f"{n}/timestamps"])) > 4]
    assert len(moving) >= 12, moving


def test_median_filter_is_a_reflect_padded_running_median():
    x = np.array([[5.0, 1.0, 4.0, 2.0, 3.0]], np.float32)
    # reflect: [4, 1 | 5 1 4 2 3 | 2 4];
    # windows 4 1 5 1 4, 1 5 1 4 2, 5 1 4 2 3, 1 4 2 3 2, 4 2 3 2 4
    np.testing.assert_array_equal(W.median_filter(x, 5), [[4.0, 2.0, 3.0, 2.0, 3.0]])
    np.testing.assert_array_equal(W.median_filter(x[:, :2], 5), x[:, :2])  # too short: as is


@pytest.mark.parametrize("call, message", [
    (lambda a: W.token_timestamps(a[0], [[0, 0]]), "one array per decoder layer"),
    (lambda a: W.token_timestamps([a[0][0]], [[0, 0]]), "batch, heads, tokens, frames"),
    (lambda a: W.token_timestamps(a, [[2, 0]]), "do not fit"),
    (lambda a: W.token_timestamps(a, [[0, 5]]), "do not fit"),
    (lambda a: W.token_timestamps(a, [1, 0]), r"\[\[layer, head\], ...\]"),
    (lambda a: W.token_timestamps(a, [[0, 0]], num_frames=[10, 20, 30]), "num_frames"),
    (lambda a: W.token_timestamps(a, [[0, 0]], num_frames=-4), "num_frames"),
    (lambda a: W.token_timestamps(a, [[0, 0]], num_input_ids=-1), "num_input_ids"),
    (lambda a: W.token_timestamps(a, [[0, 0]], median_filter_width=4), "odd"),
    (lambda a: W.token_timestamps(a, [[0, 0]], time_precision=0), "time_precision"),
    (lambda a: W.token_timestamps(a, [[0, 0]], beam_indices=np.array([[0, 9]])), "beam"),
    (lambda a: W.stack_steps([]), "non-empty"),
    (lambda a: W.stack_steps([a, a[:1]]), "same 2 layers"),
])
def test_bad_inputs_are_input_errors(call, message):
    attention = [np.full((2, 2, 5, 8), 1 / 8, np.float32)] * 2
    with pytest.raises(InputError, match=message):
        call(attention)
