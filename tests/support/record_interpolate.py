"""References for tests/test_interpolate.py: torch.nn.functional.interpolate (align_corners=False,
no antialias) in bilinear, bicubic and nearest mode, on random float32 maps, as transformers'
post-processing calls it (depth maps, segmentation logits, SAM's masks).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_interpolate.py

Writes tests/fixtures/torch-interpolate/interpolate.npz: for case i, ``i/x`` (the maps, any
leading dims), ``i/size`` (out height, width), ``i/<mode>`` torch's result (x viewed as
[1, maps, H, W]). Shapes: up and down by integer and fractional factors, one axis only, stacks
with one and two leading dims.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families_vision_audio import FIXTURES, save_npz  # noqa: E402

CASES = [((3, 8, 8), (16, 16)), ((2, 2, 17, 23), (61, 83)), ((5, 40, 30), (13, 7)),
         ((1, 9, 12), (9, 31)), ((7, 5), (5, 7)), ((6, 20, 30), (45, 50))]
MODES = ("bilinear", "bicubic", "nearest")


def main():
    rng = np.random.default_rng(20261203)
    arrays = {}
    for i, (shape, size) in enumerate(CASES):
        x = rng.standard_normal(shape).astype(np.float32)
        maps = torch.from_numpy(x.reshape((1, -1) + shape[-2:]))
        arrays[f"{i}/x"], arrays[f"{i}/size"] = x, np.array(size, np.int64)
        for mode in MODES:
            kwargs = {} if mode == "nearest" else {"align_corners": False}
            out = F.interpolate(maps, size=size, mode=mode, **kwargs)
            arrays[f"{i}/{mode}"] = out.numpy().reshape(shape[:-2] + size)
    out = FIXTURES / "torch-interpolate"
    out.mkdir(parents=True, exist_ok=True)
    save_npz(out / "interpolate.npz", arrays)


if __name__ == "__main__":
    main()
