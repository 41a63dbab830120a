"""pipelines/vision/interpolate.py against torch.nn.functional.interpolate (recorded by
tests/support/record_interpolate.py, torch 2.13): bilinear and bicubic with align_corners=False,
and nearest, on stacks of maps."""

import pathlib

import numpy as np
import pytest

from transmuter.pipelines.vision import interpolate

REFS = np.load(pathlib.Path(__file__).parent / "fixtures" / "torch-interpolate" / "interpolate.npz")
CASES = sorted({int(k.split("/")[0]) for k in REFS.files})
# torch computes source coordinates and blend weights in float32, we in float64 (float32 out): the
# weights differ by a float32 rounding of the coordinate, which moves values of magnitude ~4 (these
# maps are standard normal) by ~1e-5. Measured: 1.4e-5 bilinear, 1.6e-5 bicubic.
TOL = 1e-4


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("case", CASES)
def test_linear_modes_equal_torch(case, mode):
    x, size = REFS[f"{case}/x"], tuple(REFS[f"{case}/size"])
    got, want = getattr(interpolate, mode)(x, size), REFS[f"{case}/{mode}"]
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.abs(got - want).max() <= TOL


@pytest.mark.parametrize("case", CASES)
def test_nearest_equals_torch(case):
    x, size = REFS[f"{case}/x"], tuple(REFS[f"{case}/size"])
    assert np.array_equal(interpolate.nearest(x, size), REFS[f"{case}/nearest"])


def test_bilinear_in_chunks_equals_whole(monkeypatch):
    """Maps resized a few at a time (CHUNK_PIXELS) give the same bits as all at once."""
    x = REFS["1/x"]  # 2 x 2 maps: one step at the default CHUNK_PIXELS
    whole = interpolate.bilinear(x, (61, 83))
    monkeypatch.setattr(interpolate, "CHUNK_PIXELS", 1)  # one map per step
    assert np.array_equal(interpolate.bilinear(x, (61, 83)), whole)
    monkeypatch.setattr(interpolate, "CHUNK_PIXELS", 2 * 61 * 83 + 1)  # two at a time
    assert np.array_equal(interpolate.bilinear(x, (61, 83)), whole)
