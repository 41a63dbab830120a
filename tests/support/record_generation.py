"""Greedy and beam-search references from transformers' ``generate`` on the fixtures' PyTorch models.

Usage (export environment only; a few seconds per fixture):
    /work/venvs/export/bin/python tests/support/record_generation.py            # all
    /work/venvs/export/bin/python tests/support/record_generation.py t5 gpt2    # some
    /work/venvs/export/bin/python tests/support/record_generation.py marian-tokenizer

Each model is rebuilt exactly as its generator (families_text.py) built it: same config, same seed,
tokenizer trained the same way. Before recording, the rebuilt model must reproduce the fixture's
recorded pipeline greedy outputs (pipeline_text-generation.json / pipeline_text2text-generation.json);
otherwise the script stops. Writes ``tests/fixtures/<name>/references/generate_beam.json``:

    {"cases": [{"prompt": text, "prompt_ids": [...], "kwargs": {...generate options...},
                "sequences": [[new token ids (seq2seq: after the start token)], ...],
                "sequence_scores": [...] (beam only)}]}
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_common as ec  # noqa: E402
import families_text as ft  # noqa: E402

PROMPTS = {"decoder": ["Hello world! This is", "The capital of France is"],
           "seq2seq": ["Translate English to German: The house is wonderful.", "Hello world!"]}
NEW = 8


def _marian(work):
    from transformers import MarianConfig, MarianMTModel

    tok = ft.marian_tokenizer(work)
    ec.seed_everything()
    pad = tok.pad_token_id
    cfg = MarianConfig(  # as families_text.build_marian
        vocab_size=len(tok), decoder_vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=128, pad_token_id=pad, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=pad, forced_eos_token_id=tok.eos_token_id, scale_embedding=True,
        share_encoder_decoder_embeddings=True, init_std=ft.DECODER_INIT,
    )
    return MarianMTModel(cfg), tok


def _bart(work):
    from transformers import BartConfig, BartForConditionalGeneration

    tok = ft.bart_tokenizer(work)
    ec.seed_everything()
    cfg = BartConfig(  # as families_text.build_bart
        vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.eos_token_id, forced_bos_token_id=tok.bos_token_id,
        forced_eos_token_id=tok.eos_token_id, init_std=ft.DECODER_INIT,
    )
    return BartForConditionalGeneration(cfg), tok


BUILDERS = {"gpt2": (ft._gpt2, "decoder"), "llama": (ft._llama, "decoder"), "t5": (ft._t5, "seq2seq"),
            "marian": (_marian, "seq2seq"), "bart": (_bart, "seq2seq")}


def _check_pipeline(name, model, tok, kind):
    """The rebuilt model gives the fixture's recorded transformers pipeline outputs."""
    task = "text-generation" if kind == "decoder" else "text2text-generation"
    with open(ec.FIXTURES_ROOT / name / "references" / f"pipeline_{task}.json") as f:
        record = json.load(f)
    pipe = ft._pipeline(task, model, tok)
    for call in record["calls"]:
        got = [pipe(**x, **call["call_kwargs"]) if isinstance(x, dict) else pipe(x, **call["call_kwargs"])
               for x in call["inputs"]]
        if got != call["outputs"]:
            raise SystemExit(f"{name}: the rebuilt model does not reproduce {task} outputs:\n{got}\n"
                             f"!= {call['outputs']}")


def _cases(tok, kind, greedy_new):
    """generate options per case; one case sets eos to a token the greedy text makes, so beams
    finish at different steps (a random model rarely emits its real eos)."""
    cases = [{"max_new_tokens": NEW, "do_sample": False},
             {"max_new_tokens": NEW, "do_sample": False, "num_beams": 3, "num_return_sequences": 3},
             {"max_new_tokens": NEW, "do_sample": False, "num_beams": 3, "length_penalty": 2.0,
              "early_stopping": True, "num_return_sequences": 2}]
    if len(greedy_new) > 2:
        cases.append({"max_new_tokens": NEW, "do_sample": False, "num_beams": 3, "num_return_sequences": 3,
                      "eos_token_id": int(greedy_new[2])})
        cases.append({"max_new_tokens": NEW, "do_sample": False, "num_beams": 3, "num_return_sequences": 2,
                      "eos_token_id": int(greedy_new[2]), "early_stopping": "never", "length_penalty": 0.5})
    return cases


def record(name):
    import torch

    build, kind = BUILDERS[name]
    with tempfile.TemporaryDirectory() as work:
        model, tok = build(Path(work))
        model.eval()
        _check_pipeline(name, model, tok, kind)
        out = []
        with torch.no_grad():
            for prompt in PROMPTS[kind]:
                ids = tok(prompt, return_tensors="pt")
                skip = 1 if kind == "seq2seq" else ids["input_ids"].shape[1]
                greedy_new = model.generate(**ids, max_new_tokens=NEW, do_sample=False)[0, skip:].tolist()
                for kwargs in _cases(tok, kind, greedy_new):
                    res = model.generate(**ids, **kwargs, return_dict_in_generate=True, output_scores=True)
                    case = {"prompt": prompt, "prompt_ids": ids["input_ids"][0].tolist(), "kwargs": kwargs,
                            "sequences": [s[skip:].tolist() for s in res.sequences]}
                    if getattr(res, "sequences_scores", None) is not None:
                        case["sequence_scores"] = res.sequences_scores.tolist()
                    out.append(case)
    path = ec.FIXTURES_ROOT / name / "references" / "generate_beam.json"
    path.write_text(json.dumps({"generator": "tests/support/record_generation.py", "cases": out}, indent=1) + "\n")
    print(f"{name}: {len(out)} cases -> {path}")


TOKENIZER_TEXTS = ["Translate English to German: The house is wonderful.", "Hello world!",
                   ">>de<< Hi </s> there", "\u00fcn\u00efc\u00f6d\u00e9   spaces  ", "x<pad>y<unk>"]


def record_marian_tokenizer():
    """transformers' MarianTokenizer (slow, sentencepiece) on the fixture's own files: ids, and
    decoded text with and without special tokens, into references/tokenizer_marian.json."""
    from transformers import MarianTokenizer

    d = ec.FIXTURES_ROOT / "marian"
    tok = MarianTokenizer.from_pretrained(str(d))
    ids = list(range(0, len(tok), 7))
    out = {"texts": TOKENIZER_TEXTS, "ids": [tok(t)["input_ids"] for t in TOKENIZER_TEXTS],
           "decode_ids": ids, "decoded": tok.decode(ids), "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
    (d / "references" / "tokenizer_marian.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"marian tokenizer -> {d / 'references' / 'tokenizer_marian.json'}")


if __name__ == "__main__":
    for n in sys.argv[1:] or [*BUILDERS, "marian-tokenizer"]:
        record_marian_tokenizer() if n == "marian-tokenizer" else record(n)
