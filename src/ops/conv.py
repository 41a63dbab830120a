"""Convolutions: Conv, ConvTranspose, DeformConv, CausalConvWithState, Col2Im.

Layout is ONNX's (N, C, *spatial) with weights (M, C/group, *kernel). Half-precision inputs
convolve in f32 and return their dtype. The backend's ``conv`` primitive does the work; a
transposed convolution is a convolution of the stride-dilated input with the flipped kernel."""

import itertools

import numpy as np

from . import window
from .registry import op
from .sample import interpolate


def _f32(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) else x


def _bias(xp, y, b):
    return y if b is None else y + xp.reshape(_f32(xp, b), (1, -1) + (1,) * (y.ndim - 2))


def _conv(xp, x, w, b, auto_pad, dilations, group, kernel_shape, pads, strides):
    win = window.resolve(x.shape[2:], w.shape[2:], strides=strides, pads=pads,
                         dilations=dilations, auto_pad=auto_pad)
    if x.ndim != w.ndim or x.shape[1] != w.shape[1] * group:
        # MLX's convolution reads past its buffers there (SIGSEGV); ONNX Runtime refuses
        raise ValueError(f"input shape {list(x.shape)} does not fit kernel {list(w.shape)} with "
                         f"group {group}: it needs rank {w.ndim} and {w.shape[1] * group} "
                         "channels on axis 1")
    if b is not None and tuple(b.shape) != (w.shape[0],):
        # broadcast over the output instead; ONNX Runtime refuses it (fuzz 20261202 Conv bias)
        raise ValueError(f"bias of shape {list(b.shape)} must be [{w.shape[0]}], one value per "
                         "output channel of the kernel")
    for axis, (size, k, d, (lo, hi)) in enumerate(zip(
            x.shape[2:], win.kernel, win.dilations, win.padding)):
        if size + lo + hi < (k - 1) * d + 1:
            # JAX's convolution gives an empty output there and the graph broadcasts on;
            # ONNX Runtime refuses the shape
            raise ValueError(
                f"input spatial axis {axis + 2} has size {size} (padded {size + lo + hi}), "
                f"smaller than the kernel's {(k - 1) * d + 1}: input shape {list(x.shape)}, "
                f"kernel {list(w.shape)}; give a larger input (an image resized to the "
                "model's size)")
    y = xp.conv(_f32(xp, x), _f32(xp, w), strides=win.strides, pads=win.pads,
                dilations=win.dilations, groups=group)
    return xp.astype(_bias(xp, y, b), xp.dtype_of(x))


@op("Conv", 1)
def conv(xp, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    return _conv(xp, x, w, b, auto_pad, dilations, group, kernel_shape, pads, strides)


def _conv_transpose(xp, x, w, b, auto_pad, dilations, group, output_padding, output_shape, pads,
                    strides):
    nd = x.ndim - 2
    in_shape, kernel = x.shape[2:], w.shape[2:]
    strides = list(strides) if strides else [1] * nd
    dilations = list(dilations) if dilations else [1] * nd
    output_padding = list(output_padding) if output_padding else [0] * nd
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = (list(output_shape)[-nd:] if output_shape is not None
               else [i * s for i, s in zip(in_shape, strides)])
        total = [s * (i - 1) + op_ + sp - o
                 for s, i, op_, sp, o in zip(strides, in_shape, output_padding, span, out)]
        if auto_pad == "SAME_UPPER":
            begin, end = [t // 2 for t in total], [t - t // 2 for t in total]
        else:
            begin, end = [t - t // 2 for t in total], [t // 2 for t in total]
    elif auto_pad == "VALID" or not pads:
        begin = end = [0] * nd
    else:
        begin, end = list(pads[:nd]), list(pads[nd:])
    # (C, M/g, *k) -> (M, C/g, *k), kernel flipped.
    c, m_g = w.shape[:2]
    wt = xp.reshape(w, (group, c // group, m_g) + tuple(kernel))
    wt = xp.reshape(xp.swapaxes(wt, 1, 2), (group * m_g, c // group) + tuple(kernel))
    wt = xp.flip(wt, axis=tuple(range(2, 2 + nd)))
    conv_pads = ([sp - 1 - p for sp, p in zip(span, begin)]
                 + [sp - 1 - p + o for sp, p, o in zip(span, end, output_padding)])
    y = xp.conv(_f32(xp, x), _f32(xp, wt), strides=[1] * nd, pads=conv_pads, dilations=dilations,
                groups=group, lhs_dilation=strides)
    return xp.astype(_bias(xp, y, b), xp.dtype_of(x))


@op("ConvTranspose", 1)
def conv_transpose(xp, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1,
                   kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                   strides=None):
    return _conv_transpose(xp, x, w, b, auto_pad, dilations, group, output_padding,
                           output_shape, pads, strides)


@op("DeformConv", 19)
def deform_conv(xp, x, w, offset, b=None, mask=None, *, dilations=None, group=1,
                kernel_shape=None, offset_group=1, pads=None, strides=None):
    """Each kernel tap samples the input bilinearly at its place plus a learned offset (zeros
    outside), scaled by ``mask``; then the taps contract with the weights per group."""
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    nd = len(kernel)
    k = int(np.prod(kernel))
    out = tuple(offset.shape[2:])
    strides = list(strides) if strides else [1] * nd
    dilations = list(dilations) if dilations else [1] * nd
    pads = list(pads) if pads else [0] * (2 * nd)
    xf = _f32(xp, x)
    dt = xp.dtype_of(xf)
    og = offset_group
    off = xp.reshape(xp.astype(offset, dt), (n * og, k, nd) + out)
    coords = []
    for axis in range(nd):
        # Host: where each tap of each output position lands before the offset, (k, *out).
        taps = np.array([t[axis] for t in itertools.product(*[range(s) for s in kernel])])
        base = (np.arange(out[axis]) * strides[axis] - pads[axis]).reshape(
            (1,) * (axis + 1) + (-1,) + (1,) * (nd - axis - 1))
        place = (taps.reshape((-1,) + (1,) * nd) * dilations[axis] + base).astype(dt)
        coords.append(off[:, :, axis] + xp.asarray(np.broadcast_to(place, (k,) + out)))
    grouped = xp.reshape(xf, (n * og, c // og) + tuple(x.shape[2:]))
    # (n*og, c/og, k, *out)
    cols = interpolate(xp, grouped, coords, mode="linear", padding_mode="zeros")
    if mask is not None:
        cols = cols * xp.reshape(xp.astype(mask, dt), (n * og, 1, k) + out)
    cols = xp.reshape(cols, (n, group, c // group, k, -1))
    wg = xp.reshape(_f32(xp, w), (group, m // group, c // group, k))
    y = xp.einsum("ngckp,gmck->ngmp", cols, wg)
    y = xp.reshape(y, (n, m) + out)
    return xp.astype(_bias(xp, y, b), xp.dtype_of(x))


@op("CausalConvWithState", 27)
def causal_conv_with_state(xp, x, w, b=None, past_state=None, *, activation="none"):
    """Depthwise causal 1-D convolution carrying the last k-1 inputs as state."""
    n, c, _ = x.shape
    k = w.shape[2]
    if past_state is None:
        past_state = xp.zeros((n, c, k - 1), dtype=xp.dtype_of(x))
    padded = xp.concatenate([past_state, x], axis=2)
    y = xp.conv(_f32(xp, padded), _f32(xp, w), strides=[1], pads=[0, 0], dilations=[1], groups=c)
    y = _bias(xp, y, b)
    if activation in ("silu", "swish"):
        y = y / (1 + xp.exp(-y))
    present = padded[:, :, padded.shape[2] - (k - 1):]
    return xp.astype(y, xp.dtype_of(x)), present


@op("Col2Im", 18, static=(1, 2))
def col2im(xp, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Sum sliding blocks (N, C*prod(block), L) back into images (N, C, *image_shape)."""
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    win = window.resolve(image, block, strides=strides, pads=pads, dilations=dilations)
    n = x.shape[0]
    k = int(np.prod(block))
    c = x.shape[1] // k
    cols = xp.reshape(x, (n, c, k) + win.out)
    padded_shape = [i + b + e for i, b, e in zip(image, win.begin, win.given_end)]
    img = xp.zeros((n, c, *padded_shape), dtype=xp.dtype_of(x))
    for j, tap in enumerate(itertools.product(*[range(s) for s in block])):
        index = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                      for t, d, o, s in zip(tap, win.dilations, win.out, win.strides))
        img = xp.index_update(img, (slice(None), slice(None)) + index, cols[:, :, j], "add")
    crop = tuple(slice(b, b + i) for b, i in zip(win.begin, image))
    return img[(slice(None), slice(None)) + crop]
