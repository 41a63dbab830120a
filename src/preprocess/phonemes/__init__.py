"""Text to phonemes for Kokoro, as kokoro-js' `phonemize.js` does it: text normalization (numbers,
currency, abbreviations), espeak-ng (`en-us` for voices starting with "a", `en` (British) for "b"),
and the same post-processing of espeak's IPA, so that the same text gives kokoro-js' token ids.
Long text is split into sentences as kokoro-js' `TextSplitterStream` splits it."""

from .english import phonemize_english
from .normalize import normalize_text
from .splitter import SentenceSplitter, split_sentences
from .tokens import MAX_PHONEMES, phoneme_ids

__all__ = ["MAX_PHONEMES", "SentenceSplitter", "normalize_text", "phoneme_ids", "phonemize",
           "split_sentences"]


def phonemize(text: str, language: str = "a", normalize: bool = True) -> str:
    """`text` as Kokoro phonemes. `language` is the voice's first letter as in kokoro-js ("a":
    American English, "b": British English); `normalize` applies kokoro-js' text normalization."""
    return phonemize_english(text, language, normalize)
