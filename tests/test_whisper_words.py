"""Whisper token timestamps (pipelines/audio/whisper/words.py) against transformers'
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
from transmuter.pipelines.audio.whisper import words as W

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


# --- the whisper-timestamped fixture: the export's cross-attentions, the pipeline's recipe -------

TIMESTAMPED = ROOT / "fixtures" / "whisper-timestamped"
ALIGNMENT = TIMESTAMPED / "references" / "token_timestamps.npz"
RECORD = TIMESTAMPED / "references" / "pipeline_automatic-speech-recognition.json"
HEADS = [[1, 0], [1, 1]]  # the fixture's generation_config.json alignment_heads (checked below)
SR = 16000


def alignment_keys():
    names = np.load(ALIGNMENT).files
    return sorted({n.rsplit("/", 1)[0] for n in names})


def onnx_timestamps(ref, key):
    """token_timestamps over onnxruntime's cross-attentions of one generate call, as the
    pipeline calls it: num_frames from the attention mask, the prompt's length, 0.02 s."""
    layers = [ref[f"{key}/layer{i}"] for i in range(2)]
    frames = ref[f"{key}/num_frames"] if f"{key}/num_frames" in ref else None
    return W.token_timestamps(layers, HEADS, num_frames=frames,
                              num_input_ids=int(ref[f"{key}/num_input_ids"]), time_precision=0.02)


def test_fixture_alignment_heads():
    config = json.loads((TIMESTAMPED / "generation_config.json").read_text())
    assert config["alignment_heads"] == HEADS


@pytest.mark.parametrize("key", alignment_keys())
def test_onnx_cross_attentions_give_transformers_timestamps(key):
    """The export's cross-attentions over the tokens transformers generated (greedy, batched,
    chunked, beams), stacked step by step, give generate's own token timestamps."""
    ref = np.load(ALIGNMENT)
    got = onnx_timestamps(ref, key)
    want = ref[f"{key}/timestamps"]
    assert got.shape == want.shape == ref[f"{key}/sequences"].shape
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def word_cases():
    cases = json.loads(RECORD.read_text())["cases"]
    return [c for c in cases if c["call_kwargs"].get("return_timestamps") == "word"]


@pytest.mark.parametrize("case", word_cases(), ids=lambda c: c["name"])
def test_the_recipe_gives_the_pipelines_words(case):
    """token timestamps from the export -> the generated tokens' part (what the pipeline hands
    _decode_asr, eos padding aside) -> _decode_asr, the chunks' strides in seconds: transformers'
    pipeline output, texts and times."""
    from transmuter.pipelines.audio.whisper.text import decode_asr
    from transmuter.preprocess.text.tokenizer import Tokenizer

    tok, ref = Tokenizer.from_repo(TIMESTAMPED), np.load(ALIGNMENT)
    language = case["call_kwargs"].get("return_language")
    strides = iter(case.get("chunk_strides") or [])
    clip_lengths = [s[0] for s in case.get("chunk_strides") or []] or \
        [a["stop"] - a["start"] for a in case["audio"]]
    calls = iter(range(len(case["alignment"])))
    results = []
    for call_ids, call_record in zip(case["token_ids"], case["generate_calls"]):
        model_outputs = []
        for rows, generated in zip(call_ids, call_record):
            key = f"{case['name']}/{next(calls)}"
            stamps = onnx_timestamps(ref, key)
            prompt = int(ref[f"{key}/num_input_ids"])
            lengths = [clip_lengths.pop(0) for _ in rows]
            # num_frames: the features' attention mask summed, a mel frame per hop of 160 samples
            np.testing.assert_array_equal(ref[f"{key}/num_frames"], [-(-n // 160) for n in lengths])
            for b, ids in enumerate(rows):
                kept = stamps[b, prompt:prompt + len(ids)]
                text = np.array(ids) != tok.eos_token_id  # eos pads a batch's shorter row
                np.testing.assert_allclose(kept[text], np.array(generated["token_timestamps"][b])[text],
                                           rtol=0, atol=ATOL)
                out = {"tokens": np.array([ids]), "token_timestamps": kept[None]}
                stride = next(strides, None)
                if stride is not None:
                    out["stride"] = tuple(s / SR for s in stride)
                model_outputs.append(out)
        # a batch's rows are separate inputs; a recording's chunks are one
        groups = [[o] for o in model_outputs] if case["batch_size"] else [model_outputs]
        results += [decode_asr(tok, g, return_timestamps="word", return_language=language)
                    for g in groups]
    got = [{"text": text, **optional} for text, optional in results]
    assert json.loads(json.dumps(got)) == case["outputs"]
