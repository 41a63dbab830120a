"""Text to phonemes for Kokoro, as kokoro-js' `phonemize.js` does it: text normalization (numbers,
currency, abbreviations), espeak-ng (`en-us` for voices starting with "a", `en` (British) for "b"),
and the same post-processing of espeak's IPA, so that the same text gives kokoro-js' token ids.
The kokoro package's other languages: Spanish, French, Hindi, Italian and Brazilian Portuguese
through espeak-ng as misaki's `EspeakG2P` does it, Japanese and Chinese through misaki's own G2P
when it is installed. Long text is split into sentences as kokoro-js' `TextSplitterStream` does."""

from ...errors import InputError
from .english import phonemize_english
from .espeak_languages import VOICES, phonemize_espeak_language
from .normalize import normalize_text
from .splitter import SentenceSplitter, split_sentences
from .tokens import MAX_PHONEMES, phoneme_ids

__all__ = ["LANGUAGES", "MAX_PHONEMES", "SentenceSplitter", "normalize_text", "phoneme_ids",
           "phonemize", "split_sentences"]

# the kokoro package's lang codes (its pipeline.py LANG_CODES), a voice's first letter
LANGUAGES = {"a": "American English", "b": "British English", "e": "Spanish", "f": "French",
             "h": "Hindi", "i": "Italian", "p": "Brazilian Portuguese", "j": "Japanese",
             "z": "Mandarin Chinese"}
_MISAKI = {"j": ("ja", "JAG2P"), "z": ("zh", "ZHG2P")}


def phonemize(text: str, language: str = "a", normalize: bool = True) -> str:
    """`text` as Kokoro phonemes. `language` is the voice's first letter (`LANGUAGES`): "a" and "b"
    as kokoro-js makes them (`normalize`: kokoro-js' text normalization, English only); e, f, h,
    i, p as the kokoro package makes them through espeak-ng; j and z through misaki's G2P."""
    if language in ("a", "b"):
        return phonemize_english(text, language, normalize)
    if language in VOICES:
        return phonemize_espeak_language(text, language)
    if language in _MISAKI:
        return _misaki_g2p(language)(text)[0]
    raise InputError(f"Kokoro has no language {language!r}: one of "
                     + ", ".join(f"{code!r} ({name})" for code, name in LANGUAGES.items()))


def _misaki_g2p(language: str):
    module, name = _MISAKI[language]
    try:
        g2p = getattr(__import__(f"misaki.{module}", fromlist=[name]), name)  # optional, heavy
    except ImportError as e:
        raise InputError(f"{LANGUAGES[language]} text to phonemes needs misaki's G2P, as the "
                         f"kokoro package uses: pip install \"misaki[{module}]\"; or pass the "
                         "phonemes "
                         f"directly ({{\"phonemes\": ...}}). ({e})") from None
    return g2p()
