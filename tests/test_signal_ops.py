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
