"""Hub resolution, downloads and variant choice, against a fake Hub on loopback (hub_server.py).

Nothing here reaches the network: HF_ENDPOINT and huggingface_hub's constants point at 127.0.0.1.
"""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter
from transmuter import hub
from transmuter.errors import HubError

try:
    from .hub_server import GOOD_TOKEN, fake_hub  # noqa: F401  (the fixture)
    from .hub_server import is_lfs as hub_server_is_lfs
except ImportError:
    from hub_server import GOOD_TOKEN, fake_hub  # noqa: F401
    from hub_server import is_lfs as hub_server_is_lfs

HUB_FILES = Path(__file__).resolve().parents[2] / "shared" / "hub-files"
VALUES = {"fp32": 1.0, "fp16": 2.0, "q8": 3.0, "q4": 4.0, "q4f16": 5.0, "int8": 6.0}


# --- fixture repos, built here -------------------------------------------------------------------

def tiny_model(value, size=4):
    """Y = X + W with W filled with ``value``: the value tells which file was loaded."""
    w = numpy_helper.from_array(np.full(size, value, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])], "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [size])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def with_external_data(tmp_path, name, value, location=None):
    """{name: graph bytes, location: weight bytes}, saved by onnx with save_as_external_data."""
    folder = tmp_path / f"ext-{value}"
    folder.mkdir(exist_ok=True)
    location = location or Path(name).name + "_data"
    onnx.save(tiny_model(value, size=64), folder / Path(name).name, save_as_external_data=True,
              all_tensors_to_one_file=True, location=location, size_threshold=0)
    base = str(Path(name).parent)
    prefix = "" if base == "." else base + "/"
    return {name: (folder / Path(name).name).read_bytes(),
            prefix + location: (folder / location).read_bytes()}


def variants(component="model", folder="onnx", dtypes=("fp32", "fp16", "q8", "q4")):
    return {f"{folder}/{component}{hub.DTYPE_SUFFIXES[d]}.onnx":
            tiny_model(VALUES[d]).SerializeToString() for d in dtypes}


def config(**js_config):
    cfg = {"model_type": "bert"}
    if js_config:
        cfg["transformers.js_config"] = js_config
    return json.dumps(cfg)


def weight(path):
    """The W value of the ONNX file at ``path`` (external data read through the cache's links)."""
    return float(numpy_helper.to_array(hub.read_onnx(path).graph.initializer[0]).ravel()[0])


def onnx_downloads(fake_hub):
    return sorted(p for p in fake_hub.downloads() if ".onnx" in p)


# --- downloads -----------------------------------------------------------------------------------

def test_download_default_variant_only(fake_hub):
    fake_hub.add("org/multi", {"config.json": config(), "README.md": "# tiny", **variants()})
    repo = hub.resolve("org/multi")
    assert repo.onnx_files() == ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_q4.onnx",
                                 "onnx/model_quantized.onnx"]
    path = repo.onnx_file()
    assert weight(path) == VALUES["fp32"]
    assert sorted(fake_hub.downloads()) == ["config.json", "onnx/model.onnx"]


def test_load_through_transmuter(fake_hub):
    fake_hub.add("org/multi", {"config.json": config(), **variants()})
    x = np.zeros(4, np.float32)
    model = transmuter.load("org/multi", variant="q4")
    np.testing.assert_array_equal(np.asarray(model(X=x)["Y"]), np.full(4, VALUES["q4"]))
    model = transmuter.load("org/multi", "onnx/model_fp16.onnx")
    np.testing.assert_array_equal(np.asarray(model(X=x)["Y"]), np.full(4, VALUES["fp16"]))
    assert onnx_downloads(fake_hub) == ["onnx/model_fp16.onnx", "onnx/model_q4.onnx"]


def test_config_dtype_and_kv_cache_dtype(fake_hub):
    fake_hub.add("org/cfg", {"config.json": config(dtype="q4", kv_cache_dtype={"q4f16": "float16"}),
                             **variants(dtypes=("fp32", "q4", "q4f16"))})
    repo = hub.resolve("org/cfg")
    chosen = repo.choose()
    assert (chosen.dtype, chosen.path, chosen.kv_cache_dtype) == ("q4", "onnx/model_q4.onnx",
                                                                  "float32")
    assert repo.choose(variant="q4f16").kv_cache_dtype == "float16"
    assert weight(repo.onnx_file()) == VALUES["q4"]
    assert onnx_downloads(fake_hub) == ["onnx/model_q4.onnx"]


def test_explicit_variant_per_component(fake_hub):
    files = {"config.json": config(dtype={"vision_encoder": "fp16"}),
             **variants("vision_encoder", dtypes=("fp32", "fp16")),
             **variants("decoder_model_merged", dtypes=("fp32", "q4"))}
    fake_hub.add("org/vlm", files)
    repo = hub.resolve("org/vlm")
    wanted = {"vision_encoder": "fp32", "decoder_model_merged": "q4"}
    assert weight(repo.onnx_file("vision_encoder", wanted)) == VALUES["fp32"]
    assert weight(repo.onnx_file("decoder_model_merged", wanted)) == VALUES["q4"]
    assert repo.choose("vision_encoder").dtype == "fp16"  # from config.json
    assert onnx_downloads(fake_hub) == ["onnx/decoder_model_merged_q4.onnx",
                                        "onnx/vision_encoder.onnx"]


def test_external_data_comes_along(fake_hub, tmp_path):
    files = {"config.json": config(),
             **with_external_data(tmp_path, "onnx/model.onnx", 7.0),
             **with_external_data(tmp_path, "onnx/model_fp16.onnx", 8.0),
             # onnxruntime-genai's naming, in a subfolder of its own
             **with_external_data(tmp_path, "cpu-int4/model.onnx", 9.0, "model.onnx.data")}
    fake_hub.add("org/ext", files)
    assert weight(hub.resolve("org/ext").onnx_file()) == 7.0
    assert onnx_downloads(fake_hub) == ["onnx/model.onnx", "onnx/model.onnx_data"]
    model = transmuter.load("org/ext", "cpu-int4/model.onnx")
    assert np.asarray(model(X=np.zeros(64, np.float32))["Y"])[0] == 9.0
    assert "cpu-int4/model.onnx.data" in onnx_downloads(fake_hub)
    assert not any("fp16" in p for p in onnx_downloads(fake_hub))


def test_external_data_named_by_use_external_data_format(fake_hub, tmp_path):
    files = with_external_data(tmp_path, "onnx/model.onnx", 3.0, "weights.bin")
    fake_hub.add("org/chunks", {"config.json": config(use_external_data_format=2), **files})
    with pytest.raises(HubError, match=r"onnx/model.onnx_data.*missing"):
        hub.resolve("org/chunks").onnx_file()
    # The referenced file is found by reading the graph, whatever its name.
    assert weight(hub.resolve("org/chunks").onnx_file(use_external_data_format=False)) == 3.0


def test_second_load_from_cache_with_server_stopped(fake_hub):
    fake_hub.add("org/multi", {"config.json": config(), **variants()})
    first = hub.resolve("org/multi").onnx_file(variant="fp16")
    fake_hub.stop()
    again = transmuter.load("org/multi", variant="fp16")
    assert np.asarray(again(X=np.zeros(4, np.float32))["Y"])[0] == VALUES["fp16"]
    assert hub.resolve("org/multi").onnx_file(variant="fp16") == first
    with pytest.raises(HubError, match=r"org/multi \(offline: only its cached.*no file "
                                       r"'onnx/model_q4.onnx'"):
        hub.resolve("org/multi").onnx_file(variant="q4")


@pytest.mark.parametrize("how", ["env", "local_files_only"])
def test_offline_mode(fake_hub, monkeypatch, how):
    fake_hub.add("org/multi", {"config.json": config(), **variants()})
    offline = {"local_files_only": how == "local_files_only"}
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match=r"Offline.*'org/multi'.*not in the cache"):
        hub.resolve("org/multi", **offline)
    assert [entry for entry in fake_hub.log if entry[1] != "GET" or entry[2]] == []  # no API call
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    online = hub.resolve("org/multi").onnx_file()
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(fake_hub.log)
    assert hub.resolve("org/multi", **offline).onnx_file() == online
    assert len(fake_hub.log) == before  # not a single request


def test_revisions(fake_hub):
    fake_hub.add("org/rev", {"onnx/model.onnx": tiny_model(1.0).SerializeToString()})
    fake_hub.add("org/rev", {"onnx/model.onnx": tiny_model(2.0).SerializeToString(),
                             "onnx/model_fp16.onnx": tiny_model(3.0).SerializeToString()},
                 revision="v2")
    main, v2 = hub.resolve("org/rev"), hub.resolve("org/rev", revision="v2")
    assert main.commit != v2.commit
    assert main.onnx_files() == ["onnx/model.onnx"]
    assert weight(main.onnx_file()) == 1.0
    assert weight(v2.onnx_file()) == 2.0
    assert weight(hub.resolve("org/rev", revision=v2.commit).onnx_file()) == 2.0
    fake_hub.stop()
    assert weight(hub.resolve("org/rev", revision="v2", local_files_only=True).onnx_file()) == 2.0
    assert weight(hub.resolve("org/rev", local_files_only=True).onnx_file()) == 1.0


def test_unknown_revision(fake_hub):
    fake_hub.add("org/rev", {"onnx/model.onnx": b"x"})
    with pytest.raises(HubError, match=r"'org/rev' has no revision 'nope'"):
        hub.resolve("org/rev", revision="nope")


def test_missing_file_lists_what_the_repo_has(fake_hub):
    fake_hub.add("org/multi", {"config.json": config(), **variants(dtypes=("fp32", "fp16"))})
    repo = hub.resolve("org/multi")
    for call in (lambda: repo.file("onnx/model_q4.onnx"), lambda: repo.onnx_file(variant="q4"),
                 lambda: transmuter.load("org/multi", "onnx/decoder_model_merged.onnx")):
        with pytest.raises(HubError) as info:
            call()
        message = str(info.value)
        assert "org/multi" in message
        assert "  - onnx/model.onnx\n  - onnx/model_fp16.onnx" in message
    with pytest.raises(HubError, match="Unknown variant 'q3'"):
        repo.onnx_file(variant="q3")
    assert onnx_downloads(fake_hub) == []


def test_gated_repo(fake_hub):
    fake_hub.add("org/gated", {"config.json": config(), **variants(dtypes=("fp32",))}, gated=True)
    with pytest.raises(HubError, match=r"'org/gated' is gated.*token="):
        hub.resolve("org/gated").onnx_file()
    assert fake_hub.downloads() == []
    path = hub.resolve("org/gated", token=GOOD_TOKEN).onnx_file()
    assert weight(path) == VALUES["fp32"]


@pytest.mark.parametrize("repo_id", ["org/private", "org/does-not-exist"])
def test_private_or_missing_repo(fake_hub, repo_id):
    fake_hub.add("org/private", {"onnx/model.onnx": tiny_model(1.0).SerializeToString()},
                 private=True)
    with pytest.raises(HubError, match=rf"'{repo_id}' was not found at http://127.0.0.1.*token="):
        hub.resolve(repo_id)
    if repo_id == "org/private":
        assert weight(hub.resolve(repo_id, token=GOOD_TOKEN).onnx_file()) == 1.0


def test_unreachable_hub_without_cache(fake_hub):
    fake_hub.stop()
    with pytest.raises(HubError, match=r"Cannot reach http://127.0.0.1:\d+ to resolve 'org/x'"):
        hub.resolve("org/x")


def test_server_dies_mid_download(fake_hub, tmp_path):
    files = with_external_data(tmp_path, "onnx/model.onnx", 5.0)
    fake_hub.add("org/big", files)
    fake_hub.fail_midway(files["onnx/model.onnx_data"])
    repo = hub.resolve("org/big")
    with pytest.raises(HubError, match=r"Downloading 'onnx/model.onnx_data' of 'org/big'.*failed"):
        repo.onnx_file()
    assert not fake_hub.running
    storage = Path(os.environ["HF_HUB_CACHE"]) / "models--org--big"
    assert not (storage / "snapshots" / repo.commit / "onnx" / "model.onnx_data").exists()
    assert not [p for p in (storage / "blobs").iterdir() if p.stat().st_size not in
                (len(files["onnx/model.onnx"]), len(files["onnx/model.onnx_data"]))]
    fake_hub.start()  # same ports
    assert weight(hub.resolve("org/big").onnx_file()) == 5.0


# --- local folders -------------------------------------------------------------------------------

def test_local_folder(tmp_path):
    folder = tmp_path / "my-model"
    for path, data in {"config.json": config(dtype="fp16"), **variants()}.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data.encode() if isinstance(data, str) else data)
    repo = hub.resolve(folder)
    assert repo.config()["transformers.js_config"] == {"dtype": "fp16"}
    assert weight(repo.onnx_file()) == VALUES["fp16"]
    model = transmuter.load(str(folder), variant="q8")
    assert np.asarray(model(X=np.zeros(4, np.float32))["Y"])[0] == VALUES["q8"]
    with pytest.raises(HubError, match=r"my-model.*no file 'onnx/model_bnb4.onnx'"):
        transmuter.load(folder, variant="bnb4")
    with pytest.raises(HubError, match="neither a local folder nor a Hub repo id"):
        hub.resolve(str(tmp_path / "missing" / "deeper" / "x"))


@pytest.mark.parametrize("fixture, component, variant, expected", [
    ("bert-opset14", "model", None, "onnx/model.onnx"),
    ("bert-opset14", "model", "quantized", "onnx/model_quantized.onnx"),
    ("gpt2", "decoder_model_merged", "fp16", "onnx/decoder_model_merged_fp16.onnx"),
    ("gpt2", "decoder_model_merged", None, "onnx/decoder_model_merged.onnx"),
])
def test_fixture_factory_folders(fixture, component, variant, expected):
    folder = Path(__file__).parent / "fixtures" / fixture
    if not (folder / "onnx" / Path(expected).name).is_file():
        pytest.skip(f"{folder} lacks {expected}")
    repo = hub.resolve(folder)
    assert repo.choose(component, variant).path == expected
    assert repo.config().get("model_type")


# --- variant rules -------------------------------------------------------------------------------

def test_choose_variant_rules():
    files = ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_q4.onnx",
             "onnx/model_quantized.onnx", "onnx/decoder_model_merged_q4f16.onnx"]
    choose = hub.choose_variant
    assert choose(files).path == "onnx/model.onnx"
    assert choose(files, variant="quantized").dtype == "q8"
    assert choose(files, variant="q8").path == "onnx/model_quantized.onnx"
    assert choose(files, task_default="q4").path == "onnx/model_q4.onnx"
    assert choose(files, task_default="bnb4").path == "onnx/model.onnx"  # absent: fp32
    cfg = {"transformers.js_config": {"dtype": "fp16"}}
    assert choose(files, config=cfg, task_default="q4").dtype == "fp16"  # config beats the task
    assert choose(files, variant="q4", config=cfg).dtype == "q4"  # caller beats config
    cfg = {"transformers.js_config": {"dtype": {"model": "q4", "other": "fp16"}}}
    assert choose(files, config=cfg).dtype == "q4"
    assert choose(files, config={"transformers.js_config": {"dtype": "auto"}}).dtype == "fp32"
    # fp32 absent: the rest, in FALLBACK_ORDER
    assert choose(files, "decoder_model_merged").dtype == "q4f16"
    assert choose(["model.onnx", "model_fp16.onnx"]).path == "model.onnx"  # repo root
    with pytest.raises(HubError, match="no file 'onnx/model_int8.onnx'"):
        choose(files, variant={"model": "int8"})
    with pytest.raises(HubError, match="no file 'onnx/vision_encoder.onnx'"):
        choose(files, "vision_encoder")


def test_kv_cache_dtype_rules():
    assert hub.kv_cache_dtype({}, "q4") is None
    assert hub.kv_cache_dtype({"kv_cache_dtype": "float16"}, "fp32") == "float16"
    per_dtype = {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}}
    assert hub.kv_cache_dtype(per_dtype, "fp16") == "float16"
    assert hub.kv_cache_dtype(per_dtype, "q4") == "float32"


def test_external_data_file_rules():
    files = ["onnx/model.onnx", "onnx/model.onnx_data", "onnx/model.onnx_data_1",
             "onnx/model_q4.onnx", "onnx/model_q4.onnx_data", "onnx/model_fp16.onnx",
             "genai/model.onnx", "genai/model.onnx.data", "onnx/model.onnx_database"]
    ext = hub.external_data_files
    assert ext(files, "onnx/model.onnx") == ["onnx/model.onnx_data", "onnx/model.onnx_data_1"]
    assert ext(files, "onnx/model_q4.onnx") == ["onnx/model_q4.onnx_data"]
    assert ext(files, "onnx/model_fp16.onnx") == []
    assert ext(files, "genai/model.onnx") == ["genai/model.onnx.data"]
    assert ext(files, "onnx/model_q4.onnx", {"model": 1}) == ["onnx/model_q4.onnx_data"]
    assert ext(files, "onnx/model.onnx", True) == ["onnx/model.onnx_data", "onnx/model.onnx_data_1"]
    with pytest.raises(HubError, match="model_fp16.onnx_data"):
        ext(files, "onnx/model_fp16.onnx", {"model_fp16.onnx": 1})
    with pytest.raises(HubError, match="at most 100"):
        ext(files, "onnx/model.onnx", 101)


def test_repo_ids():
    assert hub.is_repo_id("Xenova/all-MiniLM-L6-v2")
    assert hub.is_repo_id("onnx-community/Qwen2.5-0.5B-Instruct")
    assert not hub.is_repo_id("model.onnx")
    assert not hub.is_repo_id("dir/model.onnx")
    assert not hub.is_repo_id("../x")
    assert not hub.is_repo_id("/abs/path")
    assert not hub.is_repo_source(b"bytes")


# --- real listings and configs (../shared/hub-files) ---------------------------------------------

def real_repo(repo_id):
    folder = HUB_FILES / repo_id
    if not (folder / "_listing.txt").is_file():
        pytest.skip(f"{folder} is absent")
    lines = (folder / "_listing.txt").read_text().splitlines()
    files = [line.split("\t")[0] for line in lines if line and not line.startswith("#")]
    cfg = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() \
        else {}
    return files, cfg


@pytest.mark.parametrize("repo_id, component, variant, task_default, expected", [
    ("Xenova/all-MiniLM-L6-v2", "model", None, None, "onnx/model.onnx"),
    ("Xenova/all-MiniLM-L6-v2", "model", "quantized", None, "onnx/model_quantized.onnx"),
    ("Xenova/all-MiniLM-L6-v2", "model", "int8", None, "onnx/model_int8.onnx"),
    ("Xenova/all-MiniLM-L6-v2", "model", None, "q4", "onnx/model.onnx"),
    ("Xenova/bge-small-en-v1.5", "model", "bnb4", None, "onnx/model_bnb4.onnx"),
    ("Xenova/bge-small-en-v1.5", "model", "q4f16", None, "onnx/model_q4f16.onnx"),
    ("Xenova/bge-small-en-v1.5", "model", "uint8", None, "onnx/model_uint8.onnx"),
    ("Xenova/distilbert-base-uncased-finetuned-sst-2-english", "model", "fp16", None,
     "onnx/model_fp16.onnx"),
    ("Xenova/t5-small", "encoder_model", None, None, "onnx/encoder_model.onnx"),
    ("Xenova/t5-small", "decoder_model_merged", "q8", None,
     "onnx/decoder_model_merged_quantized.onnx"),
    ("Xenova/nllb-200-distilled-600M", "decoder_model_merged", "fp16", None,
     "onnx/decoder_model_merged_fp16.onnx"),
    ("onnx-community/Qwen2.5-0.5B-Instruct", "model", None, "q4", "onnx/model_q4.onnx"),
    ("onnx-community/Qwen2.5-0.5B-Instruct", "model", "q4f16", None, "onnx/model_q4f16.onnx"),
    ("onnx-community/whisper-base", "encoder_model", None, None,
     "onnx/encoder_model_quantized.onnx"),  # the partial listing has only _quantized
    ("onnx-community/Florence-2-base", "vision_encoder", None, "q4", "onnx/vision_encoder_q4.onnx"),
    ("onnx-community/Florence-2-base", "embed_tokens", None, "q4", "onnx/embed_tokens_q4f16.onnx"),
    ("Xenova/segformer-b0-finetuned-ade-512-512", "model", None, None, "onnx/model.onnx"),
    ("google-bert/bert-base-uncased", "model", None, None, "model.onnx"),
    ("dslim/bert-base-NER", "model", None, None, "onnx/model.onnx"),
])
def test_variant_rules_on_real_listings(repo_id, component, variant, task_default, expected):
    files, cfg = real_repo(repo_id)
    chosen = hub.choose_variant(files, component, variant=variant, config=cfg,
                                task_default=task_default, name=repo_id)
    assert chosen.path == expected


def test_smolvlm_components_and_kv_cache_dtype():
    files, cfg = real_repo("HuggingFaceTB/SmolVLM-256M-Instruct")
    dtypes = {"vision_encoder": "fp32", "embed_tokens": "fp16", "decoder_model_merged": "q4f16"}
    chosen = {c: hub.choose_variant(files, c, variant=dtypes, config=cfg) for c in dtypes}
    assert chosen["vision_encoder"].path == "onnx/vision_encoder.onnx"
    assert chosen["embed_tokens"].path == "onnx/embed_tokens_fp16.onnx"
    assert chosen["decoder_model_merged"].path == "onnx/decoder_model_merged_q4f16.onnx"
    # config.json: "kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}
    assert chosen["decoder_model_merged"].kv_cache_dtype == "float16"
    q4 = hub.choose_variant(files, "decoder_model_merged", task_default="q4", config=cfg)
    assert (q4.path, q4.kv_cache_dtype) == ("onnx/decoder_model_merged_q4.onnx", "float32")


def test_real_missing_variant_lists_files():
    files, cfg = real_repo("Xenova/all-MiniLM-L6-v2")
    with pytest.raises(HubError) as info:
        hub.choose_variant(files, variant="q4", config=cfg, name="Xenova/all-MiniLM-L6-v2")
    assert "onnx/model_q4.onnx" in str(info.value)
    assert "  - onnx/model_int8.onnx" in str(info.value)


def test_real_config_dtype_beats_task_default():
    folder = HUB_FILES / "Xenova/speecht5_tts"
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is absent")
    cfg = json.loads((folder / "config.json").read_text())  # transformers.js_config.dtype: fp32
    files = ["onnx/decoder_model_merged.onnx", "onnx/decoder_model_merged_q4.onnx"]
    chosen = hub.choose_variant(files, "decoder_model_merged", config=cfg, task_default="q4")
    assert chosen.dtype == "fp32"


# --- nothing read or written outside the cache and the repo --------------------------------------

def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file())


@pytest.mark.parametrize("revision", ["../../../escaped", "/tmp/escaped", "a\\b", "a//b", "./x",
                                      "v1/./x", "v1/..", "v1/", "x\0y"])
def test_revision_leaving_the_cache_is_refused(fake_hub, tmp_path, revision):
    # Served by the fake Hub, so that nothing but the check stands in the way of refs/<revision>.
    fake_hub.add("org/rev", {"onnx/model.onnx": tiny_model(1.0).SerializeToString()},
                 revision=revision)
    with pytest.raises(HubError, match=r"Revision .* is not a valid branch, tag or commit"):
        hub.resolve("org/rev", revision=revision)
    assert fake_hub.log == []  # refused before asking the server
    assert files_under(tmp_path) == []
    assert not Path("/tmp/escaped").exists()


def test_ref_files_stay_in_refs(fake_hub, tmp_path):
    files = {"onnx/model.onnx": tiny_model(1.0).SerializeToString()}
    commit = fake_hub.add("org/rev", files)
    for revision in ("v1.0", "refs/pr/1"):
        fake_hub.add("org/rev", files, revision=revision)
    for revision in ("main", "v1.0", "refs/pr/1", commit):
        assert hub.resolve("org/rev", revision=revision).commit == commit
    cache = Path(os.environ["HF_HUB_CACHE"])
    assert files_under(tmp_path) == [
        str((cache / "models--org--rev" / "refs" / ref).relative_to(tmp_path))
        for ref in ("main", "refs/pr/1", "v1.0")]
    assert (cache / "models--org--rev" / "refs" / "refs" / "pr" / "1").read_text() == commit
    hub.resolve("org/rev", revision="refs/pr/1").onnx_file()
    fake_hub.stop()  # offline, the ref leads to the snapshot
    assert weight(hub.resolve("org/rev", revision="refs/pr/1").onnx_file()) == 1.0


@pytest.mark.parametrize("sha", ["../../../evil", "main", "A" * 40, "a" * 39])
def test_hostile_server_commit_is_refused(fake_hub, tmp_path, sha):
    files = {"onnx/model.onnx": tiny_model(1.0).SerializeToString()}
    fake_hub.add("org/evil", files)
    repo = fake_hub.repos["org/evil"]
    repo["refs"]["main"], repo["commits"][sha] = sha, files
    with pytest.raises(HubError, match=r"answered .* as the commit of 'org/evil'.*40-hex"):
        hub.resolve("org/evil")
    assert files_under(tmp_path) == []


def test_hostile_file_names_are_dropped(fake_hub):
    bad = ["../../evil.onnx", "/etc/evil.onnx", "onnx/../../evil.onnx", "onnx/../model.onnx",
           "..\\evil.onnx"]
    fake_hub.add("org/evil", {"onnx/model.onnx": tiny_model(1.0).SerializeToString(),
                              **{name: b"evil" for name in bad}})
    repo = hub.resolve("org/evil")
    assert repo.files() == ["onnx/model.onnx"]
    with pytest.raises(HubError, match=r"no file '\.\./\.\./evil.onnx'"):
        repo.file("../../evil.onnx")
    assert weight(repo.onnx_file()) == 1.0
    assert fake_hub.downloads() == ["onnx/model.onnx"]


@pytest.mark.parametrize("location", ["../../../etc/passwd", "/etc/passwd", "../model.onnx_data"])
def test_external_data_leaving_the_folder_is_reported_by_the_loader(fake_hub, location):
    w = numpy_helper.from_array(np.zeros(64, np.float32), "W")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    model = tiny_model(0.0, size=64)
    model.graph.initializer[0].CopyFrom(w)
    fake_hub.add("org/escape", {"onnx/model.onnx": model.SerializeToString(),
                                "model.onnx_data": np.zeros(64, np.float32).tobytes()})
    with pytest.raises(HubError, match=r"tensor 'W' at .*points outside the model's folder"):
        transmuter.load("org/escape")
    assert fake_hub.downloads() == ["onnx/model.onnx"]


# --- a faulty Hub: time-outs, server errors, corrupt bytes (issue 14) ----------------------------

STALL = 20.0  # seconds a stalled route waits before answering: far past the time-outs set here


def small_repo(fake_hub, name="org/faulty"):
    """config.json (a regular file: ETag = git sha1) and onnx/model.onnx (LFS: sha256)."""
    fake_hub.add(name, {"config.json": config(), **variants(dtypes=("fp32",))})
    return name


def short_timeouts(monkeypatch, seconds=0.5):
    # huggingface_hub reads HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT (whole seconds) when
    # imported; the subprocess test below goes through the environment itself.
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", seconds)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", seconds)


def storage_files(name):
    """Snapshot links and blobs the cache holds for repo ``name``."""
    storage = Path(os.environ["HF_HUB_CACHE"]) / ("models--" + name.replace("/", "--"))
    return sorted(str(p.relative_to(storage)) for p in storage.rglob("*")
                  if p.is_file() or p.is_symlink()
                  if p.parts[len(storage.parts)] in ("blobs", "snapshots"))


@pytest.mark.parametrize("where, path, variable", [
    ("api", None, "HF_HUB_ETAG_TIMEOUT"),              # model_info: no time-out of its own
    ("head", "config.json", "HF_HUB_ETAG_TIMEOUT"),    # the metadata of a file
    ("cdn", "onnx/model.onnx", "HF_HUB_DOWNLOAD_TIMEOUT"),  # the bytes of an LFS file
])
def test_stalled_hub_times_out(fake_hub, monkeypatch, where, path, variable):
    short_timeouts(monkeypatch)
    name = small_repo(fake_hub)
    fake_hub.fault(where, path, stall=STALL)
    with pytest.raises(HubError) as info:
        hub.resolve(name).onnx_file()
    message = str(info.value)
    for part in (fake_hub.url, repr(name), f"within 0.5 s ({variable})", f"set {variable}"):
        assert part in message
    assert storage_files(name) == [] or where == "cdn"  # cdn: config.json is cached
    assert "onnx/model.onnx" not in " ".join(storage_files(name))
    fake_hub.faults.clear()
    assert weight(hub.resolve(name).onnx_file()) == VALUES["fp32"]


def test_stalled_hub_falls_back_to_the_cache(fake_hub, monkeypatch, caplog):
    short_timeouts(monkeypatch)
    name = small_repo(fake_hub)
    first = hub.resolve(name).onnx_file()
    fake_hub.fault("api", stall=STALL)
    repo = hub.resolve(name)
    assert repo.onnx_file() == first
    assert "offline" in repo.label
    assert "did not answer within 0.5 s (HF_HUB_ETAG_TIMEOUT)" in caplog.text


def test_timeout_from_the_environment(fake_hub, tmp_path):
    """HF_HUB_ETAG_TIMEOUT in the environment, read by huggingface_hub at import, is the knob."""
    import subprocess
    import sys
    name = small_repo(fake_hub)
    fake_hub.fault("api", stall=STALL)
    env = {**os.environ, "HF_HUB_ETAG_TIMEOUT": "1"}
    code = f"from transmuter import hub; hub.resolve({name!r})"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=2 * STALL)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("transmuter.errors.HubError: ")
    assert "did not answer within 1 s (HF_HUB_ETAG_TIMEOUT)" in last


@pytest.mark.parametrize("where, path, status", [
    ("api", None, 500), ("api", None, 502), ("api", None, 503),
    ("head", "onnx/model.onnx", 500), ("head", "config.json", 502), ("head", "config.json", 503),
    ("get", "config.json", 500), ("cdn", "onnx/model.onnx", 503),
])
def test_server_errors_are_reported_as_such(fake_hub, where, path, status):
    name = small_repo(fake_hub)
    fake_hub.fault(where, path, status=status)
    with pytest.raises(HubError) as info:
        hub.resolve(name).onnx_file()
    message = str(info.value)
    assert f"HTTP {status}, a server error" in message and "try again later" in message
    assert repr(name) in message and fake_hub.url in message
    assert path is None or repr(path) in message
    assert "offline" not in message.lower()
    fake_hub.faults.clear()  # nothing of the failure stays behind (.no_exist, partial blobs)
    assert weight(hub.resolve(name).onnx_file()) == VALUES["fp32"]


@pytest.mark.parametrize("status, code, expected", [
    (404, "EntryNotFound",
     r"has no 'onnx/model.onnx' in 'org/faulty' at [0-9a-f]{40} \(HTTP 404\), though it lists"),
    (404, "RepoNotFound", r"'org/faulty' was not found at http://127.0.0.1.*token="),
    (401, "GatedRepo", r"'org/faulty' is gated: request access"),
    (403, "GatedRepo", r"'org/faulty' is gated: request access"),
    (403, None, r"refused access to 'org/faulty' \(HTTP 403\)"),
])
def test_client_errors_on_a_file(fake_hub, status, code, expected):
    name = small_repo(fake_hub)
    repo = hub.resolve(name)
    fake_hub.fault("head", "onnx/model.onnx", status=status, code=code)
    with pytest.raises(HubError, match=expected) as info:
        repo.onnx_file()
    assert "offline" not in str(info.value).lower()


def test_connection_refused_after_listing(fake_hub):
    name = small_repo(fake_hub)
    repo = hub.resolve(name)
    fake_hub.stop()
    with pytest.raises(HubError) as info:
        repo.onnx_file()
    message = str(info.value)
    assert message.startswith(f"Downloading 'config.json' of {name!r} failed: cannot reach "
                              f"{fake_hub.url} to download it (")
    assert "not in the cache" in message and "offline mode" not in message


@pytest.mark.parametrize("where, path", [("get", "config.json"), ("cdn", "onnx/model.onnx")])
def test_truncated_download_is_not_kept(fake_hub, where, path):
    # The server's Content-Length says half: huggingface_hub's size check (from HEAD) refuses it.
    name = small_repo(fake_hub)
    fake_hub.fault(where, path, mangle="truncate", times=1)
    with pytest.raises(HubError, match=rf"Downloading '{path}' of '{name}' from .* incomplete"):
        hub.resolve(name).onnx_file()
    assert path not in " ".join(storage_files(name))
    assert weight(hub.resolve(name).onnx_file()) == VALUES["fp32"]


def test_download_cut_short_resumes(fake_hub):
    # The connection closes before Content-Length: huggingface_hub resumes with a Range request.
    name = small_repo(fake_hub)
    fake_hub.fault("cdn", "onnx/model.onnx", mangle="cut", times=1)
    assert weight(hub.resolve(name).onnx_file()) == VALUES["fp32"]


@pytest.mark.parametrize("path, opaque", [
    ("config.json", False), ("onnx/model.onnx", False), ("onnx/model.onnx_data", False),
    # ETags that are no hash (some mirrors): parsing tells (external data has no format to parse)
    ("config.json", True), ("onnx/model.onnx", True)])
def test_corrupt_download_is_dropped(fake_hub, tmp_path, monkeypatch, path, opaque):
    """Bytes that are not the file (flipped, same size) are caught: by the ETag where it is a hash
    (git sha1 or sha256), else by parsing (.json, .onnx); then the next try succeeds."""
    monkeypatch.setenv("TRANSMUTER_VERIFY_DOWNLOADS", "1")  # huggingface_hub checks only sizes
    name = "org/corrupt"
    fake_hub.add(name, {"config.json": config(), **with_external_data(tmp_path, "onnx/model.onnx",
                                                                      7.0)})
    fake_hub.opaque_etags = opaque
    fake_hub.fault("cdn" if hub_server_is_lfs(path) else "get", path, mangle="flip", times=1)
    with pytest.raises(HubError, match=rf"Downloading '{path}' of '{name}' .* corrupt.*removed "
                                       r"from the cache.*run again"):
        hub.resolve(name).onnx_file()
    assert not [f for f in storage_files(name) if f.endswith("/" + path)]
    assert not [f for f in storage_files(name) if f.startswith("blobs/")
                and (Path(os.environ["HF_HUB_CACHE"]) / ("models--" + name.replace("/", "--"))
                     / f).stat().st_size == 0]
    assert weight(hub.resolve(name).onnx_file()) == 7.0
    fake_hub.stop()  # what is cached is the good file
    assert weight(hub.resolve(name).onnx_file()) == 7.0


def test_tampered_bytes_with_a_matching_length_header(fake_hub, monkeypatch):
    # HEAD and GET agree on a truncated size, so only the ETag (git sha1) can tell.
    monkeypatch.setenv("TRANSMUTER_VERIFY_DOWNLOADS", "1")
    name = small_repo(fake_hub)
    fake_hub.fault("head", "config.json", mangle="truncate")
    fake_hub.fault("get", "config.json", mangle="truncate")
    with pytest.raises(HubError, match=r"Downloading 'config.json' .* corrupt"):
        hub.resolve(name).onnx_file()
    fake_hub.faults.clear()
    assert weight(hub.resolve(name).onnx_file()) == VALUES["fp32"]


def test_downloads_are_hashed_only_when_asked(fake_hub, tmp_path, monkeypatch):
    # huggingface_hub has checked each size already; hashing every file again is opt-in.
    from transmuter.hub import repo as repo_module
    checked = []
    real = repo_module.corruption
    monkeypatch.setattr(repo_module, "corruption", lambda local, path, *args:
                        checked.append(path) or real(local, path, *args))
    fake_hub.add("org/ext", {"config.json": config(),
                             **with_external_data(tmp_path, "onnx/model.onnx", 7.0)})
    assert weight(hub.resolve("org/ext").onnx_file()) == 7.0
    assert checked == []
    monkeypatch.setenv("TRANSMUTER_VERIFY_DOWNLOADS", "1")
    fake_hub.add("org/ext2", {"config.json": config(),
                              **with_external_data(tmp_path, "onnx/model.onnx", 7.0)})
    assert weight(hub.resolve("org/ext2").onnx_file()) == 7.0
    assert sorted(checked) == ["config.json", "onnx/model.onnx", "onnx/model.onnx_data"]


# --- several files at once: one snapshot_download (issue 41) -------------------------------------

def ext_repo(fake_hub, tmp_path, name="org/ext"):
    """config.json, and onnx/model.onnx with its external data onnx/model.onnx_data."""
    fake_hub.add(name, {"config.json": config(),
                        **with_external_data(tmp_path, "onnx/model.onnx", 7.0)})
    return name


def test_graph_and_external_data_come_in_one_snapshot(fake_hub, tmp_path, monkeypatch):
    import huggingface_hub
    calls = []
    real = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *args, **kwargs: calls.append((args, kwargs)) or real(*args, **kwargs))
    repo = hub.resolve(ext_repo(fake_hub, tmp_path))
    assert weight(repo.onnx_file()) == 7.0
    [(args, kwargs)] = calls
    assert args == ("org/ext",) and kwargs["revision"] == repo.commit
    assert kwargs["allow_patterns"] == ["onnx/model.onnx", "onnx/model.onnx_data"]
    assert sorted(fake_hub.downloads()) == ["config.json", "onnx/model.onnx",
                                            "onnx/model.onnx_data"]
    assert [entry[1] for entry in fake_hub.log].count("TREE") == 1
    fake_hub.stop()  # cached: no snapshot, no request
    assert weight(hub.resolve("org/ext").onnx_file()) == 7.0
    assert len(calls) == 1


def test_literal_patterns():
    import fnmatch

    from transmuter.hub.repo import _literal
    for path in ("onnx/model.onnx", "weird[1]*?.onnx"):
        assert fnmatch.fnmatchcase(path, _literal(path))
    assert not fnmatch.fnmatchcase("onnx/model_q4.onnx", _literal("onnx/model*.onnx"))


@pytest.mark.parametrize("where, path", [("head", "onnx/model.onnx_data"),
                                         ("head", "onnx/model.onnx"), ("tree", None),
                                         ("cdn", "onnx/model.onnx_data")])
def test_server_error_once_is_retried(fake_hub, tmp_path, where, path):
    # One HTTP 503 on a file's metadata or the tree listing: huggingface_hub asks again (after a
    # back-off); on a file's bytes, that file is asked again on its own. The load goes on, where
    # a file-by-file download stopped at the first 5xx.
    name = ext_repo(fake_hub, tmp_path)
    fault = fake_hub.fault(where, path, status=503, times=1)
    assert weight(hub.resolve(name).onnx_file()) == 7.0
    assert fault not in fake_hub.faults  # it was met
    # the listing too was asked again, rather than the files fetched one by one after it failed
    assert [entry[1] for entry in fake_hub.log].count("TREE") == (2 if where == "tree" else 1)
    expected = ["config.json", "onnx/model.onnx", "onnx/model.onnx_data"]
    assert sorted(fake_hub.downloads()) == sorted(expected + [path] * (where == "cdn"))


def test_tree_listing_failing_falls_back_to_file_by_file(fake_hub, tmp_path):
    # snapshot_download lists the repo's tree first (retrying a 5xx); when that keeps failing it
    # returns the partial snapshot folder without a word: the files still missing come one by one.
    name = ext_repo(fake_hub, tmp_path)
    fake_hub.fault("tree", status=502)
    assert weight(hub.resolve(name).onnx_file()) == 7.0
    assert [entry[1] for entry in fake_hub.log].count("TREE") == 6  # 1 + 5 retries


@pytest.mark.parametrize("status", [500, 503])
def test_server_error_in_a_snapshot_is_reported_as_such(fake_hub, tmp_path, status):
    name = ext_repo(fake_hub, tmp_path)
    fake_hub.fault("cdn", "onnx/model.onnx_data", status=status)
    with pytest.raises(HubError) as info:
        hub.resolve(name).onnx_file()
    message = str(info.value)
    assert message.startswith("Downloading ")
    assert f"HTTP {status}, a server error" in message and "try again later" in message
    assert repr(name) in message and "'onnx/model.onnx_data'" in message
    assert "onnx/model.onnx_data" not in " ".join(storage_files(name))
    fake_hub.faults.clear()
    assert weight(hub.resolve(name).onnx_file()) == 7.0


def test_stalled_download_in_a_snapshot_times_out(fake_hub, tmp_path, monkeypatch):
    import time
    short_timeouts(monkeypatch)
    name = ext_repo(fake_hub, tmp_path)
    fake_hub.fault("cdn", "onnx/model.onnx_data", stall=STALL)
    start = time.monotonic()
    with pytest.raises(HubError) as info:
        hub.resolve(name).onnx_file()
    # huggingface_hub resumes a silent download 5 times (its 1 s waits are skipped here)
    assert time.monotonic() - start < STALL / 2
    message = str(info.value)
    assert message.startswith("Downloading 'onnx/model.onnx_data' of 'org/ext' failed: ")
    for part in (fake_hub.url, "within 0.5 s (HF_HUB_DOWNLOAD_TIMEOUT)",
                 "set HF_HUB_DOWNLOAD_TIMEOUT"):
        assert part in message
    assert "onnx/model.onnx_data" not in " ".join(storage_files(name))
    fake_hub.faults.clear()
    assert weight(hub.resolve(name).onnx_file()) == 7.0


def test_pipeline_settings_come_in_one_snapshot(fake_hub, monkeypatch):
    import huggingface_hub
    calls = []
    real = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *args, **kwargs: calls.append(kwargs["allow_patterns"])
                        or real(*args, **kwargs))
    folder = Path(__file__).parent / "fixtures" / "bert-sequence-classification"
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "references" not in p.parts}
    fake_hub.add("org/classifier", files)
    pipe = transmuter.pipeline("text-classification", "org/classifier")
    local = transmuter.pipeline("text-classification", folder)
    assert pipe("a text") == local("a text")
    assert calls == [["config.json", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json"]]
    gets = fake_hub.downloads()
    assert sorted(gets) == sorted(set(gets))  # each file once
    assert "onnx/model.onnx" in gets and "vocab.txt" not in gets


def test_hostile_tree_names_are_not_fetched_by_a_snapshot(fake_hub, tmp_path):
    # The tree listing snapshot_download asks for lists the hostile names too; only the exact,
    # checked paths are allowed, so none of them is asked for or written.
    bad = ["../../evil.onnx", "/etc/evil.onnx", "onnx/../../evil.onnx", "onnx/*", "..\\evil.onnx",
           "onnx/model.onnx_data/../../../evil"]
    name = ext_repo(fake_hub, tmp_path)
    fake_hub.add(name, {**fake_hub.repos[name]["commits"][fake_hub.repos[name]["refs"]["main"]],
                        **{path: b"evil" for path in bad}})
    assert weight(hub.resolve(name).onnx_file()) == 7.0
    assert sorted(fake_hub.downloads()) == ["config.json", "onnx/model.onnx",
                                            "onnx/model.onnx_data"]
    assert [entry[1] for entry in fake_hub.log].count("TREE") == 1
    home = Path(os.environ["HF_HOME"]).relative_to(tmp_path)
    assert [f for f in files_under(tmp_path) if not f.startswith(str(home))
            and not f.startswith("ext-")] == []
