"""Bounds on what a file can make us allocate or run. Ops whose output size a value decides
(Expand, Tile, ConstantOfShape, Range, Pad, OneHot, Resize) refuse a size past the machine's
memory before they allocate: an OpError naming the node and the size, where the eager Resize
aborted the process and MLX's Tile / Pad segfaulted. Loops refuse to run for ever."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import transmuter
from transmuter.errors import OpError

from .test_engine import info, make_model

BIG = 2**40  # elements: 4 TiB of float32, past any test machine


def graph(node, inputs, initializers):
    return make_model([node], inputs, [info("y", T.FLOAT, None)], initializers)


X = info("x", T.FLOAT, [1, 1, 2, 2])
CASES = {
    "Expand": (helper.make_node("Expand", ["x", "s"], ["y"]), [X],
               {"s": np.array([BIG, 1, 2, 2], np.int64)}),
    "Tile": (helper.make_node("Tile", ["x", "r"], ["y"]), [X],
             {"r": np.array([BIG, 1, 1, 1], np.int64)}),
    "ConstantOfShape": (helper.make_node("ConstantOfShape", ["s"], ["y"]), [],
                        {"s": np.array([BIG, 4], np.int64)}),
    "Range": (helper.make_node("Range", ["a", "b", "d"], ["y"]), [],
              {"a": np.array(0, np.float32), "b": np.array(2.0**45, np.float32),
               "d": np.array(1, np.float32)}),
    "Pad": (helper.make_node("Pad", ["x", "p"], ["y"]), [X],
            {"p": np.array([0, 0, BIG, 0, 0, 0, 0, 0], np.int64)}),
    "OneHot": (helper.make_node("OneHot", ["i", "n", "v"], ["y"]),
               [info("i", T.INT64, [4])],
               {"n": np.array([BIG], np.int64), "v": np.array([0, 1], np.float32)}),
    "Resize": (helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear"), [X],
               {"sc": np.array([1, 1, 2**19, 2**19], np.float32)}),
}
FEED = {"x": np.ones((1, 1, 2, 2), np.float32), "i": np.arange(4, dtype=np.int64)}


def feed_of(model):
    return {v.name: FEED[v.name] for v in model.inputs}


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("case", CASES)
def test_a_bomb_is_refused_before_it_allocates(case, backend):
    model = transmuter.load(graph(*CASES[case]), backend=backend)
    with pytest.raises(OpError, match=rf"{case} node.*GiB, past the .*GiB an array may take"):
        transmuter.run(model, feed_of(model))
    if model.inputs:  # compiled: the same refusal while tracing, before XLA allocates
        with pytest.raises(OpError, match="GiB, past"):
            transmuter.compile(model, feed_of(model))


def test_the_limit_moves_with_the_environment(monkeypatch):
    node, inputs, inits = CASES["Tile"]
    model = transmuter.load(graph(node, inputs, {"r": np.array([4, 1, 1, 1], np.int64)}))
    feed = feed_of(model)
    assert transmuter.run(model, feed)["y"].shape == (4, 1, 2, 2)  # 64 bytes: fine
    monkeypatch.setenv("TRANSMUTER_MAX_ARRAY_BYTES", "32")
    with pytest.raises(OpError, match=r"\[4, 1, 2, 2\] of float32"):
        transmuter.run(model, feed)


def counted_loop(trips, cond_from_data=False):
    """x += 1, ``trips`` times (a for loop as exporters write it), or while x < 1e9."""
    nodes = [helper.make_node("Add", ["x", "one"], ["x_out"])]
    if cond_from_data:
        nodes.append(helper.make_node("Less", ["x_out", "far"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["c_out"]))
    body = helper.make_graph(
        nodes, "body", [info("i", T.INT64, []), info("c", T.BOOL, []), info("x", T.FLOAT, [1])],
        [info("c_out", T.BOOL, []), info("x_out", T.FLOAT, [1])],
        [helper.make_tensor("one", T.FLOAT, [1], [1.0]),
         helper.make_tensor("far", T.FLOAT, [1], [1e9])])
    return make_model([helper.make_node("Loop", ["M", "cond", "x0"], ["x"], body=body)],
                      [info("x0", T.FLOAT, [1])], [info("x", T.FLOAT, [1])],
                      {"M": np.array(trips, np.int64), "cond": np.array(True)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_loop_past_its_bound_is_refused_before_it_runs(backend):
    feed = {"x0": np.zeros(1, np.float32)}
    small = transmuter.load(counted_loop(5), backend=backend)
    import onnxruntime as ort
    want = ort.InferenceSession(counted_loop(5).SerializeToString()).run(None, feed)[0]
    np.testing.assert_array_equal(transmuter.run(small, feed)["x"], want)  # [5.]: exact
    endless = transmuter.load(counted_loop(2**62), backend=backend)
    for call in (lambda: transmuter.run(endless, feed), lambda: transmuter.compile(endless, feed)):
        with pytest.raises(OpError, match=r"Loop would run 4,611,686,018,427,387,904 iterations"):
            call()


def test_a_host_loop_stops_at_the_bound(monkeypatch):
    """A loop whose condition comes from data runs on the host (eager) until the bound."""
    monkeypatch.setenv("TRANSMUTER_MAX_LOOP_TRIPS", "100")
    model = transmuter.load(counted_loop(2**62, cond_from_data=True))
    with pytest.raises(OpError, match="past the 100 a loop may run"):
        transmuter.run(model, {"x0": np.zeros(1, np.float32)})
    monkeypatch.setenv("TRANSMUTER_MAX_LOOP_TRIPS", "1000")
    model = transmuter.load(counted_loop(50))  # within the bound: runs
    assert float(transmuter.run(model, {"x0": np.zeros(1, np.float32)})["x"][0]) == 50.0


def _identity(dtype=T.INT64):
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [info("x", dtype, [2, None])],
                      [info("y", dtype, [2, None])])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_huge_zero_stride_input_is_refused_with_its_size(backend, mode):
    """issue 14 (fuzz 20261201:655, :1854): a broadcast view of 2^31 columns costs nothing until
    it is copied to the device, where it ran out of memory (MemoryError, RESOURCE_EXHAUSTED)."""
    from transmuter.errors import InputError
    model = transmuter.load(_identity(), backend=backend)
    x = np.broadcast_to(np.int64(1), (2, BIG))
    with pytest.raises(InputError, match=r"Input 'x' would be \[2, 1099511627776\] of int64: "
                                         r"16,384.0 GiB, past the .* GiB.*smaller batch"):
        transmuter.run(model, {"x": x}) if mode == "eager" else model(x=x)


def test_mlx_refuses_an_axis_its_32_bit_shapes_cannot_hold(monkeypatch):
    # within the size limit (raised here) but past MLX's int32 dims: its OverflowError before
    from transmuter.errors import InputError
    monkeypatch.setenv("TRANSMUTER_MAX_ARRAY_BYTES", str(2**45))
    model = transmuter.load(_identity(T.BOOL), backend="mlx")
    with pytest.raises(InputError, match=r"axis of 2\^31 or more.*backend='jax'"):
        transmuter.run(model, {"x": np.broadcast_to(np.True_, (2, 2**31 + 1))})


def _chain(n):
    """x -> Relu -> ... (``n`` nodes): each value 64 KiB, ``n`` of them made in one run."""
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    return make_model(nodes, [info("v0", T.FLOAT, [16, 1024])], [info(f"v{n}", T.FLOAT, None)])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_values_together_past_the_limit_are_refused(backend, monkeypatch):
    """issue 14 (fuzz 20261202:2837: a batch of 100,000 images through clip, eager JAX, failed
    inside XLA): no one array is past the limit, their sum is. An eager run holds every value
    until it returns, so its sum counts them all; a compiled segment frees each after its last
    reader, so the same chain holds two at a time and runs (engine/live_bytes.py)."""
    model = transmuter.load(_chain(8), backend=backend)
    x = -np.arange(16 * 1024, dtype=np.float32).reshape(16, 1024) % 7 - 3
    monkeypatch.setenv("TRANSMUTER_MAX_ARRAY_BYTES", str(200 << 10))  # 200 KiB; 64 KiB each
    with pytest.raises(OpError, match=r"Relu node: the values live after it would take "
                                      r"0.25 MiB together, past the 0.20 MiB"):
        transmuter.run(model, {"v0": x})
    np.testing.assert_array_equal(model(v0=x)["v8"], np.maximum(x, 0))  # Relu: exact
    monkeypatch.delenv("TRANSMUTER_MAX_ARRAY_BYTES")
    np.testing.assert_array_equal(transmuter.run(model, {"v0": x})["v8"], np.maximum(x, 0))


def test_the_limit_is_what_an_address_space_limit_leaves():
    """A process under RLIMIT_AS (the fuzzer's workers: 6 GB) has less than the machine."""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)); "
            "from transmuter.ops.bounds import max_array_bytes; print(max_array_bytes())")
    limit = int(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert 0 < limit < 6 << 30
