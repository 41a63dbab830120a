"""Moonshine speech recognition (pipelines/audio/seq2seq_speech.py) against the transformers
pipeline outputs recorded with the tiny moonshine fixture, on JAX and MLX; a batch equals one by
one.

speech_recognition.py does not dispatch to this head yet: the tests build the pipeline with the
dispatch patched (Moonshine's config goes to seq2seq_speech.Head, every other model where it went).
"""

import pytest

import transmuter
from transmuter.pipelines.audio import seq2seq_speech, whisper

from .fixtures import ROOT
from .test_pipelines_audio import TOL, as_recorded, cases, expected, inputs, run
from .test_pipelines_text import assert_close

FIXTURE, TASK = "moonshine", "automatic-speech-recognition"
_PIPES = {}


@pytest.fixture(scope="module", autouse=True)
def dispatch():
    """Moonshine configs to seq2seq_speech.Head, through the Whisper branch of the dispatch."""
    is_whisper, head = whisper.is_whisper, whisper.Head

    def pick(pipe, model, config, **kwargs):
        kind = seq2seq_speech.Head if seq2seq_speech.is_seq2seq_speech(config) else head
        return kind(pipe, model, config, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(whisper, "is_whisper",
                      lambda config: is_whisper(config) or seq2seq_speech.is_seq2seq_speech(config))
        patch.setattr(whisper, "Head", pick)
        yield
    _PIPES.clear()


def pipe(backend="jax"):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline(TASK, ROOT / FIXTURE, backend=backend)
    return _PIPES[backend]


def test_the_head_is_moonshines():
    assert isinstance(pipe().head, seq2seq_speech.Head)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_recorded_pipeline(backend):
    p = pipe(backend)
    for case in cases(FIXTURE, TASK):
        if case.get("error"):  # transformers refused the call: so must we, with a clear error
            with pytest.raises(ValueError):
                run(p, inputs(case), case)
            continue
        assert_close(run(p, inputs(case), case), expected(FIXTURE, TASK, case), TOL,
                     f"{FIXTURE} {case['name']} ({backend})")


def test_a_batch_equals_one_by_one():
    p = pipe()
    for case in cases(FIXTURE, TASK):
        if case.get("error"):
            continue
        clips, kwargs = inputs(case), case["call_kwargs"]
        alone = [as_recorded(p(x, **kwargs)) for x in clips]
        assert_close(as_recorded(p(clips, batch_size=len(clips), **kwargs)), alone, 0,
                     f"{FIXTURE} {case['name']} batched")


def test_errors_name_what_to_change():
    p = pipe()
    clip = inputs(cases(FIXTURE, TASK)[1])[0]
    with pytest.raises(ValueError, match="return_timestamps"):
        p(clip, return_timestamps=True)
    with pytest.raises(ValueError, match="return_language"):
        p(clip, return_language=True)
    with pytest.raises(ValueError, match="stride"):
        p(dict(clip, stride=(1600, 1600)))
    with pytest.raises(ValueError, match="num_beam"):
        p(clip, generate_kwargs={"num_beam": 2})
