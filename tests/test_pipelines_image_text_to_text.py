"""image-text-to-text (pipelines/vision/image_text_to_text.py) against transformers on the idefics3
fixture (a tiny SmolVLM-shaped Idefics3, tests/support/families_idefics3.py), whose references
tests/support/record_image_text_to_text.py recorded from the PyTorch model:

- the processor: Idefics3Processor's input_ids (exactly: the image tokens expanded as it expands
  them) and pixel_values / pixel_attention_mask (references/processor.npz). Both sides resize with
  Pillow on the same uint8 pixels and rescale (float64 then float32) and normalize (float32) in
  the same order, so the values should agree bit for bit; 1e-6 leaves room for NumPy's float32
  rounding in the normalize only; also the real SmolVLM-256M-Instruct processor files
  (../shared/hub-files: 512-pixel tiles, 2048 longest edge, its 49k tokenizer) on one image
  (references/processor_smolvlm.npz: ids, and every 16th pixel of the 40 MB pixel_values);
- the pipeline: every recorded case (one image, two images in a chat, prompts with <image>,
  splitting on and off, max_new_tokens, new text only, beam search, a continued assistant
  message), on JAX and MLX: the records (text, chat form) identical and generate's token ids
  identical;
- a batch of two chats gives each chat's recorded ids; a seed repeats a sampled text; streaming
  joins to the recorded new text; bad inputs are PipelineErrors.
"""

import copy
import shutil

import numpy as np
import pytest

import transmuter
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference

SMOLVLM = ROOT.parents[2] / "shared" / "hub-files" / "HuggingFaceTB" / "SmolVLM-256M-Instruct"
REAL_PROMPT, REAL_STRIDE = "<image>Can you describe this image?", 16  # as recorded

TASK = "image-text-to-text"
FIXTURE = "idefics3"
FX = ROOT / FIXTURE
_PIPES = {}


def pipe(backend="jax"):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline(TASK, FX, backend=backend)
    return _PIPES[backend]


def reference():
    return pipeline_reference(FIXTURE, TASK)


def case(name):
    return next(c for c in reference()["cases"] if c["name"] == name)


def paths(rel):
    return [str(FX / r) for r in rel]


def relative(obj):
    """Our records with the fixture's absolute image paths written as recorded (relative)."""
    if isinstance(obj, dict):
        return {k: relative(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [relative(v) for v in obj]
    if isinstance(obj, str) and obj.startswith(str(FX) + "/"):
        return obj[len(str(FX)) + 1:]
    return obj


def call(p, c, **extra):
    """(records, token ids per record) of a recorded case, called as it was recorded."""
    seen, post = [], p.postprocess

    def spy(outputs, **params):
        out = outputs[0]
        seen.extend(list(out["ids"]) + list(map(int, new)) for new in out["new_ids"])
        return post(outputs, **params)

    p.postprocess = spy
    try:
        outs = p(text=copy.deepcopy(c["text"]), images=paths(c["images"]),
                 **c["call_kwargs"], **extra)
    finally:
        del p.postprocess
    return relative(outs), seen


# --- processor ----------------------------------------------------------------------------------


def test_processor_matches_transformers():
    import json

    meta = json.loads((FX / "references/processor.json").read_text())
    data = np.load(FX / "references/processor.npz")
    p = pipe()
    for c in meta:
        text = c["text"]
        given = {"messages": text} if isinstance(text, list) else {"text": text}
        chunk = next(p.preprocess(dict(given, images=paths(c["images"])),
                                  split=c["kwargs"].get("do_image_splitting")))
        name = c["name"]
        assert chunk["ids"] == data[f"{name}/input_ids"][0].tolist(), name
        pixels, mask = chunk["vision"]
        want = data[f"{name}/pixel_values"][0]
        assert pixels.shape == want.shape, name
        np.testing.assert_allclose(pixels, want, rtol=0, atol=1e-6, err_msg=name)
        assert (mask == data[f"{name}/pixel_attention_mask"][0].astype(bool)).all(), name


def test_real_smolvlm_processor_matches_transformers():
    """The processor at SmolVLM-256M's real sizes and tokenizer (no model needed)."""
    import json

    from transmuter import hub
    from transmuter.preprocess.image.load import load_image
    from transmuter.preprocess.image.families.idefics3 import Idefics3Images, expand_prompt
    from transmuter.preprocess.text.tokenizer import Tokenizer

    if not SMOLVLM.is_dir():
        pytest.skip("needs ../shared/hub-files/HuggingFaceTB/SmolVLM-256M-Instruct")
    ref = np.load(FX / "references/processor_smolvlm.npz")
    config = json.loads((SMOLVLM / "preprocessor_config.json").read_text())
    seq_len = json.loads((SMOLVLM / "processor_config.json").read_text())["image_seq_len"]
    (pixels, mask), grids = Idefics3Images(config).process(
        [load_image(FX / "references/image_0.png")])
    text = expand_prompt(REAL_PROMPT, grids, seq_len)
    ids = Tokenizer.from_repo(hub.resolve(SMOLVLM)).encode(text, truncation=False).ids
    assert ids == ref["input_ids"].tolist()
    assert list(pixels.shape) == ref["pixel_shape"].tolist()
    # same Pillow resize and float steps: equal up to float32 rounding (see the module doc)
    np.testing.assert_allclose(pixels[:, :, ::REAL_STRIDE, ::REAL_STRIDE], ref["pixels"],
                               rtol=0, atol=1e-6)
    assert list(mask.shape) == ref["mask_shape"].tolist() and mask.sum() == ref["mask_sum"]


# --- generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_recorded_pipeline(backend):
    p = pipe(backend)
    for c in reference()["cases"]:
        outs, ids = call(p, c)
        assert outs == c["outputs"], c["name"]
        assert ids == c["token_ids"], c["name"]


def test_generation_settings_are_transformers():
    want = reference()["generation_config"]
    config = pipe()._sanitize_parameters()[1]["config"]
    assert config.max_new_tokens == want["max_new_tokens"]  # the pipeline's 256
    assert config.eos_token_id == [want["eos_token_id"]]
    assert config.pad_token_id == want["pad_token_id"]


def test_batch_of_chats_equals_each_recorded():
    """Two chats in one call (one generate over both rows) give what transformers gave each
    alone; greedy ids of max_new_tokens=7 are the first 7 of the 10-token record."""
    a, b = case("one_image"), case("is_cat")
    p = pipe()
    seen, post = [], p.postprocess
    p.postprocess = lambda outputs, **kw: (seen.append(
        list(outputs[0]["ids"]) + list(map(int, outputs[0]["new_ids"][0]))), post(outputs, **kw))[1]
    try:
        p(text=[a["text"], b["text"]], images=[paths(a["images"]), paths(b["images"])],
          max_new_tokens=7, batch_size=2)
    finally:
        del p.postprocess
    prompt = len(a["token_ids"][0]) - a["call_kwargs"]["max_new_tokens"]
    assert seen == [a["token_ids"][0][:prompt + 7], b["token_ids"][0]]


def test_sampling_with_seed_repeats():
    c = case("one_image")
    p = pipe()
    first, _ = call(p, c, do_sample=True, seed=3, top_k=20)
    again, _ = call(p, c, do_sample=True, seed=3, top_k=20)
    assert first == again


def test_stream_joins_to_the_new_text():
    c = case("new_text")
    kwargs = {k: v for k, v in c["call_kwargs"].items() if k != "return_full_text"}
    chunks = list(pipe()(text=copy.deepcopy(c["text"]), images=paths(c["images"]), stream=True,
                         **kwargs))
    assert "".join(chunks) == c["outputs"][0]["generated_text"]


# --- vision encoder shapes ----------------------------------------------------------------------


def test_tiles_run_in_power_of_two_chunks():
    """An image split into tiles runs them in chunks of a power of two (10 tiles: 8, 2), so a few
    compiled shapes serve every tile count; the features equal onnxruntime's over all the tiles
    in one call (the encoder reads each tile alone). 1e-4, as tests/test_models.py compares every
    graph with onnxruntime: float32 sums in another order (measured 1.3e-5 on features of ~20)."""
    ort = pytest.importorskip("onnxruntime")
    skimage_data = pytest.importorskip("skimage.data")
    from transmuter.preprocess.image.load import load_image

    p = pipe()
    _, (pixels, mask) = p.family.prepare("<image>", [load_image(skimage_data.astronaut())])
    assert len(pixels) == 10  # 3 x 3 tiles and the global image
    seen = []

    def run(feed):
        seen.append(feed["pixel_values"].shape[1])
        return p._run_model(feed, model=p.vision)

    got = p.family.features(run, (pixels, mask))
    session = ort.InferenceSession(str(FX / "onnx/vision_encoder.onnx"))
    want = session.run(None, {"pixel_values": pixels[None], "pixel_attention_mask": mask[None]})[0]
    assert seen == [8, 2]
    np.testing.assert_allclose(got, want.reshape(-1, want.shape[-1]), rtol=0, atol=1e-4)


# --- errors -------------------------------------------------------------------------------------


def test_more_image_parts_than_images():
    c = case("two_images")
    with pytest.raises(PipelineError, match="more image parts"):
        pipe()(text=c["text"], images=paths(c["images"][:1]), max_new_tokens=1)
    with pytest.raises(PipelineError, match="beyond the chat's image parts"):
        pipe()(text=case("one_image")["text"], images=paths(c["images"]), max_new_tokens=1)
    with pytest.raises(PipelineError, match="one image per <image>"):
        pipe()(text="<image><image>Two", images=paths(c["images"][:1]), max_new_tokens=1)


def test_pixel_bounds_are_a_qwen2vl_option():
    c = case("one_image")
    with pytest.raises(PipelineError, match="max_pixels are Qwen2-VL options"):
        pipe()(text=c["text"], images=paths(c["images"]), max_new_tokens=1, max_pixels=3136)


def test_prompt_past_the_context():
    with pytest.raises(PipelineError, match="context is 512"):
        pipe()(text="hello " * 600, max_new_tokens=1)
    with pytest.raises(PipelineError, match="context of 512"):
        pipe()(text="hello " * 100, max_new_tokens=400)


def test_image_part_without_a_vision_encoder(tmp_path):
    repo = tmp_path / "no-vision"
    shutil.copytree(FX, repo)
    (repo / "onnx/vision_encoder.onnx").unlink()
    p = transmuter.pipeline(TASK, repo)
    with pytest.raises(PipelineError, match="no vision encoder"):
        p(text=case("one_image")["text"], images=paths(case("one_image")["images"]),
          max_new_tokens=1)


def test_variant_per_component(tmp_path):
    """variant= a dict chooses each graph's file (transformers.js' per-file dtypes); a component
    it does not name takes the default, and a file it names that the repo lacks is an error."""
    repo = tmp_path / "variants"
    shutil.copytree(FX, repo)
    shutil.copyfile(repo / "onnx/vision_encoder.onnx", repo / "onnx/vision_encoder_quantized.onnx")
    p = transmuter.pipeline(TASK, repo, variant={"vision_encoder": "q8",
                                                 "decoder_model_merged": "fp32"})
    files = [m.origin[1].rsplit("/", 1)[-1] for m in (p.vision, p.generator.embed_fn.model,
                                                       p.model)]
    assert files == ["vision_encoder_quantized.onnx", "embed_tokens.onnx",
                     "decoder_model_merged.onnx"]
    with pytest.raises(transmuter.HubError, match="embed_tokens_q4.onnx"):
        transmuter.pipeline(TASK, repo, variant={"embed_tokens": "q4"})


def test_not_an_idefics3_model():
    with pytest.raises(PipelineError, match="Idefics3 / SmolVLM"):
        transmuter.pipeline(TASK, ROOT / "llama")
