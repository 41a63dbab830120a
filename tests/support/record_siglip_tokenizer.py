"""Records transformers' SiglipTokenizer ids (the slow, sentencepiece tokenizer: the siglip
fixture has spiece.model and no tokenizer.json) for texts that exercise its rules: lower-casing,
punctuation removal, whitespace, "▁" in the text, truncation to 64, special tokens in the text.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_siglip_tokenizer.py

Writes tests/fixtures/siglip/references/siglip_tokenizer_ids.json (transformers 4.57.6).
"""

import json
import pathlib

import transformers

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "siglip"
TEXTS = ["This is a photo of cat.", "This is a photo of Dog!", "  Hello,   WORLD...  ",
         "a photo of a \u2581 thing", "it's (really) 'quoted' \"text\"", "x" * 200,
         "ünïcödé Straße", "tab\tand\nnewline", "end </s> special", "</s>"]

if __name__ == "__main__":
    tok = transformers.SiglipTokenizer.from_pretrained(FIXTURE)
    ids = [tok(t, padding="max_length", max_length=64, truncation=True)["input_ids"] for t in TEXTS]
    out = {"how_made": "SiglipTokenizer(text, padding='max_length', max_length=64, "
                       "truncation=True), transformers " + transformers.__version__,
           "texts": TEXTS, "ids": ids}
    (FIXTURE / "references" / "siglip_tokenizer_ids.json").write_text(json.dumps(out, indent=1))
