"""Random generators: shapes, dtypes, seeds and distributions.

ONNX leaves the generator unspecified, so values cannot match another runtime's. These tests check
what the spec does fix. Every statistical check allows Z = 5 standard errors of the estimate
(derived from the sample size next to each check): a correct generator fails one with probability
below 1e-6, while a wrong mean, spread or probability (off by more than that) is caught."""

import importlib.util

import numpy as np
import pytest
from onnx import TensorProto, helper

import transmuter

BACKENDS = ["jax"] + (["mlx"] if importlib.util.find_spec("mlx") else [])
Z = 5.0  # standard errors allowed in a statistical check (two-sided p < 6e-7 per check)


def load(nodes, inputs, outputs, backend, opset=22):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return transmuter.load(model, backend=backend)


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def generator(op_type, backend, shape=(200, 100), dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node(op_type, [], ["y"], shape=list(shape), dtype=dtype, **attrs)
    return load([node], [], [info("y", dtype, list(shape))], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_normal_distribution(backend):
    mean, scale = 2.0, 3.0
    y = np.asarray(transmuter.run(generator("RandomNormal", backend, mean=mean, scale=scale,
                                            seed=1.0), {})["y"])
    assert y.shape == (200, 100) and y.dtype == np.float32
    n = y.size
    # The sample mean's standard error is scale / sqrt(n); the sample std's is about
    # scale / sqrt(2 n) for normal draws.
    assert abs(y.mean() - mean) < Z * scale / np.sqrt(n)
    assert abs(y.std() - scale) < Z * scale / np.sqrt(2 * n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_uniform_distribution(backend):
    low, high = -1.0, 3.0
    y = np.asarray(transmuter.run(generator("RandomUniform", backend, low=low, high=high,
                                            seed=7.0), {})["y"])
    assert y.shape == (200, 100) and y.dtype == np.float32
    assert y.min() >= low and y.max() < high
    n, width = y.size, high - low
    # Uniform on [low, high): std width / sqrt(12), so the mean's standard error is
    # width / sqrt(12 n); the variance width**2 / 12 has standard error width**2 / sqrt(180 n)
    # (fourth central moment width**4 / 80).
    assert abs(y.mean() - (low + high) / 2) < Z * width / np.sqrt(12 * n)
    assert abs(y.var() - width ** 2 / 12) < Z * width ** 2 / np.sqrt(180 * n)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_type", ["RandomNormal", "RandomUniform"])
def test_seed_repeats_and_no_seed_differs(backend, op_type):
    seeded = generator(op_type, backend, shape=(64,), seed=3.0)
    a, b = (np.asarray(transmuter.run(seeded, {})["y"]) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    other = np.asarray(transmuter.run(generator(op_type, backend, shape=(64,), seed=4.0), {})["y"])
    assert not np.array_equal(a, other)
    unseeded = generator(op_type, backend, shape=(64,))
    c, d = (np.asarray(transmuter.run(unseeded, {})["y"]) for _ in range(2))
    assert not np.array_equal(c, d)  # 64 float draws: equal only if the generator repeats


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_type", ["RandomNormalLike", "RandomUniformLike"])
def test_like_takes_shape_and_dtype(backend, op_type):
    x = np.zeros((3, 5), np.float16)
    model = load([helper.make_node(op_type, ["x"], ["y"], seed=0.0)],
                 [info("x", TensorProto.FLOAT16, [3, 5])], [info("y", TensorProto.FLOAT16, [3, 5])],
                 backend)
    y = np.asarray(transmuter.run(model, {"x": x})["y"])
    assert y.shape == (3, 5) and y.dtype == np.float16 and np.isfinite(y).all()
    if backend == "mlx":
        return  # MLX has no float64 on its default (GPU) stream
    model = load([helper.make_node(op_type, ["x"], ["y"], dtype=TensorProto.DOUBLE)],
                 [info("x", TensorProto.FLOAT16, [3, 5])], [info("y", TensorProto.DOUBLE, [3, 5])],
                 backend)
    assert np.asarray(transmuter.run(model, {"x": x})["y"]).dtype == np.float64


def bernoulli_model(backend, p_shape, dtype=None, seed=None):
    attrs = {} if dtype is None else {"dtype": dtype}
    if seed is not None:
        attrs["seed"] = seed
    out = dtype if dtype is not None else TensorProto.FLOAT
    return load([helper.make_node("Bernoulli", ["p"], ["y"], **attrs)],
                [info("p", TensorProto.FLOAT, list(p_shape))], [info("y", out, list(p_shape))],
                backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bernoulli_distribution(backend):
    n = 20000
    p = np.concatenate([np.full(n, 0.2), np.full(n, 0.8), np.zeros(100), np.ones(100)])
    p = p.astype(np.float32)
    y = np.asarray(transmuter.run(bernoulli_model(backend, p.shape, seed=5.0), {"p": p})["y"])
    assert y.shape == p.shape and y.dtype == np.float32
    assert set(np.unique(y)) <= {0.0, 1.0}
    # Each block's mean estimates its p with standard error sqrt(p (1 - p) / n).
    for block, prob in ((y[:n], 0.2), (y[n:2 * n], 0.8)):
        assert abs(block.mean() - prob) < Z * np.sqrt(prob * (1 - prob) / n)
    assert (y[2 * n:2 * n + 100] == 0).all() and (y[2 * n + 100:] == 1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bernoulli_dtype_and_compiled_seed(backend):
    p = np.full((4, 50), 0.5, np.float32)
    model = bernoulli_model(backend, p.shape, dtype=TensorProto.INT32, seed=2.0)
    fn = transmuter.compile(model, {"p": p})
    a, b = np.asarray(fn({"p": p})["y"]), np.asarray(fn({"p": p})["y"])
    assert a.dtype == np.int32 and a.shape == (4, 50)
    np.testing.assert_array_equal(a, b)  # a seeded node draws the same values every call
    np.testing.assert_array_equal(a, np.asarray(transmuter.run(model, {"p": p})["y"]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [None, TensorProto.INT64])
def test_multinomial_distribution(backend, dtype):
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]])
    logits = np.log(np.maximum(probs, 1e-30)).astype(np.float32)
    samples = 20000
    attrs = {"sample_size": samples, "seed": 11.0}
    if dtype is not None:
        attrs["dtype"] = dtype
    out = dtype if dtype is not None else TensorProto.INT32
    model = load([helper.make_node("Multinomial", ["x"], ["y"], **attrs)],
                 [info("x", TensorProto.FLOAT, [2, 3])], [info("y", out, [2, samples])], backend)
    y = np.asarray(transmuter.run(model, {"x": logits})["y"])
    assert y.shape == (2, samples)
    assert y.dtype == (np.int64 if dtype is not None else np.int32)
    assert y.min() >= 0 and y.max() < 3
    # A class frequency estimates its probability with standard error sqrt(p (1 - p) / samples).
    for row in range(2):
        freq = np.bincount(y[row], minlength=3) / samples
        for c in range(3):
            prob = probs[row, c]
            assert abs(freq[c] - prob) <= Z * np.sqrt(prob * (1 - prob) / samples)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_compiled_draws_differ_between_calls_unless_seeded(backend):
    """A compiled function threads a new key through each call; a `seed` attribute fixes it."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("RandomNormalLike", ["x"], ["free"]),
             helper.make_node("RandomNormalLike", ["x"], ["fixed"], seed=3.0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("free", TensorProto.FLOAT, [64]),
                               helper.make_tensor_value_info("fixed", TensorProto.FLOAT, [64])])
    model = transmuter.load(helper.make_model(graph), backend=backend)
    feed = {"x": np.zeros(64, np.float32)}
    fn = transmuter.compile(model, feed)
    a, b = fn(feed), fn(feed)
    assert fn.cache_info().misses == 1
    assert not np.array_equal(np.asarray(a["free"]), np.asarray(b["free"]))
    np.testing.assert_array_equal(np.asarray(a["fixed"]), np.asarray(b["fixed"]))
    # rng_seed fixes the call's key: the unseeded op repeats its draws, another seed differs
    c, d, e = fn(feed, rng_seed=7), fn(feed, rng_seed=7), fn(feed, rng_seed=8)
    np.testing.assert_array_equal(np.asarray(c["free"]), np.asarray(d["free"]))
    assert not np.array_equal(np.asarray(c["free"]), np.asarray(e["free"]))
    assert fn.cache_info().misses == 1  # the key is an argument: no new compile
    with pytest.raises(transmuter.errors.InputError, match="rng_seed must be an int"):
        fn(feed, rng_seed="7")


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_dropout_distribution_and_mask(backend):
    ratio, shape = 0.3, (200, 100)
    # Dropout's seed is an INT (the Random* ops' a FLOAT): load-time validation refuses a FLOAT
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=3)
    r = helper.make_tensor("r", TensorProto.FLOAT, [], [ratio])
    t = helper.make_tensor("t", TensorProto.BOOL, [], [True])
    graph = helper.make_graph([node], "g", [info("x", TensorProto.FLOAT, list(shape))],
                              [info("y", TensorProto.FLOAT, list(shape)),
                               info("mask", TensorProto.BOOL, list(shape))], initializer=[r, t])
    model = transmuter.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]),
                            backend=backend)
    x = np.random.default_rng(0).uniform(1, 2, shape).astype(np.float32)
    out = transmuter.run(model, {"x": x})
    y, mask = np.asarray(out["y"]), np.asarray(out["mask"])
    assert y.shape == shape and y.dtype == np.float32 and mask.dtype == bool
    # kept elements scaled by 1 / (1 - ratio) (f32 rounding), dropped ones exactly zero
    np.testing.assert_allclose(y[mask], x[mask] / (1 - ratio), rtol=1e-6)
    assert (y[~mask] == 0).all()
    # the kept fraction is Binomial(n, 1 - ratio) / n: standard error sqrt(r (1 - r) / n)
    assert abs(mask.mean() - (1 - ratio)) < Z * np.sqrt(ratio * (1 - ratio) / mask.size)
    # a seed fixes the mask
    assert (np.asarray(transmuter.run(model, {"x": x})["mask"]) == mask).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_dropout_is_identity(backend):
    node = helper.make_node("Dropout", ["x"], ["y", "mask"])
    graph = helper.make_graph([node], "g", [info("x", TensorProto.FLOAT, [3, 4])],
                              [info("y", TensorProto.FLOAT, [3, 4]),
                               info("mask", TensorProto.BOOL, [3, 4])])
    model = transmuter.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]),
                            backend=backend)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = transmuter.run(model, {"x": x})
    assert (np.asarray(out["y"]) == x).all() and np.asarray(out["mask"]).all()
