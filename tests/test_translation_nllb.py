"""NLLB / M2M100 translation with src_lang / tgt_lang against transformers, on the tiny NLLB fixture
(tests/fixtures/nllb: M2M100ForConditionalGeneration + NllbTokenizerFast with five language codes;
tests/support/families_text.py build_nllb).

References: tokenizer_nllb.json (NllbTokenizerFast ids per text and src_lang, non-legacy and
legacy_behaviour tokenizers) and pipeline_translation.json (transformers' translation pipeline
with src_lang / tgt_lang, greedy and 3 beams). Ids and texts are compared exactly: tokenization
is integer work, and greedy / beam choices are argmax / top-k decisions on logits that match
onnxruntime's to ~1e-5, far from the recorded sequences' score gaps.

Each step of the growing cache compiles once: one pipeline, max_new_tokens 6, sources padded to
one length, so every call shares the compiled shapes.
"""

import json
import os
import shutil

import pytest

import transmuter
from transmuter.preprocess.text.tokenizer import Tokenizer, TokenizerError

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "nllb")
HUB_NLLB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                        "hub-files", "Xenova", "nllb-200-distilled-600M")
_PIPES = {}


def reference(file):
    with open(os.path.join(FIXTURE, "references", file)) as f:
        return json.load(f)


def pipe(task="translation"):
    if task not in _PIPES:
        base = _PIPES.get("translation")
        if base is None:
            base = _PIPES["translation"] = transmuter.pipeline("translation", FIXTURE)
        # other tasks over the same decoder share its generator (and its compiled steps)
        _PIPES[task] = transmuter.pipeline(task, base.model, tokenizer=base.tokenizer,
                                           config=FIXTURE)
    return _PIPES[task]


@pytest.mark.parametrize("folder,key", [("", "ids"), ("legacy", "legacy_ids")])
def test_tokenizer_ids_with_src_lang_equal_transformers(folder, key):
    # non-legacy: [src_lang] tokens </s>; legacy_behaviour: tokens </s> [src_lang]
    ref = reference("tokenizer_nllb.json")
    tok = Tokenizer.from_repo(os.path.join(FIXTURE, folder))
    for lang, expected in ref[key].items():  # "" is the saved default (eng_Latn)
        got = [tok.encode(t, src_lang=lang or None).ids for t in ref["texts"]]
        assert got == expected, lang
    # after another language, no src_lang is the default again (the template is restored)
    assert [tok.encode(t).ids for t in ref["texts"]] == ref[key][""]


def test_translation_equals_transformers_pipeline():
    for call in reference("pipeline_translation.json")["calls"]:
        got = [pipe()(x, batch_size=1, **call["call_kwargs"]) for x in call["inputs"]]
        assert got == call["outputs"], call["call_kwargs"]


def test_task_name_languages_and_errors():
    call = reference("pipeline_translation.json")["calls"][0]
    text, kwargs = call["inputs"][0], call["call_kwargs"]
    with pytest.raises(Exception, match="src_lang= and tgt_lang="):
        pipe()(text, max_new_tokens=6)
    with pytest.raises(TokenizerError, match="Unknown language code 'fr'.*eng_Latn, fra_Latn"):
        pipe()(text, src_lang="eng_Latn", tgt_lang="fr", max_new_tokens=6)
    with pytest.raises(TokenizerError, match="Unknown language code 'xx_Latn'"):
        pipe()(text, **dict(kwargs, src_lang="xx_Latn"))
    with pytest.raises(TokenizerError, match="Unknown language code 'en'"):
        pipe("translation_en_to_fr")(text, max_new_tokens=6)
    # text2text-generation takes the tokenizer's default source language and no target
    t2t = reference("pipeline_text2text-generation.json")["calls"][0]
    assert pipe("text2text-generation")(t2t["inputs"][0], **t2t["call_kwargs"]) == t2t["outputs"][0]


@pytest.mark.skipif(not os.path.isdir(HUB_NLLB), reason="needs ../shared/hub-files (Xenova NLLB)")
def test_hub_nllb_config_shape(tmp_path):
    # Xenova's tokenizer_config.json has additional_special_tokens and src_lang null and the 202
    # codes in special_tokens_map.json: with the fixture's tokenizer.json in a scratch folder, the
    # codes it holds are the languages, in the map's order
    for folder, name in ((FIXTURE, "tokenizer.json"), (HUB_NLLB, "tokenizer_config.json"),
                         (HUB_NLLB, "special_tokens_map.json")):
        shutil.copyfile(os.path.join(folder, name), tmp_path / name)
    tok = Tokenizer.from_repo(str(tmp_path))
    assert tok.languages == ["deu_Latn", "eng_Latn", "fra_Latn", "spa_Latn", "zho_Hans"]
    assert tok.encode("Hello", src_lang="fra_Latn").ids[0] == tok.language_token_id("fra_Latn")


def test_m2m100_language_tokens():
    # M2M100 codes are "en", "fr": their tokens are __en__, __fr__ (transformers' get_lang_token),
    # placed as set_src_lang_special_tokens does: prefix [__xx__], suffix [</s>]; the template here
    # is what that gives for the default "en". Expected ids by that rule: a word-level vocab.
    from tokenizers import Tokenizer as Backend, models, pre_tokenizers, processors

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "hello": 3, "world": 4, "__en__": 5, "__fr__": 6}
    backend = Backend(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="__en__ $A </s>", pair="__en__ $A $B </s>",
        special_tokens=[("__en__", 5), ("</s>", 1)])
    tok = Tokenizer(backend, {"src_lang": None, "language_codes": "m2m100", "eos_token": "</s>",
                              "additional_special_tokens": ["__en__", "__fr__"]})
    assert tok.encode("hello world").ids == [5, 3, 4, 1]
    assert tok.encode("hello world", src_lang="fr").ids == [6, 3, 4, 1]
    assert tok.encode("hello world", src_lang="__en__").ids == [5, 3, 4, 1]
    assert tok.language_token_id("fr") == 6  # tgt_lang -> forced_bos_token_id
    with pytest.raises(TokenizerError, match="Unknown language code 'de'.*__en__, __fr__"):
        tok.language_token_id("de")
