"""CLIP's tokenizer from its slow files (``vocab.json``, ``merges.txt``), for repos that hold no
``tokenizer.json``: Stable Diffusion's ``tokenizer/`` folders (stabilityai's, and the ONNX
exports made from them) keep only those.

    tok = clip_tokenizer("tokenizer/vocab.json", "tokenizer/merges.txt", tokenizer_config)

Built as transformers' CLIPTokenizer builds its ``tokenizers`` backend (transformers 5,
models/clip/tokenization_clip.py; the CLIPConverter of transformers 4 makes the same): BPE with
``</w>`` word ends, NFC + whitespace folding + lowercase, CLIP's word split, byte-level symbols,
and ``<|startoftext|> ... <|endoftext|>`` around each text.
"""

import json

from .tokenizer import Tokenizer, TokenizerError

# CLIP's words: its two special tokens, English contractions, letters, single digits, other runs
WORDS = (r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]"""
         r"""|[^\s\p{L}\p{N}]+""")


def clip_tokenizer(vocab_file, merges_file, config=None):
    """A ``Tokenizer`` over CLIP's ``vocab_file`` and ``merges_file``, with tokenizer_config.json's
    special tokens (``config``; CLIP's defaults where it names none)."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, \
        processors
    from tokenizers import Tokenizer as Backend

    config = {"unk_token": "<|endoftext|>", "bos_token": "<|startoftext|>",
              "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", **dict(config or {})}
    names = {k: _content(config[k]) for k in ("unk_token", "bos_token", "eos_token")}
    try:
        with open(vocab_file, encoding="utf-8") as f:
            vocab = json.load(f)
        with open(merges_file, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, ValueError) as e:
        raise TokenizerError(f"CLIP's tokenizer files cannot be read ({e})") from None
    merges = [tuple(line.split()) for line in lines
              if line.strip() and not line.startswith("#version")]
    backend = Backend(models.BPE(vocab=vocab, merges=merges, dropout=None,
                                 continuing_subword_prefix="", end_of_word_suffix="</w>",
                                 fuse_unk=False, unk_token=names["unk_token"]))
    backend.normalizer = normalizers.Sequence([normalizers.NFC(),
                                               normalizers.Replace(Regex(r"\s+"), " "),
                                               normalizers.Lowercase()])
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(WORDS), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(names[k], special=True)
                                for k in ("bos_token", "eos_token")])
    bos, eos = names["bos_token"], names["eos_token"]
    backend.post_processor = processors.RobertaProcessing(
        (eos, backend.token_to_id(eos)), (bos, backend.token_to_id(bos)), trim_offsets=False,
        add_prefix_space=False)
    return Tokenizer(backend, config)


def _content(token):
    """A special token of tokenizer_config.json: a string, or an AddedToken dict."""
    return token["content"] if isinstance(token, dict) else str(token)
