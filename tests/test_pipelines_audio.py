"""Audio pipelines against the transformers pipeline outputs recorded with the fixtures
(references/pipeline_<task>.json: cases of clips, options and outputs), on JAX and MLX; a batch
equals one by one."""

import json

import numpy as np
import pytest

import transmuter

from .fixtures import ROOT, pipeline_reference, pipeline_references
from .test_pipelines_text import assert_close

AUDIO_TASKS = {"audio-classification", "zero-shot-audio-classification",
               "automatic-speech-recognition"}
# Tiny random models: XLA's float32 sums in another order than PyTorch's move scores by ~1e-6,
# and the features by as much (test_audio_features.py); the bound of 1e-4 leaves headroom.
TOL = 1e-4
REFERENCES = pipeline_references(AUDIO_TASKS)


def expected(fixture, task, case):
    """A case's outputs; for a batch that transformers' padding makes differ from each clip
    alone (``equals_case`` not equal, texts changed), that case's one-by-one outputs: the model
    takes no attention_mask, so the zeros transformers pads with are heard (wav2vec2-base
    normalizes over time); Transmuter runs such clips at their own lengths, so its batch equals
    one by one (test_a_batch_equals_one_by_one)."""
    same = case.get("equals_case")
    if same and not same["equal"] and same["max_abs_diff"] is None:
        return next(c for c in cases(fixture, task) if c["name"] == same["case"])["outputs"]
    return case["outputs"]
# transformers fails here (its Whisper tokenizer has no pad token to batch with; long-form
# clips of different lengths crash its padding); Transmuter batches them, and
# test_a_batch_equals_one_by_one checks those batches.
NOT_AN_ERROR_HERE = {("whisper", "batch_without_pad_token_is_an_error"),
                     ("whisper", "batch_longform_different_lengths_is_an_error")}
_PIPES = {}


def clap_logit_scale():
    """exp(logit_scale_a) of the joint CLAP the split files were cut from (the clap fixture's
    model.onnx, same weights): split files hold no scale, so a caller gives it."""
    import onnx

    graph = onnx.load(ROOT / "clap" / "onnx" / "model.onnx").graph
    stored = next(t for t in graph.initializer if t.name == "logit_scale_a")
    return float(np.exp(onnx.numpy_helper.to_array(stored)))


def options(fixture):
    return {"logit_scale": clap_logit_scale()} if fixture == "clap-split" else {}


def pipe(fixture, task, backend="jax"):
    key = (fixture, task, backend)
    if key not in _PIPES:
        _PIPES[key] = transmuter.pipeline(task, ROOT / fixture, backend=backend, variant="fp32",
                                          **options(fixture))
    return _PIPES[key]


def clip(entry):
    """The samples of a reference's clip: a path under tests/fixtures (.npy, or an audio file
    read by soundfile as the recorder read it), or {"path", "start", "stop"} (samples)."""
    import soundfile

    spec = entry if isinstance(entry, dict) else {"path": entry}
    path = ROOT / spec["path"]
    samples = np.load(path) if path.suffix == ".npy" else \
        soundfile.read(path, dtype="float32", always_2d=False)[0]
    return samples[spec.get("start", 0):spec.get("stop")]


def cases(fixture, task):
    """The reference's cases; a reference recorded before cases existed is one case."""
    ref = pipeline_reference(fixture, task)
    if "cases" in ref:
        return ref["cases"]
    audio = [f"{fixture}/{p}" for p in ref["inputs"]["audio"]]
    return [{"name": "recorded", "audio": audio, "sampling_rate": ref["inputs"]["sampling_rate"],
             "call_kwargs": ref["call_kwargs"], "outputs": ref["outputs"]}]


def as_recorded(result):
    """A result as the reference JSON holds it (timestamp tuples become lists)."""
    return json.loads(json.dumps(result))


def run(p, clips, case):
    kwargs = case["call_kwargs"]
    if case.get("batch_size"):
        return as_recorded(p(clips, batch_size=case["batch_size"], **kwargs))
    out = []
    for i, x in enumerate(clips):
        if case.get("setup") == "np.random.seed(i) before the call on clip i":
            np.random.seed(i)  # CLAP's rand_trunc draws its crop from NumPy's global RNG
        out.append(as_recorded(p(x, **kwargs)))
    return out


def inputs(case):
    extra = {k: tuple(v) if isinstance(v, list) else v
             for k, v in (case.get("input_extra") or {}).items()}
    return [{"raw": clip(a), "sampling_rate": case["sampling_rate"], **extra}
            for a in case["audio"]]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture,task", REFERENCES, ids=[f"{f}-{t}" for f, t in REFERENCES])
def test_matches_recorded_pipeline(fixture, task, backend):
    p = pipe(fixture, task, backend)
    for case in cases(fixture, task):
        if (fixture, case["name"]) in NOT_AN_ERROR_HERE:
            continue
        if case.get("error"):  # transformers refused the call: so must we, with a clear error
            with pytest.raises(ValueError):
                run(p, inputs(case), case)
            continue
        if "cross-attentions" in case.get("needs", ()) and not p.head.attention_outputs:
            with pytest.raises(ValueError, match="cross-attention"):  # this export has none
                run(p, inputs(case), case)
            continue
        assert_close(run(p, inputs(case), case), expected(fixture, task, case), TOL,
                     f"{fixture} {case['name']}")


@pytest.mark.parametrize("fixture,task", REFERENCES, ids=[f"{f}-{t}" for f, t in REFERENCES])
def test_a_batch_equals_one_by_one(fixture, task):
    p = pipe(fixture, task)
    for case in cases(fixture, task):
        if (case.get("error") and (fixture, case["name"]) not in NOT_AN_ERROR_HERE) or \
                (case.get("needs") and not p.head.attention_outputs) or case.get("setup"):
            continue  # refused, not run yet, or random (CLAP's crop of a long clip)
        clips, kwargs = inputs(case), case["call_kwargs"]
        alone = [as_recorded(p(x, **kwargs)) for x in clips]
        assert_close(as_recorded(p(clips, batch_size=len(clips), **kwargs)), alone, 1e-5,
                     f"{fixture} {case['name']} batched")


def test_split_clap_needs_its_logit_scale():
    with pytest.raises(transmuter.pipelines.PipelineError, match="logit_scale="):
        transmuter.pipeline("zero-shot-audio-classification", ROOT / "clap-split")


def test_split_clap_embeds_each_label_set_once():
    p = pipe("clap-split", "zero-shot-audio-classification")
    sound = clip({"path": "speech/cat_16k.wav", "start": 0, "stop": 16000})
    first = p(sound, candidate_labels=["speech", "music"])
    kept = set(p._label_sets.keys())
    # a batch of two runs other kernels than one row: floats within 1e-6, labels equal
    assert_close(p([sound, sound], candidate_labels=["speech", "music"]), [first, first], 1e-6)
    assert set(p._label_sets.keys()) == kept  # the second call embedded no text
    assert ("This is a sound of speech.", "This is a sound of music.") in kept


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_word_timestamps_align_tokens_as_transformers(backend, monkeypatch):
    """Per token, the times the cross-attention alignment gives equal generate's
    ``token_timestamps`` (recorded as "alignment": the sequences, prompt included, and their
    times), on the export with cross-attention outputs. Times are 20 ms frame indices, so equal
    within float32 rounding means the same DTW path."""
    from transmuter.pipelines.audio.whisper.pipeline import Head

    p = pipe("whisper-timestamped", "automatic-speech-recognition", backend)
    seen = []
    original = Head._token_times

    def spy(self, *args):
        seen.append(original(self, *args))
        return seen[-1]

    monkeypatch.setattr(Head, "_token_times", spy)
    checked = 0
    for case in cases("whisper-timestamped", "automatic-speech-recognition"):
        if case["call_kwargs"].get("return_timestamps") != "word" or case.get("batch_size"):
            continue
        for clip_input, alignment in zip(inputs(case), case["alignment"]):
            seen.clear()
            p(clip_input, **case["call_kwargs"])
            got = np.concatenate([np.asarray(t) for call in seen for t in call])
            want = np.asarray(alignment["timestamps"][0], np.float32)
            np.testing.assert_allclose(got[:len(want)], want, atol=1e-6, err_msg=case["name"])
            checked += 1
    assert checked >= 6
