"""Long text into sentences, as kokoro-js' `TextSplitterStream` (kokoro.js/src/splitter.js) does:
at sentence terminators (and newlines) outside quotes and brackets, not after abbreviations,
initials before a capitalized word, list numbers, inside tokens ("$9.99", URLs, e-mail addresses),
or before a lowercase word; trailing closing quotes and brackets stay with their sentence."""

import re

from .normalize import JS_SPACE, js_trim

_TERMINATORS = ".!?…。？！"
_TRAILING = "\"')]}」』"
_MATCHING = {")": "(", "]": "[", "}": "{", "》": "《", "〉": "〈", "›": "‹", "»": "«", "」": "「",
             "』": "『", "〕": "〔", "】": "【"}
_OPENING = set(_MATCHING.values())
ABBREVIATIONS = frozenset([
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "sgt", "col", "gen", "rep", "sen", "gov", "lt",
    "maj", "capt", "st", "mt", "etc", "co", "inc", "ltd", "dept", "vs", "p", "pg", "jan", "feb",
    "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "sun", "mon", "tu",
    "tue", "tues", "wed", "th", "thu", "thur", "thurs", "fri", "sat"])
_LIST_NUMBER = re.compile(r"(?:^|\n)[0-9]+\Z")
_URL = re.compile(r"https?[,:]//")
_INITIALS = re.compile(r"(?:[A-Za-z]\.)+\Z")


def _is_space(c: str) -> bool:
    return c in JS_SPACE


def _is_terminator(c: str, newlines: bool = True) -> bool:
    return c in _TERMINATORS or (newlines and c == "\n")


def _is_abbreviation(token: str) -> bool:
    token = re.sub(r"\.+\Z", "", re.sub(r"['’][sS]\Z", "", token))
    return token.lower() in ABBREVIATIONS


def _update_stack(c: str, stack: list[str], i: int, text: str) -> None:
    """Quotes and brackets open and close; an apostrophe between letters ("don't") does neither."""
    if c in "\"'":
        if c == "'" and 0 < i < len(text) - 1 and text[i - 1].isascii() and text[i - 1].isalpha() \
                and text[i + 1].isascii() and text[i + 1].isalpha():
            return
        if stack and stack[-1] == c:
            stack.pop()
        else:
            stack.append(c)
    elif c in _OPENING:
        stack.append(c)
    elif c in _MATCHING and stack and stack[-1] == _MATCHING[c]:
        stack.pop()


class SentenceSplitter:
    """Text pushed in pieces, sentences out as soon as each is certainly complete (kokoro-js'
    `TextSplitterStream`): `push` returns the sentences it completed, `close` the rest."""

    def __init__(self):
        self._buffer = ""

    def push(self, text: str) -> list[str]:
        self._buffer += text
        sentences, consumed = _complete_sentences(self._buffer)
        self._buffer = self._buffer[consumed:]
        return sentences

    def close(self) -> list[str]:
        rest, self._buffer = js_trim(self._buffer), ""
        return [rest] if rest else []


def split_sentences(text: str) -> list[str]:
    """`text` as sentences, split where kokoro-js' `TextSplitterStream` splits it."""
    splitter = SentenceSplitter()
    return splitter.push(text) + splitter.close()


def _complete_sentences(buffer: str) -> tuple[list[str], int]:
    """The sentences complete in `buffer`, and how many of its characters they took."""
    sentences, start, i, stack, n = [], 0, 0, [], len(buffer)
    while i < n:
        c = buffer[i]
        _update_stack(c, stack, i, buffer)
        if stack or not _is_terminator(c):
            i += 1
            continue
        if _LIST_NUMBER.search(buffer[start:i]):  # "1." or "\n2." starting a list item
            i += 1
            continue
        end = i  # over more terminators, then closing quotes and brackets
        while end + 1 < n and _is_terminator(buffer[end + 1], newlines=False):
            end += 1
        while end + 1 < n and buffer[end + 1] in _TRAILING:
            end += 1
        next_word = end + 1
        while next_word < n and _is_space(buffer[next_word]):
            next_word += 1
        if i == next_word - 1 and c != "\n":  # no space after: inside a token ("$9.99")
            i += 1
            continue
        if next_word == n:  # nothing after yet: wait for more text
            break
        token_start = i - 1
        while token_start >= 0 and not _is_space(buffer[token_start]):
            token_start -= 1
        token_start = max(start, token_start + 1)
        token_end = token_start
        while token_end < n and not _is_space(buffer[token_end]):
            token_end += 1
        token = buffer[token_start:token_end]
        if not token:
            i += 1
            continue
        if (_URL.search(token) or "@" in token) and not _is_terminator(token[-1]):
            i = token_start + len(token)
            continue
        if _is_abbreviation(token):
            i += 1
            continue
        if _INITIALS.match(token) and next_word < n and "A" <= buffer[next_word] <= "Z":
            i += 1  # initials before a capitalized word: a name
            continue
        if c == "." and next_word < n and "a" <= buffer[next_word] <= "z":
            i += 1
            continue
        sentence = js_trim(buffer[start:end + 1])
        if sentence in ("...", "…"):  # a lone ellipsis goes with the next sentence
            i += 1
            continue
        if sentence:
            sentences.append(sentence)
        i = start = end + 1
    return sentences, start
