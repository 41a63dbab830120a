"""engine/passes/stft_phase.py: STFT phases at DC and Nyquist as torch.angle gives them (+pi for
an exact zero imaginary part and a negative real part), on both forms Kokoro's exports take."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import transmuter
from transmuter.engine.passes import stft_phase

from .fixtures import ROOT

FRAME = 8


def atan2_after_stft():
    """An STFT, then torch's ONNX export of atan2(imag, real) (symbolic_opset9.atan2), as the
    kokoro-onnx file computes its vocoder's phases."""
    c = lambda name, value, dtype=TensorProto.FLOAT: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=helper.make_tensor(name, dtype, [], [value]))
    nodes = [
        c("zero", 0.0), c("pi", np.pi), c("i0", 0, TensorProto.INT64),
        c("i1", 1, TensorProto.INT64), c("step", FRAME, TensorProto.INT64),
        c("length", FRAME, TensorProto.INT64),
        helper.make_node("STFT", ["signal", "step", "", "length"], ["spec"], onesided=1),
        helper.make_node("Gather", ["spec", "i0"], ["re"], axis=3),
        helper.make_node("Gather", ["spec", "i1"], ["im"], axis=3),
        helper.make_node("Div", ["im", "re"], ["ratio"]),
        helper.make_node("Atan", ["ratio"], ["atan"]),
        helper.make_node("Add", ["atan", "pi"], ["plus"]),
        helper.make_node("Sub", ["atan", "pi"], ["minus"]),
        helper.make_node("Greater", ["im", "zero"], ["up"]),
        helper.make_node("Where", ["up", "plus", "minus"], ["turned"]),
        helper.make_node("Less", ["re", "zero"], ["left"]),
        helper.make_node("Where", ["left", "turned", "atan"], ["phase"]),
    ]
    graph = helper.make_graph(
        nodes, "atan2", [helper.make_tensor_value_info("signal", TensorProto.FLOAT,
                                                       [1, 4 * FRAME, 1])],
        [helper.make_tensor_value_info("phase", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_atan2_of_an_stft_gives_torchs_pi_at_dc_and_nyquist(backend):
    model = transmuter.load(atan2_after_stft().SerializeToString(), backend=backend)
    fixed, rewrites = stft_phase.torch_phase(model)
    assert rewrites == 1
    n = np.arange(4 * FRAME)
    # DC and Nyquist both negative (-1.5 - (-1)^n), every bin with some energy (the noise)
    noise = np.random.default_rng(0).normal(0, 0.3, n.size)
    signal = (-1.5 - (-1.0) ** n + noise).astype(np.float32)
    frames = signal.reshape(4, FRAME).astype(np.float64)
    spectrum = np.fft.rfft(frames, axis=-1)
    # torch.angle: an imaginary part that is exactly zero at DC and Nyquist (real input) is +0
    spectrum[:, [0, FRAME // 2]] = spectrum[:, [0, FRAME // 2]].real + 0j
    want = np.angle(spectrum)
    assert np.allclose(want[:, [0, FRAME // 2]], np.pi)
    got = np.asarray(transmuter.run(fixed, {"signal": signal[None, :, None]})["phase"])[0]
    # float32 DFT against float64: the middle bins' angles within 1e-5 rad
    np.testing.assert_allclose(got, want, atol=1e-5)
    before = np.asarray(transmuter.run(model, {"signal": signal[None, :, None]})["phase"])[0]
    assert np.allclose(before[:, 0], -np.pi)  # as exported: y > 0 false at y == 0


def test_the_dft_kernel_of_customstft_gets_exact_zero_rows():
    model = transmuter.load(ROOT / "kokoro/onnx/model.onnx", backend="mlx")
    fixed, rewrites = stft_phase.torch_phase(model)
    assert rewrites == 1
    (conv,) = [n for n in fixed.graph.nodes if n.op_type == "Conv" and
               n.inputs[1].endswith("/exact_dc_nyquist")]
    original = np.asarray({**model.params, **model.constants}[conv.inputs[1].split("/exact")[0]])
    kernel = fixed.constants[conv.inputs[1]]
    assert np.abs(original[10]).max() > 0  # the export's ~1e-17 of sin(pi n)
    assert not kernel[[0, 10]].any() and np.array_equal(kernel[1:10], original[1:10])
    assert stft_phase.torch_phase(fixed) == (fixed, 0)  # nothing left to fix
