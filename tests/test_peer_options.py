"""pipeline() under the names users of transformers and transformers.js type (transformers.js'
option names and values from its source: packages/transformers/src/utils/dtypes.js, devices.js,
pipelines/index.js SUPPORTED_TASKS): dtype, device, model_file_name / subfolder, model_kwargs,
revision, token; a task inferred from the repo; the task's default model."""

import json
import logging
import shutil
from pathlib import Path

import pytest

import transmuter
from transmuter import hub
from transmuter.errors import HubError, PipelineError
from transmuter.pipelines import task_inference

try:
    from .hub_server import GOOD_TOKEN, fake_hub  # noqa: F401  (the fixture)
except ImportError:
    from hub_server import GOOD_TOKEN, fake_hub  # noqa: F401

FIXTURES = Path(__file__).parent / "fixtures"
HUB_FILES = Path(__file__).resolve().parents[2] / "shared" / "hub-files"
CLASSIFIER = FIXTURES / "bert-sequence-classification"  # onnx/model.onnx, model_quantized.onnx


def files_of(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def chosen(pipe):
    """The loaded file as a path in its repo (the factory loads it by its local path)."""
    return "/".join(Path(pipe.model.origin[1]).parts[-2:])


# --- dtype (transformers.js) = variant ----------------------------------------------------------

@pytest.mark.parametrize("dtype, file", [("q8", "onnx/model_quantized.onnx"),
                                         ("fp32", "onnx/model.onnx"),
                                         ("auto", "onnx/model.onnx"),  # config, else fp32
                                         ({"model": "q8"}, "onnx/model_quantized.onnx"),
                                         ({"model": "auto"}, "onnx/model.onnx"),
                                         ("float32", "onnx/model.onnx")])  # transformers' name
def test_dtype_is_variant(dtype, file):
    pipe = transmuter.pipeline("text-classification", CLASSIFIER, dtype=dtype)
    assert chosen(pipe) == file
    same = transmuter.pipeline("text-classification", CLASSIFIER,
                               variant=None if file == "onnx/model.onnx" else "q8")
    assert chosen(same) == file
    assert pipe("a short text") == same("a short text")


@pytest.mark.parametrize("options, message", [
    ({"dtype": "q4"}, r"(?s)no file 'onnx/model_q4.onnx'.*variant=.*dtype="),
    ({"dtype": "q8", "variant": "fp32"}, r"variant= and dtype both give it"),
    ({"dtype": "fp8"}, r"Unknown variant 'fp8'; use one of: fp32, fp16"),
    ({"dtype": "bfloat16"}, r"compute_type='bf16'"),
])
def test_dtype_errors(options, message):
    with pytest.raises((PipelineError, HubError), match=message) as caught:
        transmuter.pipeline("text-classification", CLASSIFIER, **options)
    assert "file=..." not in str(caught.value).split("transmuter.load")[0]


# --- device ------------------------------------------------------------------------------------

def test_device_cpu_and_indices():
    import jax

    if jax.devices()[0].platform != "cpu":
        pytest.skip("on an accelerator, 'cpu' is not JAX's default device")
    cpu = jax.devices("cpu")[0]
    for device in ("cpu", -1, 0, cpu, "auto"):
        pipe = transmuter.pipeline("text-classification", CLASSIFIER, device=device)
        assert pipe.model.backend.name == "jax"
        # on this CPU-only machine every one of them is JAX's default device: one placement
        assert pipe.model.placement is None
    assert transmuter.pipeline("text-classification", CLASSIFIER, device="cpu")("a text") == \
        transmuter.pipeline("text-classification", CLASSIFIER)("a text")


def test_device_mps_is_mlx():
    pytest.importorskip("mlx.core")
    pipe = transmuter.pipeline("text-classification", CLASSIFIER, device="mps")
    assert pipe.model.backend.name == "mlx"
    want = transmuter.pipeline("text-classification", CLASSIFIER, backend="mlx")("a text")
    assert pipe("a text") == want


@pytest.mark.parametrize("options, message", [
    ({"device": "webgpu"}, r"onnxruntime-web backend of transformers.js.*'cpu', 'gpu'/'cuda'"),
    ({"device": "npu"}, r"Unknown device 'npu'"),
    ({"device": "cuda"}, r"device='cuda': JAX sees 0 gpu device\(s\).*jax\[cuda12\]"),
    ({"device": "cuda:1"}, r"device='cuda:1': JAX sees 0 gpu"),
    ({"device": 7}, r"device=7: JAX sees \d+ default device"),
    ({"device": "mps", "backend": "jax"}, r"device='mps' runs on MLX.*backend='jax'"),
    ({"device": "cpu", "backend": "mlx"}, r"device='cpu' places the model with JAX"),
    ({"device": 1.5}, r"device must be 'cpu'.*got float"),
])
def test_device_errors(options, message):
    import jax

    if jax.devices()[0].platform != "cpu":
        pytest.skip("the messages are those of a CPU-only machine")
    with pytest.raises(PipelineError, match=message):
        transmuter.pipeline("text-classification", CLASSIFIER, **options)


def test_device_map_and_torch_dtype():
    """transformers' device_map (one device: "auto", "cpu", "cuda", ...) and torch_dtype (the
    older name of dtype) read as device= and dtype=."""
    pipe = transmuter.pipeline("text-classification", CLASSIFIER, device_map="auto",
                               torch_dtype="auto")
    assert chosen(pipe) == "onnx/model.onnx" and pipe.model.backend.name == "jax"
    assert chosen(transmuter.pipeline("text-classification", CLASSIFIER, device_map="cpu",
                                      torch_dtype="q8")) == "onnx/model_quantized.onnx"
    with pytest.raises(PipelineError, match=r"device_map as a dict places modules"):
        transmuter.pipeline("text-classification", CLASSIFIER, device_map={"": 0})
    with pytest.raises(PipelineError, match=r"device= or device_map=, not both"):
        transmuter.pipeline("text-classification", CLASSIFIER, device_map="cpu", device="cpu")


def test_device_and_devices_given_twice():
    import jax

    other = jax.devices("cpu")
    with pytest.raises(PipelineError, match=r"devices= and device both give it"):
        transmuter.pipeline("text-classification", CLASSIFIER, device="cpu",
                            devices=[object(), *other])


# --- model_file_name / subfolder (transformers.js), model_kwargs (transformers) ----------------

def test_model_file_name_and_subfolder(tmp_path):
    folder = tmp_path / "repo"
    shutil.copytree(CLASSIFIER, folder)
    (folder / "exports").mkdir()
    shutil.copy(folder / "onnx" / "model_quantized.onnx", folder / "exports" / "classifier.onnx")
    shutil.copy(folder / "onnx" / "model.onnx", folder / "onnx" / "other_quantized.onnx")
    pipe = transmuter.pipeline("text-classification", folder, model_file_name="classifier",
                               subfolder="exports")
    assert chosen(pipe) == "exports/classifier.onnx"
    q8 = transmuter.pipeline("text-classification", folder, dtype="q8")
    assert pipe("a text") == q8("a text")
    # the name takes the dtype's suffix, as transformers.js' model_file_name does
    pipe = transmuter.pipeline("text-classification", folder, model_file_name="other", dtype="q8")
    assert chosen(pipe) == "onnx/other_quantized.onnx"
    with pytest.raises(HubError, match=r"no file 'onnx/absent.onnx'"):
        transmuter.pipeline("text-classification", folder, model_file_name="absent")


def test_model_file_name_refused_where_a_task_loads_several_graphs():
    with pytest.raises(PipelineError, match=r"model_file_name= and subfolder= pick the one graph"
                                            r".*text2text-generation loads several"):
        transmuter.pipeline("text2text-generation", FIXTURES / "t5", model_file_name="model")


def test_model_kwargs():
    pipe = transmuter.pipeline("text-classification", CLASSIFIER,
                               model_kwargs={"dtype": "q8", "checks": False})
    assert chosen(pipe) == "onnx/model_quantized.onnx" and not pipe.model.checks
    with pytest.raises(PipelineError, match=r"model_kwargs holds \['attn_implementation'\]"):
        transmuter.pipeline("text-classification", CLASSIFIER,
                            model_kwargs={"attn_implementation": "sdpa"})
    with pytest.raises(PipelineError, match=r"variant= and model_kwargs both give it"):
        transmuter.pipeline("text-classification", CLASSIFIER, variant="fp32",
                            model_kwargs={"variant": "q8"})
    with pytest.raises(PipelineError, match=r"model_kwargs must be a dict"):
        transmuter.pipeline("text-classification", CLASSIFIER, model_kwargs="q8")


# --- revision and token, through the loopback Hub -----------------------------------------------

def test_revision_and_token(fake_hub):
    files = files_of(CLASSIFIER)
    relabelled = json.loads(files["config.json"])
    relabelled["id2label"] = {"0": "NO", "1": "YES"}
    fake_hub.add("org/classifier", files, private=True)
    fake_hub.add("org/classifier", {**files, "config.json": json.dumps(relabelled)},
                 revision="v2", private=True)
    with pytest.raises(HubError, match=r"was not found.*token="):
        transmuter.pipeline("text-classification", "org/classifier")
    main = transmuter.pipeline("text-classification", "org/classifier", token=GOOD_TOKEN)
    v2 = transmuter.pipeline("text-classification", "org/classifier", token=GOOD_TOKEN,
                             revision="v2")
    assert main("a text")[0]["label"] in ("negative", "positive")
    assert v2("a text")[0]["label"] in ("NO", "YES")
    assert v2("a text")[0]["score"] == main("a text")[0]["score"]


# --- the task, inferred -------------------------------------------------------------------------

def _export_task(manifest):
    """The pipeline task of a fixture's optimum export task (its manifest.json): the same task
    without "-with-past"; semantic-segmentation is transformers' image-segmentation; optimum's
    feature-extraction of an image model is the image task."""
    task = manifest["task"].removesuffix("-with-past")
    return {"semantic-segmentation": "image-segmentation"}.get(task, task)


FIXTURE_TASKS = sorted(p.parent.name for p in FIXTURES.glob("*/manifest.json")
                       if (p.parent / "config.json").exists())


@pytest.mark.parametrize("name", FIXTURE_TASKS)
def test_task_inferred_as_the_fixture_was_exported(name):
    """Each fixture's inferred task is the task optimum exported it for (tests/support); where
    they differ in name, the differences are the tasks' own: a sentence-transformers folder is
    text-embedding (CrossEncoder: text-ranking), an image encoder's features are
    image-feature-extraction, Marian and NLLB translate (text2text-generation's family)."""
    folder = FIXTURES / name
    want = _export_task(json.loads((folder / "manifest.json").read_text()))
    got = task_inference.infer_task(hub.resolve(folder))
    allowed = {want}
    if (folder / "modules.json").exists():
        allowed = {"text-embedding", "text-ranking"}
    if want == "feature-extraction" and not (folder / "tokenizer.json").exists():
        allowed = {"image-feature-extraction"}
    if want == "text2text-generation":
        allowed |= {"translation"}
    assert got in allowed


REAL_TAGGED = sorted(str(p.parent.relative_to(HUB_FILES)) for p in HUB_FILES.glob("*/*/README.md")
                     if "\npipeline_tag:" in p.read_text(encoding="utf-8")) \
    if HUB_FILES.exists() else []


@pytest.mark.parametrize("repo", REAL_TAGGED)
def test_architectures_agree_with_real_pipeline_tags(repo):
    """Real config.json files: the task their architectures say is the Hub's pipeline_tag of
    the repo (Florence-2, tagged image-text-to-text, runs here as image-to-text)."""
    folder = HUB_FILES / repo
    tag = task_inference.pipeline_tag(hub.resolve(folder))
    config = json.loads((folder / "config.json").read_text())
    got = task_inference.task_of_config(config)
    if config.get("model_type") == "florence2":
        assert task_inference.infer_task(hub.resolve(folder)) == "image-to-text"
        return
    assert got == tag


def test_pipeline_without_task(fake_hub, tmp_path):
    sentiment = transmuter.pipeline(model=CLASSIFIER)
    assert sentiment.task == "text-classification"
    assert sentiment("a text") == transmuter.pipeline("text-classification", CLASSIFIER)("a text")
    assert transmuter.pipeline(model=FIXTURES / "bert-sentence-transformers").task == \
        "text-embedding"
    # the Hub's pipeline_tag wins over the architectures (a classifier run as zero-shot)
    fake_hub.add("org/nli", files_of(FIXTURES / "bert-nli"),
                 pipeline_tag="zero-shot-classification")
    assert transmuter.pipeline(model="org/nli").task == "zero-shot-classification"
    # a model card's pipeline_tag, in a folder
    folder = tmp_path / "tagged"
    shutil.copytree(CLASSIFIER, folder)
    (folder / "README.md").write_text("---\nlicense: mit\npipeline_tag: sentiment-analysis\n---\n")
    assert transmuter.pipeline(model=folder).task == "text-classification"
    config = json.loads((folder / "config.json").read_text())
    (folder / "README.md").unlink()
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["Mystery"]}))
    with pytest.raises(PipelineError, match=r"Cannot tell the task of .*\['Mystery'\].*Give it"):
        transmuter.pipeline(model=folder)
    with pytest.raises(PipelineError, match=r"needs a task, a model, or both"):
        transmuter.pipeline()


# --- the task's default model ------------------------------------------------------------------

def test_default_model_of_transformers_js(fake_hub, caplog):
    """transformers.js' SUPPORTED_TASKS defaults, served by the loopback Hub from fixtures of
    the same architectures: the task alone loads the default, with its dtype."""
    fake_hub.add("Xenova/distilbert-base-uncased-finetuned-sst-2-english",
                 files_of(FIXTURES / "distilbert-sequence-classification"))
    with caplog.at_level(logging.WARNING, "transmuter"):
        pipe = transmuter.pipeline("sentiment-analysis")
    assert "defaulted to Xenova/distilbert-base-uncased-finetuned-sst-2-english" in caplog.text
    want = transmuter.pipeline("text-classification",
                               FIXTURES / "distilbert-sequence-classification")
    assert pipe("a text") == want("a text")
    fake_hub.add("onnx-community/Qwen3-0.6B-ONNX", files_of(FIXTURES / "llama"))
    assert chosen(transmuter.pipeline("text-generation")) == "onnx/model_q4.onnx"  # dtype q4
    assert chosen(transmuter.pipeline("text-generation", dtype="fp32")) == "onnx/model.onnx"
    with pytest.raises(PipelineError, match=r"text-ranking has no default model"):
        transmuter.pipeline("text-ranking")
    with pytest.raises(PipelineError, match=r"Unknown task 'nonsense'"):
        transmuter.pipeline("nonsense")


def test_every_default_model_is_a_task_here():
    for task in task_inference.DEFAULT_MODELS:
        transmuter.pipelines.registry.get(task)
