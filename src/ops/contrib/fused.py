"""com.microsoft ops that ONNX Runtime's graph optimizer writes when it fuses an activation into
the op before it, and a saved optimized model keeps: FusedConv (Conv + activation, with an
optional residual Z), FusedGemm (Gemm + activation), NhwcConv (channels-last Conv, written by
onnxruntime.transformers' Stable Diffusion optimizer), TransposeMatMul (FusedMatMul's older
name) and GridSample (the contrib form torch exported before opset 16 had the op)."""

from .. import elementwise as ew
from ..conv import conv
from ..nn import gemm
from ..registry import op
from ..sample import grid_sample_v16
from .activations import fused_matmul

MS = "com.microsoft"


def _fused_conv_activation(name, params):
    """FusedConv's activations, as its CPU kernel reads them (contrib_ops/cpu/
    fused_activation.cc): ``activation_params`` holds LeakyRelu's alpha, Clip's min and max,
    HardSigmoid's alpha and beta."""
    params = list(params or [])
    if name in ("Relu", "Tanh", "Sigmoid"):
        return lambda xp, x: ew._UNARY[name](xp, x)
    need = {"LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}.get(name)
    if need is None:
        raise ValueError(f"FusedConv activation {name!r}: ONNX Runtime has Relu, Tanh, Sigmoid, "
                         f"LeakyRelu, Clip and HardSigmoid")
    if len(params) != need:
        raise ValueError(f"FusedConv activation {name} takes {need} activation_params, got "
                         f"{len(params)}")
    if name == "LeakyRelu":
        return lambda xp, x: ew.leaky_relu(xp, x, alpha=params[0])
    if name == "Clip":
        return lambda xp, x: xp.clip(x, params[0], params[1])
    return lambda xp, x: ew.hard_sigmoid(xp, x, alpha=params[0], beta=params[1])


@op("FusedConv", 1, domain=MS)
def fused_conv(xp, x, w, b=None, z=None, *, activation=None, activation_params=None,
               auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
               strides=None):
    """activation(Conv(X, W) + B + Z): ORT adds the residual Z into the output before the
    activation."""
    y = conv(xp, x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    if z is not None:
        y = y + z
    if activation is None:
        return y
    return _fused_conv_activation(activation, activation_params)(xp, y)


# FusedGemm's activations (ORT's element-wise functors, which read alpha, beta and gamma from
# activation_alpha / _beta / _gamma); None: the ONNX op's default.
_GEMM_ACTIVATIONS = {
    "Relu": lambda xp, x, a, b, g: ew._UNARY["Relu"](xp, x),
    "Tanh": lambda xp, x, a, b, g: xp.tanh(x),
    "Sigmoid": lambda xp, x, a, b, g: ew._UNARY["Sigmoid"](xp, x),
    "Softsign": lambda xp, x, a, b, g: ew._UNARY["Softsign"](xp, x),
    "Softplus": lambda xp, x, a, b, g: ew._UNARY["Softplus"](xp, x),
    "LeakyRelu": lambda xp, x, a, b, g: ew.leaky_relu(xp, x, alpha=_or(a, 0.01)),
    "Elu": lambda xp, x, a, b, g: ew.elu(xp, x, alpha=_or(a, 1.0)),
    "Selu": lambda xp, x, a, b, g: ew.selu(xp, x, alpha=_or(a, 1.67326319217681884765625),
                                           gamma=_or(g, 1.05070102214813232421875)),
    "ThresholdedRelu": lambda xp, x, a, b, g: ew.thresholded_relu(xp, x, alpha=_or(a, 1.0)),
    "HardSigmoid": lambda xp, x, a, b, g: ew.hard_sigmoid(xp, x, alpha=_or(a, 0.2),
                                                          beta=_or(b, 0.5)),
}


def _or(value, default):
    return default if value is None else value


@op("FusedGemm", 1, domain=MS)
def fused_gemm(xp, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation=None,
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    y = gemm(xp, a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
    if activation is None:
        return y
    fn = _GEMM_ACTIVATIONS.get(activation)
    if fn is None:
        raise ValueError(f"FusedGemm activation {activation!r}: takes "
                         f"{', '.join(_GEMM_ACTIVATIONS)}")
    return fn(xp, y, activation_alpha, activation_beta, activation_gamma)


@op("NhwcConv", 1, domain=MS)
def nhwc_conv(xp, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1,
              kernel_shape=None, pads=None, strides=None):
    """Conv on channels-last X (N, spatial..., C); W is Conv's (M, C / group, k...), Y is
    channels-last too (ORT's CUDA kernel; it has no CPU one)."""
    last = x.ndim - 1
    y = conv(xp, xp.transpose(x, (0, last) + tuple(range(1, last))), w, b, auto_pad=auto_pad,
             dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
             strides=strides)
    return xp.transpose(y, (0,) + tuple(range(2, y.ndim)) + (1,))


@op("TransposeMatMul", 1, domain=MS)
def transpose_matmul(xp, a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    return fused_matmul(xp, a, b, alpha=alpha, transA=transA, transB=transB,
                        transBatchA=transBatchA, transBatchB=transBatchB)


@op("GridSample", 1, domain=MS)
def grid_sample(xp, x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """ONNX's GridSample-16, which took this op's attributes and defaults."""
    return grid_sample_v16(xp, x, grid, align_corners=align_corners, mode=mode,
                           padding_mode=padding_mode)
