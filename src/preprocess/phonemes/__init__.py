"""Text to phonemes for Kokoro, as kokoro-js' `phonemize.js` does it: text normalization (numbers,
currency, abbreviations), espeak-ng (`en-us` for voices starting with "a", `en-gb` for "b"), and
the same post-processing of espeak's IPA, so that the same text gives kokoro-js' token ids."""


def phonemize(text: str, language: str = "a", normalize: bool = True) -> str:
    """`text` as Kokoro phonemes. `language` is the voice's first letter as in kokoro-js ("a":
    American English, "b": British English); `normalize` applies kokoro-js' text normalization."""
    raise NotImplementedError("phonemize: being written (issue #40)")
