"""Spanish, French, Hindi, Italian and Brazilian Portuguese as the kokoro package phonemizes them
(its pipeline.py: lang codes e, f, h, i, p): misaki's `EspeakG2P` over phonemizer's espeak-ng
backend (punctuation kept, stress kept, ties written "^", language-switch flags removed), then
misaki's renaming of diphthongs and affricates to Kokoro's single symbols. Ported step by step,
quirks included, so that the phonemes are the package's (tests/test_phonemes.py)."""

import re

from . import espeak

VOICES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}

_MARKS = ';:,.!?¡¿—…"«»“”(){}[]'  # phonemizer's default punctuation marks
_MARKS_RUN = re.compile(rf"(\s*[{re.escape(_MARKS)}]+\s*)+")
# espeak-ng's "(en)" around words it says in another language
_LANGUAGE_FLAG = re.compile(r"\(.+?\)")
# misaki's e2m: espeak-ng's tied phonemes -> Kokoro's one-character symbols, applied in key order
_E2M = sorted({"a^ɪ": "I", "a^ʊ": "W", "d^z": "ʣ", "d^ʒ": "ʤ", "e^ɪ": "A", "o^ʊ": "O", "ə^ʊ": "Q",
               "s^s": "S", "t^s": "ʦ", "t^ʃ": "ʧ", "ɔ^ɪ": "Y"}.items())


def _preserve(line: str) -> tuple[list[str], list[tuple[str, str]]]:
    """phonemizer's `Punctuation._preserve_line`: the text between punctuation runs, and each run
    with where it stands ("B" begins the line, "E" ends it, "I" inside, "A" is all of it)."""
    matches = list(_MARKS_RUN.finditer(line))
    if not matches:
        return [line], []
    if len(matches) == 1 and matches[0].group() == line:
        return [], [(line, "A")]
    marks = []
    for n, match in enumerate(matches):
        position = "I"
        if n == 0 and line.startswith(match.group()):
            position = "B"
        elif n == len(matches) - 1 and line.endswith(match.group()):
            position = "E"
        marks.append((match.group(), position))
    chunks = []
    for mark, _ in marks:  # phonemizer splits at the mark's first occurrence, wherever it matched
        prefix, *rest = line.split(mark)
        chunks.append(prefix)
        line = mark.join(rest)
    return [chunk for chunk in [*chunks, line] if chunk], marks


def _restore(text: list[str], marks: list[tuple[str, str]]) -> list[str]:
    """phonemizer's `Punctuation.restore` for one line, word separator " ", not stripped."""
    out, position, text, marks = [], 0, list(text), list(marks)
    while text or marks:
        if not marks:
            out.extend(line if line.endswith(" ") else line + " " for line in text)
            text = []
        elif not text:
            out.append("".join(mark for mark, _ in marks))
            marks = []
        elif position == 0:  # every mark of the line has index 0; each output line moves on
            (mark, where), marks = marks[0], marks[1:]
            if text[0].endswith(" "):
                text[0] = text[0][:-1]
            if where == "B":
                text[0] = mark + text[0]
            elif where == "E":
                out.append(text[0] + mark + ("" if mark.endswith(" ") else " "))
                text, position = text[1:], position + 1
            elif where == "A":
                out.append(mark + ("" if mark.endswith(" ") else " "))
                position += 1
            elif len(text) == 1:
                text[0] += mark
            else:
                text = [text[0] + mark + text[1], *text[2:]]
        else:
            out.append(text[0])
            text, position = text[1:], position + 1
    return out


def _phonemize_chunk(chunk: str, voice: str) -> str:
    """phonemizer's espeak-ng backend on one chunk: clauses joined, flags removed, ties as "^"."""
    line = " ".join(espeak.translated_clauses(chunk, voice))
    line = line.strip().replace("\n", " ").replace("  ", " ")
    line = re.sub(r"_ ", " ", re.sub(r"_+", "_", line))
    line = _LANGUAGE_FLAG.sub("", line)
    if not line:
        return ""
    return "".join(word.strip().replace(espeak.TIE, "^") + " " for word in line.split(" "))


def phonemize_espeak_language(text: str, language: str) -> str:
    """`text` in Kokoro's phonemes for lang code `language` (e, f, h, i, p), as misaki's
    `EspeakG2P` makes them."""
    voice = VOICES[language]
    text = text.replace("«", "“").replace("»", "”").replace("(", "«").replace(")", "»")
    chunks, marks = _preserve(text)
    lines = _restore([_phonemize_chunk(chunk, voice) for chunk in chunks], marks)
    if not lines:
        return ""
    phonemes = lines[0].strip()
    for old, new in _E2M:
        phonemes = phonemes.replace(old, new)
    phonemes = phonemes.replace("^", "").replace("-", "")
    return phonemes.replace("«", "(").replace("»", ")")
