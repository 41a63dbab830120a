"""Kokoro's text -> phonemes (transmuter.preprocess.phonemes) against kokoro-js itself: its
`phonemize` (normalization, espeak-ng through the phonemizer npm package, its fixes of the IPA), its
`TextSplitterStream`, and its tokenizer's ids, recorded by tests/support/record_kokoro_phonemes.mjs
into tests/fixtures/kokoro_phonemes/kokoro_js.json; the other espeak-ng languages against the
kokoro package's G2P for them (misaki's EspeakG2P), recorded by
tests/support/record_kokoro_espeak_languages.py into misaki_espeak.json. Equality is exact:
phonemes are strings, ids integers. No backend is involved (host text only), so nothing is
parametrized by backend."""

import json
import pathlib
import sys

import pytest

from transmuter.errors import InputError
from transmuter.preprocess import phonemes
from transmuter.preprocess.phonemes import espeak, normalize_text, phoneme_ids, split_sentences
from transmuter.preprocess.phonemes.splitter import SentenceSplitter

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "kokoro_phonemes"
RECORD = json.loads((FIXTURES / "kokoro_js.json").read_text(encoding="utf-8"))
MISAKI = json.loads((FIXTURES / "misaki_espeak.json").read_text(encoding="utf-8"))

needs_espeak = pytest.mark.skipif(
    not espeak.available(), reason="espeak-ng is not installed: pip install espeakng-loader")


@pytest.fixture(scope="module")
def ours():
    """Our phonemes of every recorded case (the two tests below share them)."""
    return [phonemes.phonemize(case["text"], case["language"], case.get("normalize", True))
            for case in RECORD["phonemes"]]


@needs_espeak
def test_phonemes_equal_kokoro_js(ours):
    cases = RECORD["phonemes"]
    assert len({(c["text"], c["language"]) for c in cases}) >= 100  # 50+ sentences, "a" and "b"
    mismatches = [f"{case['language']} {case['text']!r}\n  kokoro-js {case['phonemes']!r}\n  ours      {mine!r}"
                  for case, mine in zip(cases, ours) if mine != case["phonemes"]]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ:\n" + "\n".join(mismatches)


@needs_espeak
def test_token_ids_equal_kokoro_js(ours):
    mismatches = [case["text"] for case, mine in zip(RECORD["phonemes"], ours)
                  if phoneme_ids(mine, RECORD["vocab"]) != case["input_ids"]]
    assert not mismatches, mismatches


@needs_espeak
def test_other_espeak_languages_equal_the_kokoro_package():
    assert {case["language"] for case in MISAKI["phonemes"]} == {"e", "f", "h", "i", "p"}
    mismatches = [f"{case['language']} {case['text']!r}\n  misaki {case['phonemes']!r}\n  ours   {mine!r}"
                  for case in MISAKI["phonemes"]
                  if (mine := phonemes.phonemize(case["text"], case["language"])) != case["phonemes"]]
    assert not mismatches, "\n".join(mismatches)


def test_japanese_without_misaki_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "misaki", None)  # import fails as if not installed
    with pytest.raises(InputError, match=r'pip install "misaki\[ja\]".*phonemes'):
        phonemes.phonemize("こんにちは", "j")


def test_unknown_language_lists_the_codes():
    with pytest.raises(InputError, match=r"'x'.*'a' \(American English\).*'z' \(Mandarin Chinese\)"):
        phonemes.phonemize("Hello", "x")


def test_token_ids_skip_characters_outside_the_vocab():
    # kokoro-js' tokenizer removes them (its normalizer), as the kokoro package does
    assert phoneme_ids("ab~c", {"a": 5, "b": 6, "c": 7}) == [0, 5, 6, 7, 0]


def test_normalization_needs_no_espeak():
    # the normalization alone, on a few of the recorded sentences' hard parts
    assert normalize_text("It costs $12.50 at 9:05 in 1987.") == \
        "It costs 12 dollars and 50 cents at 9 oh 5 in 19 87."
    assert normalize_text("Dr. Smith paid £1 (cash).") == "Doctor Smith paid 1 pound «cash»."


@pytest.mark.parametrize("case", RECORD["splits"], ids=lambda c: c["text"][:24])
def test_sentences_equal_kokoro_js_splitter(case):
    assert split_sentences(case["text"]) == case["sentences"]
    splitter = SentenceSplitter()
    emitted = [splitter.push(chunk) for chunk in case["chunks"]]
    assert emitted == case["emitted"]  # the same sentences as soon as kokoro-js gives them
    assert splitter.close() == case["rest"]


def test_missing_espeak_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # import fails as if not installed
    espeak._library.cache_clear()
    try:
        with pytest.raises(InputError, match=r'pip install "transmuter-onnx\[tts\]".*phonemes'):
            phonemes.phonemize("Hello.")
    finally:
        monkeypatch.undo()
        espeak._library.cache_clear()
