"""Call-time inputs that are not what a graph or a pipeline takes: each is our own error naming
the input and what to do, or (where nothing is lost) taken as it is meant."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import transmuter
from transmuter.errors import InputError
from transmuter.preprocess.text.tokenizer import TokenizerError

from .fixtures import ROOT
from .test_engine import info, make_model


def test_a_lone_surrogate_in_text_is_named():
    pipe = transmuter.pipeline("feature-extraction", ROOT / "bert", sequence_length=32)
    with pytest.raises(TokenizerError, match=r"'\\ud800' at position 1, a lone surrogate"):
        pipe("a\ud800b")
    broken = b"caf\xe9".decode("utf-8", errors="surrogateescape")  # a Latin-1 file read as UTF-8
    with pytest.raises(TokenizerError, match="position 3"):
        pipe(["fine", broken])
    assert np.asarray(pipe("a\ufffdb")).shape[-1] > 0  # errors="replace" gives text it takes


def add_model(dtype=T.FLOAT):
    return make_model([helper.make_node("Add", ["x", "y"], ["z"])],
                      [info("x", dtype, [2]), info("y", dtype, [2])], [info("z", dtype, [2])])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_lists_numbers_and_byte_swapped_arrays_are_taken(backend):
    """A list has no dtype: it takes the declared one (where NumPy casts it within its kind);
    a big-endian array is the same numbers in another byte order."""
    model = transmuter.load(add_model(T.INT64), backend=backend)
    want = {"z": np.array([4, 6], np.int64)}
    feeds = [{"x": [1, 2], "y": np.array([3, 4], ">i8")},
             {"x": (1, 2), "y": np.array([3, 4], np.int64)}]
    fn = transmuter.compile(model, feeds[1])
    for feed in feeds:
        for got in (transmuter.run(model, feed), fn(feed)):
            np.testing.assert_array_equal(got["z"], want["z"])
            assert np.asarray(got["z"]).dtype == np.int64
    floats = transmuter.load(add_model(), backend=backend)
    got = transmuter.run(floats, {"x": [1, 2], "y": [0.5, 0.25]})["z"]  # ints and floats: float32
    np.testing.assert_array_equal(got, np.array([1.5, 2.25], np.float32))


@pytest.mark.parametrize("value,match", [
    ([[1.0], [1.0, 2.0]], "'x' is a ragged list"),
    (np.ma.array(np.ones(2, np.float32), mask=[1, 0]), "'x' is a masked array.*filled"),
    ([1.5, 2.5], "'x' has dtype float64, but the graph declares int64"),  # no silent truncation
])
def test_inputs_that_cannot_be_taken_are_named(value, match):
    model = transmuter.load(add_model(T.INT64))
    with pytest.raises(InputError, match=match):
        transmuter.run(model, {"x": value, "y": np.ones(2, np.int64)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_declared_dim_of_0_is_enforced(backend):
    """issue 14 (fuzz 20261202:187): a graph input declared [0, 2] takes only empty rows, as
    ONNX Runtime checks it; a 0 was skipped as if it were no fixed dim."""
    import onnxruntime as ort

    model = make_model([helper.make_node("Relu", ["x"], ["z"])], [info("x", T.FLOAT, [0, 2])],
                       [info("z", T.FLOAT, [0, 2])])
    session = ort.InferenceSession(model.SerializeToString())
    ours = transmuter.load(model, backend=backend)
    with pytest.raises(Exception, match="invalid dimensions"):  # noqa: B017 - ORT's own type
        session.run(None, {"x": np.ones((1, 2), np.float32)})
    with pytest.raises(InputError, match=r"'x' has shape \[1, 2\], but the graph declares"):
        transmuter.run(ours, {"x": np.ones((1, 2), np.float32)})
    empty = np.ones((0, 2), np.float32)
    assert transmuter.run(ours, {"x": empty})["z"].shape == session.run(None, {"x": empty})[0].shape


def test_a_static_input_given_again_unchanged_is_accepted():
    model = transmuter.load(add_model())
    x, y = np.ones(2, np.float32), np.array([1, 2], np.float32)
    fn = transmuter.compile(model, {"x": x, "y": y}, static_inputs={"y": y})
    np.testing.assert_array_equal(fn({"x": x, "y": y.copy()})["z"], [2, 3])
    with pytest.raises(InputError, match=r"'y' was fixed by static_inputs.*another value"):
        fn({"x": x, "y": y + 1})


def test_an_unknown_backend_is_named():
    with pytest.raises(InputError, match="Unknown backend 'torch': choose one of jax, mlx"):
        transmuter.load(add_model(), backend="torch")


@pytest.mark.parametrize("option", ["temperature", "repetition_penalty", "top_p", "min_p",
                                    "length_penalty"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_generation_options_refuse_nan_and_inf(option, value):
    from transmuter.generation import GenerationConfig

    with pytest.raises(InputError, match=option):
        GenerationConfig(**{option: value}).validate()


def _broken_copy(tmp_path, fixture, name, edit):
    """A copy of a fixture whose file ``name`` is rewritten by ``edit(text) -> text``."""
    import shutil

    folder = tmp_path / fixture
    shutil.copytree(ROOT / fixture, folder)
    path = folder / name
    path.write_text(edit(path.read_text()))
    return folder


def _with(**fields):
    import json

    return lambda text: json.dumps({**json.loads(text), **fields})


REPO_FILES = [  # (fixture, file, edit, the error's type name, its message)
    ("bert-sequence-classification", "config.json", lambda t: "[1, 2]", "HubError",
     "config.json holds a JSON list, where a JSON object belongs"),
    ("bert-sequence-classification", "config.json", _with(id2label=["a", "b", "c"]), "HubError",
     "config.json's id2label is a JSON list"),
    ("bert-sequence-classification", "config.json", _with(max_position_embeddings=-5),
     "HubError", "max_position_embeddings must be a positive int, got -5"),
    ("bert-sequence-classification", "config.json", _with(max_position_embeddings="x"),
     "HubError", "max_position_embeddings must be a positive int, got 'x'"),
    ("bert-sequence-classification", "tokenizer_config.json", _with(model_max_length=-1),
     "TokenizerError", "model_max_length must be a positive number, got -1"),
    ("bert-sequence-classification", "tokenizer_config.json", _with(model_max_length="big"),
     "TokenizerError", "model_max_length must be a positive number, got 'big'"),
    ("bert-sequence-classification", "special_tokens_map.json", lambda t: '["[CLS]"]',
     "HubError", "special_tokens_map.json holds a JSON list"),
    ("bert-sequence-classification", "tokenizer.json", lambda t: t[:500], "TokenizerError",
     "tokenizer.json cannot be read"),
    ("vit", "preprocessor_config.json", lambda t: "[]", "HubError",
     "preprocessor_config.json holds a JSON list"),
    # issue 14 (fuzz 20261201:192, :62, :1176 and kin): TypeError / OverflowError from Pillow,
    # NaN scores from a null std; transformers fails or gives NaN alike: we name the field
    ("vit", "preprocessor_config.json", _with(size={"height": 32, "width": float("inf")}),
     "InputError", r"'size.width' is inf, where an image processor takes a whole number"),
    ("vit", "preprocessor_config.json", _with(size={"height": 10**30, "width": 32}),
     "InputError", r"'size.height' is 1000000000000000000000000000000"),
    ("vit", "preprocessor_config.json", _with(image_processor_type=1.5), "InputError",
     r"'image_processor_type' is 1.5, where an image processor takes a class name"),
    ("vit", "preprocessor_config.json", _with(image_std=[0.5, None, 0.5]), "InputError",
     r"'image_std' is \[0.5, None, 0.5\].*finite float32 numbers, none of them 0"),
    ("vit", "preprocessor_config.json", _with(image_mean=""), "InputError",
     r"'image_mean' is ''"),
    ("vit", "preprocessor_config.json", _with(rescale_factor=float("inf")), "InputError",
     r"'rescale_factor' is inf, where an image processor takes a finite number"),
    # fuzz 20261204:1123: pixels past float32's range gave NaN scores (transformers: NaN too)
    ("vit", "preprocessor_config.json", _with(rescale_factor=1e308), "InputError",
     r"'rescale_factor' is 1e\+308, where an image processor takes a finite number \(1/255\) "
     r"whose pixels fit float32"),
    ("vit", "preprocessor_config.json", _with(image_mean=[0.5, 1e300, 0.5]), "InputError",
     r"'image_mean' is \[0.5, 1e\+300, 0.5\].*finite float32 numbers"),
    ("vit", "preprocessor_config.json", _with(image_std=[1e-300, 0.5, 0.5]), "InputError",
     r"'image_std' is \[1e-300, 0.5, 0.5\].*none of them 0"),
    # issue 14 (fuzz 20261202:472, :734, :2103, 20261201:4670, :5794): AttributeError /
    # TypeError / UnicodeEncodeError escaped from the tokenizer and the pipelines' config reads
    ("bert-sequence-classification", "tokenizer_config.json",
     _with(added_tokens_decoder={"0": "[PAD]"}), "TokenizerError",
     r"added_tokens_decoder entry '0': '\[PAD\]' is not a token id and an object"),
    ("bert-sequence-classification", "tokenizer_config.json", _with(added_tokens_decoder=[1]),
     "TokenizerError", r"added_tokens_decoder is a JSON list"),
    ("bert-sequence-classification", "tokenizer_config.json", _with(pad_token=["[PAD]"]),
     "TokenizerError", r"pad_token is \['\[PAD\]'\], where a token's text"),
    ("bert-sequence-classification", "tokenizer_config.json", _with(sep_token="\udcff"),
     "TokenizerError", r"sep_token is '\\udcff', where a token's text \(a string of valid"),
    ("bert-sequence-classification", "config.json", _with(model_type={"a": 1}), "HubError",
     r"config.json's model_type must be a string, got \{'a': 1\}"),
    ("bert-sequence-classification", "config.json", _with(architectures=1.5), "HubError",
     r"config.json's architectures must be a list of class names, got 1.5"),
    ("bert-sequence-classification", "config.json", _with(pad_token_id=[0]), "HubError",
     r"config.json's pad_token_id must be an int or null, got \[0\]"),
]


@pytest.mark.parametrize("fixture,name,edit,error,match", REPO_FILES,
                         ids=[f"{f}/{n}:{m[:30]}" for f, n, _, _, m in REPO_FILES])
def test_broken_repo_files_are_named(tmp_path, fixture, name, edit, error, match):
    task = "image-classification" if fixture == "vit" else "text-classification"
    folder = _broken_copy(tmp_path, fixture, name, edit)
    with pytest.raises(transmuter.errors.TransmuterError, match=match) as caught:
        transmuter.pipeline(task, folder)
    assert type(caught.value).__name__ == error


@pytest.mark.parametrize("template,match", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
     "loops ran past 1,000,000 range steps"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "loops ran past"),  # writes nothing, yet would run 10**10 steps
    ("{{ 'x' * 10**10 }}", "repeats a str 10,000,000,000 times"),
    ("{{ 2 ** 100000000 }}", "more than 100,000 bits"),
    ("{% for m in messages %}{{ m.content * 3 }}{% endfor %}", None),  # within bounds
])
def test_chat_templates_are_bounded(template, match):
    from transmuter.preprocess.text.chat_template import ChatTemplateError, render

    messages = [{"role": "user", "content": "hi"}]
    if match is None:
        assert render(template, messages) == "hihihi"
        return
    with pytest.raises(ChatTemplateError, match=match):
        render(template, messages)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("mask", [[[1, 1, 5]], [[1, 1, 1], [0, 0, 0]], [[1, -10**6, 1]]],
                         ids=["sum past the length", "a row of zeros", "negative"])
def test_an_attention_mask_past_the_kv_buffer_is_refused(backend, mask):
    """issue 14 (fuzz 20261201:256): GroupQueryAttention's seqlens_k is the mask's row sum - 1;
    onnxruntime refuses one outside [0, length); compiled, we clamped and answered."""
    import onnxruntime as ort
    path = str(ROOT / "llama-gqa" / "onnx" / "model.onnx")
    mask = np.array(mask, np.int64)
    feed = {"input_ids": np.ones(mask.shape, np.int64), "attention_mask": mask}
    feed.update({f"past_key_values.{i}.{kv}": np.zeros((len(mask), 2, 0, 16), np.float32)
                 for i in range(2) for kv in ("key", "value")})
    with pytest.raises(Exception, match=r"seqlens_k\[\d\] = -?\d+ is out of range"):
        ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    model = transmuter.load(path, backend=backend)
    with pytest.raises(InputError, match=r"seqlens_k\[\d\] = -?\d+ is out of range.*"
                                         r"'attention_mask'|an attention mask holds 0s and 1s"):
        model(**feed)
    assert "logits" in model(**{**feed, "attention_mask": np.ones_like(mask)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("shape,ort_says,match", [
    ((1, 3, 32, 5), "Invalid input shape", r"axis 3 has size 5 .*smaller than the kernel's"),
    ((1, 3, 0, 32), "Invalid input shape", r"axis 2 has size 0 .*smaller than the kernel's"),
    ((1, 5, 32, 32), "Input channels C is not equal", r"needs rank 4 and 3 channels on axis 1")],
    ids=["narrow", "empty", "channels"])
def test_pixel_values_the_patch_conv_cannot_take_are_refused(backend, shape, ort_says, match):
    """issue 14 (fuzz 20261201:359, 5:64): JAX's convolution gave an empty output for an input
    narrower than the kernel, and MLX's segfaulted on other channels; onnxruntime refuses both."""
    import onnxruntime as ort
    from transmuter.errors import OpError
    path = str(ROOT / "vit" / "onnx" / "model.onnx")
    feed = {"pixel_values": np.zeros(shape, np.float32)}
    with pytest.raises(Exception, match=ort_says):
        ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    with pytest.raises(OpError, match=match):
        transmuter.run(transmuter.load(path, backend=backend), feed)


@pytest.mark.parametrize("field,value", [
    ("eos_token_id", 2**63), ("eos_token_id", 1e30), ("eos_token_id", [3, 1.5]),
    ("pad_token_id", 2**63), ("pad_token_id", 1.5), ("pad_token_id", []),
    ("pad_token_id", [0, 1]), ("bos_token_id", -1)])
def test_generation_config_token_ids_are_checked(field, value):
    """issue 14 (fuzz 20261201:1320): ids past int64, floats and lists in generation_config.json
    escaped as OverflowError / TypeError / IndexError from the generation loop."""
    from transmuter.generation import GenerationConfig
    with pytest.raises(InputError, match=rf"{field} must be (a token id|token ids) \(ints in "
                                         r"\[0, 2147483647\]\).*generation_config.json"):
        GenerationConfig.from_dicts({field: value})


@pytest.mark.parametrize("value", [2**62, -2**63, 2])
def test_an_attention_mask_of_other_values_than_0_and_1_is_refused(value):
    """fuzz 1412:1174: a 2^62 in the mask wrapped past int32 in its row sum to a length that
    looked valid; onnxruntime refused (seqlens_k = -1) and we answered."""
    path = str(ROOT / "llama-gqa" / "onnx" / "model.onnx")
    mask = np.array([[1, value, 1]], np.int64)
    feed = {"input_ids": np.ones(mask.shape, np.int64), "attention_mask": mask}
    feed.update({f"past_key_values.{i}.{kv}": np.zeros((1, 2, 0, 16), np.float32)
                 for i in range(2) for kv in ("key", "value")})
    with pytest.raises(InputError, match=rf"'attention_mask' holds {value} at \[0, 1\]: an "
                                         "attention mask holds 0s and 1s"):
        transmuter.run(transmuter.load(path), feed)
