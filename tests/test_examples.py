"""examples/embed_folder.py and examples/semantic_search.py run on the tiny sentence-transformers
fixture, and their numbers are sentence-transformers' (the fixture's recorded encode() outputs)."""

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

import transmuter

from .fixtures import ROOT

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
MODEL = ROOT / "bert-sentence-transformers"
# f32 under XLA vs PyTorch's kernels on a tiny random BERT: ~1e-6 apart; 1e-4 is the design's bound.
TOL = 1e-4


def example(name):
    """Import examples/<name>.py (they import their helper local_model.py as a sibling)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.fixture(scope="module", autouse=True)
def one_model():
    """Every example's pipeline over one loaded fixture model, so its shapes compile once (the
    examples load the folder they are given; that path is test_pipelines_text's)."""
    model, real = transmuter.load(MODEL), transmuter.pipeline

    def pipeline(task, source, **options):
        assert pathlib.Path(source) == MODEL
        return real(task, model, config=MODEL, tokenizer=MODEL, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transmuter, "pipeline", pipeline)
        yield


@pytest.fixture(scope="module")
def reference():
    """The three texts and their sentence-transformers embeddings (mean pooling, normalized)."""
    call = json.loads((MODEL / "references" / "pipeline_text-embedding.json").read_text())["calls"][0]
    assert call["call_kwargs"] == {}
    return call["inputs"], np.array(call["outputs"], np.float32)


@pytest.fixture(scope="module")
def docs(tmp_path_factory, reference):
    texts, _ = reference
    folder = tmp_path_factory.mktemp("docs")
    for i, text in enumerate(texts):
        (folder / "sub" if i == 2 else folder).mkdir(exist_ok=True)
        (folder / ("sub" if i == 2 else "") / f"doc{i}.txt").write_text(text, encoding="utf-8")
    (folder / "empty.txt").write_text("  \n", encoding="utf-8")
    return folder


def test_embed_folder_writes_sentence_transformers_vectors(docs, reference, tmp_path, capsys):
    _, want = reference
    example("embed_folder").main([str(docs), "--out", str(tmp_path), "--model", str(MODEL),
                                  "--batch-size", "2", "--quiet"])
    assert "skipped empty file" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert [r["file"] for r in rows] == ["doc0.txt", "doc1.txt", "sub/doc2.txt"]
    assert [r["row"] for r in rows] == [0, 1, 2]
    np.testing.assert_allclose(np.load(tmp_path / "embeddings.npy"), want, rtol=0, atol=TOL)


@pytest.mark.parametrize("source", ["texts", "folder", "index"])
def test_semantic_search_scores_are_sentence_transformers_cosines(source, docs, reference,
                                                                  tmp_path, capsys):
    texts, want = reference
    args = {"texts": ["--texts", *texts], "folder": ["--folder", str(docs)],
            "index": ["--index", str(tmp_path), "--root", str(docs)]}[source]
    if source == "index":
        example("embed_folder").embed_folder(docs, tmp_path, str(MODEL), 2, progress=False)
    example("semantic_search").main([texts[1], *args, "--model", str(MODEL), "--json",
                                     "--top-k", "3"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    scores = want @ want[1]
    order = np.argsort(-scores)
    assert np.diff(scores[order]).max() < -10 * TOL  # distinct enough for the order to be fixed
    assert [h["text"] for h in result["hits"]] == [texts[i] for i in order]
    np.testing.assert_allclose([h["score"] for h in result["hits"]], scores[order], atol=TOL)


def test_draw_detections(tmp_path):
    """Boxes drawn on copies of the photos; the detections are the pipeline's (themselves
    checked against transformers in test_pipelines_vision.py); a corrupt photo is skipped."""
    import shutil

    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("image_0.png", "image_1.png"):
        shutil.copy(ROOT / "detr" / "references" / name, folder / name)
    (folder / "broken.png").write_bytes((folder / "image_0.png").read_bytes()[:100])
    with pytest.MonkeyPatch.context() as patch:  # the real factory, not the text one above
        patch.setattr(transmuter, "pipeline", transmuter.pipelines.pipeline)
        example("draw_detections").main([str(folder), "--out", str(tmp_path / "out"),
                                         "--model", str(ROOT / "detr"), "--threshold", "0.0"])
    recorded = json.loads((ROOT / "detr/references/pipeline_object-detection.json").read_text())
    lines = [json.loads(x) for x in (tmp_path / "out/detections.jsonl").read_text().splitlines()]
    assert len(lines) == sum(len(o) for o in recorded["outputs"])
    for name in ("image_0", "image_1"):
        drawn = Image.open(tmp_path / "out" / f"{name}.png")
        photo = Image.open(folder / f"{name}.png").convert("RGB")
        assert drawn.size == photo.size and drawn.tobytes() != photo.tobytes()
    assert not (tmp_path / "out" / "broken.png").exists()


def test_vision_notebook_runs(tmp_path):
    """examples/vision.ipynb, executed as a reader would (nbclient), on the tiny DETR, DPT and
    SegFormer fixtures: every cell runs and the three pictures are shown."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "vision.ipynb", as_version=4)
    params = notebook.cells[1]
    assert params.source.startswith("# Parameters")
    params.source = (f"DETECTOR = {str(ROOT / 'detr')!r}\nDEPTH = {str(ROOT / 'dpt')!r}\n"
                     f"SEGMENTER = {str(ROOT / 'segformer')!r}\n"
                     f"PHOTO = {str(ROOT / 'detr' / 'references' / 'image_0.png')!r}\n"
                     "THRESHOLD = 0.0")
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    shown = [c for c in notebook.cells if c.cell_type == "code"
             and any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(shown) == 4  # the photo, the boxes, the depth map, the overlay


def test_tag_photos(tmp_path):
    """Tags and object counts per photo; the tags are the CLIP fixture's recorded transformers
    zero-shot scores, the counts its DETR fixture's recorded detections; a corrupt photo's line
    holds its error."""
    import shutil

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("image_0.png", "image_1.png"):
        shutil.copy(ROOT / "clip" / "references" / name, folder / name)
    (folder / "broken.png").write_bytes((folder / "image_0.png").read_bytes()[:100])
    zero_shot = json.loads((ROOT / "clip/references/pipeline_zero-shot-image-classification.json")
                           .read_text())
    detections = json.loads((ROOT / "detr/references/pipeline_object-detection.json").read_text())
    assert detections["inputs"]["specs"] == zero_shot["inputs"]["specs"]  # the same two images
    out = tmp_path / "tags.jsonl"
    with pytest.MonkeyPatch.context() as patch:  # the real factory, not the text one above
        patch.setattr(transmuter, "pipeline", transmuter.pipelines.pipeline)
        labels = zero_shot["call_kwargs"]["candidate_labels"]
        example("tag_photos").main([str(folder), "--tags", *labels, "--classifier",
                                    str(ROOT / "clip"), "--detector", str(ROOT / "detr"),
                                    "--threshold", "0.0", "--top", "2", "--out", str(out)])
    broken, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert broken["file"].endswith("broken.png") and "broken.png" in broken["error"]
    assert len(rows) == 2
    for row, tags, found in zip(rows, zero_shot["outputs"], detections["outputs"]):
        assert [t["label"] for t in row["tags"]] == [t["label"] for t in tags[:2]]
        assert all(abs(a["score"] - b["score"]) < TOL for a, b in zip(row["tags"], tags))
        assert sum(row["objects"].values()) == len(found)


def test_transcribe_srt(tmp_path):
    """A .srt beside each recording, one numbered cue per chunk of the pipeline's segment
    timestamps (the pipeline's Whisper outputs are checked against transformers in
    test_pipelines_audio.py); the tiny Whisper fixture's windows are 1 s."""
    import re
    import shutil

    import soundfile

    folder = tmp_path / "talks"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(ROOT / "speech" / "cat_16k.wav", folder / "cat.wav")
    shutil.copy(ROOT / "speech" / "fox_16k.wav", folder / "sub" / "fox.wav")
    (folder / "broken.wav").write_bytes(b"RIFF0000WAVEnot audio")  # reported and skipped
    made = []

    def pipeline(task, model, **options):  # the real factory; the pipeline kept to ask it again
        made.append(transmuter.pipelines.pipeline(task, model, **options))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transmuter, "pipeline", pipeline)
        # few tokens a window: each decode step of a new length compiles once on JAX
        example("transcribe_srt").main([str(ROOT / "whisper"), str(folder), "--chunk-length", "1",
                                        "--batch-size", "2", "--num-beams", "1",
                                        "--max-new-tokens", "6"])
    time = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
    for wav in (folder / "cat.wav", folder / "sub" / "fox.wav"):
        chunks = made[0](str(wav), return_timestamps=True, chunk_length_s=1.0,
                         generate_kwargs={"num_beams": 1, "max_new_tokens": 6})["chunks"]
        chunks = [c for c in chunks if c["text"].strip()]  # a segment with no words has no cue
        cues = wav.with_suffix(".srt").read_text(encoding="utf-8").split("\n\n")
        assert chunks and len(cues) == len(chunks)
        for i, (cue, chunk) in enumerate(zip(cues, chunks), 1):
            index, times, text = cue.rstrip("\n").split("\n", 2)
            assert index == str(i) and text == chunk["text"].strip()
            match = re.fullmatch(f"{time} --> {time}", times)
            assert match, times
            h, m, s, ms = (int(x) for x in match.groups()[:4])
            start, end = chunk["timestamp"]
            assert abs(h * 3600 + m * 60 + s + ms / 1000 - start) <= 5e-4  # rounded to the ms
            h, m, s, ms = (int(x) for x in match.groups()[4:])
            if end is None:  # an open segment ends with the recording
                end = soundfile.info(str(wav)).duration
            assert abs(h * 3600 + m * 60 + s + ms / 1000 - end) <= 5e-4
    assert not (folder / "broken.srt").exists()


def test_transcribe_srt_cues():
    """SubRip's HH:MM:SS,mmm; an open last segment (end None) ends with the recording; a segment
    with no words makes no cue."""
    srt = example("transcribe_srt").subrip(
        [{"timestamp": (0.0, 1.5), "text": " Hello."}, {"timestamp": (2.0, 2.5), "text": " "},
         {"timestamp": (3661.0015, None), "text": " World"}], lambda: 3725.25)
    assert srt == ("1\n00:00:00,000 --> 00:00:01,500\nHello.\n\n"
                   "2\n01:01:01,002 --> 01:02:05,250\nWorld\n")
