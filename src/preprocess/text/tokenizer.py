"""Tokenization with ``tokenizers`` from tokenizer.json, set up as transformers' fast tokenizer.

    tok = Tokenizer.from_repo(repo)             # tokenizer.json + tokenizer_config.json
    tok = tokenizer_for(repo)                   # (text/auto.py) this, or the repo's slow kind
    enc = tok.encode("A question?", "Its context.", max_length=128, truncation="only_second")
    batch = tok.pad([enc, ...], length=32)       # {"input_ids": int64 [B, 32], ...}

The ids, type ids, offsets and special-token masks are the ``tokenizers`` encodings themselves,
which is what ``PreTrainedTokenizerFast`` returns, so they match transformers' ids exactly.
Truncation and padding stored in tokenizer.json are switched off: the pipeline decides them.

Translation tokenizers (NLLB, M2M100) take a source language: ``encode(text, src_lang="fra_Latn")``
puts its token where tokenizer.json's TemplateProcessing has the language token (see
``set_source_language``); ``language_token_id("fra_Latn")`` is the target's forced first token.
"""

import json
import threading

import numpy as np
from tokenizers import Tokenizer as Backend
from tokenizers import processors

from ... import hub
from ...errors import TransmuterError

# transformers treats a model_max_length this large as "no limit" (VERY_LARGE_INTEGER = 1e30).
NO_LIMIT = 10**12
_STRATEGIES = {"longest_first": "longest_first", True: "longest_first",
               "only_first": "only_first", "only_second": "only_second"}



def max_length(config, default=None):
    """tokenizer_config.json's model_max_length: a positive int, or None for transformers'
    "no limit" (its VERY_LARGE_INTEGER, 1e30) and for none given."""
    limit = config.get("model_max_length", default)
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0:
        raise TokenizerError(f"tokenizer_config.json's model_max_length must be a positive "
                             f"number, got {limit!r:.80}: fix or remove it")
    return int(limit) if limit < NO_LIMIT else None


def repo_config(repo):
    """A repo's tokenizer_config.json, with special_tokens_map.json filling the keys it lacks or
    leaves null (NLLB's additional_special_tokens)."""
    config = repo.json("tokenizer_config.json", {})
    config.update({k: v for k, v in repo.json("special_tokens_map.json", {}).items()
                   if config.get(k) is None})
    return config

class TokenizerError(TransmuterError, ValueError):
    """The repo has no usable tokenizer, or an input cannot be tokenized."""


class Tokenizer:
    """A ``tokenizers.Tokenizer`` with the special tokens and limits of tokenizer_config.json."""

    def __init__(self, backend, config=None):
        self.backend = backend
        self.config = dict(config or {})
        backend.no_truncation()
        backend.no_padding()
        self._truncation = None
        # tokenizers keeps truncation and the post-processor as state: one encode at a time sets
        # them and encodes (pipelines preprocess in threads; users call from several)
        self._state = threading.Lock()
        self.model_max_length = max_length(self.config)
        self.padding_side = self.config.get("padding_side", "right")
        self.clean_up_tokenization_spaces = bool(self.config.get("clean_up_tokenization_spaces",
                                                                 False))
        for name in ("pad", "unk", "cls", "sep", "mask", "bos", "eos"):
            token = _special_token(self.config, f"{name}_token")
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", None if token is None else backend.token_to_id(token))
        self.all_special_ids = self._special_ids()
        self.languages = _language_codes(self.config, backend)
        self._post_processors = {None: backend.post_processor}
        self._source_language = None
        if self.languages and self.config.get("src_lang"):
            # transformers' NllbTokenizerFast / M2M100 rebuild the template from the config's
            # src_lang
            self._post_processors[None] = self._language_processor(
                self.language_token(self.config["src_lang"]))
            backend.post_processor = self._post_processors[None]

    @classmethod
    def from_repo(cls, repo):
        """From a ``hub`` repo (or a folder) with tokenizer.json and tokenizer_config.json. A repo
        whose tokenizer is another kind (Marian, SigLIP, CTC): ``auto.tokenizer_for``."""
        repo = hub.resolve(repo) if not isinstance(repo, hub.Repo) else repo
        if not repo.has("tokenizer.json"):
            raise TokenizerError(f"{repo.label} has no tokenizer.json (only fast tokenizers are "
                                 "supported); pass tokenizer=... or use a repo that has one")
        config = repo_config(repo)
        try:
            backend = Backend.from_file(repo.file("tokenizer.json"))
        except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception
            raise TokenizerError(f"{repo.label}: tokenizer.json cannot be read ({e}); download "
                                 "it again, or pass tokenizer=...") from None
        return cls(backend, config)

    def _special_ids(self):
        ids = {i for i in (self.pad_token_id, self.unk_token_id, self.cls_token_id,
                           self.sep_token_id, self.mask_token_id, self.bos_token_id,
                           self.eos_token_id) if i is not None}
        added = self.config.get("added_tokens_decoder") or {}
        if not isinstance(added, dict):
            raise TokenizerError(f"tokenizer_config.json's added_tokens_decoder is a JSON "
                                 f"{type(added).__name__}, where transformers reads an object "
                                 '{"id": {"content": ..., "special": ...}}: fix or remove it')
        for key, info in added.items():
            if not isinstance(info, dict) or not str(key).isdigit():
                raise TokenizerError(f"tokenizer_config.json's added_tokens_decoder entry "
                                     f"{key!r:.40}: {info!r:.80} is not a token id and an object "
                                     '{"content": ..., "special": ...}: fix or remove it')
            if info.get("special"):
                ids.add(int(key))
        return ids

    # --- encoding ------------------------------------------------------------------------------

    def encode(self, text, pair=None, *, add_special_tokens=True, max_length=None,
               truncation="longest_first", stride=0, src_lang=None):
        """One ``tokenizers.Encoding`` (with ``.overflowing`` windows when ``stride`` > 0 or
        overflow happens). ``max_length=None`` uses model_max_length; ``truncation=False`` keeps
        everything. ``src_lang``: a language code of a translation tokenizer (None: its default)."""
        check_text(text, "text")
        if pair is not None:
            check_text(pair, "text_pair")
        max_length = max_length or self.model_max_length
        with self._state:
            self._set_truncation(max_length if truncation else None, truncation, stride)
            self.set_source_language(src_lang)
            return self.backend.encode(text, pair, add_special_tokens=add_special_tokens)

    def encode_words(self, words, *, max_length=None, truncation="longest_first"):
        """transformers' ``tokenizer(words, is_split_into_words=True, truncation=...)``: each
        word tokenized on its own (``word_ids`` tell them apart)."""
        max_length = max_length or self.model_max_length
        with self._state:
            self._set_truncation(max_length if truncation else None, truncation, 0)
            return self.backend.encode(list(words), is_pretokenized=True)

    def _set_truncation(self, max_length, strategy, stride):
        # tokenizers keeps truncation as state; change it only when it changes (it is cheap, but
        # the encodings must never see a stale setting).
        key = (max_length, strategy, stride)
        if key == self._truncation:
            return
        if max_length is None:
            self.backend.no_truncation()
        else:
            if strategy not in _STRATEGIES:
                raise TokenizerError(f"Unknown truncation {strategy!r}; use one of "
                                     "'longest_first', 'only_first', 'only_second' or False")
            self.backend.enable_truncation(max_length, stride=stride,
                                           strategy=_STRATEGIES[strategy])
        self._truncation = key

    # --- languages (NLLB, M2M100) --------------------------------------------------------------

    def language_token(self, code):
        """The token of language ``code``: the code itself (NLLB ``fra_Latn``) or ``__code__``
        (M2M100 ``fr`` -> ``__fr__``, transformers' ``get_lang_token``)."""
        if not isinstance(code, str):
            raise TokenizerError(f"A language code must be a string, got {code!r:.80}")
        for token in (code, f"__{code}__"):
            if token in self.languages:
                return token
        if not self.languages:
            raise TokenizerError(f"Language {code!r}: this tokenizer has no language codes "
                                 "(tokenizer_config.json has no src_lang / language list)")
        some = ", ".join(self.languages[:5])
        raise TokenizerError(f"Unknown language code {code!r}; this tokenizer has "
                             f"{len(self.languages)} codes, e.g. {some}")

    def language_token_id(self, code):
        """Id of language ``code``'s token: transformers' ``forced_bos_token_id`` for tgt_lang."""
        return self.backend.token_to_id(self.language_token(code))

    def set_source_language(self, code):
        """Encode with language ``code`` placed as the template places it (None: the default).
        tokenizers keeps the post-processor as state, as it keeps truncation: set on change."""
        token = None if code is None else self.language_token(code)
        if token == self._source_language:
            return
        if token not in self._post_processors:
            self._post_processors[token] = self._language_processor(token)
        self.backend.post_processor = self._post_processors[token]
        self._source_language = token

    def _language_processor(self, token):
        """tokenizer.json's TemplateProcessing with its language token swapped for ``token``
        (``legacy_behaviour`` in the config, when given, places it: after eos or first)."""
        state = json.loads(self._post_processors[None].__getstate__()) \
            if self._post_processors[None] is not None else {}
        if state.get("type") != "TemplateProcessing":
            raise TokenizerError("src_lang needs tokenizer.json's post_processor to be a "
                                 f"TemplateProcessing; this one is {state.get('type')!r}")
        legacy = self.config.get("legacy_behaviour")
        single, pair = (_template_with(state[k], token, self.languages, legacy)
                        for k in ("single", "pair"))
        specials = [v for k, v in state["special_tokens"].items() if k not in self.languages]
        specials.append((token, self.backend.token_to_id(token)))
        return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)

    def pad(self, encodings, length, names=("input_ids", "attention_mask", "token_type_ids"),
            rows=None):
        """Stack encodings into int64 arrays [rows, length], padded on ``padding_side`` with
        pad_token_id (attention 0). Extra rows (to reach a compiled batch size) are padding with a
        single attended token, so no row attends to nothing."""
        rows = rows or len(encodings)
        pad_id = self.pad_token_id if self.pad_token_id is not None else 0
        out = {"input_ids": np.full((rows, length), pad_id, np.int64),
               "attention_mask": np.zeros((rows, length), np.int64),
               "token_type_ids": np.zeros((rows, length), np.int64)}
        for i, enc in enumerate(encodings):
            n = len(enc.ids)
            where = slice(length - n, length) if self.padding_side == "left" else slice(0, n)
            out["input_ids"][i, where] = enc.ids
            out["attention_mask"][i, where] = enc.attention_mask
            out["token_type_ids"][i, where] = enc.type_ids
        out["attention_mask"][len(encodings):, 0] = 1
        return {k: out[k] for k in names}

    # --- decoding ------------------------------------------------------------------------------

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=None):
        text = self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return _cleaned(text, clean_up_tokenization_spaces, self.clean_up_tokenization_spaces)

    def id_to_token(self, i):
        return self.backend.id_to_token(int(i))

    def token_to_id(self, token):
        return self.backend.token_to_id(token)

    def tokens_to_string(self, tokens):
        """transformers' ``convert_tokens_to_string`` of a fast tokenizer: the decoder's join."""
        decoder = self.backend.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    def get_vocab(self):
        return self.backend.get_vocab()

    @property
    def continuing_subword_prefix(self):
        return getattr(self.backend.model, "continuing_subword_prefix", None)


def _language_codes(config, backend):
    """The language tokens of a translation tokenizer: additional_special_tokens in the vocab,
    when the config says it has languages (NLLB and M2M100 save ``src_lang``; M2M100
    ``language_codes``). Other tokenizers' extra special tokens are not languages."""
    if "src_lang" not in config and "language_codes" not in config:
        return []
    tokens = (content(t) for t in config.get("additional_special_tokens") or [])
    return [t for t in tokens if isinstance(t, str) and backend.token_to_id(t) is not None]


def _template_with(items, token, languages, legacy):
    """A TemplateProcessing template (tokenizer.json items) as tokenizers' strings, with the
    language token ``token``: where the template had one, or per ``legacy`` (True: last, as
    NLLB's ``tokens </s> [lang]``; False: first, ``[lang] tokens </s>``)."""
    strings, where = [], None
    for item in items:
        kind, info = next(iter(item.items()))
        if kind == "SpecialToken" and info["id"] in languages:
            where = len(strings)
            continue
        strings.append(("$" if kind == "Sequence" else "") + f"{info['id']}:{info['type_id']}")
    if legacy is not None or where is None:
        where = len(strings) if legacy else 0
    strings.insert(where, f"{token}:0")
    return strings


class Encoding:
    """The fields of a ``tokenizers.Encoding`` that pipelines read: what the slow tokenizers
    (Marian, SigLIP, VITS, SpeechT5) return for a list of ids."""

    def __init__(self, ids):
        self.ids = list(ids)
        self.attention_mask = [1] * len(self.ids)
        self.type_ids = [0] * len(self.ids)
        self.overflowing = []


class MarianTokenizer:
    """transformers' (slow) ``MarianTokenizer`` for repos with source.spm, target.spm and
    vocab.json and no tokenizer.json: sentencepiece pieces of the source model mapped to ids by
    vocab.json (unknown pieces -> <unk>), a leading ``>>xx<<`` language code kept whole, special
    tokens in the text split out, eos appended. Decoding joins the target model's pieces.
    Moses punctuation normalization is left out, as transformers does without ``sacremoses``."""

    def __init__(self, source_spm, target_spm, vocab, config=None):
        try:
            import sentencepiece  # lazy: only Marian repos need it, and its absence is explained
        except ImportError as e:
            raise TokenizerError("This repo's tokenizer is sentencepiece (source.spm, no "
                                 "tokenizer.json): pip install sentencepiece") from e
        self.config = dict(config or {})
        self.source = sentencepiece.SentencePieceProcessor(model_file=source_spm)
        self.target = sentencepiece.SentencePieceProcessor(model_file=target_spm)
        self.vocab = dict(vocab)
        self.inverse = {i: t for t, i in self.vocab.items()}
        self.model_max_length = max_length(self.config, 512)
        self.clean_up_tokenization_spaces = bool(self.config.get("clean_up_tokenization_spaces",
                                                                 False))
        self.padding_side = "right"
        for name, default in (("eos", "</s>"), ("unk", "<unk>"), ("pad", "<pad>")):
            token = _special_token(self.config, f"{name}_token") or default
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", self.vocab.get(token))
        if self.unk_token_id is None or self.pad_token_id is None:
            raise TokenizerError("vocab.json lacks the <unk> or <pad> token")
        for name in ("bos", "cls", "sep", "mask"):
            setattr(self, f"{name}_token", None)
            setattr(self, f"{name}_token_id", None)
        self.special_tokens = [self.eos_token, self.unk_token, self.pad_token]
        self.all_special_ids = {self.vocab[t] for t in self.special_tokens if t in self.vocab}

    @classmethod
    def from_repo(cls, repo):
        config = repo_config(repo)
        with open(repo.file("vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        target = "target.spm" if repo.has("target.spm") else "source.spm"
        return cls(repo.file("source.spm"), repo.file(target), vocab, config)

    def encode(self, text, pair=None, *, add_special_tokens=True, max_length=None,
               truncation=False, **_):
        """Ids of ``text`` (and ``pair``) then eos; ``truncation`` cuts the text's ids so the
        whole fits ``max_length`` (default model_max_length), as transformers' longest_first
        does for one sequence."""
        check_text(text, "text")
        ids = self._ids(text) + (self._ids(pair) if pair is not None else [])
        limit = max_length or self.model_max_length
        if truncation and limit:
            ids = ids[:max(limit - int(bool(add_special_tokens)), 0)]
        return Encoding(ids + [self.eos_token_id] if add_special_tokens else ids)

    def _ids(self, text):
        tokens = []
        for part in self._split_special(text):
            if part in self.special_tokens:
                tokens.append(part)
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:
                tokens.append(part[:end + 2])  # remove_language_code: the code stays one token
                part = part[end + 2:]
            tokens += self.source.encode(part, out_type=str)
        return [self.vocab.get(t, self.unk_token_id) for t in tokens]

    def _split_special(self, text):
        parts = [text]
        for token in self.special_tokens:
            parts = [p for part in parts for p in split_keep(part, token)]
        return [p for p in parts if p]

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=None):
        tokens = [self.inverse.get(int(i), self.unk_token) for i in ids
                  if not (skip_special_tokens and int(i) in self.all_special_ids)]
        text, pieces = "", []
        for token in tokens:  # convert_tokens_to_string
            if token in self.special_tokens:
                text += self.target.decode_pieces(pieces) + token + " "
                pieces = []
            else:
                pieces.append(token)
        text = (text + self.target.decode_pieces(pieces)).replace("\u2581", " ").strip()
        return _cleaned(text, clean_up_tokenization_spaces, self.clean_up_tokenization_spaces)

    def id_to_token(self, i):
        return self.inverse.get(int(i))

    def token_to_id(self, token):
        return self.vocab.get(token)

    def get_vocab(self):
        return dict(self.vocab)


def split_keep(text, token):
    """``text`` split at each ``token``, the tokens kept as pieces of their own."""
    pieces = text.split(token)
    out = [pieces[0]]
    for piece in pieces[1:]:
        out += [token, piece]
    return out


def clean_up_tokenization(text):
    """transformers' ``clean_up_tokenization``: glue punctuation and English contractions."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


def _cleaned(text, clean, default):
    """``text`` through clean_up_tokenization when the call (else the tokenizer) asks for it."""
    return clean_up_tokenization(text) if (default if clean is None else clean) else text


def content(token):
    """The text of a special token of tokenizer_config.json, which stores them as strings or
    AddedToken dicts (``{"content": ...}``)."""
    return token.get("content") if isinstance(token, dict) else token


def _special_token(config, key):
    """The text of special token ``key`` of ``config`` (None when unset), refused with the
    field when it is no string or no valid Unicode (a list escaped as TypeError from
    tokenizers, a lone surrogate as UnicodeEncodeError)."""
    token = content(config.get(key))
    if token is None:
        return None
    bad = not isinstance(token, str)
    if not bad:
        try:
            token.encode("utf-8")
        except UnicodeEncodeError:
            bad = True
    if bad:
        raise TokenizerError(f"tokenizer_config.json's (or special_tokens_map.json's) {key} is "
                             f"{token!r:.80}, where a token's text (a string of valid Unicode, "
                             'or {"content": ...}) belongs: fix or remove it')
    return token


def check_text(text, what):
    """Refuse with TokenizerError an input ``text`` (named ``what``) that is no string, is empty
    or blank, or is not valid Unicode."""
    if not isinstance(text, str):
        raise TokenizerError(f"{what} must be a string, got {type(text).__name__}: {text!r:.80}")
    if not text.strip():
        raise TokenizerError(f"{what} is empty; give some text to process")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: what errors="surrogateescape" leaves
        raise TokenizerError(f"{what} holds {text[e.start]!r} at position {e.start}, a lone "
                             "surrogate (not valid Unicode): read the file with "
                             "errors='replace', or as its real encoding") from None
