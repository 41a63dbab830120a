"""Records transformers' (slow) VitsTokenizer and SpeechT5Tokenizer ids for texts that exercise
their rules. VITS: lower-casing outside vocabulary entries, characters not in the vocabulary
dropped (normalize) or unknown (no normalize), the blank between characters (add_blank), the
special tokens split out of the text, Romanian's cedilla, non-Latin text romanized by uroman
(is_uroman); on the fixture's vocabulary and on a cased one with punctuation and digits (MMS-TTS
vocabularies hold those). SpeechT5: sentencepiece characters, special tokens in the text, eos
appended; with normalize=true, numbers spelled out first.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_tts_tokenizers.py

Writes tests/fixtures/vits/references/vits_tokenizer_ids.json and
tests/fixtures/speecht5/references/speecht5_tokenizer_ids.json and speecht5_numbers.json
(transformers 4.57.6).
"""

import json
import pathlib
import tempfile

import transformers

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
VITS_TEXTS = ["hello world", "Hello, World!", "THE CAT SAT.", "café 42", "  spaces  around  ",
              "it's", "a_b", "x<unk>y", "<unk>", "tab\tnew\nline", "ünïcödé", "İstanbul",
              "Ştiinţă și țară", "Don't STOP - 3 cats, 12 dogs.", "!!!", "ABC abc", "q",
              # non-Latin scripts: is_uroman romanizes them (uroman), others drop or unk them
              "Привет, мир!", "안녕하세요", "こんにちは世界", "مرحبا بالعالم", "नमस्ते दुनिया",
              "Γειά σου Κόσμε", "北京欢迎你", "mixed Привет and HELLO"]
SPEECHT5_TEXTS = ["hello world", "Hello, World!", "the cat sat on the mat", "  two  spaces ",
                  "café 42", "end </s> special", "<s>start", "unknown ü char", "a"]
# normalize=true: EnglishNumberNormalizer's rules and quirks (a lone 0 vanishes, cents digit by
# digit, numbers glued to letters left alone, commas inside numbers dropped), every currency
# symbol, and the two inputs it fails on (two symbols; a number past the decillions).
SPEECHT5_NUMBERS = [
    "I have 3 cats and 12 dogs.", "10 110 111 1,000,000 1,234,567", "It costs $5.50 today.",
    "-$3 and -7 and -0", "50% of 12.5% is 6.25%", "pi is 3.14159", "the 2nd and 3rd", "0 007 0.5",
    "$0.99", "€3.5 £10 ¢99 ¥1000 ₹2,500 ₽7 ฿8 ₺9 ₴10 ₣11 ₡12 ₱13 ₪14 ₮15 ₩16 ₦17 ₫18 ﷼19",
    "1e5 a1 1a 12:30 1/2 1-2 (42) \"7\"", "5.00 5.0 5. .5", "100000000000000000000000000000000000",
    "0000000000000000000000000000000000000001", "٣ apples", "twenty 20 </s> 30",
    "$€5", "1" + "0" * 36]

# A cased vocabulary with punctuation, digits, Romanian letters and one multi-character entry.
CASED = ["_", " ", *"abcdefghijklmnopqrstuvwxyz", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"0123456789",
         "'", ",", ".", "-", "ş", "ţ", "ă", "î", "St", "<unk>"]
VITS_SETTINGS = {  # name -> (vocabulary, tokenizer options)
    "fixture": (None, {}),
    "no_blank": (None, {"add_blank": False}),
    "no_normalize": (None, {"normalize": False}),
    "cased": (CASED, {}),
    "cased_ron": (CASED, {"language": "ron"}),
    "uroman": (None, {"is_uroman": True}),
    "uroman_cased": (CASED, {"is_uroman": True}),
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
    # transformers romanizes is_uroman text only where uroman imports (else it warns and goes on)
    import uroman  # noqa: F401
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


def record_speecht5_numbers():
    from transformers.models.speecht5.number_normalizer import EnglishNumberNormalizer

    normalizer = EnglishNumberNormalizer()
    tok = transformers.SpeechT5Tokenizer.from_pretrained(FIXTURES / "speecht5", normalize=True)
    cases = []
    for text in SPEECHT5_NUMBERS:
        try:
            cases.append({"text": text, "spelled": normalizer(text),
                          "ids": tok(text)["input_ids"]})
        except (ValueError, IndexError) as e:  # the reference's own failures
            cases.append({"text": text, "error": type(e).__name__})
    return {"how_made": "EnglishNumberNormalizer()(text) and SpeechT5Tokenizer.from_pretrained("
                        "fixture, normalize=True)(text)['input_ids'], transformers "
                        + transformers.__version__, "cases": cases}


def write(path, data):
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write(FIXTURES / "vits" / "references" / "vits_tokenizer_ids.json", record_vits())
    write(FIXTURES / "speecht5" / "references" / "speecht5_tokenizer_ids.json",
          record_speecht5())
    write(FIXTURES / "speecht5" / "references" / "speecht5_numbers.json",
          record_speecht5_numbers())
