"""transformers' (slow) ``VitsTokenizer``, for VITS / MMS-TTS repos (vocab.json of characters,
tokenizer_config.json, no tokenizer.json; transformers has no fast one either).

    tok = VitsTokenizer.from_repo(repo)
    tok.encode("Hello, world!").ids     # [0, h, 0, e, 0, ..., 0]: characters, a blank between

As ``prepare_for_tokenization`` then ``tokenize``: with ``normalize``, each position that does
not start a vocabulary entry is lower-cased (a cased vocabulary keeps its capitals), Romanian's
"ț" becomes "ţ", and characters the vocabulary lacks are dropped (punctuation, digits of an
English vocabulary) before the ends are stripped; without it they become ``unk``. The special
tokens (pad, unk) in the text are kept whole; every other piece is split into characters with
id 0 (the blank) between and around them when ``add_blank``.

Models that read romanized text (``is_uroman``, non-Latin MMS-TTS languages) get it from the
``uroman`` package, as in transformers; without it such a text is refused with what to do (where
transformers only warns and reads the unromanized text). Models that read phonemes
(``phonemize``: phonemizer + espeak) are refused with what to do.
"""

import functools
import json
import re

from ... import hub
from ...errors import InputError
from .tokenizer import (Encoding, Tokenizer, TokenizerError, check_text, content, max_length,
                        repo_config)

_NON_ASCII = re.compile(r"[^\x00-\x7F]")


def _romanized(text):
    """``text`` in Latin letters, as transformers romanizes it for is_uroman models:
    uroman's ``romanize_string``. Without the package transformers only warns and reads the
    text unromanized (its letters then dropped as outside the vocabulary): refused here."""
    try:
        romanizer = _uroman()
    except ImportError:
        raise InputError(
            "This MMS-TTS model reads romanized text (tokenizer_config.json: is_uroman=true) "
            f"and the text has non-Latin characters: {text!r:.60}. pip install uroman, which "
            "romanizes it as transformers does, or romanize it yourself first") from None
    return romanizer.romanize_string(text)


@functools.lru_cache(maxsize=1)
def _uroman():
    import uroman  # optional, so imported here: only is_uroman models need it

    return uroman.Uroman()  # once per process: it loads its tables (seconds)


class VitsTokenizer:
    padding_side = "right"
    pad = Tokenizer.pad  # the same padding rule as every tokenizer: right, pad_token_id

    def __init__(self, vocab, config=None):
        self.config = dict(config or {})
        self.vocab = dict(vocab)
        if self.config.get("phonemize", True):  # transformers' default is True
            raise TokenizerError(
                "This VITS model reads phonemes (tokenizer_config.json: phonemize=true): its "
                "text goes through the phonemizer package and espeak first, which Transmuter "
                "does not run. Use an MMS-TTS style model whose vocabulary is characters "
                "(phonemize=false)")
        self.add_blank = bool(self.config.get("add_blank", True))
        self.normalize = bool(self.config.get("normalize", True))
        self.is_uroman = bool(self.config.get("is_uroman", False))
        self.language = self.config.get("language")
        self.pad_token = content(self.config.get("pad_token")) or "<pad>"
        self.unk_token = content(self.config.get("unk_token")) or "<unk>"
        self.pad_token_id = 0  # add_blank's blank and the padding are id 0, as in transformers
        self.unk_token_id = self.vocab.get(self.unk_token)
        self.model_max_length = max_length(self.config)
        self.special_tokens = self._special_tokens()
        self.blank = self._blank()
        # normalize_text tries the vocabulary entries in order at each position (first match
        # wins); grouped by first character, the same order is tried far faster
        self._entries = {}
        for word in [*self.vocab, *self.special_tokens]:
            if word:
                self._entries.setdefault(word[0], []).append(word)
        specials = sorted(self.special_tokens, key=len, reverse=True)  # the Trie's longest match
        self._split = re.compile("(" + "|".join(map(re.escape, specials)) + ")")

    @classmethod
    def from_repo(cls, repo):
        """From a ``hub`` repo (or a folder) with vocab.json and tokenizer_config.json."""
        repo = hub.resolve(repo) if not isinstance(repo, hub.Repo) else repo
        if not repo.has("vocab.json"):
            raise TokenizerError(f"{repo.label} has no vocab.json, which a VITS tokenizer reads")
        config = repo_config(repo)
        with open(repo.file("vocab.json"), encoding="utf-8") as f:
            return cls(json.load(f), config)

    def _special_tokens(self):
        """pad, unk and tokenizer_config.json's added tokens: split out of the text whole."""
        found = [self.pad_token, self.unk_token]
        found += [content(t) for _, t in sorted((self.config.get("added_tokens_decoder") or {})
                                                 .items(), key=lambda kv: int(kv[0]))]
        return list(dict.fromkeys(t for t in found if t))

    def _blank(self):
        blank = next((t for t, i in self.vocab.items() if i == 0), None)
        if self.add_blank and blank is None:
            raise TokenizerError("vocab.json has no id 0, the blank add_blank puts between "
                                 "characters")
        return blank

    # --- encoding ------------------------------------------------------------------------------

    def encode(self, text, pair=None, **_):
        """The ids of ``text`` (no special tokens are added; they may be empty when
        normalization drops every character)."""
        check_text(text, "text")
        if pair is not None:
            raise TokenizerError("The VITS tokenizer takes one text, not a pair")
        return Encoding([self._id(t) for t in self.tokenize(text)])

    def prepare(self, text):
        """The text as the model reads it: prepare_for_tokenization."""
        if self.normalize:
            text = self._lower_outside_vocab(text)
        if self.language == "ron":
            text = text.replace("ț", "ţ")
        if self.is_uroman and _NON_ASCII.search(text):
            text = _romanized(text)
        if self.normalize:
            text = "".join(c for c in text if c in self.vocab).strip()
        return text

    def tokenize(self, text):
        tokens = []
        for piece in self._split.split(self.prepare(text)):
            if piece in self.special_tokens:
                tokens.append(piece)
            elif piece:
                tokens += self._characters(piece)
        return tokens

    def _characters(self, piece):
        if not self.add_blank:
            return list(piece)
        out = [self.blank] * (2 * len(piece) + 1)
        out[1::2] = piece
        return out

    def _lower_outside_vocab(self, text):
        """normalize_text: a vocabulary entry starting here is kept as it is, else this
        character is lower-cased."""
        out, i = [], 0
        while i < len(text):
            word = next((w for w in self._entries.get(text[i], ()) if text.startswith(w, i)),
                        None)
            out.append(word if word is not None else text[i].lower())
            i += len(word) if word is not None else 1
        return "".join(out)

    def _id(self, token):
        found = self.vocab.get(token, self.unk_token_id)
        if found is None:
            raise TokenizerError(f"The character {token!r} is not in vocab.json and the "
                                 f"vocabulary has no unknown token {self.unk_token!r}")
        return found

    # --- decoding ------------------------------------------------------------------------------

    def decode(self, ids, skip_special_tokens=False, **_):
        inverse = {i: t for t, i in self.vocab.items()}
        tokens = [inverse.get(int(i), "") for i in ids]
        if self.add_blank and len(tokens) > 1:
            tokens = tokens[1::2]
        if skip_special_tokens:
            tokens = [t for t in tokens if t not in self.special_tokens]
        return "".join(tokens)
