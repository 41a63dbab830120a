"""Records transformers' (slow) VitsTokenizer and SpeechT5Tokenizer ids for texts that exercise
their rules. VITS: lower-casing outside vocabulary entries, characters not in the vocabulary
dropped (normalize) or unknown (no normalize), the blank between characters (add_blank), the
special tokens split out of the text, Romanian's cedilla; on the fixture's vocabulary and on a
cased one with punctuation and digits (MMS-TTS vocabularies hold those). SpeechT5: sentencepiece
characters, special tokens in the text, eos appended.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_tts_tokenizers.py

Writes tests/fixtures/vits/references/vits_tokenizer_ids.json and
tests/fixtures/speecht5/references/speecht5_tokenizer_ids.json (transformers 4.57.6).
"""

import json
import pathlib
import tempfile

import transformers

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
VITS_TEXTS = ["hello world", "Hello, World!", "THE CAT SAT.", "café 42", "  spaces  around  ",
              "it's", "a_b", "x<unk>y", "<unk>", "tab\tnew\nline", "ünïcödé", "İstanbul",
              "Ştiinţă și țară", "Don't STOP - 3 cats, 12 dogs.", "!!!", "ABC abc", "q"]
SPEECHT5_TEXTS = ["hello world", "Hello, World!", "the cat sat on the mat", "  two  spaces ",
                  "café 42", "end </s> special", "<s>start", "unknown ü char", "a"]

# A cased vocabulary with punctuation, digits, Romanian letters and one multi-character entry.
CASED = ["_", " ", *"abcdefghijklmnopqrstuvwxyz", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"0123456789",
         "'", ",", ".", "-", "ş", "ţ", "ă", "î", "St", "<unk>"]
VITS_SETTINGS = {  # name -> (vocabulary, tokenizer options)
    "fixture": (None, {}),
    "no_blank": (None, {"add_blank": False}),
    "no_normalize": (None, {"normalize": False}),
    "cased": (CASED, {}),
    "cased_ron": (CASED, {"language": "ron"}),
}


def vits_tokenizers(tmp):
    fixture = FIXTURES / "vits"
    base = json.loads((fixture / "tokenizer_config.json").read_text())
    for name, (chars, options) in VITS_SETTINGS.items():
        folder = tmp / name
        folder.mkdir()
        vocab = json.loads((fixture / "vocab.json").read_text()) if chars is None else \
            {c: i for i, c in enumerate(chars)}
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        config = {k: base[k] for k in ("add_blank", "normalize", "phonemize", "is_uroman",
                                       "language", "pad_token", "unk_token")}
        config.update(options)
        tok = transformers.VitsTokenizer(str(folder / "vocab.json"), **config)
        yield name, vocab, config, tok


def record_vits():
    with tempfile.TemporaryDirectory() as tmp:
        tokenizers, cases = {}, []
        for name, vocab, config, tok in vits_tokenizers(pathlib.Path(tmp)):
            tokenizers[name] = {"vocab": vocab, "config": config}
            cases += [{"tokenizer": name, "text": t, "ids": tok(t)["input_ids"]}
                      for t in VITS_TEXTS]
    return {"how_made": "VitsTokenizer(vocab.json, **config)(text)['input_ids'], transformers "
                        + transformers.__version__, "tokenizers": tokenizers, "cases": cases}


def record_speecht5():
    tok = transformers.SpeechT5Tokenizer.from_pretrained(FIXTURES / "speecht5")
    return {"how_made": "SpeechT5Tokenizer.from_pretrained(fixture)(text)['input_ids'], "
                        "transformers " + transformers.__version__,
            "texts": SPEECHT5_TEXTS, "ids": [tok(t)["input_ids"] for t in SPEECHT5_TEXTS]}


def write(path, data):
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write(FIXTURES / "vits" / "references" / "vits_tokenizer_ids.json", record_vits())
    write(FIXTURES / "speecht5" / "references" / "speecht5_tokenizer_ids.json",
          record_speecht5())
