"""Text pipelines against the transformers / sentence-transformers outputs recorded with the
fixtures (references/pipeline_<task>.json), plus the Pipeline contract: batching, lists,
generators, bad inputs.

Every pipeline here pads to one length (sequence_length=32; the default buckets in one test) and
the graphs compile once per padded shape, shared by the tests of this module (one loaded model per
fixture)."""

import json
import math
import types

import numpy as np
import pytest

import transmuter
from transmuter import hub
from transmuter.pipelines import PipelineError
from transmuter.preprocess.text.tokenizer import Tokenizer

from .fixtures import ROOT, pipeline_reference, pipeline_references

# The graph runs in float32 under XLA, with another order of sums than PyTorch's kernels; on these
# tiny random models that moves scores by ~1e-6, and 1e-4 (the design's bound) leaves headroom.
TOL = 1e-4
# Batched vs one-by-one: the same graph with extra padded rows/positions (masked out).
BATCH_TOL = 1e-5

ENCODER_TASKS = {"text-classification", "token-classification", "fill-mask", "question-answering",
                 "zero-shot-classification", "text-ranking", "feature-extraction",
                 "text-embedding"}
# Construction options a fixture's references need.
OPTIONS = {
    # a call uses transformers' default max_seq_len (384): its context must fit one window
    "bert-qa-long": {"sequence_length": [32, 128]},
}
CASES = [(task, fixture, OPTIONS.get(fixture, {}))
         for fixture, task in pipeline_references(ENCODER_TASKS)]


@pytest.fixture(scope="module")
def pipes():
    models, made = {}, {}

    def get(task, fixture, **options):
        options = {"sequence_length": 32, "batch_size": 1, **options}
        key = (task, fixture, json.dumps(options, sort_keys=True))
        if key not in made:
            folder = ROOT / fixture
            if fixture not in models:
                models[fixture] = transmuter.load(folder)
            made[key] = transmuter.pipeline(task, models[fixture], config=folder,
                                             tokenizer=folder, **options)
        return made[key]

    return get


def reference(task, fixture):
    return pipeline_reference(fixture, task)


def assert_close(got, want, tol=TOL, where="output"):
    """Same structure, keys (in order), labels, spans and strings; numbers within ``tol``."""
    got, want = (x.tolist() if isinstance(x, np.ndarray) else x for x in (got, want))
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not a dict"
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_close(got[k], want[k], tol, f"{where}[{k!r}]")
    elif isinstance(want, list):
        assert isinstance(got, list), f"{where}: {type(got).__name__} is not a list"
        assert len(got) == len(want), f"{where}: {len(got)} items != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, tol, f"{where}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, (float, int)) and math.isclose(got, want, abs_tol=tol), \
            f"{where}: {got!r} != {want!r} (tolerance {tol})"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("task,fixture,options", CASES, ids=[f"{t}-{f}" for t, f, _ in CASES])
def test_matches_recorded_pipeline(pipes, task, fixture, options):
    pipe = pipes(task, fixture, **options)
    for call in reference(task, fixture)["calls"]:
        kwargs = dict(call["call_kwargs"])
        if task == "text-embedding":  # pooling= / normalize= are construction options
            pipe = pipes(task, fixture, **options, **kwargs)
            kwargs = {}
        for i, (x, want) in enumerate(zip(call["inputs"], call["outputs"])):
            assert_close(pipe(x, **kwargs), want, where=f"{kwargs} input {i}")


BATCHED = [
    ("text-classification", "bert-sequence-classification", {"top_k": None}),
    ("token-classification", "bert-token-classification", {"aggregation_strategy": "simple"}),
    ("question-answering", "bert-qa-long", {"max_seq_len": 32, "doc_stride": 8, "top_k": 2}),
    ("zero-shot-classification", "bert-nli", {"candidate_labels": ["sports", "weather"]}),
    ("text-embedding", "bert-sentence-transformers", {}),
    ("text-embedding", "bert-st-dense", {}),
]


@pytest.mark.parametrize("task,fixture,kwargs", BATCHED, ids=[t for t, _, _ in BATCHED])
def test_batched_equals_one_by_one(pipes, task, fixture, kwargs):
    pipe = pipes(task, fixture, **({"sequence_length": [32, 128]} if "qa" in fixture else {}))
    inputs = reference(task, fixture)["calls"][0]["inputs"]
    one = [pipe(x, **kwargs) for x in inputs]
    assert_close(pipe(list(inputs), batch_size=4, **kwargs), one, BATCH_TOL)
    lazy = pipe((x for x in inputs), batch_size=3, **kwargs)
    assert isinstance(lazy, types.GeneratorType)
    assert_close(list(lazy), one, BATCH_TOL)


def test_lists_generators_and_empty(pipes):
    pipe = pipes("fill-mask", "bert-fill-mask")
    text = "The capital of France is [MASK]."
    single = pipe(text)
    assert isinstance(single, list) and isinstance(single[0], dict)
    assert pipe([]) == []
    assert list(pipe(iter([]))) == []
    assert_close(pipe([text, text]), [single, single], BATCH_TOL)
    assert_close(list(pipe(iter([text]), progress=True)), [single], BATCH_TOL)


def test_sequence_buckets_and_truncation(pipes):
    pipe = pipes("text-classification", "bert-sequence-classification")
    assert pipe.sequence_lengths == (32,)
    long = " ".join(["word"] * 200)  # far past 32 tokens: truncated, as the model max would be
    assert pipe(long)[0]["label"] in {"negative", "neutral", "positive"}
    wide = transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification",
                               sequence_length=[16, 64, 4096])
    assert wide.sequence_lengths == (16, 64, 512)  # capped at the model's 512 positions


def test_default_padding_matches_recorded(pipes):
    """The default buckets (a few per power of two, up to the model's maximum) pad the short and
    long reference sentences to different lengths, in one batch and alone: the embeddings stay
    sentence-transformers' (the padded positions are masked out; TOL as everywhere here)."""
    call = reference("text-embedding", "bert-sentence-transformers")["calls"][0]
    pipe = pipes("text-embedding", "bert-sentence-transformers", sequence_length=None,
                 **call["call_kwargs"])
    assert pipe.sequence_lengths == (16, 20, 24)  # 4 steps over (16, 32], capped at the
    # tokenizer's model_max_length (24), where sentence-transformers truncates too
    assert_close(pipe(call["inputs"], batch_size=2), call["outputs"])
    assert_close([pipe(x) for x in call["inputs"]], call["outputs"])


def test_text_pairs(pipes):
    pipe = pipes("text-classification", "bert-cross-encoder")
    as_dict = pipe({"text": "Where is the tower?", "text_pair": "In Paris."})
    assert_close(pipe(("Where is the tower?", "In Paris.")), as_dict)
    ranked = pipes("text-ranking", "bert-cross-encoder")(
        {"query": "Where is the tower?", "documents": ["In Paris."]})
    assert_close(ranked[0]["score"], as_dict["score"])


def test_question_answering_keywords(pipes):
    pipe = pipes("question-answering", "bert-question-answering")
    example = reference("question-answering", "bert-question-answering")["calls"][0]
    x, want = example["inputs"][0], example["outputs"][0]
    assert_close(pipe(question=x["question"], context=x["context"]), want)
    with pytest.raises(PipelineError, match="context"):
        pipe(question="Where do I live?")


@pytest.mark.parametrize("task,fixture,bad,message", [
    ("text-classification", "bert-sequence-classification", "", "empty"),
    ("text-classification", "bert-sequence-classification", "   ", "empty"),
    ("text-classification", "bert-sequence-classification", 42, "string"),
    ("text-classification", "bert-sequence-classification", [None], "string"),
    ("fill-mask", "bert-fill-mask", "No mask here.", r"No mask_token \(\[MASK\]\)"),
    ("question-answering", "bert-question-answering", {"question": "Where?"}, "context"),
    ("question-answering", "bert-question-answering", {"question": "Where?", "context": ""},
     "empty"),
    ("zero-shot-classification", "bert-nli", "Some text.", "candidate_labels"),
    ("text-ranking", "bert-cross-encoder", {"query": "q", "documents": []}, "documents"),
])
def test_bad_inputs(pipes, task, fixture, bad, message):
    with pytest.raises(ValueError, match=message):
        pipes(task, fixture)(bad)


def test_models_that_cannot_do_the_task():
    with pytest.raises(PipelineError, match="id2label"):
        transmuter.pipeline("text-classification", ROOT / "bert")
    with pytest.raises(PipelineError, match="id2label"):
        transmuter.pipeline("ner", ROOT / "bert")
    with pytest.raises(PipelineError, match="pooling"):
        transmuter.pipeline("text-embedding", ROOT / "bert")
    with pytest.raises(PipelineError, match="Unknown task"):
        transmuter.pipeline("text-clasification", ROOT / "bert")
    with pytest.raises(PipelineError, match="aggregation_strategy"):
        transmuter.pipeline("ner", ROOT / "bert-token-classification",
                            aggregation_strategy="longest")


def test_aliases_and_tokenizer():
    from transmuter.pipelines import registry
    assert registry.get("sentiment-analysis") is registry.get("text-classification")
    assert registry.get("ner") is registry.get("token-classification")
    tok = Tokenizer.from_repo(hub.resolve(ROOT / "bert-question-answering"))
    enc = tok.encode("Where do I live?", "My name is Sarah and I live in London.")
    ids = np.load(ROOT / "bert-question-answering" / "references" / "model.npz")["0/in/input_ids"]
    assert enc.ids == [int(i) for i in ids[0] if i != tok.pad_token_id]
    assert tok.mask_token == "[MASK]" and tok.model_max_length == 512
    windows = tok.encode("q", " ".join(["word"] * 40), max_length=16, stride=4,
                         truncation="only_second")
    assert len(windows.ids) == 16 and windows.overflowing


def test_tokenizer_encodes_from_many_threads():
    """tokenizers keeps truncation as state; encodes that set it differently from several threads
    (image pipelines preprocess in threads, users call from several) each get their own
    setting's ids, as one thread gives them."""
    import concurrent.futures

    tok = Tokenizer.from_repo(hub.resolve(ROOT / "bert-question-answering"))
    text = " ".join(["word"] * 60)
    calls = [(i % 3) * 8 or None for i in range(3000)]  # max_length 8, 16 or no truncation

    def encode(max_length):
        return tok.encode(text, max_length=max_length, truncation=bool(max_length)).ids

    want = {n: encode(n) for n in set(calls)}
    assert len({len(ids) for ids in want.values()}) == 3
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(encode, calls))
    assert all(ids == want[n] for ids, n in zip(got, calls))


# Dense modules run in float32 NumPy over sentence-transformers' own weights, after a pooled
# embedding whose sums XLA orders differently from PyTorch: ~1e-7 apart on these unit vectors
# (components < 1), so 1e-5 leaves two orders of headroom and would catch a wrong activation,
# a missing bias or a transposed weight (each moves components by > 1e-2).
DENSE_TOL = 1e-5


@pytest.mark.parametrize("call", [0, 1], ids=["with-normalize", "normalize-false"])
def test_dense_modules_match_sentence_transformers(pipes, call):
    """modules.json's Pooling -> Dense (Tanh, model.safetensors) -> Dense (GELU, no bias,
    pytorch_model.bin) -> Normalize, against SentenceTransformer.encode of the same folder."""
    record = reference("text-embedding", "bert-st-dense")["calls"][call]
    pipe = pipes("text-embedding", "bert-st-dense", **record["call_kwargs"])
    got = np.array(pipe(record["inputs"], batch_size=3))
    assert got.shape == (3, 16)
    np.testing.assert_allclose(got, np.array(record["outputs"]), rtol=0, atol=DENSE_TOL)


def _dense_copy(tmp_path):
    import shutil
    folder = tmp_path / "st-dense"
    shutil.copytree(ROOT / "bert-st-dense", folder)
    return folder


def _refused(folder, match):
    with pytest.raises(PipelineError, match=match):
        transmuter.pipeline("text-embedding", folder)


def test_dense_module_files_that_are_refused(tmp_path):
    import pickle
    import zipfile
    folder = _dense_copy(tmp_path)
    weights = folder / "2_Dense" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])  # cut: the offsets run past the buffer
    _refused(folder, r"2_Dense \(Dense\): cannot read model.safetensors")
    weights.unlink()
    _refused(folder, "2_Dense .*no model.safetensors nor pytorch_model.bin")

    folder = _dense_copy(tmp_path / "b")
    import os
    with zipfile.ZipFile(folder / "3_Dense" / "pytorch_model.bin", "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"linear.weight": os.system}))
    _refused(folder, r"3_Dense .*refusing posix.system: only tensors are read")


@pytest.mark.parametrize("field,value,match", [
    ("activation_function", "torch.nn.modules.activation.Softplus", "activation_function"),
    ("activation_function", "mypackage.Custom", "activation_function"),
    ("in_features", 30, "config.json says"),
    ("module_input_name", "token_embeddings", "module_input_name"),
])
def test_dense_configs_that_are_refused(tmp_path, field, value, match):
    folder = _dense_copy(tmp_path)
    path = folder / "3_Dense" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, field: value}))
    _refused(folder, match)
