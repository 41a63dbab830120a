"""transformers' (slow) ``SiglipTokenizer``, for SigLIP repos with spiece.model and no
tokenizer.json: lower-cased, ASCII punctuation removed, whitespace collapsed, then sentencepiece
(without its dummy prefix, after a "▁" the tokenizer adds itself), then eos.

transformers.js' SigLIP repos ship a tokenizer.json, which ``Tokenizer`` reads instead."""

import re
import string

from .tokenizer import (Encoding, Tokenizer, TokenizerError, check_text, content, repo_config,
                        split_keep)

SPIECE_UNDERLINE = "\u2581"
_PUNCTUATION = str.maketrans("", "", string.punctuation)


class SiglipTokenizer:
    padding_side = "right"
    pad = Tokenizer.pad  # the same padding rule as every tokenizer: right, pad_token_id

    def __init__(self, spm_file, config=None):
        self.config = dict(config or {})
        self.sp = _processor_without_dummy_prefix(spm_file)
        self.model_max_length = int(self.config.get("model_max_length") or 64)
        self.do_lower_case = bool(self.config.get("do_lower_case", True))
        for name, default in (("eos", "</s>"), ("unk", "<unk>"), ("pad", "</s>")):
            token = content(self.config.get(f"{name}_token")) or default
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", self.sp.piece_to_id(token))
        self.special_tokens = [self.eos_token, self.unk_token, self.pad_token]
        # encode(unk + text) and drop unk's pieces: sentencepiece strips a leading "▁" otherwise
        self._unk_length = len(self.sp.encode(self.unk_token, out_type=str))

    @classmethod
    def from_repo(cls, repo):
        config = repo_config(repo)
        return cls(repo.file("spiece.model"), config)

    def encode(self, text, pair=None, *, add_special_tokens=True, max_length=None,
               truncation=True, **_):
        """Ids of ``text`` then eos, cut to ``max_length`` (default model_max_length) with the
        eos kept, as ``tokenizer(text, truncation=True, max_length=...)``."""
        check_text(text, "text")
        if pair is not None:
            raise TokenizerError("The SigLIP tokenizer takes one text, not a pair")
        ids = self._ids(text)
        limit = max_length or self.model_max_length
        if truncation and limit:
            ids = ids[:max(limit - int(add_special_tokens), 0)]
        if add_special_tokens and (not ids or ids[-1] != self.eos_token_id):
            ids = ids + [self.eos_token_id]
        return Encoding(ids)

    def _ids(self, text):
        # PreTrainedTokenizer.tokenize: lower-case outside special tokens, split them out
        # (their lstrip/rstrip eat the spaces around them), then _tokenize each piece
        text = SPIECE_UNDERLINE + text.replace(SPIECE_UNDERLINE, " ")
        pieces = [text]
        for token in self.special_tokens:
            pieces = [p for part in pieces for p in split_keep(part, token)]
        tokens = []
        for i, piece in enumerate(pieces):
            if piece in self.special_tokens:
                tokens.append(piece)
                continue
            piece = piece.lower() if self.do_lower_case else piece
            if i > 0:
                piece = piece.lstrip()
            if i < len(pieces) - 1:
                piece = piece.rstrip()
            if piece:
                tokens += self._tokenize(piece)
        if len(tokens) > 1 and tokens[0] == SPIECE_UNDERLINE and tokens[1] in self.special_tokens:
            tokens = tokens[1:]
        return [self.sp.piece_to_id(t) for t in tokens]

    def _tokenize(self, text):
        text = re.sub(r"\s+", " ", text.translate(_PUNCTUATION)).strip()  # canonicalize_text
        tokens = self.sp.encode(self.unk_token + text, out_type=str)
        return tokens[self._unk_length:] if len(tokens) >= self._unk_length else tokens

    def decode(self, ids, skip_special_tokens=False, **_):
        ids = [int(i) for i in ids if not (skip_special_tokens and int(i) in
                                           {self.eos_token_id, self.pad_token_id})]
        return self.sp.decode(ids)


def _processor_without_dummy_prefix(spm_file):
    """SiglipTokenizer.get_spm_processor: the model with add_dummy_prefix switched off."""
    try:  # lazy, so that a missing sentencepiece / protobuf is explained
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2 as model_pb2
    except ImportError as e:
        raise TokenizerError("This SigLIP repo's tokenizer is sentencepiece (spiece.model, no "
                             "tokenizer.json): pip install sentencepiece protobuf") from e
    with open(spm_file, "rb") as f:
        model = model_pb2.ModelProto.FromString(f.read())
    model.normalizer_spec.add_dummy_prefix = False
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model.SerializeToString())
    return processor
