"""Whisper's ASR decoding (pipelines/audio/whisper/text.py) against transformers'
``WhisperTokenizerFast._decode_asr`` and ``decode``, recorded by
tests/support/record_whisper_text.py on synthetic model outputs (segments, strides, restarts,
prompts, languages, empty chunks, word timestamps, random tokens) for the whisper fixture's
tokenizer and, when ../shared/hub-files has them, whisper-tiny.en's and whisper-base's.

Texts must be identical and timestamps exactly equal: both sides do the same float arithmetic on
the same values (strides in seconds, float32 token times read back exactly), in the same order.
"""

import builtins
import json
import pathlib

import numpy as np
import pytest

from transmuter.errors import InputError
from transmuter.pipelines.audio.whisper import text as W
from transmuter.preprocess.text.tokenizer import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parent
REFERENCE = json.loads((ROOT / "fixtures" / "whisper" / "references" / "decode_asr.json")
                       .read_text(encoding="utf-8"))
HUB = ROOT.parents[1] / "shared" / "hub-files"
PATHS = {"fixture": ROOT / "fixtures" / "whisper",
         "Xenova/whisper-tiny.en": HUB / "Xenova" / "whisper-tiny.en",
         "openai/whisper-base": HUB / "openai" / "whisper-base"}
_TOKENIZERS = {}


def tokenizer(name):
    if not PATHS[name].is_dir():
        pytest.skip(f"needs ../shared/hub-files ({name})")
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = Tokenizer.from_repo(PATHS[name])
    return _TOKENIZERS[name]


def model_outputs(case):
    """The recorded outputs as the pipeline hands them over: int64 [1, n], float32 [1, n]."""
    outputs = []
    for o in case["outputs"]:
        out = {"tokens": np.array(o["tokens"], np.int64).reshape(1, -1)}
        if "stride" in o:
            out["stride"] = tuple(o["stride"])
        if "token_timestamps" in o:
            out["token_timestamps"] = np.array(o["token_timestamps"], np.float32).reshape(1, -1)
        outputs.append(out)
    return outputs


def runs():
    for name, ref in REFERENCE["tokenizers"].items():
        for k, case in enumerate(ref["cases"]):
            for r, run in enumerate(case["runs"]):
                yield pytest.param(name, k, r, id=f"{name}-{k}-{case['kind']}-{r}")


@pytest.mark.parametrize("name, k, r", list(runs()))
def test_decode_asr_equals_transformers(name, k, r):
    tok = tokenizer(name)
    case = REFERENCE["tokenizers"][name]["cases"][k]
    run = case["runs"][r]
    kwargs = {key: run[key] for key in ("return_timestamps", "return_language", "time_precision",
                                        "segment_size")}
    if "error" in run:  # transformers' own failure (its word split indexing past the text)
        with pytest.raises(getattr(builtins, run["error"])):
            W.decode_asr(tok, model_outputs(case), **kwargs)
        return
    text, optional = W.decode_asr(tok, model_outputs(case), **kwargs)
    assert text == run["text"]
    # tuples become lists through JSON; floats compare exactly
    assert json.loads(json.dumps(optional, ensure_ascii=False)) == run["optional"]


def test_there_are_about_a_hundred_fixture_cases_of_every_kind():
    cases = REFERENCE["tokenizers"]["fixture"]["cases"]
    n = sum(len(case["runs"]) for case in cases)
    kinds = {case["kind"].split("_")[0] for case in cases}
    options = {(run["return_timestamps"], run["return_language"]) for case in cases
               for run in case["runs"]}
    assert n >= 100 and {"plain", "segments", "chunked", "word", "random", "prompt"} <= kinds
    assert {(None, None), (True, None), (None, True), (True, True), ("word", None),
            ("word", True)} <= options


@pytest.mark.parametrize("name", list(REFERENCE["tokenizers"]))
def test_decode_equals_transformers(name):
    tok = tokenizer(name)
    for case in REFERENCE["tokenizers"][name]["decode"]:
        got = W.decode(tok, case["ids"], skip_special_tokens=case["skip_special_tokens"],
                       decode_with_timestamps=case["decode_with_timestamps"])
        assert got == case["text"], case


@pytest.mark.parametrize("name", list(REFERENCE["tokenizers"]))
def test_special_ids_in_transformers_order(name):
    assert W.special_ids(tokenizer(name)) == REFERENCE["tokenizers"][name]["all_special_ids"]


def test_tokens_may_be_one_dimensional():
    tok = tokenizer("fixture")
    case = next(c for c in REFERENCE["tokenizers"]["fixture"]["cases"] if c["kind"] == "plain")
    flat = [{"tokens": np.array(o["tokens"])} for o in case["outputs"]]
    assert W.decode_asr(tok, flat)[0] == case["runs"][0]["text"]


def test_languages_tables():
    assert W.LANGUAGES["en"] == "english" and len(W.LANGUAGES) == 100
    assert W.TO_LANGUAGE_CODE["mandarin"] == "zh" and W.TO_LANGUAGE_CODE["english"] == "en"


@pytest.mark.parametrize("outputs, options, match", [
    ({"tokens": [1]}, {}, "list of dicts"),
    ([[1, 2]], {}, r"model_outputs\[0\] must be a dict"),
    ([{"tokens": np.zeros((2, 3), np.int64)}], {}, r"\[1, n\]"),
    ([{"tokens": np.array([[1.5]])}], {}, "ints"),
    ([{"tokens": np.array([[5]])}], {"return_timestamps": "word"}, "token_timestamps"),
    ([{"tokens": np.array([[5, 6]]), "token_timestamps": np.zeros((1, 1), np.float32)}],
     {"return_timestamps": "word"}, "one timestamp per token"),
    ([{"tokens": np.array([[5]])}], {"return_timestamps": "char"}, "return_timestamps")])
def test_bad_inputs_say_what_to_do(outputs, options, match):
    with pytest.raises(InputError, match=match):
        W.decode_asr(tokenizer("fixture"), outputs, **options)
