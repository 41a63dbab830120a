"""Kokoro's token ids of a phoneme string, as its tokenizer gives them (the onnx-community repo's
tokenizer.json: characters outside the vocab removed, one token per character, "$" = 0 before and
after; the kokoro package's `KModel.forward` does the same)."""

MAX_PHONEMES = 510  # the model's 512 positions less the two "$"; longer text is split first


def phoneme_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """`phonemes` as Kokoro's input ids: 0, each character's id from `vocab` (characters outside it
    skipped), 0."""
    return [0, *(vocab[c] for c in phonemes if c in vocab), 0]
