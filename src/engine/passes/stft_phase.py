"""STFT phases at DC and Nyquist as torch computes them (``torch.angle`` of an exact zero
imaginary part and a negative real part is +pi).

Kokoro's vocoder (iSTFTNet) reads the phases of its harmonic source's STFT. Its exports compute
them in ways that give -pi, or +pi and -pi at random, where torch gives +pi, at the DC and
Nyquist bins, whose imaginary parts are zero for a real signal; the vocoder's convolutions then
turn a frame-to-frame flip into a tone at the hop rate (4.8 kHz at 24 kHz, hop 5):

- **An STFT op followed by torch's ONNX atan2** (``Where(x < 0, Where(y > 0, atan(y/x) + pi,
  atan(y/x) - pi), atan(y/x))``, as the kokoro-onnx file has it): an exact DFT gives y = 0 and
  the ``y > 0`` test picks -pi. The test becomes ``y >= 0`` for a y read from an STFT's output.
- **The STFT as convolutions** (kokoro's CustomSTFT, hexgrad's export.py): the imaginary DFT
  kernel's Nyquist row is sin(pi n) rounded to float32, ~1e-17 instead of 0, so y is rounding
  noise whose sign follows the summation order, and the export's own correction (y == 0 and
  x < 0 -> pi) misses it. That row (and the DC row) become exact zeros.

Both rewrites are found in the graph, never by node names; a graph with neither is unchanged."""

import dataclasses

import numpy as np

from ... import ops

# ops between an STFT's output and the imaginary part that atan2 reads
_PICKS = frozenset({"Gather", "Slice", "Squeeze", "Unsqueeze", "Transpose", "Reshape", "Split",
                    "Identity"})


def torch_phase(model):
    """(``model`` with its STFT phases as torch's, how many places changed): a rewrite over the
    same weights, or ``model`` itself and 0 when its graph has no such phase."""
    graph, constants = model.graph, dict(model.constants)
    weights = {**model.params, **constants}
    producers = {out: node for node in graph.nodes for out in node.outputs}
    opset = model.opsets.get("", 12)
    changed = {}
    for node in graph.nodes:
        test = _atan2_test(node, producers, weights)
        if test is not None:
            changed[id(test)] = dataclasses.replace(
                test, op_type="GreaterOrEqual", opdef=ops.lookup("", "GreaterOrEqual", opset))
        conv = _dft_kernel(node, weights, constants)
        if conv is not None:
            changed[id(node)] = conv
    if not changed:
        return model, 0
    other = model.with_graph(dataclasses.replace(
        graph, nodes=[changed.get(id(n), n) for n in graph.nodes]))
    other.constants = constants
    return other, len(changed)


def _atan2_test(node, producers, weights):
    """The ``y > 0`` node of torch's atan2 decomposition at ``node`` (its inner Where) when y
    comes from an STFT; else None."""
    if node.op_type != "Where" or len(node.inputs) != 3:
        return None
    test = producers.get(node.inputs[0])
    if test is None or test.op_type != "Greater" or \
            not _is_zero(test.inputs[1], producers, weights):
        return None
    plus, minus = (producers.get(name) for name in node.inputs[1:])
    if not (plus and minus and plus.op_type == "Add" and minus.op_type == "Sub"):
        return None
    atan = producers.get(minus.inputs[0])
    if atan is None or atan.op_type != "Atan" or atan.outputs[0] not in plus.inputs:
        return None
    return test if _from_stft(test.inputs[0], producers) else None


def _from_stft(name, producers, depth=8):
    node = producers.get(name)
    while node is not None and depth:
        if node.op_type == "STFT":
            return True
        if node.op_type not in _PICKS:
            return False
        node, depth = producers.get(node.inputs[0]), depth - 1
    return False


def _is_zero(name, producers, weights):
    value = weights.get(name)
    if value is None and name in producers and producers[name].op_type == "Constant":
        value = producers[name].attrs.get("value")
    return value is not None and np.size(value) == 1 and float(np.asarray(value)) == 0.0


def _dft_kernel(node, weights, constants):
    """A Conv reading CustomSTFT's imaginary DFT kernel [n/2 + 1, 1, n] (-sin(2 pi k t / n)
    times a window) whose DC and Nyquist rows are not exact zeros: a copy of the node reading
    the kernel with them zeroed (added to ``constants``)."""
    if node.op_type != "Conv" or len(node.inputs) < 2 or node.inputs[1] not in weights:
        return None
    kernel = np.asarray(weights[node.inputs[1]])
    if kernel.ndim != 3 or kernel.shape[1] != 1 or kernel.shape[0] != kernel.shape[2] // 2 + 1 \
            or kernel.shape[2] % 2 or kernel.dtype.kind != "f":
        return None
    n = kernel.shape[2]
    basis = -np.sin(2 * np.pi * np.outer(np.arange(n // 2 + 1), np.arange(n)) / n)
    window = kernel[1, 0] / np.where(np.abs(basis[1]) > 1e-6, basis[1], 1.0)
    if not np.allclose(kernel[:, 0], basis * window, atol=1e-6 * np.abs(kernel).max()):
        return None
    if not kernel[[0, n // 2]].any():
        return None
    exact = kernel.copy()
    exact[[0, n // 2]] = 0
    name = node.inputs[1] + "/exact_dc_nyquist"
    constants[name] = exact
    return dataclasses.replace(node, inputs=[node.inputs[0], name, *node.inputs[2:]])
