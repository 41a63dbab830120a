"""SpeechT5's number normalizer: what ``SpeechT5Tokenizer`` does to a text before tokenizing it
when the repo's tokenizer_config.json says ``normalize: true`` (transformers'
``models/speecht5/number_normalizer.py``, ``EnglishNumberNormalizer``). Numbers, amounts of money
and percentages are spelled out in English: "$5.50" -> "five point five zero dollars".

Its quirks are the reference's and are kept, since a model fine-tuned on its output expects them:
a lone "0" becomes nothing, "1,234,567" loses only its first comma, decimals are read digit by
digit, and a number glued to a letter ("2nd", "3.14159"'s tail) is left as it is or cut where a
non-word character bounds it."""

import re

from .tokenizer import TokenizerError

_ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]
_TENS = ["", "ten", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_THOUSANDS = ["", "thousand", "million", "billion", "trillion", "quadrillion", "quintillion",
              "sextillion", "septillion", "octillion", "nonillion", "decillion"]
# In the reference's order (the first one a number starts with names its currency).
_CURRENCIES = {"$": " dollars", "€": " euros", "£": " pounds", "¢": " cents",
               "¥": " japanese yen", "﷼": " saudi riyal", "₹": " indian rupees",
               "₽": " russian rubles", "฿": " thai baht", "₺": " turkish liras",
               "₴": " ukrainian hryvnia", "₣": " swiss francs", "₡": " costa rican colon",
               "₱": " philippine peso", "₪": " israeli shekels", "₮": " mongolian tögrög",
               "₩": " south korean won", "₦": " nigerian naira", "₫": " vietnamese Đồng"}
# The reference's pattern: each symbol optional, in this order, then digits and at most two
# decimals and a percent sign, not inside a word.
_NUMBER = re.compile(r"(?<!\w)(-?\$?\€?\£?\¢?\¥?\₹?\₽?\฿?\₺?\₴?\₣?\₡?\₱?\₪?\₮?\₩?\₦?\₫?\﷼?"
                     r"\d+(?:\.\d{1,2})?%?)(?!\w)")
_GROUPED = re.compile(r"(\d+,\d+)")


def spell_numbers(text):
    """``text`` with its numbers spelled out, as EnglishNumberNormalizer()(text)."""
    text = _GROUPED.sub(lambda m: m.group(1).replace(",", ""), text)
    text = _NUMBER.sub(lambda m: _spell(m.group(1)), text)
    return re.sub(" +", " ", text)


def _below_thousand(num):
    """The reference's spell_number for 0 < num < 1000 (and 0 -> "zero", for decimals)."""
    if num == 0:
        return "zero"
    hundreds, rest = divmod(num, 100)
    part = ""
    if hundreds:
        part = _ONES[hundreds] + " hundred" + (" and " if rest else "")
    if 10 < rest < 20:
        return part + _TEENS[rest - 10]
    tens, ones = _TENS[rest // 10], _ONES[rest % 10]
    return part + tens + (" " if tens and ones else "") + ones


def _spell(number):
    integer, _, decimals = number.partition(".")
    decimals = decimals or "00"
    minus = ""
    if integer.startswith("-"):  # the pattern puts a sign before any currency symbol
        minus, integer = "minus ", integer[1:]
    symbol = next((s for s in _CURRENCIES if integer.startswith(s)), "")
    currency, integer = _CURRENCIES.get(symbol, ""), integer[len(symbol):]
    percent = ""
    if "%" in integer or "%" in decimals:
        percent = " percent"
        integer, decimals = integer.replace("%", ""), decimals.replace("%", "")
    if not integer.isdigit():  # two currency symbols ("$€5"): the reference fails on int()
        raise _unspeakable(number, "it has more than one currency symbol")
    integer = integer.zfill(3 * ((len(integer) - 1) // 3 + 1))
    parts = []
    for i in range(0, len(integer), 3):
        chunk = int(integer[i:i + 3])
        if chunk:
            scale = len(integer[i:]) // 3 - 1
            if scale >= len(_THOUSANDS):  # the reference's IndexError
                raise _unspeakable(number, f"its digits go past the {_THOUSANDS[-1]}s")
            parts.append(_below_thousand(chunk) + (" " + _THOUSANDS[scale] if scale else ""))
    spelled = " ".join(parts)
    if decimals != "00":
        spelled += " point " + " ".join(_below_thousand(int(d)) for d in decimals)
    return f"{minus}{spelled}{percent}{currency}"


def _unspeakable(number, why):
    return TokenizerError(f"SpeechT5's number normalizer (tokenizer_config.json: normalize=true) "
                          f"cannot spell {number!r}: {why}. Write it out in words")
