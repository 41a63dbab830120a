"""transmuter.integrations.ray on a local Ray cluster started here (2 CPUs, loopback, shut down at
the end): Ray Data jobs over folders of fixture inputs give the single-process pipeline's results,
row for row (none lost or duplicated), also when an actor dies mid-job; errors reach the driver
naming the column, the row or the model folder. The predictor's batch mapping (formats, result
columns, error column) is also checked in this process, without Ray.

The single-process pipelines are themselves checked against transformers in
test_pipelines_text.py / test_pipelines_vision.py / test_pipelines_audio.py; here the embeddings
of the recorded texts are also compared with sentence-transformers' recorded ones.

Each job starts its actors (a Python process importing JAX, then a compile per padded shape,
read back from a persistent compile cache shared by the actors after the first): the module
takes ~1.5-3 minutes on a loaded 2-core machine."""

import json
import os
import pathlib

import numpy as np
import pytest

# Ray picks the machine's routable address for a local cluster on Linux; with this it keeps to
# loopback (read when ray is imported, and inherited by its workers).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")

import transmuter  # noqa: E402
from transmuter.integrations.ray import TransmuterPredictor  # noqa: E402
from transmuter.pipelines import PipelineError  # noqa: E402

from .fixtures import ROOT  # noqa: E402
from .test_examples import example  # noqa: E402

TEXT_MODEL = ROOT / "bert-sentence-transformers"
# One padded length (the model's 24) for every text job and the single-process pipeline: each
# actor compiles one length (a few row counts), not the default buckets' three.
TEXT = dict(task="text-embedding", model=str(TEXT_MODEL), sequence_length=24)
IMAGE_MODEL = ROOT / "vit"
# The Ray job batches rows differently from the single-process run (other rows per batch, so
# other padded row counts): the same graph on other padded shapes, ~1e-6 apart under XLA.
BATCH_TOL = 1e-5
# f32 under XLA vs PyTorch's kernels on the tiny random BERT (test_pipelines_text.py's bound).
TOL = 1e-4
REPO = pathlib.Path(__file__).resolve().parent.parent
# A job's actors: half a CPU each, so two actors leave a CPU of the 2 for Ray Data's read tasks
# (with all CPUs taken by actors the read never runs and the job waits for ever).
ACTOR = dict(num_cpus=0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {"PYTHONPATH": str(REPO),  # actors unpickle tests.test_ray's test predictor
           # one compile cache for every actor of the module (on the node, as by default)
           "TRANSMUTER_COMPILE_CACHE": str(tmp_path_factory.mktemp("compile-cache"))}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def embed():
    return transmuter.pipeline("text-embedding", TEXT_MODEL, sequence_length=24)


@pytest.fixture(scope="module")
def recorded():
    """The fixture's texts and their sentence-transformers embeddings (default options)."""
    call = json.loads((TEXT_MODEL / "references" / "pipeline_text-embedding.json").read_text())
    call = call["calls"][0]
    assert call["call_kwargs"] == {}
    return call["inputs"], np.array(call["outputs"], np.float32)


def one_line_texts(n, recorded):
    """``n`` one-line texts (read_text reads a row per line): the recorded ones first, then
    their words in other orders and lengths."""
    texts, _ = recorded
    words = " ".join(texts).replace("\n", " ").split()
    rng = np.random.default_rng(18)
    more = [" ".join(rng.choice(words, size=rng.integers(1, 30))) for _ in range(n - len(texts))]
    return [t.replace("\n", " ") for t in texts] + more


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory, recorded):
    folder = tmp_path_factory.mktemp("texts")
    for i, text in enumerate(one_line_texts(200, recorded)):
        (folder / f"doc{i:03d}.txt").write_text(text + "\n", encoding="utf-8")
    return folder


def texts_of(folder):
    paths = sorted(str(p) for p in folder.glob("*.txt"))
    return paths, [pathlib.Path(p).read_text(encoding="utf-8").strip() for p in paths]


def run_job(ds, actors=1, batch_size=16, **kwargs):
    """The rows of ``ds`` mapped by a TransmuterPredictor (``kwargs``), sorted by path."""
    predictor = kwargs.pop("predictor", TransmuterPredictor)
    remote = {k: kwargs.pop(k) for k in ("max_restarts", "max_task_retries") if k in kwargs}
    out = ds.map_batches(predictor, fn_constructor_kwargs=kwargs, batch_size=batch_size,
                         compute=ray.data.ActorPoolStrategy(size=actors), **ACTOR, **remote)
    return sorted(out.take_all(), key=lambda row: row["path"])


def assert_embeddings(rows, paths, want):
    assert [r["path"] for r in rows] == paths  # each file once: none lost, none duplicated
    got = np.stack([r["embedding"] for r in rows])
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=BATCH_TOL)


# --- on the cluster ---------------------------------------------------------------------------

def test_text_job_equals_single_process(cluster, text_folder, embed, recorded):
    paths, texts = texts_of(text_folder)
    rows = run_job(ray.data.read_text(str(text_folder), include_paths=True), actors=2,
                   **TEXT)
    want = np.stack(embed(texts))
    assert_embeddings(rows, paths, want)
    ours, st = want[:len(recorded[0])], recorded[1]
    np.testing.assert_allclose(ours, st, rtol=0, atol=TOL)  # and sentence-transformers' too


class DiesOnce(TransmuterPredictor):
    """A predictor whose actor exits (as if killed) on its 3rd batch, the first time only: the
    marker file says it happened."""

    def __init__(self, marker, **kwargs):
        super().__init__(**kwargs)
        self.marker, self.calls = pathlib.Path(marker), 0

    def __call__(self, batch):
        self.calls += 1
        if self.calls == 3 and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


def test_killed_actor_is_retried(cluster, text_folder, embed, tmp_path):
    paths, texts = texts_of(text_folder)
    marker = tmp_path / "died"
    rows = run_job(ray.data.read_text(str(text_folder), include_paths=True), batch_size=32,
                   predictor=DiesOnce, marker=str(marker), max_restarts=1, max_task_retries=1,
                   **TEXT)
    assert marker.exists()  # an actor did die mid-job
    assert_embeddings(rows, paths, np.stack(embed(texts)))


def test_image_job_equals_single_process(cluster, tmp_path):
    rng = np.random.default_rng(0)
    import PIL.Image

    for i in range(50):  # two sizes: read_images gives one array per image
        size = (24, 20) if i % 2 else (32, 40)
        pixels = rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)
        PIL.Image.fromarray(pixels).save(tmp_path / f"img{i:02d}.png")
    paths = sorted(str(p) for p in tmp_path.glob("*.png"))
    classify = transmuter.pipeline("image-classification", IMAGE_MODEL, variant="fp32")
    want = classify(paths, top_k=None)
    rows = run_job(ray.data.read_images(str(tmp_path), include_paths=True, mode="RGB"),
                   task="image-classification", model=str(IMAGE_MODEL), variant="fp32",
                   top_k=None)
    assert [r["path"] for r in rows] == paths
    for row, w in zip(rows, want):  # all 5 labels: compared by label (near ties may swap)
        got = dict(zip(row["label"], row["score"]))
        assert sorted(got) == sorted(x["label"] for x in w)
        np.testing.assert_allclose([got[x["label"]] for x in w], [x["score"] for x in w],
                                   rtol=0, atol=BATCH_TOL)


def small_folder(tmp_path, texts):
    for i, text in enumerate(texts):
        (tmp_path / f"doc{i}.txt").write_text(text, encoding="utf-8")
    return sorted(str(p) for p in tmp_path.glob("*.txt"))


def test_row_error_names_row_and_path(cluster, tmp_path):
    paths = small_folder(tmp_path, ["one", "two", "", "four"])
    ds = ray.data.read_binary_files(paths, include_paths=True).map_batches(
        lambda b: {"path": b["path"], "text": np.array([x.decode() for x in b["bytes"]], object)})
    with pytest.raises(Exception, match=r"row 2 of the batch, path '[^']*doc2.txt'.*empty"):
        run_job(ds, **TEXT)


def test_error_column_with_pandas_batches(cluster, tmp_path, embed):
    texts = ["one", "two", "", "four"]
    paths = small_folder(tmp_path, texts)
    ds = ray.data.read_binary_files(paths, include_paths=True).map_batches(
        lambda b: {"path": b["path"], "text": np.array([x.decode() for x in b["bytes"]], object)})
    out = ds.map_batches(TransmuterPredictor, batch_format="pandas", batch_size=4,
                         compute=ray.data.ActorPoolStrategy(size=1), **ACTOR,
                         fn_constructor_kwargs=dict(**TEXT, on_error="column"))
    rows = sorted(out.take_all(), key=lambda r: r["path"])
    assert [r["path"] for r in rows] == paths
    assert [r["error"] is None for r in rows] == [True, True, False, True]
    assert "row 2 of the batch" in rows[2]["error"] and "empty" in rows[2]["error"]
    assert rows[2]["embedding"] is None
    fine = [0, 1, 3]
    np.testing.assert_allclose(np.stack([rows[i]["embedding"] for i in fine]),
                               np.stack(embed([texts[i] for i in fine])), rtol=0, atol=BATCH_TOL)


def test_missing_model_folder_reaches_the_driver(cluster, tmp_path):
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    ds = ray.data.from_items([{"text": "hello", "path": "a"}])
    with pytest.raises(Exception, match=f"Cannot build the 'text-embedding' pipeline from "
                                        f"'{broken}'.*no file 'onnx/model.onnx'"):
        run_job(ds, task="text-embedding", model=str(broken))


def test_missing_column_reaches_the_driver(cluster):
    ds = ray.data.from_items([{"body": "hello", "path": "a"}])
    with pytest.raises(Exception, match=r"no column 'text'.*columns are \['body', 'path'\]"):
        run_job(ds, **TEXT)


def test_example_embeds_folder_into_parquet(cluster, tmp_path, embed, recorded):
    import pyarrow.parquet

    texts = recorded[0] + ["  "]  # the blank file is left out
    docs = tmp_path / "docs"
    docs.mkdir()
    paths = small_folder(docs, texts)[:-1]
    example("ray_embed_folder").main([str(docs), str(TEXT_MODEL), str(tmp_path / "out"),
                                      "--concurrency", "1", "--batch-size", "2",
                                      "--cpus-per-actor", "0.5"])
    table = pyarrow.parquet.read_table(tmp_path / "out").to_pylist()
    rows = sorted(table, key=lambda r: r["path"])
    assert [r["path"] for r in rows] == paths and all(r["error"] is None for r in rows)
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows], np.float32),
                               recorded[1], rtol=0, atol=TOL)


# --- the batch mapping, in this process ---------------------------------------------------------

@pytest.fixture(scope="module")
def predictor():
    return TransmuterPredictor(**TEXT)


def test_numpy_and_pandas_batches(predictor, embed, recorded):
    import pandas

    texts = recorded[0]
    batch = {"text": np.array(texts, dtype=object), "id": np.arange(len(texts))}
    out = predictor(batch)
    assert list(out) == ["text", "id", "embedding"] and out["id"] is batch["id"]
    assert out["embedding"].dtype == np.float32 and out["embedding"].shape == (len(texts), 32)
    np.testing.assert_allclose(out["embedding"], np.stack(embed(texts)), rtol=0, atol=BATCH_TOL)
    frame = predictor(pandas.DataFrame(batch))
    assert isinstance(frame, pandas.DataFrame) and list(frame.columns) == list(out)
    np.testing.assert_array_equal(np.stack(frame["embedding"]), out["embedding"])


def test_result_columns_of_other_tasks(tmp_path):
    """Labels and scores as lists (top_k), generated text as strings, audio bytes decoded:
    each equal to the single-process pipeline's result for the same row."""
    texts = ["I love it", "not good at all"]
    classify = transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification")
    out = TransmuterPredictor("text-classification", str(ROOT / "bert-sequence-classification"),
                              top_k=2)({"text": np.array(texts, object)})
    want = classify(texts, top_k=2)
    assert [list(x) for x in out["label"]] == [[d["label"] for d in w] for w in want]
    np.testing.assert_allclose(np.array(list(out["score"]), float),
                               [[d["score"] for d in w] for w in want], rtol=0, atol=BATCH_TOL)

    images = np.stack([np.full((20, 24, 3), v, np.uint8) for v in (30, 200)])  # read_images' HWC
    caption = transmuter.pipeline("image-to-text", ROOT / "trocr", max_new_tokens=5)
    out = TransmuterPredictor("image-to-text", str(ROOT / "trocr"), max_new_tokens=5)(
        {"image": images})
    assert list(out["generated_text"]) == [r[0]["generated_text"] for r in caption(list(images))]

    files = [ROOT / "speech" / "cat_16k.wav", ROOT / "speech" / "fox_16k.wav"]
    data = np.array([f.read_bytes() for f in files], object)  # read_binary_files' "bytes"
    asr = transmuter.pipeline("automatic-speech-recognition", ROOT / "wav2vec2", variant="fp32")
    out = TransmuterPredictor("automatic-speech-recognition", str(ROOT / "wav2vec2"),
                              variant="fp32")({"bytes": data, "path": np.array(files, str)})
    assert list(out["text"]) == [r["text"] for r in asr([f.read_bytes() for f in files])]


def test_batch_errors(predictor):
    with pytest.raises(PipelineError, match=r"no column 'text'.*columns are \['body', 'id'\]"):
        predictor({"body": np.array(["x"], object), "id": np.arange(1)})
    with pytest.raises(PipelineError, match=r"Column 'text' holds ndarray values.*\['text'\]"):
        predictor({"text": np.zeros((2, 32, 32, 3), np.uint8)})  # read_images' pixels
    with pytest.raises(PipelineError, match=r"row 1 of the batch, path 'b.txt'.*NoneType"):
        predictor({"text": np.array(["fine", None], object), "path": np.array(["a.txt", "b.txt"])})
    with pytest.raises(PipelineError, match=r"'embedding' would overwrite.*prefix="):
        predictor({"text": np.array(["x"], object), "embedding": np.zeros(1)})
    out = TransmuterPredictor(**TEXT, prefix="st_", on_error="column")(
        {"text": np.array(["fine", "", "also fine"], object), "embedding": np.zeros(3)})
    assert out["st_error"][0] is None and "row 1" in out["st_error"][1]
    assert out["st_embedding"][1] is None and out["st_embedding"][0].shape == (32,)
    with pytest.raises(PipelineError, match="on_error must be one of"):
        TransmuterPredictor(**TEXT, on_error="skip")
