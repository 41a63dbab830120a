"""kokoro-js' text normalization (`normalize_text` in kokoro.js/src/phonemize.js), rule for rule.

JavaScript regular expressions differ from Python's in ways that matter here, so each pattern is
written to match what the JavaScript one matches: `\\d`, `\\b` and the `i` flag are ASCII-only in
JavaScript (re.ASCII), while `\\s` is Unicode but not Python's Unicode set (`JS_SPACE` below); `$`
without the `m` flag is the end of the text (`\\Z`); `String.trim` strips `JS_SPACE`.
"""

import re

# JavaScript's \s: the WhiteSpace and LineTerminator characters of ECMA-262
JS_SPACE = "".join(chr(c) for c in [9, 10, 11, 12, 13, 32, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF])


def js_space_class(exclude: str = "") -> str:
    """A character class of JavaScript's `\\s`, less `exclude`."""
    return "[" + re.escape("".join(c for c in JS_SPACE if c not in exclude)) + "]"


def js_trim(text: str) -> str:
    return text.strip(JS_SPACE)


def _rx(pattern: str, flags: int = 0) -> re.Pattern:
    return re.compile(pattern, re.ASCII | flags)


def split_num(number: str) -> str:
    """A time ("9:30"), a year ("1987", "1990s"), or a decimal left for `point_num`."""
    if "." in number:
        return number
    if ":" in number:
        hours, minutes = (int(part) for part in number.split(":"))
        if minutes == 0:
            return f"{hours} o'clock"
        if minutes < 10:
            return f"{hours} oh {minutes}"
        return f"{hours} {minutes}"
    year = int(number[:4])
    if year < 1100 or year % 1000 < 10:
        return number
    left, right = number[:2], int(number[2:4])
    suffix = "s" if number.endswith("s") else ""
    if 100 <= year % 1000 <= 999:
        if right == 0:
            return f"{left} hundred{suffix}"
        if right < 10:
            return f"{left} oh {right}{suffix}"
    return f"{left} {right}{suffix}"


def _is_js_number(text: str) -> bool:
    # What the matched amounts can be: digits with an optional fraction, then words ("12 hundred")
    return re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text) is not None


def flip_money(amount: str) -> str:
    """"$12.50" -> "12 dollars and 50 cents", "£1" -> "1 pound", "$2 million" ->
    "2 million dollars"."""
    bill = "dollar" if amount[0] == "$" else "pound"
    value = amount[1:]
    if not _is_js_number(value):
        return f"{value} {bill}s"
    if "." not in amount:
        return f"{value} {bill}{'' if value == '1' else 's'}"
    whole, cents = value.split(".")
    cents_value = int(cents.ljust(2, "0"))
    if amount[0] == "$":
        coins = "cent" if cents_value == 1 else "cents"
    else:
        coins = "penny" if cents_value == 1 else "pence"
    return f"{whole} {bill}{'' if whole == '1' else 's'} and {cents_value} {coins}"


def point_num(number: str) -> str:
    whole, fraction = number.split(".")
    return f"{whole} point {' '.join(fraction)}"


def _replace_dots(match: re.Match) -> str:
    return match.group(0).replace(".", "-")


_RULES = [
    # 1. quotes and brackets
    (_rx("[‘’]"), "'"),
    (_rx("«"), "“"),
    (_rx("»"), "”"),
    (_rx("[“”]"), '"'),
    (_rx(r"\("), "«"),
    (_rx(r"\)"), "»"),
    # 2. full-width punctuation
    (_rx("、"), ", "),
    (_rx("。"), ". "),
    (_rx("！"), "! "),
    (_rx("，"), ", "),
    (_rx("："), ": "),
    (_rx("；"), "; "),
    (_rx("？"), "? "),
    # 3. whitespace: every space but " " and "\n" becomes " "; (only the first run of spaces is
    # squeezed: kokoro-js' regex has no g flag)
    (_rx(js_space_class(exclude=" \n")), " "),
    (_rx("  +"), " ", 1),
    (_rx(r"(?<=\n) +(?=\n)"), ""),
    # 4. abbreviations
    (_rx(r"\bD[Rr]\.(?= [A-Z])"), "Doctor"),
    (_rx(r"\b(?:Mr\.|MR\.(?= [A-Z]))"), "Mister"),
    (_rx(r"\b(?:Ms\.|MS\.(?= [A-Z]))"), "Miss"),
    (_rx(r"\b(?:Mrs\.|MRS\.(?= [A-Z]))"), "Mrs"),
    (_rx(r"\betc\.(?! [A-Z])", re.IGNORECASE), "etc"),
    # 5. casual words
    (_rx(r"\b(y)eah?\b", re.IGNORECASE), r"\1e'a"),
    # 5. numbers and currencies
    (_rx(r"\d*\.\d+|\b\d{4}s?\b|(?<!:)\b(?:[1-9]|1[0-2]):[0-5]\d\b(?!:)"),
     lambda m: split_num(m.group(0))),
    (_rx(r"(?<=\d),(?=\d)"), ""),
    (_rx(r"[$£]\d+(?:\.\d+)?(?: hundred| thousand| (?:[bm]|tr)illion)*\b|[$£]\d+\.\d\d?\b",
         re.IGNORECASE),
     lambda m: flip_money(m.group(0))),
    (_rx(r"\d*\.\d+"), lambda m: point_num(m.group(0))),
    (_rx(r"(?<=\d)-(?=\d)"), " to "),
    (_rx(r"(?<=\d)S"), " S"),
    # 6. possessives
    (_rx(r"(?<=[BCDFGHJ-NP-TV-Z])'?s\b"), "'S"),
    (_rx(r"(?<=X')S\b"), "s"),
    # 7. letters joined by dots
    (_rx(r"(?:[A-Za-z]\.){2,} [a-z]"), _replace_dots),
    (_rx(r"(?<=[A-Z])\.(?=[A-Z])", re.IGNORECASE), "-"),
]


def normalize_text(text: str) -> str:
    """`text` as kokoro-js normalizes it before espeak-ng: numbers, years, times, currency and
    abbreviations spelled out, quotes and brackets unified."""
    for pattern, replacement, *count in _RULES:
        text = pattern.sub(replacement, text, count=count[0] if count else 0)
    return js_trim(text)
