"""Sliding-window geometry shared by convolution and pooling: kernel, strides, dilations, pads
(explicit or ``auto_pad``) and ``ceil_mode`` resolved to per-axis begin/end pads and output sizes.

All of it is host arithmetic on shapes and attributes."""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Window:
    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple  # pads before each spatial axis
    end: tuple  # pads after each spatial axis (ceil_mode's extra included)
    out: tuple  # output spatial sizes
    given_end: tuple = None  # the pads after each axis before ceil_mode's extra

    @property
    def pads(self):
        """ONNX order: [begin..., end...]."""
        return list(self.begin) + list(self.end)

    @property
    def padding(self):
        """(begin, end) pairs per spatial axis."""
        return list(zip(self.begin, self.end))


def _ints(values, n, default):
    return tuple(int(v) for v in values) if values is not None and len(values) else (default,) * n


def resolve(in_shape, kernel, *, strides=None, pads=None, dilations=None, auto_pad="NOTSET",
            ceil_mode=0):
    """The window of a convolution or pool over spatial sizes ``in_shape``."""
    n = len(in_shape)
    kernel = tuple(int(k) for k in kernel)
    strides = _ints(strides, n, 1)
    dilations = _ints(dilations, n, 1)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_shape, strides)]
        total = [max(0, (o - 1) * s + w - i) for o, s, w, i in zip(out, strides, span, in_shape)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return Window(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out), tuple(end))
    if auto_pad == "VALID":
        begin = end = (0,) * n
    else:
        p = _ints(pads, 2 * n, 0)
        begin, end = p[:n], p[n:]
    out, final_end = [], []
    for i in range(n):
        padded = in_shape[i] + begin[i] + end[i]
        size = (padded - span[i]) / strides[i] + 1
        if ceil_mode:
            o = int(math.ceil(size))
            if (o - 1) * strides[i] >= in_shape[i] + begin[i]:  # the last window starts in padding
                o -= 1
        else:
            o = int(math.floor(size))
        o = max(o, 0)
        out.append(o)
        # ceil mode: pad the end further so that the last window fits.
        final_end.append(max(end[i], (o - 1) * strides[i] + span[i] - in_shape[i] - begin[i]))
    return Window(kernel, strides, dilations, tuple(begin), tuple(final_end), tuple(out),
                  tuple(end))
