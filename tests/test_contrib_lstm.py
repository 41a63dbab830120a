"""LSTM and com.microsoft DynamicQuantizeLSTM against onnxruntime (optimizations off).

The quantized LSTM quantizes its float operands to uint8 at every step (ops/contrib/
quantized_lstm.py), so a value within an ulp of a rounding tie can land one quantization step
apart in ORT and here; those flips are the file's own noise. Each comparison therefore measures
that noise first, ORT against itself with the input scaled by 1 + 1e-6, and allows a small
multiple of it. The integer products are exact on both sides; the weights are 7-bit, as
``quantize_dynamic(reduce_range=True)`` writes them (ORT's x86 u8s8 kernel saturates int16 pair
sums for full-range int8, a hardware artefact we do not reproduce).

ORT quantizes the hidden state over the rows one thread computes: with more than one thread and a
batch of 2 or more (hidden <= 256) or more than 4, each thread's slice of the batch has its own
range, so its result depends on the machine's core count. ORT runs single-threaded here, where a
step's range covers the whole batch, as ours does (and as any thread count gives for batch 1,
Kokoro's case)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.contrib_graphs import BACKENDS, feeds, run_ours, single_node

RNG = np.random.default_rng(7)
OUTS = {"Y": np.float32, "Y_h": np.float32, "Y_c": np.float32}


def _lstm_inputs(steps, batch, size, hidden, dirs, *, peephole=False, initial=False,
                 lens=None):
    inputs = {"X": RNG.standard_normal((steps, batch, size)).astype(np.float32)}
    return inputs, {
        "B": (RNG.standard_normal((dirs, 8 * hidden)) * 0.1).astype(np.float32),
        "sequence_lens": None if lens is None else np.asarray(lens, np.int32),
        "initial_h": RNG.standard_normal((dirs, batch, hidden)).astype(np.float32)
        if initial else None,
        "initial_c": RNG.standard_normal((dirs, batch, hidden)).astype(np.float32)
        if initial else None,
        "P": (RNG.standard_normal((dirs, 3 * hidden)) * 0.1).astype(np.float32)
        if peephole else None}


def _quantized_inputs(steps, batch, size, hidden, dirs, *, weights, per_column, **kw):
    x, rest = _lstm_inputs(steps, batch, size, hidden, dirs, **kw)
    cols = (dirs, 4 * hidden) if per_column else (dirs,)
    if weights == "int8":
        w = RNG.integers(-64, 65, (dirs, size, 4 * hidden), dtype=np.int8)
        r = RNG.integers(-64, 65, (dirs, hidden, 4 * hidden), dtype=np.int8)
        w_zp = r_zp = np.zeros(cols, np.int8)
    else:  # uint8: one zero point per direction, or one in all for per-column (ORT's rule)
        w = RNG.integers(0, 256, (dirs, size, 4 * hidden), dtype=np.uint8)
        r = RNG.integers(0, 256, (dirs, hidden, 4 * hidden), dtype=np.uint8)
        w_zp, r_zp = (np.full(cols, RNG.integers(100, 156), np.uint8) if per_column else
                      RNG.integers(100, 156, cols, dtype=np.uint8) for _ in range(2))
    scale = 0.3 / np.sqrt(size * 64)
    inputs = {**x, "W": w, "R": r, **rest,
              "W_scale": (RNG.random(cols) * scale + scale / 2).astype(np.float32),
              "W_zero_point": w_zp,
              "R_scale": (RNG.random(cols) * scale + scale / 2).astype(np.float32),
              "R_zero_point": r_zp}
    return inputs


def _compare_within_noise(model, inputs, backend, *, floor):
    """Largest difference from ORT, against ORT's own change for X * (1 + 1e-6)."""
    want = run_ort(model, inputs)
    nudged = run_ort(model, {**inputs, "X": inputs["X"] * np.float32(1 + 1e-6)})
    got = run_ours(model, inputs, backend)
    for name in want:
        noise = np.abs(nudged[name] - want[name]).max()
        err = np.abs(got[name] - want[name]).max()
        assert got[name].shape == want[name].shape, name
        # 4x ORT's own noise, at least ``floor``: the f32 summation order of the float parts.
        assert err <= max(4 * noise, floor), f"{name}: {err} from ORT (its noise {noise})"


def run_ort(model, inputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1  # see the module's note
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds(model, inputs))))


CONSTANTS = {"W", "R", "B", "P", "W_scale", "W_zero_point", "R_scale", "R_zero_point"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("direction,weights,per_column,extra", [
    ("bidirectional", "int8", False, {}),  # Kokoro's form
    ("forward", "int8", True, {"peephole": True}),
    ("reverse", "uint8", False, {"initial": True}),
    ("bidirectional", "uint8", True, {"peephole": True, "initial": True}),
    ("forward", "int8", False, {"lens": [5, 5, 5]}),
    ("bidirectional", "int8", False, {"lens": [5, 3, 4]}),
])
def test_dynamic_quantize_lstm(backend, direction, weights, per_column, extra):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = _quantized_inputs(5, 3, 12, 8, dirs, weights=weights, per_column=per_column,
                               **extra)
    model = single_node("DynamicQuantizeLSTM", inputs, OUTS, constants=CONSTANTS,
                        hidden_size=8, direction=direction)
    _compare_within_noise(model, inputs, backend, floor=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("weights", ["int8", "uint8"])
def test_dynamic_quantize_lstm_refuses_zero_points_that_vary(backend, weights):
    # ORT reads one zero point per direction and refuses per-column ones that differ (uint8)
    # or are not zero (int8): "Weight point must be constant" / "must be zero".
    inputs = _quantized_inputs(3, 1, 12, 8, 1, weights=weights, per_column=True)
    inputs["W_zero_point"] = inputs["W_zero_point"].copy()
    inputs["W_zero_point"][0, 5] += 1
    model = single_node("DynamicQuantizeLSTM", inputs, OUTS, constants=CONSTANTS,
                        hidden_size=8)
    with pytest.raises(Exception, match="must be constant|must be zero"):
        run_ort(model, inputs)
    with pytest.raises(Exception, match="W_zero_point.* must be"):
        run_ours(model, inputs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_quantize_lstm_from_quantize_dynamic(backend, tmp_path):
    # The graph onnxruntime's own quantizer writes from a float LSTM (as Kokoro's was made).
    from onnxruntime.quantization import QuantType, quantize_dynamic
    size, hidden = 16, 12
    w = (RNG.standard_normal((2, 4 * hidden, size)) * 0.3).astype(np.float32)
    r = (RNG.standard_normal((2, 4 * hidden, hidden)) * 0.3).astype(np.float32)
    b = (RNG.standard_normal((2, 8 * hidden)) * 0.1).astype(np.float32)
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                            direction="bidirectional")
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [7, 1, size])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in OUTS],
        [helper.make_tensor(n, TensorProto.FLOAT, v.shape, v.ravel()) for n, v in
         (("W", w), ("R", r), ("B", b))])
    import onnx
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                                ir_version=10), src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, reduce_range=True,
                     op_types_to_quantize=["LSTM"])
    model = onnx.load(dst)
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    inputs = {"X": RNG.standard_normal((7, 1, size)).astype(np.float32)}
    _compare_within_noise(model, inputs, backend, floor=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("direction,extra", [
    ("bidirectional", {"peephole": True, "initial": True}),
    ("reverse", {"lens": [4, 2, 3]}),
])
def test_lstm(backend, direction, extra):
    # The float LSTM the quantized one shares its time loop with; ORT's gates use MLAS's
    # logistic and tanh approximations (a few ulp of f32).
    dirs = 2 if direction == "bidirectional" else 1
    size, hidden = 6, 5
    x, rest = _lstm_inputs(4, 3, size, hidden, dirs, **extra)
    inputs = {**x, "W": RNG.standard_normal((dirs, 4 * hidden, size)).astype(np.float32),
              "R": RNG.standard_normal((dirs, 4 * hidden, hidden)).astype(np.float32), **rest}
    model = single_node("LSTM", inputs, OUTS, constants={"W", "R", "B", "P"}, domain="",
                        hidden_size=hidden, direction=direction)
    want, got = run_ort(model, inputs), run_ours(model, inputs, backend)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)
