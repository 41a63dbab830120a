"""Tiny fixtures for the text pipelines that the family scripts do not record.

Usage (export environment only; no network, no Hub downloads):

    /work/venvs/export/bin/python tests/support/families_pipelines.py            # all of them
    /work/venvs/export/bin/python tests/support/families_pipelines.py bert-nli   # some of them

Each model is a tiny BERT built from a config with random weights (``seed_everything``), using the
tokenizer files of the committed ``tests/fixtures/bert`` (``bert-ner-words`` uses the cased
``bert-token-classification`` ones), exported with optimum-onnx like families_text.py does, so each
folder follows tests/support/README.md. The references are what the peers give on the torch model:

    bert-sentence-transformers  references/pipeline_text-embedding.json (SentenceTransformer.encode;
                                mean pooling + Normalize from modules.json, max_seq_length 24, and a
                                CLS-pooled, unnormalized call) and pipeline_feature-extraction.json
                                (transformers pipeline)
    bert-nli                    references/pipeline_zero-shot-classification.json
    bert-cross-encoder          references/pipeline_text-ranking.json (CrossEncoder.rank) and
                                pipeline_text-classification.json (one label: sigmoid)
    bert-ner-words              references/pipeline_token-classification.json, all five aggregations
    bert-qa-long                references/pipeline_question-answering.json, contexts split into
                                windows (max_seq_len / doc_stride), top_k, handle_impossible_answer
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_common as ec  # noqa: E402
import families_text as ft  # noqa: E402

FIXTURES = {}


def fixture(name):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


def _tokenizer(source="bert"):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(str(ec.FIXTURES_ROOT / source))


EMBED_TEXTS = [
    "Hello world!",
    "The cat sat on the mat.",
    # longer than max_seq_length (24): sentence-transformers truncates it
    "My name is Sarah and I live in London, where the weather is often grey but the "
    "museums are free and the parks are wide and green all year round.",
]


@fixture("bert-sentence-transformers")
def build_sentence_transformers(d: Path, work: Path):
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertModel

    tok = _tokenizer()
    ec.seed_everything()
    model = BertModel(ft._bert_config(tok))
    ft.encoder_fixture(d, "bert", model, tok, "feature-extraction",
                       pipeline_calls=[(EMBED_TEXTS[:2], {})])
    # A sentence-transformers folder: the saved HF model plus its module files.
    st_dir = work / "st"
    model.save_pretrained(st_dir)
    tok.save_pretrained(st_dir)
    body = models.Transformer(str(st_dir), max_seq_length=24)
    st = SentenceTransformer(modules=[body, models.Pooling(32, "mean"), models.Normalize()],
                             device="cpu")
    st.save(str(work / "saved"))
    # sentence-transformers 5 keeps max_seq_length as the tokenizer's model_max_length
    for f in ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
              "tokenizer_config.json"]:
        if (work / "saved" / f).exists():
            shutil.copyfile(work / "saved" / f, d / f)
    for sub in (work / "saved").iterdir():
        if sub.is_dir():  # 1_Pooling/config.json, 2_Normalize (empty)
            (d / sub.name).mkdir(exist_ok=True)
            for f in sub.glob("*.json"):
                shutil.copyfile(f, d / sub.name / f.name)
            if not any((d / sub.name).iterdir()):
                (d / sub.name / ".keep").write_text("")
    loaded = SentenceTransformer(str(work / "saved"), device="cpu", local_files_only=True)
    cls = SentenceTransformer(modules=[body, models.Pooling(32, "cls")], device="cpu")
    calls = [
        {"inputs": EMBED_TEXTS, "call_kwargs": {},
         "outputs": [e for e in loaded.encode(EMBED_TEXTS, batch_size=1)]},
        {"inputs": EMBED_TEXTS, "call_kwargs": {"pooling": "cls", "normalize": False},
         "outputs": [e for e in cls.encode(EMBED_TEXTS, batch_size=1)]},
    ]
    ec.save_pipeline_record(d / "references" / "pipeline_text-embedding.json", "text-embedding",
                            calls, peer="sentence-transformers 5.7.0 SentenceTransformer.encode")


ZS_TEXTS = ["The match ended with a late goal.", "It will rain in Paris tomorrow."]
ZS_LABELS = ["sports", "weather", "politics"]


@fixture("bert-nli")
def build_nli(d: Path, work: Path):
    from transformers import BertForSequenceClassification

    tok = _tokenizer()
    ec.seed_everything()
    labels = {0: "contradiction", 1: "neutral", 2: "entailment"}
    cfg = ft._bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
    model = BertForSequenceClassification(cfg)
    ft.encoder_fixture(
        d, "bert", model, tok, "text-classification",
        pipeline_task="zero-shot-classification",
        pipeline_calls=[
            (ZS_TEXTS, {"candidate_labels": ZS_LABELS}),
            (ZS_TEXTS, {"candidate_labels": ZS_LABELS, "multi_label": True}),
            (ZS_TEXTS, {"candidate_labels": "sports, weather",
                        "hypothesis_template": "The topic is {}."}),
            (ZS_TEXTS, {"candidate_labels": ["sports"]}),
        ],
    )


RANK_QUERY = "Where is the Eiffel Tower?"
RANK_DOCS = ["The Eiffel Tower is in Paris.", "Bananas are yellow.",
             "Paris is the capital of France and has a famous tower.", "I like trains."]


@fixture("bert-cross-encoder")
def build_cross_encoder(d: Path, work: Path):
    from sentence_transformers import CrossEncoder
    from transformers import BertForSequenceClassification

    tok = _tokenizer()
    ec.seed_everything()
    model = BertForSequenceClassification(ft._bert_config(tok, num_labels=1))
    ft.encoder_fixture(d, "bert", model, tok, "text-classification",
                       pipeline_calls=[(ft.CLS_TEXTS, {}), (ft.CLS_TEXTS, {"top_k": None})])
    model.save_pretrained(work / "ce")
    tok.save_pretrained(work / "ce")
    ce = CrossEncoder(str(work / "ce"), device="cpu", local_files_only=True)
    query = {"query": RANK_QUERY, "documents": RANK_DOCS}
    calls = [
        {"inputs": [query], "call_kwargs": {},
         "outputs": [ce.rank(RANK_QUERY, RANK_DOCS, batch_size=1)]},
        {"inputs": [query], "call_kwargs": {"top_k": 2, "return_documents": True},
         "outputs": [ce.rank(RANK_QUERY, RANK_DOCS, top_k=2, return_documents=True,
                             batch_size=1)]},
    ]
    ec.save_pipeline_record(d / "references" / "pipeline_text-ranking.json", "text-ranking", calls,
                            peer="sentence-transformers 5.7.0 CrossEncoder.rank")


NER_TEXTS = ["Wolfgang Amadeus lives in Berlingen.", "Clarabelle works for Unitedness Nations."]


@fixture("bert-ner-words")
def build_ner_words(d: Path, work: Path):
    from transformers import BertForTokenClassification

    tok = _tokenizer("bert-token-classification")
    ec.seed_everything()
    labels = dict(enumerate(ft.NER_LABELS))
    cfg = ft._bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
    model = BertForTokenClassification(cfg)
    strategies = ["none", "simple", "first", "average", "max"]
    ft.encoder_fixture(
        d, "bert", model, tok, "token-classification", texts=(NER_TEXTS,),
        pipeline_calls=[(NER_TEXTS, {"aggregation_strategy": s}) for s in strategies]
        + [(NER_TEXTS, {"aggregation_strategy": "simple", "ignore_labels": []})],
    )


LONG_QA = [
    {"question": "Where does Sarah live?",
     "context": "My name is Sarah. I work in a large office with many people and long corridors. "
                "Every day I take the train, read a book, drink coffee and look at the river. "
                "In the evening I go home to London, where I live with my cat."},
    {"question": "What is the capital?", "context": "Paris is the capital."},
]


@fixture("bert-qa-long")
def build_qa_long(d: Path, work: Path):
    from transformers import BertForQuestionAnswering

    tok = _tokenizer()
    ec.seed_everything()
    model = BertForQuestionAnswering(ft._bert_config(tok))
    ft.encoder_fixture(
        d, "bert", model, tok, "question-answering",
        texts=([q["question"] for q in LONG_QA], [q["context"] for q in LONG_QA]),
        pipeline_calls=[
            (LONG_QA, {"max_seq_len": 32, "doc_stride": 8}),
            (LONG_QA, {"max_seq_len": 32, "doc_stride": 8, "top_k": 3}),
            (LONG_QA, {"max_seq_len": 32, "doc_stride": 8, "handle_impossible_answer": True}),
            (LONG_QA, {"max_answer_len": 3, "align_to_words": False}),
        ],
    )


def build(name: str) -> None:
    d = ec.reset_dir(ec.FIXTURES_ROOT / name)
    with tempfile.TemporaryDirectory() as work:
        FIXTURES[name](d, Path(work))
    ec.verify_fixture(d)


def main(argv: list[str]) -> int:
    return ec.run_fixtures(__file__, FIXTURES, build, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
