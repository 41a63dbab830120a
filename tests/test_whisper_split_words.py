"""Word timestamps (``return_timestamps="word"``) on a split decoder pair.

whisper-timestamped-split (tests/support/families_audio_timestamped_split.py) is
whisper-timestamped's model exported as decoder_model + decoder_with_past_model, both with
``cross_attentions.*`` outputs. The alignment is read from one teacher-forced decoder_model call
over the prompt and the generated tokens (whisper.py ``_token_times``), so the pair gives
transformers' word timestamps: whisper-timestamped's transformers pipeline record (the same torch
model) is the reference, texts identical and timestamps within 1e-4 as every audio case.

A split pair without those outputs (whisper-split) is refused with the file it lacks them in and
the export to use.
"""

import json

import pytest

import transmuter
from transmuter.pipelines.base import PipelineError

from .fixtures import ROOT
from .test_pipelines_audio import TOL, as_recorded, clip
from .test_pipelines_text import assert_close

TASK = "automatic-speech-recognition"
REFERENCE = json.loads((ROOT / "whisper-timestamped" / "references" /
                        f"pipeline_{TASK}.json").read_text())
CASES = {c["name"]: c for c in REFERENCE["cases"]
         if c["call_kwargs"].get("return_timestamps") == "word" and "error" not in c}
_PIPES = {}


def pipe(fixture, backend):
    key = (fixture, backend)
    if key not in _PIPES:
        _PIPES[key] = transmuter.pipeline(TASK, ROOT / fixture, backend=backend, variant="fp32")
    return _PIPES[key]


def run(p, case):
    clips, kwargs = [clip(a) for a in case["audio"]], case["call_kwargs"]
    if case.get("batch_size"):
        return as_recorded(p(clips, batch_size=case["batch_size"], **kwargs))
    return [as_recorded(p(c, **kwargs)) for c in clips]


def test_the_pair_outputs_cross_attentions_and_runs_split():
    p = pipe("whisper-timestamped-split", "mlx")
    assert p.head.generator.decoder.layout.first_presents is not None  # the split pair runs
    assert p.head.attention_outputs == ["cross_attentions.0", "cross_attentions.1"]


# JAX compiles the teacher-forced call per sequence length on top of the steps (~1 min a case
# on 2 cores); MLX runs them in seconds. The JAX twins are slow tests.
@pytest.mark.parametrize("backend", [pytest.param("jax", marks=pytest.mark.slow), "mlx"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_word_timestamps_on_the_split_pair_match_transformers(name, backend):
    assert len(CASES) >= 5  # short, return_language, beams, chunked, batch
    case = CASES[name]
    assert_close(run(pipe("whisper-timestamped-split", backend), case), case["outputs"], TOL,
                 name)


def test_a_split_pair_without_cross_attentions_is_refused_naming_its_file():
    p = pipe("whisper-split", "mlx")
    case = CASES["word_timestamps"]
    with pytest.raises(PipelineError, match=r"decoder_model\.onnx has no cross_attentions\.\* "
                                            r"outputs: use an export whose onnx/decoder_model"
                                            r"\.onnx \(with its decoder_with_past_model\.onnx\)"):
        run(p, case)
