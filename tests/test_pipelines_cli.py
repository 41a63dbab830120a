"""The ``transmuter run`` command line, in-process, on a tiny classification fixture."""

import json

import pytest

from transmuter import cli

from .fixtures import ROOT

MODEL = str(ROOT / "bert-sequence-classification")


def test_run_texts_file_and_folder(tmp_path, capsys):
    (tmp_path / "lines.txt").write_text("This film was terrible.\n\nThe weather today is sunny.\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("I love this movie, it is wonderful!")
    (docs / "b.md").write_text("This film was terrible.")
    (docs / "skip.bin").write_bytes(b"\0")
    out = tmp_path / "out.jsonl"
    options = ["--batch-size", "2", "--options", '{"sequence_length": 32}', "--quiet"]
    assert cli.main(["run", "sentiment-analysis", MODEL, "I love this movie, it is wonderful!",
                     "--input", str(tmp_path / "lines.txt"), "--output", str(out), *options]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    recorded = json.loads((ROOT / "bert-sequence-classification" / "references" /
                           "pipeline_text-classification.json").read_text())["calls"][0]
    want = dict(zip(recorded["inputs"], recorded["outputs"]))
    assert [r["input"] for r in rows] == ["I love this movie, it is wonderful!",
                                          "This film was terrible.", "The weather today is sunny."]
    for row in rows:  # a list input gives one dict per text (transformers' list form)
        assert row["output"]["label"] == want[row["input"]][0]["label"]
        assert abs(row["output"]["score"] - want[row["input"]][0]["score"]) < 1e-4

    assert cli.main(["run", "text-classification", MODEL, "--input", str(docs), *options]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["file"].rsplit("/", 1)[-1] for r in rows] == ["a.txt", "b.md"]
    assert all(set(r["output"]) == {"label", "score"} for r in rows)


def test_run_folder_of_images_writes_maps_as_files(tmp_path):
    import shutil

    import numpy as np
    from PIL import Image

    photos = tmp_path / "photos"
    (photos / "sub").mkdir(parents=True)
    refs = ROOT / "segformer" / "references"
    shutil.copy(refs / "image_0.png", photos / "a.png")
    shutil.copy(refs / "image_1.png", photos / "sub" / "b.PNG")
    (photos / "notes.txt").write_text("not an image")
    out = tmp_path / "out.jsonl"
    assert cli.main(["run", "image-segmentation", str(ROOT / "segformer"), "--input", str(photos),
                     "--output", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["file"].rsplit("/", 1)[-1] for r in rows] == ["a.png", "b.PNG"]
    recorded = json.loads((refs / "pipeline_image-segmentation.json").read_text())["outputs"]
    for row, want in zip(rows, recorded):
        assert [s["label"] for s in row["output"]] == [s["label"] for s in want]
        mask = Image.open(row["output"][0]["mask"]["file"])
        assert list(mask.size) == want[0]["mask"]["pil_image"]["size"]
        assert int(np.asarray(mask, np.int64).sum()) == want[0]["mask"]["pil_image"]["sum"]


@pytest.mark.parametrize("args,message", [
    (["run", "no-such-task", MODEL, "x"], "Unknown task 'no-such-task'"),
    (["run", "text-classification", MODEL, "x", "--options", "{bad"], "--options is not JSON"),
    (["run", "text-classification", MODEL, "x", "--options", "[1]"], "must be a JSON object"),
    (["run", "text-classification", MODEL, "x", "--output", "/no/such/dir/out.jsonl"],
     "No such file or directory"),
    (["run", "text-classification", MODEL, "--input", "/no/such/input"],
     "neither a file nor a folder"),
    (["run", "text-classification", MODEL, "x", "--options", '{"batch_size": 0}'],
     "batch_size must be a positive int"),
    (["run", "text-classification", MODEL, "x", "--options", '{"backend": "mlx"}'],
     "--options sets 'backend': give it as --backend mlx"),
    (["run", "text-classification", MODEL, "x", "--options", '{"variant": "q8"}'],
     "give it as --variant q8"),
])
def test_bad_command_lines_print_one_line(args, message, capsys):
    assert cli.main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transmuter: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_input_files_that_are_not_utf8(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9\n".encode("latin-1"))
    jsonl = tmp_path / "lines.jsonl"
    jsonl.write_text('{"text": "fine"}\nnot json\n')
    assert cli.main(["run", "text-classification", MODEL, "--input", str(bad), "-q"]) == 2
    assert "latin1.txt is not UTF-8 text" in capsys.readouterr().err
    assert cli.main(["run", "text-classification", MODEL, "--input", str(jsonl), "-q"]) == 2
    assert "lines.jsonl line 2 is not JSON" in capsys.readouterr().err


def test_run_folder_of_recordings(tmp_path):
    """A folder of recordings: each audio file transcribed once, in name order, equal to the
    transformers reference of the same clip (wav2vec2 fixture, 'plain' case)."""
    import shutil

    clips = tmp_path / "clips"
    clips.mkdir()
    shutil.copy(ROOT / "speech" / "cat_16k.wav", clips / "a.wav")
    shutil.copy(ROOT / "speech" / "fox_16k.wav", clips / "b.WAV")
    (clips / "notes.txt").write_text("not audio")
    out = tmp_path / "out.jsonl"
    assert cli.main(["run", "automatic-speech-recognition", str(ROOT / "wav2vec2"),
                     "--input", str(clips), "--output", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    recorded = json.loads((ROOT / "wav2vec2" / "references" /
                           "pipeline_automatic-speech-recognition.json").read_text())
    plain = next(c for c in recorded["cases"] if c["name"] == "plain")
    assert [r["file"].rsplit("/", 1)[-1] for r in rows] == ["a.wav", "b.WAV"]
    assert [r["output"] for r in rows] == plain["outputs"]


def test_a_broken_file_stops_the_run_or_is_skipped(tmp_path, capsys):
    """A corrupt image stops the run (exit 2, one line naming it); with --on-error skip its line
    holds the error, the other images their results, and the run exits 1."""
    import shutil

    photos = tmp_path / "photos"
    photos.mkdir()
    refs = ROOT / "segformer" / "references"
    shutil.copy(refs / "image_0.png", photos / "a.png")
    (photos / "b.png").write_bytes((refs / "image_1.png").read_bytes()[:100])
    shutil.copy(refs / "image_1.png", photos / "c.png")
    out = tmp_path / "out.jsonl"
    command = ["run", "image-segmentation", str(ROOT / "segformer"), "--input", str(photos),
               "--output", str(out), "--quiet"]
    assert cli.main(command) == 2
    assert "b.png" in capsys.readouterr().err
    assert cli.main([*command, "--on-error", "skip"]) == 1
    assert "1 of 3 inputs failed" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["file"].rsplit("/", 1)[-1] for r in rows] == ["a.png", "b.png", "c.png"]
    assert "output" not in rows[1] and rows[1]["error"].startswith("InputError: ")
    assert "b.png" in rows[1]["error"]
    recorded = json.loads((refs / "pipeline_image-segmentation.json").read_text())["outputs"]
    for row, want in zip([rows[0], rows[2]], recorded):
        assert [s["label"] for s in row["output"]] == [s["label"] for s in want]
