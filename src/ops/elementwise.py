"""Elementwise math: unary functions, broadcasting arithmetic, comparisons, logic, activations."""

import numpy as np

from .. import dtypes
from .registry import op

# Unary ops whose ONNX semantics are NumPy's, unchanged across versions (newer versions only added
# types). Registered from one table: each is one line of math.
_UNARY = {
    "Abs": lambda xp, x: xp.abs(x),
    "Neg": lambda xp, x: -x,
    "Exp": lambda xp, x: xp.exp(x),
    "Log": lambda xp, x: xp.log(x),
    "Sqrt": lambda xp, x: xp.sqrt(x),
    "Reciprocal": lambda xp, x: xp.astype(1 / x, xp.dtype_of(x)),
    "Floor": lambda xp, x: xp.floor(x),
    "Ceil": lambda xp, x: xp.ceil(x),
    "Round": lambda xp, x: xp.round(x),  # half to even, as NumPy
    "Sign": lambda xp, x: xp.sign(x),
    "Sin": lambda xp, x: xp.sin(x),
    "Cos": lambda xp, x: xp.cos(x),
    "Tan": lambda xp, x: xp.tan(x),
    "Asin": lambda xp, x: xp.arcsin(x),
    "Acos": lambda xp, x: xp.arccos(x),
    "Atan": lambda xp, x: xp.arctan(x),
    "Sinh": lambda xp, x: xp.sinh(x),
    "Cosh": lambda xp, x: xp.cosh(x),
    "Asinh": lambda xp, x: xp.arcsinh(x),
    "Acosh": lambda xp, x: xp.arccosh(x),
    "Atanh": lambda xp, x: xp.arctanh(x),
    "Tanh": lambda xp, x: xp.tanh(x),
    "Erf": lambda xp, x: xp.erf(x),
    "Sigmoid": lambda xp, x: _sigmoid(xp, x),
    "Relu": lambda xp, x: xp.maximum(x, xp.zeros((), xp.dtype_of(x))),
    "Softplus": lambda xp, x: xp.logaddexp(x, xp.zeros((), xp.dtype_of(x))),
    "Softsign": lambda xp, x: x / (1 + xp.abs(x)),
    "Mish": lambda xp, x: x * xp.tanh(xp.logaddexp(x, xp.zeros((), xp.dtype_of(x)))),
    "Not": lambda xp, x: xp.logical_not(x),
    "BitwiseNot": lambda xp, x: xp.bitwise_not(x),
    "IsNaN": lambda xp, x: xp.isnan(x),
    "Identity": lambda xp, x: x,
}

_BINARY = {
    "Add": lambda xp, a, b: a + b,
    "Sub": lambda xp, a, b: a - b,
    "Mul": lambda xp, a, b: a * b,
    "Equal": lambda xp, a, b: xp.equal(a, b),
    "Less": lambda xp, a, b: xp.less(a, b),
    "LessOrEqual": lambda xp, a, b: xp.less_equal(a, b),
    "Greater": lambda xp, a, b: xp.greater(a, b),
    "GreaterOrEqual": lambda xp, a, b: xp.greater_equal(a, b),
    "And": lambda xp, a, b: xp.logical_and(a, b),
    "Or": lambda xp, a, b: xp.logical_or(a, b),
    "Xor": lambda xp, a, b: xp.logical_xor(a, b),
    "BitwiseAnd": lambda xp, a, b: xp.bitwise_and(a, b),
    "BitwiseOr": lambda xp, a, b: xp.bitwise_or(a, b),
    "BitwiseXor": lambda xp, a, b: xp.bitwise_xor(a, b),
}

for _name, _fn in _UNARY.items():
    op(_name, 1)(_fn)
for _name, _fn in _BINARY.items():
    op(_name, 1)(_fn)


def _sigmoid(xp, x):
    return 1 / (1 + xp.exp(-x))


@op("Div", 1)
def div(xp, a, b):
    if dtypes.is_float(xp.dtype_of(a)):
        return a / b
    # Integer division truncates towards zero, as C (and onnxruntime) do.
    q = xp.abs(a) // xp.abs(b)
    return xp.astype(xp.where((a < 0) != (b < 0), -q, q), xp.dtype_of(a))


@op("Mod", 10)
def mod(xp, a, b, *, fmod=0):
    return xp.fmod(a, b) if fmod else xp.mod(a, b)


@op("Pow", 1)
def pow_(xp, x, y):
    dt = xp.dtype_of(x)
    if xp.dtype_of(y) == dt:
        return xp.power(x, y)
    wide = np.float64 if dt != np.float16 else np.float32
    return xp.astype(xp.power(xp.astype(x, wide), xp.astype(y, wide)), dt)


@op("BitShift", 11)
def bit_shift(xp, x, y, *, direction):
    # Shifts by a negative amount or by the width or more give 0 (C would leave them undefined).
    width = xp.dtype_of(x).itemsize * 8
    out_of_range = xp.logical_or(y < 0, y >= width)
    y = xp.where(out_of_range, xp.zeros_like(y), y)
    if direction == "LEFT":
        return xp.where(out_of_range, xp.zeros_like(x), xp.left_shift(x, y))
    # Right shifts are arithmetic for signed types: out of range, only the sign is left.
    fill = xp.where(x < 0, xp.full_like(x, -1), xp.zeros_like(x)) if xp.dtype_of(x).kind == "i" \
        else xp.zeros_like(x)
    return xp.where(out_of_range, fill, xp.right_shift(x, y))


@op("IsInf", 10)
def is_inf(xp, x, *, detect_negative=1, detect_positive=1):
    neg = xp.logical_and(xp.isinf(x), x < 0) if detect_negative else xp.zeros(x.shape, bool)
    pos = xp.logical_and(xp.isinf(x), x > 0) if detect_positive else xp.zeros(x.shape, bool)
    return xp.logical_or(neg, pos)


def _fold(fn, values):
    out = values[0]
    for v in values[1:]:
        out = fn(out, v)
    return out


@op("Sum", 1)
def sum_(xp, *xs):
    return _fold(lambda a, b: a + b, xs)


@op("Mean", 1)
def mean(xp, *xs):
    return xp.astype(_fold(lambda a, b: a + b, xs) / len(xs), xp.dtype_of(xs[0]))


@op("Max", 1)
def max_(xp, *xs):
    return _fold(xp.maximum, xs)


@op("Min", 1)
def min_(xp, *xs):
    return _fold(xp.minimum, xs)


@op("Where", 9)
def where(xp, condition, x, y):
    return xp.where(condition, x, y)


@op("Clip", 1)
def clip_v1(xp, x, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):
    return xp.clip(x, min, max)


@op("Clip", 11)
def clip(xp, x, low=None, high=None):
    if low is not None:
        x = xp.maximum(x, xp.astype(low, xp.dtype_of(x)))
    if high is not None:
        x = xp.minimum(x, xp.astype(high, xp.dtype_of(x)))
    return x


# Activations with attributes.

@op("LeakyRelu", 1)
def leaky_relu(xp, x, *, alpha=0.01):
    return xp.where(x >= 0, x, x * xp.asarray(alpha, xp.dtype_of(x)))


@op("PRelu", 1)
def prelu(xp, x, slope):
    return xp.where(x >= 0, x, x * slope)


@op("Elu", 1)
def elu(xp, x, *, alpha=1.0):
    # exp(x) - 1 in f32 for half inputs, rounded once: in half, exp(x) near 1 keeps too few bits
    # for the subtraction (Celu's function body goes through Elu).
    xf = xp.astype(x, np.float32) if xp.is_half(x) else x
    y = xp.asarray(alpha, xp.dtype_of(xf)) * (xp.exp(xf) - 1)
    return xp.where(x >= 0, x, xp.astype(y, xp.dtype_of(x)))


@op("Celu", 12)
def celu(xp, x, *, alpha=1.0):
    xf = xp.astype(x, np.float32) if xp.is_half(x) else x  # exp in f32 for half inputs
    a = xp.asarray(alpha, xp.dtype_of(xf))
    return xp.astype(xp.maximum(xf, 0 * xf) + xp.minimum(0 * xf, a * (xp.exp(xf / a) - 1)),
                     xp.dtype_of(x))


@op("Selu", 1)
def selu(xp, x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    dt = xp.dtype_of(x)
    a, g = xp.asarray(alpha, dt), xp.asarray(gamma, dt)
    return xp.where(x > 0, g * x, g * (a * xp.exp(x) - a))


@op("ThresholdedRelu", 10)
def thresholded_relu(xp, x, *, alpha=1.0):
    return xp.where(x > alpha, x, 0 * x)


@op("HardSigmoid", 1)
def hard_sigmoid(xp, x, *, alpha=0.2, beta=0.5):
    dt = xp.dtype_of(x)
    return xp.astype(xp.clip(x * xp.asarray(alpha, dt) + xp.asarray(beta, dt), 0, 1), dt)


@op("HardSwish", 14)
def hard_swish(xp, x):
    dt = xp.dtype_of(x)
    return x * xp.astype(xp.clip(x * xp.asarray(1 / 6, dt) + xp.asarray(0.5, dt), 0, 1), dt)


@op("Gelu", 20)
def gelu(xp, x, *, approximate="none"):
    dt = xp.dtype_of(x)
    if approximate == "tanh":
        c = xp.asarray(np.sqrt(2 / np.pi), dt)
        return 0.5 * x * (1 + xp.tanh(c * (x + xp.asarray(0.044715, dt) * x * x * x)))
    return 0.5 * x * (1 + xp.erf(x * xp.asarray(1 / np.sqrt(2), dt)))


@op("Shrink", 9)
def shrink(xp, x, *, bias=0.0, lambd=0.5):
    dt = xp.dtype_of(x)
    return xp.astype(xp.where(x < -lambd, x + bias, xp.where(x > lambd, x - bias, 0 * x)), dt)
