"""Tiny text-model fixtures: BERT, DistilBERT, XLM-RoBERTa, GPT-2, Llama, Qwen3, T5, Marian, BART, NLLB.

Usage (export environment only; no network, no Hub downloads):

    /work/venvs/export/bin/python tests/support/families_text.py            # all text fixtures
    /work/venvs/export/bin/python tests/support/families_text.py bert gpt2  # some of them
    /work/venvs/export/bin/python tests/support/families_text.py --list

Every model is built from a ``transformers`` config class with random weights (``torch.manual_seed(0)``)
and every tokenizer is trained offline on ``export_common.CORPUS``. Outputs go to
``tests/fixtures/<name>/`` following tests/support/README.md: ONNX graphs in ``onnx/`` (Xenova /
onnx-community layout and variant names), ``references/<stem>.npz`` (onnxruntime, ORT_DISABLE_ALL) and
``references/pipeline_<task>.json`` (transformers pipeline on the torch model), ``manifest.json``.
Torch weights are never written to the fixture folders.

Pinned versions (see tests/support/requirements-export.txt); the fixtures were made with:
    python 3.11, torch 2.13.0 (CPU), transformers 4.57.6, optimum-onnx 0.1.0 (optimum 2.1.0),
    onnx 1.23.2, onnxruntime 1.32.0, onnx-ir 1.1.0, tokenizers 0.22.2, sentencepiece 0.2.3,
    sentence-transformers 5.7.0, accelerate 1.15.0 (tied-weight dedup in optimum), numpy 2.4.6,
    protobuf 7.36.2.

Layouts:
    encoders     onnx/model.onnx (+ _quantized / _fp16 / _q4 / _q4f16)
    gpt2         onnx/decoder_model_merged.onnx (If on use_cache_branch) + onnx/decoder_model.onnx,
                 made with optimum's legacy decoder / decoder_with_past split and merge_decoders
    llama, qwen3 onnx/model.onnx (onnx-community layout: one graph with past inputs and position_ids)
    seq2seq      onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx
``*-opset14`` fixtures are opset 14 with ``attn_implementation="eager"``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_common as ec  # noqa: E402

FIXTURES: dict[str, Callable[[Path], None]] = {}


def fixture(name: str):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


ENCODER_TEXTS = ["Hello world!", "My name is Sarah and I live in London."]
DECODER_PROMPTS = ["Hello world! This is", "Once upon a time, there was a little girl who"]
SEQ2SEQ_TEXTS = ["Translate English to German: The house is wonderful.", "Hello world!"]
NER_LABELS = ["O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Generative models use a larger init std than the 0.02 default so that greedy decoding does not
# just repeat one token (clear top-1 margins, varied KV-cache steps).
DECODER_INIT = 0.4
VARIANT_FNS = {"quantized": ec.quantize_int8, "fp16": ec.convert_fp16, "q4": ec.quantize_q4,
               "q4f16": ec.quantize_q4f16}


# ------------------------------------------------------------------------------------------------
# tokenizers
# ------------------------------------------------------------------------------------------------


def bert_tokenizer(work: Path, lowercase: bool = True, cls=None):
    from transformers import BertTokenizerFast

    cls = cls or BertTokenizerFast
    vocab = ec.train_wordpiece_vocab(work / "vocab.txt", 600, lowercase)
    return cls(vocab_file=str(vocab), do_lower_case=lowercase, model_max_length=512)


def gpt2_tokenizer(work: Path):
    from transformers import GPT2TokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work, 600, ["<|endoftext|>"])
    t = "<|endoftext|>"
    return GPT2TokenizerFast(
        vocab_file=str(vocab), merges_file=str(merges), unk_token=t, bos_token=t, eos_token=t,
        add_prefix_space=False, model_max_length=128,
    )


def qwen_tokenizer(work: Path):
    from transformers import Qwen2TokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work, 600, [])
    tok = Qwen2TokenizerFast(
        vocab_file=str(vocab), merges_file=str(merges), unk_token=None, bos_token=None,
        eos_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=256,
    )
    # ids in Qwen's order: <|endoftext|>, <|im_start|>, <|im_end|>; chat models stop on <|im_end|>
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = CHATML_TEMPLATE
    return tok


def llama_tokenizer(work: Path):
    from transformers import LlamaTokenizerFast

    spm = ec.train_sentencepiece(
        work / "tokenizer.model", 700, "bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
    )
    # Llama-2 / TinyLlama layout: normalizer Prepend("▁") + Replace(" ", "▁"), byte-fallback BPE
    return LlamaTokenizerFast(
        vocab_file=str(spm), legacy=True, add_prefix_space=True, add_bos_token=True, model_max_length=256
    )


def t5_tokenizer(work: Path):
    from transformers import T5TokenizerFast

    spm = ec.train_sentencepiece(work / "spiece.model", 400, "unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    return T5TokenizerFast(vocab_file=str(spm), extra_ids=100, model_max_length=512)


def xlmr_tokenizer(work: Path):
    from transformers import XLMRobertaTokenizerFast

    spm = ec.train_sentencepiece(work / "sentencepiece.bpe.model", 400, "unigram")
    return XLMRobertaTokenizerFast(vocab_file=str(spm), model_max_length=128)


def marian_tokenizer(work: Path):
    import sentencepiece as sp
    from transformers import MarianTokenizer

    spm = ec.train_sentencepiece(work / "source.spm", 400, "unigram", eos_id=0, unk_id=1, bos_id=-1, pad_id=-1)
    (work / "target.spm").write_bytes(spm.read_bytes())
    proc = sp.SentencePieceProcessor(model_file=str(spm))
    vocab = {proc.id_to_piece(i): i for i in range(proc.get_piece_size())}
    vocab["<pad>"] = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2))
    return MarianTokenizer(
        source_spm=str(spm), target_spm=str(work / "target.spm"), vocab=str(work / "vocab.json"),
        source_lang="en", target_lang="de", model_max_length=512,
    )


NLLB_LANGS = ["eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn", "zho_Hans"]


def nllb_tokenizer(work: Path, legacy: bool = False):
    """NllbTokenizerFast converted from a sentencepiece model trained with NLLB's special ids
    (<unk> 0, <s> 1, </s> 2: the fairseq offset maps them to <s> 0, <pad> 1, </s> 2, <unk> 3), with
    a handful of language codes instead of the 202 FAIRSEQ ones."""
    from transformers import NllbTokenizerFast

    spm = ec.train_sentencepiece(work / "sentencepiece.bpe.model", 300, "unigram", unk_id=0, bos_id=1, eos_id=2,
                                 pad_id=-1)
    return NllbTokenizerFast(vocab_file=str(spm), additional_special_tokens=list(NLLB_LANGS), src_lang="eng_Latn",
                             legacy_behaviour=legacy, model_max_length=128)


def bart_tokenizer(work: Path):
    from transformers import BartTokenizerFast

    vocab, merges = ec.train_bytelevel_bpe(work, 600, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return BartTokenizerFast(vocab_file=str(vocab), merges_file=str(merges), model_max_length=128)


# ------------------------------------------------------------------------------------------------
# generic fixture builders
# ------------------------------------------------------------------------------------------------


def _save_hub_files(d: Path, model, tok, generation: bool = False) -> None:
    model.config.architectures = [model.__class__.__name__]
    model.config.save_pretrained(d)
    if generation:
        model.generation_config.save_pretrained(d)
    # chat template inside tokenizer_config.json, as the Hub's Qwen / SmolLM repos have it
    tok.save_pretrained(d, save_jinja_files=False)


def _pipeline(task: str, model, tok):
    from transformers import pipeline

    return pipeline(task, model=model, tokenizer=tok, device="cpu")


def _record_calls(d: Path, task: str, model, tok, calls: list[tuple[list, dict]]) -> None:
    import torch

    pipe = _pipeline(task, model, tok)
    recorded = []
    with torch.no_grad():
        for inputs, kwargs in calls:
            outs = []
            for x in inputs:
                ec.seed_everything()
                outs.append(pipe(**x, **kwargs) if isinstance(x, dict) else pipe(x, **kwargs))
            recorded.append({"inputs": inputs, "call_kwargs": kwargs, "outputs": outs})
    ec.save_pipeline_record(d / "references" / f"pipeline_{task}.json", task, recorded)


# Variants made on the unmerged graphs and then merged (see export_common.variant_of_merged).
MERGE_AFTER = {"fp16"}


def _make_variants(
    onnx_dir: Path, stems: list[str], variants: tuple[str, ...], strict_merge: bool = True
) -> list[str]:
    files = []
    for stem in stems:
        files.append(f"{stem}.onnx")
        for v in variants:
            dst = onnx_dir / f"{stem}_{v}.onnx"
            if stem == "decoder_model_merged" and v in MERGE_AFTER:
                ec.variant_of_merged(
                    VARIANT_FNS[v], onnx_dir / "decoder_model.onnx", onnx_dir / "decoder_with_past_model.onnx",
                    dst, strict=strict_merge,
                )
            else:
                VARIANT_FNS[v](onnx_dir / f"{stem}.onnx", dst)
            files.append(f"{stem}_{v}.onnx")
    return files


def _drop(onnx_dir: Path, names) -> None:
    for n in names:
        (onnx_dir / n).unlink(missing_ok=True)


def encoder_fixture(
    d: Path, family: str, model, tok, task: str, *, opset: int = 18, eager: bool = False,
    variants: tuple[str, ...] = (), texts=None, pipeline_calls=None, pipeline_task: str | None = None,
) -> None:
    model.eval()
    _save_hub_files(d, model, tok)
    ec.export_optimum(model, tok, task, d / "onnx", opset, eager=eager, keep={"model.onnx"})
    files = _make_variants(d / "onnx", ["model"], variants)
    if texts is None:
        enc = tok(ENCODER_TEXTS, padding=True, return_tensors="np")
    else:
        enc = tok(*texts, padding=True, return_tensors="np")
    feeds = {k: np.asarray(v, dtype=np.int64) for k, v in enc.items()}
    graphs = {}
    for f in files:
        stem = f[: -len(".onnx")]
        ref = f"references/{stem}.npz"
        ec.save_reference(d / ref, ec.encoder_reference(d / "onnx" / f, feeds))
        graphs[f"onnx/{f}"] = {"reference": ref, "static_inputs": []}
    ec.write_manifest(d, family, model.__class__.__name__, task, opset, graphs)
    if pipeline_calls:
        _record_calls(d, pipeline_task or task, model, tok, pipeline_calls)


def _left_padded(tok, texts):
    side, pad = tok.padding_side, tok.pad_token
    tok.padding_side = "left"
    if pad is None:  # GPT-2 has no pad token: pad with eos (its id is masked out anyway)
        tok.pad_token = tok.eos_token
    enc = tok(texts, padding=True, return_tensors="np")
    tok.padding_side = side
    if pad is None:
        tok.pad_token = None
    return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)


GEN_KW = {"max_new_tokens": 8, "do_sample": False}


def decoder_fixture(
    d: Path, family: str, model, tok, *, opset: int = 18, eager: bool = False, merged: bool = True,
    also_plain: bool = False, variants: tuple[str, ...] = (), prompts=None,
) -> None:
    task = "text-generation-with-past"
    model.eval()
    _save_hub_files(d, model, tok, generation=True)
    if merged:
        ec.export_optimum(model, tok, task, d / "onnx", opset, eager=eager, split_decoder=True)
        files = _make_variants(d / "onnx", ["decoder_model_merged"], variants)
        _drop(d / "onnx", ["decoder_with_past_model.onnx"] + ([] if also_plain else ["decoder_model.onnx"]))
        if also_plain:
            files.append("decoder_model.onnx")
    else:
        ec.export_optimum(model, tok, task, d / "onnx", opset, eager=eager, keep={"model.onnx"})
        files = _make_variants(d / "onnx", ["model"], variants)
    ids, mask = _left_padded(tok, DECODER_PROMPTS)
    graphs = {}
    for f in files:
        stem = f[: -len(".onnx")]
        ref = f"references/{stem}.npz"
        ec.save_reference(d / ref, ec.decoder_reference(d / "onnx" / f, ids, mask, n_cached=3))
        static = ["use_cache_branch"] if "merged" in stem else []
        graphs[f"onnx/{f}"] = {"reference": ref, "static_inputs": static}
    ec.write_manifest(d, family, model.__class__.__name__, task, opset, graphs)
    prompts = prompts or ["Hello world! This is", "The capital of France is"]
    _record_calls(
        d, "text-generation", model, tok,
        [(prompts, dict(GEN_KW)), (prompts, dict(GEN_KW, return_tensors=True))],
    )


def seq2seq_fixture(
    d: Path, family: str, model, tok, *, opset: int = 18, eager: bool = False, variants: tuple[str, ...] = (),
    pipeline_inputs=None,
) -> None:
    task = "text2text-generation-with-past"
    model.eval()
    _save_hub_files(d, model, tok, generation=True)
    ec.export_optimum(model, tok, task, d / "onnx", opset, eager=eager)
    _make_variants(d / "onnx", ["encoder_model", "decoder_model_merged"], variants, strict_merge=False)
    _drop(d / "onnx", ["decoder_model.onnx", "decoder_with_past_model.onnx"])
    enc = tok(SEQ2SEQ_TEXTS, padding=True, return_tensors="np")
    ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
    graphs = {}
    for sfx in ("",) + tuple(f"_{v}" for v in variants):
        e, m = f"encoder_model{sfx}", f"decoder_model_merged{sfx}"
        enc_steps, dec_steps = ec.seq2seq_reference(
            d / "onnx" / f"{e}.onnx", d / "onnx" / f"{m}.onnx", ids, mask, model.config.decoder_start_token_id, 3
        )
        ec.save_reference(d / f"references/{e}.npz", enc_steps)
        ec.save_reference(d / f"references/{m}.npz", dec_steps)
        graphs[f"onnx/{e}.onnx"] = {"reference": f"references/{e}.npz", "static_inputs": []}
        graphs[f"onnx/{m}.onnx"] = {"reference": f"references/{m}.npz", "static_inputs": ["use_cache_branch"]}
    ec.write_manifest(d, family, model.__class__.__name__, task, opset, graphs)
    inputs = pipeline_inputs or SEQ2SEQ_TEXTS
    _record_calls(d, "text2text-generation", model, tok, [(inputs, dict(GEN_KW))])


# ------------------------------------------------------------------------------------------------
# families
# ------------------------------------------------------------------------------------------------


def _bert_config(tok, **kw):
    from transformers import BertConfig

    base = dict(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=512, type_vocab_size=2, pad_token_id=tok.pad_token_id,
    )
    base.update(kw)
    return BertConfig(**base)


def _bert_feature(d: Path, work: Path, opset: int, eager: bool, variants):
    from transformers import BertModel

    tok = bert_tokenizer(work)
    ec.seed_everything()
    model = BertModel(_bert_config(tok))
    encoder_fixture(d, "bert", model, tok, "feature-extraction", opset=opset, eager=eager, variants=variants)


@fixture("bert")
def build_bert(d: Path, work: Path):
    _bert_feature(d, work, 18, False, ("quantized", "fp16", "q4", "q4f16"))


@fixture("bert-opset14")
def build_bert_opset14(d: Path, work: Path):
    _bert_feature(d, work, 14, True, ("quantized",))


CLS_TEXTS = ["I love this movie, it is wonderful!", "This film was terrible.", "The weather today is sunny."]


@fixture("bert-sequence-classification")
def build_bert_seqcls(d: Path, work: Path):
    from transformers import BertForSequenceClassification

    tok = bert_tokenizer(work)
    ec.seed_everything()
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    cfg = _bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
    model = BertForSequenceClassification(cfg)
    encoder_fixture(
        d, "bert", model, tok, "text-classification", variants=("quantized",),
        pipeline_calls=[(CLS_TEXTS, {}), (CLS_TEXTS, {"top_k": None})],
    )


NER_TEXTS = ["My name is Wolfgang and I live in Berlin.", "Clara works for the United Nations in New York."]


@fixture("bert-token-classification")
def build_bert_ner(d: Path, work: Path):
    from transformers import BertForTokenClassification

    tok = bert_tokenizer(work, lowercase=False)
    ec.seed_everything()
    labels = dict(enumerate(NER_LABELS))
    cfg = _bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
    model = BertForTokenClassification(cfg)
    encoder_fixture(
        d, "bert", model, tok, "token-classification", variants=("quantized",),
        texts=(NER_TEXTS,),
        pipeline_calls=[(NER_TEXTS, {"aggregation_strategy": "none"}), (NER_TEXTS, {"aggregation_strategy": "simple"})],
    )


@fixture("bert-fill-mask")
def build_bert_mlm(d: Path, work: Path):
    from transformers import BertForMaskedLM

    tok = bert_tokenizer(work)
    ec.seed_everything()
    model = BertForMaskedLM(_bert_config(tok))
    m = tok.mask_token
    texts = [f"The capital of France is {m}.", f"I live in a small {m} near the river."]
    encoder_fixture(
        d, "bert", model, tok, "fill-mask", texts=(texts,),
        pipeline_calls=[(texts, {}), (texts, {"top_k": 3})],
    )


QA = [
    {"question": "Where do I live?", "context": "My name is Sarah and I live in London."},
    {"question": "What is the capital of France?", "context": "The capital of France is Paris, and the capital of Germany is Berlin."},
]


@fixture("bert-question-answering")
def build_bert_qa(d: Path, work: Path):
    from transformers import BertForQuestionAnswering

    tok = bert_tokenizer(work)
    ec.seed_everything()
    model = BertForQuestionAnswering(_bert_config(tok))
    encoder_fixture(
        d, "bert", model, tok, "question-answering",
        texts=([q["question"] for q in QA], [q["context"] for q in QA]),
        pipeline_calls=[(QA, {}), (QA, {"top_k": 2})],
    )


@fixture("distilbert-sequence-classification")
def build_distilbert(d: Path, work: Path):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, DistilBertTokenizerFast

    tok = bert_tokenizer(work, cls=DistilBertTokenizerFast)
    ec.seed_everything()
    labels = {0: "NEGATIVE", 1: "POSITIVE"}
    cfg = DistilBertConfig(
        vocab_size=len(tok), dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=512,
        pad_token_id=tok.pad_token_id, id2label=labels, label2id={v: k for k, v in labels.items()},
    )
    model = DistilBertForSequenceClassification(cfg)
    encoder_fixture(
        d, "distilbert", model, tok, "text-classification", variants=("quantized",),
        pipeline_calls=[(CLS_TEXTS, {}), (CLS_TEXTS, {"top_k": None})],
    )


@fixture("xlm-roberta")
def build_xlmr(d: Path, work: Path):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    tok = xlmr_tokenizer(work)
    ec.seed_everything()
    cfg = XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=130, type_vocab_size=1, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    model = XLMRobertaForMaskedLM(cfg)
    m = tok.mask_token
    texts = [f"The capital of France is {m}.", f"Hello {m}! This is a tiny test."]
    encoder_fixture(
        d, "xlm-roberta", model, tok, "fill-mask", texts=(texts,), variants=("quantized",),
        pipeline_calls=[(texts, {}), (texts, {"top_k": 3})],
    )


def _gpt2(work: Path, eager: bool = False):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = gpt2_tokenizer(work)
    eos = tok.eos_token_id
    ec.seed_everything()
    cfg = GPT2Config(
        vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=2, n_inner=128,
        bos_token_id=eos, eos_token_id=eos, initializer_range=DECODER_INIT,
    )
    model = GPT2LMHeadModel(cfg)
    model.generation_config.pad_token_id = eos
    return model, tok


@fixture("gpt2")
def build_gpt2(d: Path, work: Path):
    model, tok = _gpt2(work)
    decoder_fixture(d, "gpt2", model, tok, also_plain=True, variants=("quantized", "fp16"))


@fixture("gpt2-opset14")
def build_gpt2_opset14(d: Path, work: Path):
    model, tok = _gpt2(work)
    decoder_fixture(d, "gpt2", model, tok, opset=14, eager=True)


def _llama(work: Path):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = llama_tokenizer(work)
    ec.seed_everything()
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        initializer_range=DECODER_INIT,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.eos_token_id
    return model, tok


@fixture("llama")
def build_llama(d: Path, work: Path):
    model, tok = _llama(work)
    decoder_fixture(d, "llama", model, tok, merged=False, variants=("quantized", "q4", "q4f16"))


@fixture("llama-opset14")
def build_llama_opset14(d: Path, work: Path):
    model, tok = _llama(work)
    decoder_fixture(d, "llama", model, tok, merged=False, opset=14, eager=True)


@fixture("qwen3")
def build_qwen3(d: Path, work: Path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen_tokenizer(work)
    ec.seed_everything()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rope_theta=1000000.0,
        tie_word_embeddings=True, bos_token_id=tok.pad_token_id, eos_token_id=eos,
        initializer_range=DECODER_INIT,
    )
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    decoder_fixture(d, "qwen3", model, tok, merged=False, variants=("q4",))


def _t5(work: Path):
    from transformers import T5Config, T5ForConditionalGeneration

    tok = t5_tokenizer(work)
    ec.seed_everything()
    cfg = T5Config(
        vocab_size=len(tok), d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="relu",
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
        initializer_factor=2.0,  # T5's analogue of DECODER_INIT (greedy output not one repeated token)
    )
    return T5ForConditionalGeneration(cfg), tok


@fixture("t5")
def build_t5(d: Path, work: Path):
    model, tok = _t5(work)
    seq2seq_fixture(d, "t5", model, tok, variants=("quantized", "fp16"))


@fixture("t5-opset14")
def build_t5_opset14(d: Path, work: Path):
    model, tok = _t5(work)
    seq2seq_fixture(d, "t5", model, tok, opset=14, eager=True)


@fixture("marian")
def build_marian(d: Path, work: Path):
    from transformers import MarianConfig, MarianMTModel

    tok = marian_tokenizer(work)
    ec.seed_everything()
    pad = tok.pad_token_id
    cfg = MarianConfig(
        vocab_size=len(tok), decoder_vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=128, pad_token_id=pad, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=pad, forced_eos_token_id=tok.eos_token_id, scale_embedding=True,
        share_encoder_decoder_embeddings=True, init_std=DECODER_INIT,
    )
    model = MarianMTModel(cfg)
    seq2seq_fixture(d, "marian", model, tok, variants=("quantized",))


@fixture("bart")
def build_bart(d: Path, work: Path):
    from transformers import BartConfig, BartForConditionalGeneration

    tok = bart_tokenizer(work)
    ec.seed_everything()
    cfg = BartConfig(
        vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.eos_token_id, forced_bos_token_id=tok.bos_token_id,
        forced_eos_token_id=tok.eos_token_id, init_std=DECODER_INIT,
    )
    model = BartForConditionalGeneration(cfg)
    seq2seq_fixture(d, "bart", model, tok, variants=("quantized",))


NLLB_TEXTS = ["The house is wonderful.", "Hello world!"]
NLLB_NEW = 6  # the tests' growing cache compiles one decoder shape per step


def _nllb(work: Path):
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    tok = nllb_tokenizer(work)
    ec.seed_everything()
    cfg = M2M100Config(  # NLLB checkpoints are M2M100ForConditionalGeneration with these special ids
        vocab_size=len(tok), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.eos_token_id, scale_embedding=True, init_std=DECODER_INIT,
        tokenizer_class="NllbTokenizer",
    )
    return M2M100ForConditionalGeneration(cfg), tok


def _nllb_tokenizer_ids(tok) -> dict:
    """tokenizer ids for each text and src_lang (None: the saved default), as the translation
    pipeline sets ``tok.src_lang`` before tokenizing."""
    out = {}
    for lang in [None, "fra_Latn", "zho_Hans"]:
        tok.src_lang = lang or "eng_Latn"
        out[lang or ""] = [tok(t)["input_ids"] for t in NLLB_TEXTS + SEQ2SEQ_TEXTS[:1]]
    tok.src_lang = "eng_Latn"
    return out


@fixture("nllb")
def build_nllb(d: Path, work: Path):
    model, tok = _nllb(work)
    seq2seq_fixture(d, "nllb", model, tok)
    calls = [(NLLB_TEXTS, {"src_lang": src, "tgt_lang": tgt, "max_new_tokens": NLLB_NEW, "num_beams": beams})
             for src, tgt, beams in [("eng_Latn", "fra_Latn", 1), ("deu_Latn", "zho_Hans", 1),
                                     ("eng_Latn", "spa_Latn", 3)]]
    calls.append((NLLB_TEXTS[:1], dict(calls[1][1], return_tensors=True)))  # ids: the forced target token
    _record_calls(d, "translation", model, tok, calls)
    # legacy_behaviour (tokens </s> [src_lang]): a second tokenizer on the same sentencepiece model
    legacy = nllb_tokenizer(work / "legacy", legacy=True)
    legacy.save_pretrained(d / "legacy")
    ids = {"texts": NLLB_TEXTS + SEQ2SEQ_TEXTS[:1], "ids": _nllb_tokenizer_ids(tok),
           "legacy_ids": _nllb_tokenizer_ids(legacy)}
    (d / "references" / "tokenizer_nllb.json").write_text(json.dumps(ids, indent=1) + "\n")
    # tokenizer.json is the tokenizer; the sentencepiece files (240 kB each) would only serve the slow one
    _drop(d, ["sentencepiece.bpe.model", "legacy/sentencepiece.bpe.model"])


# ------------------------------------------------------------------------------------------------


def build(name: str) -> None:
    d = ec.reset_dir(ec.FIXTURES_ROOT / name)
    with tempfile.TemporaryDirectory() as work:
        FIXTURES[name](d, Path(work))
    ec.verify_fixture(d)


def main(argv: list[str]) -> int:
    return ec.run_fixtures(__file__, FIXTURES, build, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
