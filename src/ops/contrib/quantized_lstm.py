"""com.microsoft DynamicQuantizeLSTM: the LSTM that onnxruntime's ``quantize_dynamic`` writes, with
int8/uint8 weights W (dirs, input, 4 * hidden) and R (dirs, hidden, 4 * hidden), already
transposed, and a scale per direction (dirs,) or per gate column (dirs, 4 * hidden).

As ONNX Runtime's CPU kernel computes it (providers/cpu/rnn/rnn_helpers.cc, the quantized
ComputeGemm): each product's left operand is quantized to uint8 as it comes, over the whole
matrix (DynamicQuantizeLinear's range: [min(a, 0), max(a, 0)]): the inputs of every step at once
for W, the hidden state of the whole batch at each step for R. (ORT with several threads splits
a batch of 2 or more rows among them, each slice with its own range, so that result depends on
the core count; ours is its single-threaded one, and any thread count's for batch 1.) The
integer product accumulates exactly in int32 and is scaled by a_scale * w_scale. The weight's
zero point is the first of its direction (ORT requires it constant, and zero for int8). Bias,
peepholes and gates are float, as in LSTM."""

import numpy as np

from ..qlinear import int_matmul
from ..quantize import dynamic_quantize_linear
from ..recurrent import _lstm
from ..registry import op

MS = "com.microsoft"
_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)


def _quantized_product(xp, a, weight, zero_point, scale, valid=None):
    """a (..., K) float @ weight (K, N) int, with ``a`` quantized dynamically; ``valid`` (the
    leading axis of a) limits the range to the rows ORT quantizes."""
    if valid is not None:  # zeros leave the range as it is (it always includes 0)
        a = xp.where(xp.reshape(valid, (-1,) + (1,) * (a.ndim - 1)), a,
                     xp.zeros((), xp.dtype_of(a)))
    q, a_scale, a_zero = dynamic_quantize_linear(xp, a)
    centered = xp.astype(q, _I32) - xp.astype(a_zero, _I32)
    w = xp.astype(weight, _I32) - xp.astype(zero_point, _I32)
    acc = int_matmul(xp, centered, w)
    return xp.astype(acc, _F32) * (a_scale * scale)


def _per_direction(xp, value, d, hidden, label):
    """Direction ``d``'s scale or zero point: a scalar (per-tensor) or (4 * hidden,) columns."""
    if value.ndim not in (1, 2) or (value.ndim == 2 and value.shape[1] != 4 * hidden):
        raise ValueError(f"DynamicQuantizeLSTM {label} of shape {list(value.shape)} must be "
                             f"(directions,) or (directions, {4 * hidden})")
    return value[d]


def _check_zero_point(xp, zp, name):
    """ORT's rule for per-column zero points: all zero for int8 weights, all one value for
    uint8, since its kernel reads only the first. Checked where the values are known (not a
    zero point computed inside a compiled graph)."""
    if zp.ndim != 2 or zp.size == 0 or not xp.is_concrete(zp):
        return
    zp = np.asarray(zp)
    if zp.dtype == np.int8 and zp.any():
        raise ValueError(f"DynamicQuantizeLSTM {name} of int8 weights must be zero, as ONNX "
                         f"Runtime requires")
    if zp.dtype == np.uint8 and (zp != zp.flat[0]).any():
        raise ValueError(f"DynamicQuantizeLSTM {name} must be constant (one value for every "
                         f"column and direction), as ONNX Runtime requires")


@op("DynamicQuantizeLSTM", 1, domain=MS)
def dynamic_quantize_lstm(xp, x, w, r, b=None, sequence_lens=None, initial_h=None,
                          initial_c=None, p=None, w_scale=None, w_zero_point=None, r_scale=None,
                          r_zero_point=None, *, hidden_size=None, activations=None,
                          activation_alpha=None, activation_beta=None, clip=None,
                          direction="forward", input_forget=0):
    hidden = r.shape[1]
    if w.ndim != 3 or r.ndim != 3 or w.shape[2] != 4 * hidden or r.shape[2] != 4 * hidden:
        raise ValueError(f"DynamicQuantizeLSTM weights W {list(w.shape)} and R "
                             f"{list(r.shape)} must be (directions, input, 4 * hidden) and "
                             f"(directions, hidden, 4 * hidden)")

    _check_zero_point(xp, w_zero_point, "W_zero_point")
    _check_zero_point(xp, r_zero_point, "R_zero_point")

    def zero_of(zp, d):
        # ORT reads one zero point per direction: the first of its row.
        return xp.reshape(_per_direction(xp, zp, d, hidden, "zero point"), (-1,))[0]

    def project(d, xd, valid):
        scale = xp.astype(_per_direction(xp, w_scale, d, hidden, "W_scale"), _F32)
        return _quantized_product(xp, xd, w[d], zero_of(w_zero_point, d), scale, valid)

    def recur(d, h, live):
        # A finished row's state is zero in ORT's Y buffer, which it quantizes with the rest.
        if live is not None:
            h = xp.where(live[:, None], h, xp.zeros((), xp.dtype_of(h)))
        scale = xp.astype(_per_direction(xp, r_scale, d, hidden, "R_scale"), _F32)
        return _quantized_product(xp, h, r[d], zero_of(r_zero_point, d), scale)

    return _lstm(xp, x, w, r, b, sequence_lens, initial_h, initial_c, p, activations=activations,
                 alpha=activation_alpha, beta=activation_beta, clip=clip, direction=direction,
                 layout=0, input_forget=input_forget, project=project, recur=recur)
