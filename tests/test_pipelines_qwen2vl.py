"""image-text-to-text over Qwen2-VL and Qwen2.5-VL (pipelines/vision/image_text_to_text.py,
vlm_families.py) against transformers on the qwen2-vl and qwen2.5-vl fixtures (a tiny
Qwen2VLForConditionalGeneration and a tiny Qwen2_5_VLForConditionalGeneration, its vision
attention in windows, in transformers.js' three graphs, tests/support/families_qwen2vl.py),
whose references tests/support/record_qwen2vl.py recorded from the PyTorch models (and checked
there: every greedy case's ids equal an onnxruntime loop over the same ONNX files); each test
runs on both:

- the processor: Qwen2VLProcessor's input_ids exactly (``<|image_pad|>`` expanded to one token
  per merged 2 x 2 patches) and Qwen2VLImageProcessor's pixel_values / image_grid_thw on the
  fixture's images and on three full scikit-image photos at Qwen2-VL-2B-Instruct's min_pixels /
  max_pixels and at the fixture's (smart_resize both ways). Both sides resize with Pillow on the
  same uint8 pixels and rescale (float64 then float32) and normalize (float32) in the same
  order: 1e-6 leaves room for NumPy's float32 rounding in the normalize only;
- M-RoPE: get_rope_index's 3-D positions of each processor case, exactly;
- the pipeline: every recorded case (one and two images, a small image resized up to
  min_pixels, a text-only chat, a prompt with <|image_pad|>, new text only, beam search of 3
  and of 2 over two images, a continued assistant message, min_pixels / max_pixels as call
  options) on JAX and MLX: records and generate's token ids identical; a chat takes the call's
  bounds too (transformers 4.57's pipeline drops processor kwargs for chats: the reference there
  is the recorded prompt's image-token count);
- two chats in one call equal transformers' own batch of them (left-padded there) and each
  alone; a seed repeats a sampled text; streaming joins to the recorded new text; bad inputs are
  PipelineErrors.
"""

import copy
import json

import numpy as np
import pytest

import transmuter
from transmuter import buckets
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference

TASK = "image-text-to-text"
FIXTURES = ("qwen2-vl", "qwen2.5-vl")
_PIPES = {}


class Fixture:
    """One fixture's folder, references and pipelines (one per backend, kept for the module)."""

    def __init__(self, name):
        self.name, self.dir = name, ROOT / name

    def pipe(self, backend="jax"):
        key = (self.name, backend)
        if key not in _PIPES:
            _PIPES[key] = transmuter.pipeline(TASK, self.dir, backend=backend)
        return _PIPES[key]

    def reference(self):
        return pipeline_reference(self.name, TASK)

    def case(self, name):
        return next(c for c in self.reference()["cases"] if c["name"] == name)

    def paths(self, rel):
        return [str(self.dir / r) for r in rel]

    def relative(self, obj):
        """Our records with the fixture's absolute image paths written as recorded."""
        if isinstance(obj, dict):
            return {k: self.relative(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.relative(v) for v in obj]
        if isinstance(obj, str) and obj.startswith(str(self.dir) + "/"):
            return obj[len(str(self.dir)) + 1:]
        return obj

    def call(self, p, c, **extra):
        """(records, token ids per record) of a recorded case, called as it was recorded."""
        seen, post = [], p.postprocess

        def spy(outputs, **params):
            out = outputs[0]
            seen.extend(list(out["ids"]) + list(map(int, new)) for new in out["new_ids"])
            return post(outputs, **params)

        p.postprocess = spy
        try:
            outs = p(text=copy.deepcopy(c["text"]), images=self.paths(c["images"]) or None,
                     **c["call_kwargs"], **extra)
        finally:
            del p.postprocess
        return self.relative(outs), seen


@pytest.fixture(params=FIXTURES)
def fx(request):
    return Fixture(request.param)


# --- processor ----------------------------------------------------------------------------------


def test_processor_matches_transformers(fx):
    meta = json.loads((fx.dir / "references/processor.json").read_text())
    data = np.load(fx.dir / "references/processor.npz")
    rope = np.load(fx.dir / "references/rope.npz")
    p = fx.pipe()
    for c in meta["cases"]:
        name = c["name"]
        chunk = next(p.preprocess({"messages": c["text"], "images": fx.paths(c["images"])}))
        assert chunk["ids"] == data[f"{name}/input_ids"][0].tolist(), name
        want_positions = rope[f"{name}/position_ids"][:, 0]
        got_positions = chunk["positions"]
        assert got_positions.tolist() == want_positions.tolist(), name
        # the next position after the prompt: transformers' rope_deltas + the prompt length
        assert got_positions.max() + 1 == rope[f"{name}/rope_deltas"][0, 0] + len(chunk["ids"])
        if chunk["vision"] is None:
            assert f"{name}/pixel_values" not in data.files, name
            continue
        pixels, grids = chunk["vision"]
        assert grids.tolist() == data[f"{name}/image_grid_thw"].tolist(), name
        np.testing.assert_allclose(pixels, data[f"{name}/pixel_values"], rtol=0, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("bounds", ["real", "fixture"])
def test_photos_match_transformers(fx, bounds):
    """Full scikit-image photos at Qwen2-VL-2B-Instruct's min/max pixels and at the fixture's."""
    skimage_data = pytest.importorskip("skimage.data")
    from transmuter.preprocess.image.load import load_image
    from transmuter.preprocess.image.families.qwen2vl import Qwen2VLImages

    meta = json.loads((fx.dir / "references/processor.json").read_text())
    data = np.load(fx.dir / "references/processor.npz")
    config = json.loads((fx.dir / "preprocessor_config.json").read_text())
    images = Qwen2VLImages({**config, **meta["bounds"][bounds]})
    for photo in meta["photos"]:
        key = f"{bounds}/{photo}"
        pixels, grids = images.process([load_image(getattr(skimage_data, photo)())])
        assert list(pixels.shape) == data[f"{key}/shape"].tolist(), key
        assert grids.tolist() == data[f"{key}/grid"].tolist(), key
        np.testing.assert_allclose(pixels[::meta["row_stride"]], data[f"{key}/pixels"], rtol=0,
                                   atol=1e-6, err_msg=key)


def test_smart_resize_refuses_extreme_aspect():
    from transmuter.errors import InputError
    from transmuter.preprocess.image.families.qwen2vl import smart_resize

    with pytest.raises(InputError, match="aspect ratio over 200"):
        smart_resize(10, 2100, 28, 3136, 12845056)


# --- vision encoder shapes ----------------------------------------------------------------------

# Five patch counts (600 to 624: images of 28-pixel multiples, 150 to 156 merged tokens) that
# share one bucket (buckets.patches: 640), each image run alone with its filler
SIDES = [(12, 13), (11, 14), (10, 15), (13, 12), (9, 17), (8, 19)]


def ort_features(path, pixels, grids):
    """onnxruntime's image_features of the vision encoder ``path`` on these patches, unpadded."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path))
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, (pixels, grids))))[0]


def test_vision_encoder_pads_images_to_shared_shapes(fx):
    """Images of five patch counts run through one compiled shape (each alone, padded with a
    filler image that its attention never sees) plus the first call's check; each image's
    features, and two images' together, equal onnxruntime's on the unpadded patches. 1e-4 of
    the features' scale: float32 sums at other shapes, in XLA and onnxruntime (measured 1e-6)."""
    from transmuter.engine.compiled import CompiledFunction
    from transmuter.pipelines.vision.vlm_families import Qwen2VL
    from transmuter.preprocess.image.load import load_image

    skimage_data = pytest.importorskip("skimage.data")
    photo = load_image(skimage_data.astronaut())
    p = fx.pipe()
    family = Qwen2VL(None, p.config)
    run = CompiledFunction(p.vision, cache_size=64)
    visions = [family.images.process([photo.resize((28 * w, 28 * h))], max_pixels=28 * 28 * 400)
               for h, w in SIDES]
    assert len({len(pixels) for pixels, _ in visions}) == 5
    for pixels, grids in visions + [tuple(map(np.concatenate, zip(*visions[:2])))]:
        want = ort_features(fx.dir / "onnx/vision_encoder.onnx", pixels, grids)
        got = family.features(run, (pixels, grids))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert family.pads is True
    assert run.cache_info().misses == 2  # the check's unpadded first image, then one bucket


def test_vision_encoder_whose_images_mix_runs_unpadded(tmp_path):
    """A vision encoder whose features of one image depend on the other images' patches (each
    row plus the mean of all rows) fails the first call's check: every call then runs the
    images together and unpadded, as the graph was exported, and equals onnxruntime."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from transmuter.engine.compiled import CompiledFunction
    from transmuter.pipelines.vision.vlm_families import Qwen2VL

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["pixel_values", "shape"], ["rows"]),
         helper.make_node("ReduceMean", ["rows"], ["mean"], axes=[0], keepdims=1),
         helper.make_node("Add", ["rows", "mean"], ["image_features"])],
        "mixing",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["patches", 6]),
         helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["images", 3])],
        [helper.make_tensor_value_info("image_features", TensorProto.FLOAT, None)],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 24])])
    path = tmp_path / "vision_encoder.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    family = Qwen2VL(None, {})
    run = CompiledFunction(transmuter.load(path))
    rng = np.random.default_rng(0)
    for grids in ([[1, 4, 6]], [[1, 2, 2], [1, 6, 2]]):
        grids = np.array(grids, np.int64)
        pixels = rng.standard_normal((int(np.prod(grids, axis=-1).sum()), 6)).astype(np.float32)
        got = family.features(run, (pixels, grids))
        np.testing.assert_allclose(got, ort_features(path, pixels, grids), rtol=0, atol=1e-6)
        assert family.pads is False


# --- generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matches_recorded_pipeline(fx, backend):
    p = fx.pipe(backend)
    for c in fx.reference()["cases"]:
        outs, ids = fx.call(p, c)
        assert outs == c["outputs"], c["name"]
        assert ids == c["token_ids"], c["name"]


def test_generation_settings_are_transformers(fx):
    want = fx.reference()["generation_config"]
    config = fx.pipe()._sanitize_parameters()[1]["config"]
    assert config.max_new_tokens == want["max_new_tokens"]
    assert config.eos_token_id == want["eos_token_id"]
    assert config.pad_token_id == want["pad_token_id"]


def test_batch_of_chats_equals_transformers_batch(fx):
    """Two chats (one and two images, prompts of different lengths and M-RoPE offsets) in one
    generate: what transformers' batch gave, which is what each gives alone. One fixture on
    each backend (a JAX batch compiles for ~30 s on 2 loaded cores)."""
    batch = fx.reference()["batch"]
    chosen = [fx.case(n) for n in batch["names"]]
    p = fx.pipe("jax" if fx.name == "qwen2-vl" else "mlx")
    outs = p(text=[copy.deepcopy(c["text"]) for c in chosen],
             images=[fx.paths(c["images"]) for c in chosen], **batch["call_kwargs"])
    assert fx.relative(outs) == batch["outputs"]


def test_token_summary_counts_a_batch(fx):
    """Two chats in one generate: input is each prompt's tokens (its image tokens included),
    output its new tokens (the recorded ones), padding what the batch ran for it beyond them:
    both prompts' padding to the longer one's chunks, then the steps after it stopped."""
    batch = fx.reference()["batch"]
    chosen = [fx.case(n) for n in batch["names"]]
    budget = batch["call_kwargs"]["max_new_tokens"]
    prompts = [len(c["token_ids"][0]) - c["call_kwargs"]["max_new_tokens"] for c in chosen]
    outs = fx.pipe("mlx")(text=[copy.deepcopy(c["text"]) for c in chosen],
                          images=[fx.paths(c["images"]) for c in chosen], token_summary=True,
                          **batch["call_kwargs"])
    width = sum(buckets.prompt_chunks(max(prompts)))  # the longer prompt's padded chunks
    for out, n in zip(outs, prompts):
        assert out[0]["token_summary"] == {"input": n, "output": budget, "padding": width - n}
    with pytest.raises(PipelineError, match="drop token_summary"):
        fx.pipe("mlx")(text=chosen[0]["text"], images=fx.paths(chosen[0]["images"]),
                       stream=True, token_summary=True)


def test_sampling_with_seed_repeats(fx):
    c = fx.case("one_image")  # on MLX: its compiled shapes are ready in a fraction of JAX's time
    first, _ = fx.call(fx.pipe("mlx"), c, do_sample=True, seed=3, top_k=20)
    again, _ = fx.call(fx.pipe("mlx"), c, do_sample=True, seed=3, top_k=20)
    assert first == again


def test_stream_joins_to_the_new_text(fx):
    c = fx.case("new_text")
    kwargs = {k: v for k, v in c["call_kwargs"].items() if k != "return_full_text"}
    chunks = list(fx.pipe("mlx")(text=copy.deepcopy(c["text"]), images=fx.paths(c["images"]),
                                 stream=True, **kwargs))
    assert "".join(chunks) == c["outputs"][0]["generated_text"]


# --- errors -------------------------------------------------------------------------------------


def test_bad_inputs(fx):
    c, one, p = fx.case("two_images"), fx.case("one_image"), fx.pipe()
    with pytest.raises(PipelineError, match="more image parts"):
        p(text=c["text"], images=fx.paths(c["images"][:1]), max_new_tokens=1)
    with pytest.raises(PipelineError, match=r"one image per <\|image_pad\|>"):
        p(text="<|image_pad|><|image_pad|>Two", images=fx.paths(c["images"][:1]),
          max_new_tokens=1)
    with pytest.raises(PipelineError, match="do_image_splitting is an Idefics3"):
        p(text=one["text"], images=fx.paths(one["images"]), max_new_tokens=1,
          do_image_splitting=False)
    with pytest.raises(PipelineError, match="context is 512"):
        p(text="hello " * 600, max_new_tokens=1)


def test_pixel_bounds_apply_to_a_chat(fx):
    """A chat with max_pixels= expands its image to as many tokens as transformers' processor
    gave the recorded prompt case with the same image and bound."""
    case, pad = fx.case("max_pixels"), fx.pipe().family.image_token
    token = fx.pipe().tokenizer.token_to_id(pad)
    chat = copy.deepcopy(fx.case("one_image")["text"])
    _, ids = fx.call(fx.pipe("mlx"), {"text": chat, "images": case["images"],
                                     "call_kwargs": case["call_kwargs"]})
    assert ids[0].count(token) == case["token_ids"][0].count(token)
    assert ids[0].count(token) < fx.case("one_image")["token_ids"][0].count(token)


def test_pixel_bounds_are_checked(fx):
    one, p = fx.case("prompt"), fx.pipe()
    for bad in (0, -5, 1.5, "3136", True):
        with pytest.raises(PipelineError, match="max_pixels must be a positive number"):
            p(text=one["text"], images=fx.paths(one["images"]), max_new_tokens=1,
              max_pixels=bad)


def test_device_loop_refuses_mrope(fx):
    from transmuter.errors import InputError

    gen = fx.pipe().generator
    config = fx.pipe()._sanitize_parameters(max_new_tokens=2)[1]["config"]
    with pytest.raises(InputError, match="M-RoPE"):
        gen.check_device_loop(True, config)
