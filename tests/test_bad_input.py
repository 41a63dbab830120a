"""Call-time inputs that are not what a graph or a pipeline takes: each is our own error naming
the input and what to do, or (where nothing is lost) taken as it is meant."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import transmuter
from transmuter.errors import InputError
from transmuter.preprocess.tokenizer import TokenizerError

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
