"""text-embedding as sentence-transformers 5's encode / encode_query / encode_document: prompts
(config_sentence_transformers.json's prompts and default_prompt_name, prompt_name=, prompt=,
prompts= at construction, include_prompt false), truncate_dim, normalize_embeddings, precision,
one [n, d] array for a list. References: tests/support/record_st_encode.py (the bert-st-prompts
fixture through SentenceTransformer(backend="onnx"); the real all-MiniLM-L6-v2 on PyTorch)."""

import json
import os
import pathlib

import numpy as np
import pytest

import transmuter
from transmuter.errors import PipelineError

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "bert-st-prompts"
CACHE = pathlib.Path(os.environ.get("TRANSMUTER_TEST_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-tests"))
MINILM = CACHE / "all-MiniLM-L6-v2"
REFERENCE = "references/sentence_transformers_encode.npz"
# float32 vectors: the same graph (fixture: onnxruntime; MiniLM: PyTorch on the same weights)
# summed in another order: measured at most 9e-8 (fixture) and 3e-7 (MiniLM); 1e-5 leaves
# room for six layers of rounding on other CPUs
FLOAT_TOL = 1e-5


def load(folder):
    ref = np.load(folder / REFERENCE)
    return ref, json.loads(str(ref["cases"])), [str(s) for s in ref["sentences"]]


def run(folder, spec, sentences, backend="jax"):
    pipe = transmuter.pipeline("text-embedding", folder, backend=backend, **spec["init"])
    method = pipe if spec["method"] == "encode" else getattr(pipe, spec["method"])
    return method(sentences[0] if spec["single"] else sentences, **spec["kwargs"])


def assert_equal_to(got, want, floats):
    """Floats within FLOAT_TOL; quantized values exactly, except where the float embedding lies
    within FLOAT_TOL of a bucket edge (int8/uint8: a step is the dimension's range / 255) or of 0
    (binary): there rounding may put it on either side."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=0, atol=FLOAT_TOL)
        return
    if got.shape[-1] == floats.shape[-1]:  # int8 / uint8: one value per dimension
        low, high = floats.min(0), floats.max(0)
        steps = np.where(high == low, 1, (high - low) / 255)
        position = (floats - low) / steps
        edge = np.abs(position - np.round(position)) * steps < FLOAT_TOL
        differ = got.astype(int) != want.astype(int)
        assert not (differ & ~edge).any()
        assert (np.abs(got.astype(int) - want.astype(int)) <= 1).all()
    else:  # binary / ubinary: 8 signs a byte
        near_zero = np.abs(floats) < FLOAT_TOL
        bits = lambda a: np.unpackbits(a.view(np.uint8) if a.dtype == np.uint8 else
                                       (a.astype(np.int16) + 128).astype(np.uint8), axis=-1)
        differ = bits(got)[:, :floats.shape[1]] != bits(want)[:, :floats.shape[1]]
        assert not (differ & ~near_zero).any()


def check_cases(folder, backend="jax"):
    ref, specs, sentences = load(folder)
    floats = ref["case/encode"]
    for name, spec in specs.items():
        got = np.asarray(run(folder, spec, sentences, backend))
        try:
            assert_equal_to(got, ref[f"case/{name}"], floats)
        except AssertionError as e:
            raise AssertionError(f"case {name} ({spec}): {e}") from None


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_prompts_fixture_matches_sentence_transformers(backend):
    check_cases(FIXTURE, backend)


@pytest.mark.skipif(not (MINILM / REFERENCE).exists(),
                    reason="run bash tests/support/setup_real_models.sh, then "
                           "tests/support/record_st_encode.py minilm in its virtualenv")
def test_real_minilm_matches_sentence_transformers():
    check_cases(MINILM)


def test_prompts_change_the_vectors():
    """The cases differ where sentence-transformers' do: the default prompt is applied (a
    config that names one gives other vectors than no prompt), query and document differ."""
    ref, _, _ = load(FIXTURE)
    assert not np.allclose(ref["case/encode"], ref["case/empty_prompt"], atol=1e-3)
    assert not np.allclose(ref["case/encode_query"], ref["case/encode_document"], atol=1e-3)
    np.testing.assert_array_equal(ref["case/prompt_name_query"], ref["case/encode_query"])


@pytest.fixture(scope="module")
def embed():
    return transmuter.pipeline("text-embedding", FIXTURE)


def test_list_gives_one_array(embed):
    texts = ["the cat", "hello", "a b c"]
    got = embed(texts)
    assert isinstance(got, np.ndarray) and got.shape == (3, 32) and got.dtype == np.float32
    listed = embed(texts, convert_to_numpy=False)
    assert isinstance(listed, list) and all(v.shape == (32,) for v in listed)
    np.testing.assert_array_equal(np.stack(listed), got)
    lazy = list(embed(iter(texts)))
    np.testing.assert_allclose(np.stack(lazy), got, rtol=0, atol=FLOAT_TOL)
    assert embed([]).shape == (0,)  # as encode([]): np.asarray([])
    errors = embed(["fine", ""], on_error="return")
    assert isinstance(errors, list) and isinstance(errors[1], Exception)


def test_pooling_and_normalize_per_call(embed):
    cls = transmuter.pipeline("text-embedding", FIXTURE, pooling="cls", normalize=False)
    np.testing.assert_array_equal(embed(["a text"], pooling="cls", normalize=False),
                                  cls(["a text"]))
    raw = embed(["a text"], normalize=False)
    np.testing.assert_allclose(embed(["a text"]), raw / np.linalg.norm(raw), rtol=0, atol=1e-6)


def test_options_refused(embed):
    with pytest.raises(PipelineError, match=r"prompt_name='nope' is not one of the model's "
                                            r"prompts: \['classification', 'document', 'query'\]"):
        embed("x", prompt_name="nope")
    with pytest.raises(PipelineError, match=r"prompt= .* or prompt_name= .* not both"):
        embed("x", prompt="a: ", prompt_name="query")
    with pytest.raises(PipelineError, match=r"precision must be one of float32, int8"):
        embed("x", precision="float16")
    with pytest.raises(PipelineError, match=r"truncate_dim must be a positive int"):
        embed("x", truncate_dim=0)
    with pytest.raises(PipelineError, match=r"precision='int8' takes its ranges .* give a list"):
        embed(iter(["x"]), precision="int8")
    with pytest.raises(PipelineError, match=r"normalize= and normalize_embeddings= .* give one"):
        embed("x", normalize=True, normalize_embeddings=False)
    with pytest.raises(PipelineError, match=r"default_prompt_name 'nope' is not one of"):
        transmuter.pipeline("text-embedding", FIXTURE, default_prompt_name="nope")


def test_show_progress_bar(embed, capsys):
    embed(["a", "b"], show_progress_bar=True)
    assert "text-embedding" in capsys.readouterr().err
    embed(["a", "b"], show_progress_bar=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("call, options", [(0, {"pooling": "mean", "normalize": True}),
                                           (1, {"pooling": "cls"}),
                                           (1, {"pooling": "first_token"})])
def test_feature_extraction_pools_as_transformers_js(call, options):
    """transformers.js' feature-extraction call options (pooling, normalize) against
    sentence-transformers' encode on the same fixture (mean + Normalize, and CLS unnormalized,
    recorded by tests/support/families_pipelines.py); [1, d] per input, as transformers.js'
    Tensor for one text."""
    folder = FIXTURE.parent / "bert-sentence-transformers"
    record = json.loads((folder / "references" / "pipeline_text-embedding.json").read_text())
    record = record["calls"][call]
    pipe = transmuter.pipeline("feature-extraction", folder)
    got = np.array([pipe(x, return_tensors=True, **options)[0] for x in record["inputs"]])
    np.testing.assert_allclose(got, np.array(record["outputs"]), rtol=0, atol=FLOAT_TOL)
    bits = pipe(record["inputs"][0], quantize=True, precision="ubinary", return_tensors=True,
                **options)  # the signs of the reference, 8 to a byte (none lies near 0 here)
    np.testing.assert_array_equal(bits, np.packbits(np.array(record["outputs"][:1]) > 0, axis=-1))
    with pytest.raises(PipelineError, match=r"normalize= and quantize= apply to pooled vectors"):
        pipe("x", normalize=True)
    with pytest.raises(PipelineError, match=r"quantize=True takes precision='binary' or"):
        pipe("x", pooling="mean", quantize=True, precision="int8")
