"""``transmuter coverage`` end to end on the loopback Hub (hub_server.py): fixture repos are
listed by the model list API, recorded with onnxruntime, run through Transmuter compiled, and
every fixture passes in the matrix; then ``run --offline`` works from the cache alone."""

import json

import pytest
from transmuter import cli
from transmuter.coverage import cases

from .fixtures import ROOT
from .hub_server import fake_hub as hub_fixture

fake_hub = hub_fixture  # the fixture, by the name the tests take

# fixture folder -> (task, downloads): the list API sorts on downloads
REPOS = {"bert-sequence-classification": ("text-classification", 300),
         "distilbert-sequence-classification": ("text-classification", 200)}
MORE = {"bert": ("feature-extraction", 500), "vit": ("image-classification", 400),
        "bert-question-answering": ("question-answering", 50),
        "wav2vec2-classifier": ("audio-classification", 100)}


def serve(hub, repos):
    for folder, (task, downloads) in repos.items():
        files = {str(p.relative_to(ROOT / folder)): p.read_bytes()
                 for p in (ROOT / folder).rglob("*") if p.is_file()
                 and p.name != "manifest.json" and "references" not in p.parts}
        hub.add(f"fixtures/{folder}", files, tags=["onnx", "transformers.js"],
                pipeline_tag=task, downloads=downloads)
    # not ONNX, and another task: neither is selected
    hub.add("other/pytorch-only", {"config.json": "{}"}, tags=["pytorch"],
            pipeline_tag="text-classification", downloads=10**6)
    hub.add("other/no-onnx-files", {"config.json": "{}"}, tags=["onnx"],
            pipeline_tag="text-classification", downloads=10**5)


def coverage(folder, *args):
    return cli.main(["coverage", *args, "--dir", str(folder)])


def cover(fake_hub, tmp_path, capsys, repos, per_task):
    serve(fake_hub, repos)
    tasks = ",".join(dict.fromkeys(task for task, _ in repos.values()))
    assert coverage(tmp_path, "select", "--tasks", tasks, "--per-task", str(per_task)) == 0
    selected = json.loads((tmp_path / "cases.json").read_text())
    assert [g["repo"] for g in selected] == [
        f"fixtures/{name}" for name, _ in sorted(repos.items(), key=lambda r: (
            list(dict.fromkeys(t for t, _ in repos.values())).index(r[1][0]), -r[1][1]))]
    assert coverage(tmp_path, "record") == 0
    recorded = json.loads((tmp_path / "recorded.json").read_text())
    assert all("error" not in r for r in recorded), recorded
    assert coverage(tmp_path, "run") == 0  # exit status 0: every case passes
    capsys.readouterr()
    assert coverage(tmp_path, "matrix", "--output", str(tmp_path / "matrix.md")) == 0
    text = capsys.readouterr().out
    return selected, text


def test_every_fixture_passes(fake_hub, tmp_path, capsys):
    selected, text = cover(fake_hub, tmp_path, capsys, REPOS, per_task=2)
    assert [g["variants"] for g in selected] == [["fp32", "q8"], ["fp32", "q8"]]
    assert text.startswith("4 of 4 cases pass (2 models).")
    assert "| text-classification | fixtures/bert-sequence-classification | pass | pass |" in text
    assert ("- [fixtures/bert-sequence-classification](https://huggingface.co/fixtures/"
            "bert-sequence-classification) (text-classification; 300 downloads; fp32, q8)") in text
    assert (tmp_path / "matrix.md").read_text() == text
    # a cache filled elsewhere: the Hub gone, run --offline reads the cache alone
    fake_hub.stop()
    assert coverage(tmp_path, "run", "--offline") == 0


@pytest.mark.slow
def test_every_fixture_passes_more_tasks_and_half_variants(fake_hub, tmp_path, capsys):
    selected, text = cover(fake_hub, tmp_path, capsys, MORE, per_task=1)
    assert [g["variants"] for g in selected] == [["fp32", "fp16", "q8", "q4", "q4f16"],
                                                 ["fp32", "fp16", "q8"], ["fp32"], ["fp32"]]
    assert text.startswith("10 of 10 cases pass (4 models).")
    assert "| audio-classification | fixtures/wav2vec2-classifier | pass |" in text


def test_variants_of_a_file_list():
    files = ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_q4f16.onnx",
             "onnx/model_q4.onnx", "onnx/model_quantized.onnx", "onnx/decoder_model.onnx",
             "onnx/model.onnx_data", "model.onnx"]
    assert cases.variants(files) == ["fp32", "fp16", "q8", "q4", "q4f16"]


def test_select_offline_and_steps_out_of_order(tmp_path, capsys):
    assert coverage(tmp_path, "select", "--offline") == 2
    assert "cases.json" in capsys.readouterr().err
    assert coverage(tmp_path, "run") == 2
    assert "run `transmuter coverage record` first" in capsys.readouterr().err


def test_a_case_that_differs_or_fails_says_so(fake_hub, tmp_path, capsys, monkeypatch):
    """``run`` and ``matrix`` on hand-made records: a planted wrong Add differs (by its size), a
    file the repo lacks is an error with its type, a record's own error stays an error."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from transmuter.debug.reference import outputs

    from .planted import plant
    w = numpy_helper.from_array(np.full(4, 2.0, np.float32), "W")
    proto = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])], "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])
    fake_hub.add("org/tiny", {"config.json": "{}", "onnx/model.onnx": proto.SerializeToString()},
                 tags=["onnx"], pipeline_tag="feature-extraction", downloads=7)
    feed = {"X": np.arange(4, dtype=np.float32)}
    np.savez(tmp_path / "tiny.npz", **{"input/X": feed["X"], "noise/Y": np.float64(0),
                                       "output/Y": outputs(proto, feed)["Y"]})
    case = {"task": "feature-extraction", "repo": "org/tiny", "file": "onnx/model.onnx",
            "record": "tiny.npz"}
    cases.write(tmp_path, "cases.json", [{"task": "feature-extraction", "repo": "org/tiny",
                                          "downloads": 7, "variants": ["fp32", "fp16", "q8"]}])
    cases.write(tmp_path, "recorded.json", [
        {**case, "variant": "fp32"}, {**case, "variant": "fp16", "file": "onnx/model_fp16.onnx"},
        {**case, "variant": "q8", "error": "HubError: the download failed"}])
    plant(monkeypatch, "Add", change=lambda y: y + 0.5)
    assert coverage(tmp_path, "run") == 1  # not every case passes
    capsys.readouterr()
    assert coverage(tmp_path, "matrix") == 0
    text = capsys.readouterr().out
    assert text.startswith("0 of 3 cases pass (1 model).")
    assert ("| feature-extraction | org/tiny | differs (0.5) | error (HubError) | "
            "error (record: HubError) |") in text

