"""One value of Transmuter's against onnxruntime's: agree within a tolerance, or by how much not.

Floats agree where |ours - ref| <= atol + rtol * |ref| + noise, NaN where the reference has NaN;
integers, booleans and strings agree exactly (up to ``noise`` for integers: an int8 graph's
quantized values move by a step where a rounding tie falls the other way). A sequence agrees
when it has the same length and each tensor agrees."""

import dataclasses

import numpy as np

from .. import dtypes


@dataclasses.dataclass
class Diff:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0  # |ours - ref| / (|ref| + atol)
    bad: int = 0  # elements past the tolerance
    size: int = 0
    where: tuple = ()  # index of the largest difference
    why: str = ""  # what differs besides values: shape, type, length

    def __str__(self):
        if self.why:
            return self.why
        text = f"max |diff| {self.max_abs:.3g} (relative {self.max_rel:.3g})"
        if self.size > 1:
            text += f" at {list(self.where)}"
        if not self.ok:
            text += f", {self.bad} of {self.size} elements past the tolerance"
        return text


def compare(ours, ref, rtol, atol, noise=0.0) -> Diff:
    if isinstance(ref, list) or isinstance(ours, list):
        return _sequences(ours, ref, rtol, atol, noise)
    if ref is None or ours is None:
        return Diff(ours is None and ref is None, why="" if ours is ref else
                    f"{'no value' if ours is None else 'a value'} where onnxruntime has "
                    f"{'none' if ref is None else 'one'}")
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return Diff(False, why=f"shape {list(ours.shape)}, onnxruntime's {list(ref.shape)}")
    if _kind(ours) != _kind(ref):
        return Diff(False, why=f"type {describe(ours)}, onnxruntime's {describe(ref)}")
    if ref.dtype == object or ref.dtype.kind in "US":
        equal = ours == ref
        return Diff(bool(np.all(equal)), bad=int(np.size(equal) - np.sum(equal)), size=ref.size)
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    if ref.size == 0:
        return Diff(True)
    nan = np.isnan(b)
    same = (a == b) | (nan & np.isnan(a))  # equal infinities and NaN where the reference has NaN
    with np.errstate(invalid="ignore"):  # inf - inf: a difference, counted as inf below
        diff = np.where(same, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    limit = atol + rtol * np.abs(np.where(nan, 0.0, b)) + noise
    if not dtypes.is_float(ref.dtype):
        limit = np.full(b.shape, float(noise))  # integers and booleans: exact, up to the noise
    bad = diff > limit
    where = np.unravel_index(int(np.argmax(diff)), ref.shape) if ref.ndim else ()
    rel = diff / (np.abs(np.where(nan, 0.0, b)) + atol)  # atol: a zero reference stays finite
    return Diff(not bad.any(), float(diff.max()), float(rel.max()), int(bad.sum()), int(ref.size),
                tuple(int(i) for i in where))


def _sequences(ours, ref, rtol, atol, noise):
    if not (isinstance(ours, list) and isinstance(ref, list)):
        return Diff(False, why=f"{describe(ours)}, onnxruntime's {describe(ref)}")
    if len(ours) != len(ref):
        return Diff(False, why=f"a sequence of {len(ours)}, onnxruntime's of {len(ref)}")
    diffs = [compare(a, b, rtol, atol, noise) for a, b in zip(ours, ref)]
    for i, d in enumerate(diffs):
        if not d.ok:
            return dataclasses.replace(d, why=f"item {i} of the sequence: {d}")
    worst = max(diffs, key=lambda d: d.max_abs, default=Diff(True))
    return dataclasses.replace(worst, why="")


def noise_of(ref, perturbed):
    """The largest change of a value between two onnxruntime runs whose inputs and weights
    differ by 1e-6 relative: the file's own noise (0 for what is not a float or integer)."""
    if isinstance(ref, list):
        return max((noise_of(a, b) for a, b in zip(ref, perturbed)), default=0.0)
    ref, perturbed = np.asarray(ref), np.asarray(perturbed)
    if ref.shape != perturbed.shape or ref.dtype.kind not in "fiub" or ref.size == 0:
        return 0.0
    diff = np.abs(ref.astype(np.float64) - perturbed.astype(np.float64))
    return float(np.nanmax(diff)) if np.isfinite(diff).any() else 0.0


def describe(value):
    """``float32[1, 4]``, ``a sequence of 3``, ``None``."""
    if value is None:
        return "None"
    if isinstance(value, list):
        return f"a sequence of {len(value)}"
    value = np.asarray(value)
    return f"{dtypes.name(value.dtype) if value.dtype != object else 'string'}{list(value.shape)}"


def _kind(value):
    return "f" if dtypes.is_float(value.dtype) else value.dtype.kind
