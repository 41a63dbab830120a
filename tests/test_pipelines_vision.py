"""Vision pipelines against the transformers pipeline outputs recorded with the fixtures
(references/pipeline_<task>.json, run on references/image_*.png), on JAX and MLX; a batch equals
one by one; bad image inputs are clear errors."""

import hashlib
import json
import math

import numpy as np
import pytest

import transmuter
from transmuter.errors import InputError

from .fixtures import ROOT, pipeline_reference, pipeline_references
from .test_pipelines_text import assert_close

VISION_TASKS = {"image-classification", "zero-shot-image-classification", "object-detection",
                "image-segmentation", "depth-estimation"}
# Tiny random models: XLA's float32 sums in another order than PyTorch's move scores by ~1e-6;
# the design's bound of 1e-4 leaves headroom.
TOL = 1e-4
# Recorded references no ONNX graph can meet, with the reason.
PENDING = {
    # transformers' pipeline passes the tokenizer's attention_mask to SiglipModel, which masks the
    # padding; SigLIP's ONNX export takes no attention_mask (SigLIP is trained on unmasked
    # 64-token texts). The torch model called without the mask equals onnxruntime, and
    # test_siglip_equals_onnxruntime_on_the_same_inputs checks the pipeline against that.
    ("siglip", "zero-shot-image-classification"):
        "the recorded pipeline masks padding the ONNX graph cannot mask",
}
CASES = [(f, t) for f, t in pipeline_references(VISION_TASKS)]
_PIPES = {}


def pipe(fixture, task, backend="jax"):
    key = (fixture, task, backend)
    if key not in _PIPES:
        _PIPES[key] = transmuter.pipeline(task, ROOT / fixture, backend=backend, variant="fp32")
    return _PIPES[key]


def images(fixture, ref):
    return [str(ROOT / fixture / p) for p in ref["inputs"]["images"]]


def summary(value):
    """A PIL image or an array as the references summarise them (families_vision_audio.py)."""
    if hasattr(value, "getbands"):
        data = np.asarray(value)
        return {"pil_image": {"mode": value.mode, "size": list(value.size),
                              "sum": int(data.astype(np.int64).sum()),
                              "md5": hashlib.md5(value.tobytes()).hexdigest()}}
    x = np.asarray(value, np.float64)
    return {"shape": list(x.shape), "mean": float(x.mean()), "std": float(x.std()),
            "min": float(x.min()), "max": float(x.max()), "sum": float(x.sum())}


def summarised(result):
    if isinstance(result, list):
        return [summarised(r) for r in result]
    if isinstance(result, dict):
        return {k: summarised(v) for k, v in result.items()}
    if hasattr(result, "getbands") or isinstance(result, np.ndarray):
        return summary(result)
    return result


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture,task", CASES, ids=[f"{t}-{f}" for f, t in CASES])
def test_matches_recorded_pipeline(fixture, task, backend):
    if (fixture, task) in PENDING:
        pytest.xfail(PENDING[fixture, task])
    ref = pipeline_reference(fixture, task)
    p = pipe(fixture, task, backend)
    for i, (image, want) in enumerate(zip(images(fixture, ref), ref["outputs"])):
        got = summarised(p(image, **ref["call_kwargs"]))
        assert_close(got, want, TOL, where=f"image {i}")


@pytest.mark.parametrize("fixture,task", [c for c in CASES if c not in PENDING],
                         ids=[f"{t}-{f}" for f, t in CASES if (f, t) not in PENDING])
def test_batch_equals_one_by_one(fixture, task):
    ref = pipeline_reference(fixture, task)
    p = pipe(fixture, task)
    inputs = images(fixture, ref) * 2
    one = [summarised(p(x, **ref["call_kwargs"])) for x in inputs]
    assert_close(summarised(p(inputs, batch_size=4, **ref["call_kwargs"])), one, 1e-5)
    assert_close(summarised(list(p(iter(inputs), batch_size=3, **ref["call_kwargs"]))), one, 1e-5)


def test_image_kinds_give_the_same_result():
    from PIL import Image

    p = pipe("vit", "image-classification")
    path = ROOT / "vit" / "references" / "image_0.png"
    image = Image.open(path)
    want = p(str(path))
    for given in (path, image, path.read_bytes(), np.asarray(image.convert("RGB"))):
        assert_close(p(given), want, 1e-6, where=type(given).__name__)


@pytest.mark.parametrize("bad,match", [(b"not an image", "bytes"), ("no/such/file.png", "file"),
                                       (12, "int")])
def test_bad_images_are_clear_errors(bad, match):
    with pytest.raises((InputError, transmuter.pipelines.PipelineError), match=match):
        pipe("vit", "image-classification")(bad)


def test_a_bad_image_in_a_list_is_named(tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes((ROOT / "vit" / "references" / "image_0.png").read_bytes()[:100])
    with pytest.raises(InputError, match="broken.png"):
        pipe("vit", "image-classification")([str(ROOT / "vit/references/image_1.png"),
                                              str(broken)])


def test_top_k_and_function_to_apply():
    p = pipe("vit", "image-classification")
    image = str(ROOT / "vit/references/image_0.png")
    all_scores = p(image, top_k=None)
    assert len(all_scores) == 5 and math.isclose(sum(s["score"] for s in all_scores), 1,
                                                 rel_tol=1e-5)
    assert p(image, top_k=2) == all_scores[:2]
    raw = p(image, top_k=None, function_to_apply="none")
    assert [r["label"] for r in raw] == [r["label"] for r in all_scores]


def test_object_detection_exact_boxes():
    p = pipe("detr", "object-detection")
    image = str(ROOT / "detr/references/image_0.png")
    rounded, exact = p(image, threshold=0.0), p(image, threshold=0.0, exact_boxes=True)
    for r, e in zip(rounded, exact):
        assert r["box"] == {k: int(v) for k, v in e["box"].items()}
        assert isinstance(e["box"]["xmin"], float)


def test_siglip_tokenizer_equals_transformers():
    from transmuter import hub
    from transmuter.preprocess.tokenizer import Tokenizer

    tok = Tokenizer.from_repo(hub.resolve(ROOT / "siglip"))
    ref = json.loads((ROOT / "siglip/references/siglip_tokenizer_ids.json").read_text())
    for text, want in zip(ref["texts"], ref["ids"]):
        got = tok.pad([tok.encode(text, max_length=64)], 64, ["input_ids"])["input_ids"][0]
        assert got.tolist() == want, text


def test_siglip_equals_onnxruntime_on_the_same_inputs():
    """Texts and images as transformers prepared them for model.npz (onnxruntime's logits on the
    fixture's model.onnx): with hypothesis_template="{}" the pipeline's texts are those texts."""
    manifest = json.loads((ROOT / "siglip" / "manifest.json").read_text())
    texts = manifest["text_inputs"]["texts"]
    logits = np.load(ROOT / "siglip/references/model.npz")["0/out/logits_per_image"]
    p = pipe("siglip", "zero-shot-image-classification")
    for i in range(2):
        got = p(str(ROOT / f"siglip/references/image_{i}.png"), candidate_labels=texts,
                hypothesis_template="{}")
        scores = 1 / (1 + np.exp(-logits[i].astype(np.float64)))
        want = [{"score": float(s), "label": t} for s, t in sorted(zip(scores, texts),
                                                                     key=lambda x: -x[0])]
        assert_close(got, want, TOL, where=f"image {i}")
