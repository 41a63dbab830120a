"""transformers' Wav2Vec2CTCTokenizer (wav2vec2, HuBERT, Data2Vec audio, Wav2Vec2-BERT CTC heads):
vocab.json and tokenizer_config.json, no tokenizer.json. Decoding is CTC's: repeats merged, the
blank (pad) token dropped, the word delimiter read as a space; ``offsets`` gives transformers'
``output_char_offsets`` / ``_get_word_offsets`` in logit frames.

    tok = CTCTokenizer.from_repo(repo)
    tok.decode(frame_ids)                   -> "HELLO WORLD"
    tok.offsets(frame_ids, "word")          -> [{"word": "HELLO", "start_offset": 3, ...}, ...]
"""

import itertools
import json

from .tokenizer import TokenizerError, repo_config


class CTCTokenizer:
    def __init__(self, vocab, config=None):
        self.config = dict(config or {})
        self.vocab = dict(vocab)
        self.tokens = {i: t for t, i in self.vocab.items()}
        self.pad_token = self.config.get("pad_token", "<pad>")
        self.word_delimiter = self.config.get("word_delimiter_token", "|")
        self.delimiter_char = self.config.get("replace_word_delimiter_char", " ")
        self.lower = bool(self.config.get("do_lower_case", False))
        self.pad_token_id = self.vocab.get(self.pad_token)

    @classmethod
    def from_repo(cls, repo):
        config = repo_config(repo)
        with open(repo.file("vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        if vocab and all(isinstance(v, dict) for v in vocab.values()):  # MMS: one per language
            lang = config.get("target_lang")
            if lang not in vocab:
                raise TokenizerError(f"{repo.label}'s vocab.json holds one vocabulary per "
                                     f"language ({', '.join(sorted(vocab)[:5])}, ...); its "
                                     f"tokenizer_config.json names target_lang={lang!r}, which "
                                     "is not one of them")
            vocab = vocab[lang]
        for token, info in (config.get("added_tokens_decoder") or {}).items():
            vocab.setdefault(info["content"], int(token))
        return cls(vocab, config)

    def _chars(self, ids):
        """(chars, repetitions) of the merged frames, blanks still in."""
        tokens = [self.tokens.get(int(i), self.config.get("unk_token", "<unk>")) for i in ids]
        groups = [(t, len(list(g))) for t, g in itertools.groupby(tokens)]
        return [t for t, _ in groups], [n for _, n in groups]

    def _text_chars(self, chars):
        return [self.delimiter_char if c == self.word_delimiter else c
                for c in chars if c != self.pad_token]

    def decode(self, ids):
        """The text of per-frame token ids, special tokens kept (as the pipeline decodes CTC)."""
        text = "".join(self._text_chars(self._chars(ids)[0])).strip()
        return text.lower() if self.lower else text

    def offsets(self, ids, level):
        """``level`` "char": [{"char", "start_offset", "end_offset"}] in frames; "word":
        [{"word", "start_offset", "end_offset"}] (words split at the delimiter)."""
        chars, reps = self._chars(ids)
        out, at = [], 0
        for char, n in zip(chars, reps):
            if char != self.pad_token:
                out.append({"char": char, "start_offset": at, "end_offset": at + n})
            at += n
        for item, char in zip(out, self._text_chars(chars)):
            item["char"] = char
        return out if level == "char" else _word_offsets(out, self.delimiter_char)


def _word_offsets(offsets, delimiter):
    """transformers' Wav2Vec2CTCTokenizer._get_word_offsets."""
    words, last, word, start, end = [], "SPACE", "", 0, 0
    for offset in offsets:
        char = offset["char"]
        state = "SPACE" if char == delimiter else "WORD"
        if state == last:
            end = offset["end_offset"]
            word += char
        elif state == "SPACE":
            words.append({"word": word, "start_offset": start, "end_offset": end})
        else:
            start, end, word = offset["start_offset"], offset["end_offset"], char
        last = state
    if last == "WORD":
        words.append({"word": word, "start_offset": start, "end_offset": end})
    return words
