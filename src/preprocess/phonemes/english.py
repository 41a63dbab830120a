"""American and British English phonemes as kokoro-js makes them (`phonemize` in
kokoro.js/src/phonemize.js): normalized text split at punctuation, the pieces between through
espeak-ng (voice "en-us" for "a", "en" for "b": kokoro-js' choices), the punctuation kept as it is,
then kokoro-js' fixes of espeak's IPA.

espeak-ng's data: kokoro-js' phonemizer 1.2.1 bundles an espeak-ng build from between 1.51 and 1.52;
the espeakng-loader wheel ships 1.52.0. Over 18,919 English words (the all-MiniLM-L6-v2 vocab) both
give the same phonemes, in espeak-ng's names, for "en-us" and "en", and the same IPA for "en"; for
"en-us" the IPA differs in one phoneme only, `o@` ("four", "story"), which 1.52 writes "ɔː" and
kokoro-js' build "oː". `_kokoro_js_ipa` writes it as kokoro-js does, so that the phonemes and token
ids are kokoro-js' (tests/test_phonemes.py).
"""

import re

from . import espeak
from .normalize import js_space_class, js_trim, normalize_text

PUNCTUATION = ';:,.!?¡¿—…"«»“”(){}[]'
_SPACE = js_space_class()
_PUNCTUATION_RUN = re.compile(f"(?:{_SPACE}*[{re.escape(PUNCTUATION)}]+{_SPACE}*)+")

VOICES = {"a": "en-us", "b": "en"}  # kokoro-js: "en-us" for "a", "en" (espeak's British) otherwise

_FIXES = [
    ("kəkˈoːɹoʊ", "kˈoʊkəɹoʊ"),  # "kokoro" as Wiktionary says it
    ("kəkˈɔːɹəʊ", "kˈəʊkəɹəʊ"),
    ("ʲ", "j"),
    ("r", "ɹ"),
    ("x", "k"),
    ("ɬ", "l"),
]
_BEFORE_HUNDRED = re.compile("(?<=[a-zɹː])(?=hˈʌndɹɪd)")
_LONE_Z = re.compile(r' z(?=[;:,.!?¡¿—…"«»“” ]|\Z)')
_NINETY = re.compile("(?<=nˈaɪn)ti(?!ː)")  # American "ninety" flaps its t
_SEPARATOR = "\x01"  # between phonemes in espeak-ng's output; never in text that reaches it


def _kokoro_js_ipa(text: str, voice: str) -> list[str]:
    """espeak-ng's IPA clauses of `text`, with "en-us" `o@` written "oː" as kokoro-js' build
    does."""
    ipa = espeak.clauses(text, voice, separator=_SEPARATOR)
    if voice != "en-us" or not any("ɔː" in clause for clause in ipa):
        return [clause.replace(_SEPARATOR, "") for clause in ipa]
    names = espeak.clauses(text, voice, ipa=False, separator=_SEPARATOR)
    return [_o_at_as_o(clause, named) for clause, named in zip(ipa, names, strict=True)]


def _o_at_as_o(clause: str, named: str) -> str:
    """`clause` (IPA) with each phoneme that `named` (the same clause in espeak-ng's phoneme names,
    stress marked "'" or ",") calls `o@` written "oː"; unchanged if the two do not align."""
    words, named_words = clause.split(" "), named.split(" ")
    phonemes = [word.split(_SEPARATOR) for word in words]
    names = [word.split(_SEPARATOR) for word in named_words]
    if [len(w) for w in phonemes] != [len(w) for w in names]:  # not seen; espeak-ng's own IPA then
        return clause.replace(_SEPARATOR, "")
    return " ".join("".join(p.replace("ɔː", "oː") if n.lstrip("',") == "o@" else p
                            for p, n in zip(word, named_word))
                    for word, named_word in zip(phonemes, names))


def split_punctuation(text: str) -> list[tuple[bool, str]]:
    """`text` as (is_punctuation, piece) pieces, in order: runs of punctuation with the spaces
    around them, and the text between."""
    pieces, start = [], 0
    for match in _PUNCTUATION_RUN.finditer(text):
        if start < match.start():
            pieces.append((False, text[start:match.start()]))
        pieces.append((True, match.group(0)))
        start = match.end()
    if start < len(text):
        pieces.append((False, text[start:]))
    return pieces


def phonemize_english(text: str, language: str = "a", normalize: bool = True) -> str:
    voice = VOICES["a" if language == "a" else "b"]
    if normalize:
        text = normalize_text(text)
    phonemes = "".join(piece if is_punctuation else " ".join(_kokoro_js_ipa(piece, voice))
                       for is_punctuation, piece in split_punctuation(text))
    for old, new in _FIXES:
        phonemes = phonemes.replace(old, new)
    phonemes = _BEFORE_HUNDRED.sub(" ", phonemes)
    phonemes = _LONE_Z.sub("z", phonemes)
    if language == "a":
        phonemes = _NINETY.sub("di", phonemes)
    return js_trim(phonemes)
