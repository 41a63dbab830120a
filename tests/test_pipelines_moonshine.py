"""Moonshine speech recognition (pipelines/audio/seq2seq_speech.py): test_pipelines_audio.py runs
the fixture's recorded transformers cases (JAX, MLX, a batch equals one by one); here, that the
pipeline picks Moonshine's head and refuses what Moonshine cannot do."""

import pytest

import transmuter
from transmuter.pipelines.audio import seq2seq_speech

from .fixtures import ROOT
from .test_pipelines_audio import cases, inputs

FIXTURE, TASK = "moonshine", "automatic-speech-recognition"
_PIPES = {}


def pipe(backend="jax"):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline(TASK, ROOT / FIXTURE, backend=backend)
    return _PIPES[backend]


def test_the_head_is_moonshines():
    assert isinstance(pipe().head, seq2seq_speech.Head)


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
