"""DFT of real signals (the real-input FFT plus the Hermitian mirror for a full spectrum) at odd,
padded and truncated lengths on either axis, against NumPy's float64 FFT, as the spec's
reference computes it; the conformance cases only have length 10."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter


def dft_model(shape, length, axis, onesided):
    inits = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    if length:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "length"))
    node = helper.make_node("DFT", ["x", "length" if length else "", "axis"], ["y"],
                            onesided=onesided)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("n,length,onesided,axis", [
    (7, None, 0, 1), (7, 9, 0, 1), (8, 5, 0, 2), (9, 12, 1, 1)])
def test_real_dft_matches_float64_fft(backend, n, length, onesided, axis):
    shape = (2, n, 5, 1) if axis == 1 else (2, 4, n, 1)
    x = np.random.default_rng(n).standard_normal(shape).astype(np.float32)
    size = length or n
    want = np.fft.fft(x[..., 0].astype(np.float64), n=size, axis=axis)
    if onesided:
        want = np.take(want, np.arange(size // 2 + 1), axis=axis)
    got = transmuter.run(transmuter.load(dft_model(shape, length, axis, onesided),
                                         backend=backend), {"x": x})["y"]
    got = np.asarray(got)
    assert got.shape == want.shape + (2,) and got.dtype == np.float32
    # float32 FFT rounding on sums of up to 12 N(0, 1) terms: a few 1e-7.
    np.testing.assert_allclose(got[..., 0], want.real, atol=2e-6)
    np.testing.assert_allclose(got[..., 1], want.imag, atol=2e-6)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("rank", [2, 3])
def test_stft_of_a_rank_2_signal_is_real(backend, rank):
    # Kokoro's export gives STFT a (batch, length) signal, which onnxruntime reads as real (the
    # spec writes (batch, length, 1)); both forms against onnxruntime.
    from tests.contrib_graphs import check, single_node
    x = np.random.default_rng(3).standard_normal((2, 100)).astype(np.float32)
    inputs = {"signal": x if rank == 2 else x[..., None], "frame_step": np.array(5, np.int64),
              "window": np.hanning(20).astype(np.float32),
              "frame_length": np.array(20, np.int64)}
    model = single_node("STFT", inputs, {"Y": np.float32}, domain="", opset=17,
                        constants={"frame_step", "frame_length"}, onesided=1)
    # float32 FFTs of 20 terms of size ~1 (bins up to ~10): ORT's own DFT (Bluestein for this
    # length) rounds to ~1.5e-5, e.g. a Nyquist bin's imaginary part that is exactly 0 in a
    # real-input FFT (ours) comes out +-1.5e-5 there.
    check(model, inputs, backend, atol=3e-5)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_stft_phase_of_a_constant_frame_is_finite(backend):
    # issue 40: Kokoro's vocoder takes the STFT's phase as atan(im / re). The FFT cancels a
    # constant frame's Nyquist bin under a Hann window to exactly 0 + 0j, and 0 / 0 made its
    # audio NaN; onnxruntime's DFT leaves rounding noise there, and so does ours now.
    from onnx import TensorProto, helper, numpy_helper
    signal = np.concatenate([np.full(60, -0.0294, np.float32),
                             np.random.default_rng(5).standard_normal(40).astype(np.float32)])
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)).astype(np.float32)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("step", np.array(5, np.int64)), ("window", window), ("zero", np.array(0, np.int64)),
        ("one", np.array(1, np.int64)))]
    nodes = [helper.make_node("STFT", ["signal", "step", "window"], ["spec"], onesided=1),
             helper.make_node("Gather", ["spec", "zero"], ["re"], axis=3),
             helper.make_node("Gather", ["spec", "one"], ["im"], axis=3),
             helper.make_node("Div", ["im", "re"], ["ratio"]),
             helper.make_node("Atan", ["ratio"], ["phase"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [1, 100])],
        [helper.make_tensor_value_info("spec", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("phase", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from tests.contrib_graphs import run_ort
    want = run_ort(model, {"signal": signal[None]})
    got = transmuter.run(transmuter.load(model, backend=backend), {"signal": signal[None]})
    assert np.isfinite(want["phase"]).all()
    assert np.isfinite(np.asarray(got["phase"])).all()
    # the spectrum itself: ORT's Bluestein DFT rounds to ~1.1e-5 here (a bin that is 0 in
    # exact arithmetic), ours to a float32 sum of 20 terms
    np.testing.assert_allclose(np.asarray(got["spec"]), want["spec"], atol=3e-5)
