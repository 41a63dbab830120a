"""torchvision on the CPU torch of these machines: import this before transformers' torchvision
image processors (requirements-sam3.txt's venv).

torchvision 0.28's compiled ops (nms, roi_align, ...) link against CUDA torch libraries
(libc10_cuda.so, libtorch_cuda.so) that torch 2.13.0+cpu lacks, so its C extension does not load,
and `import torchvision` then stops in _meta_registrations, registering fake kernels for
torchvision::nms / qnms, ops that were never declared. Where the extension does not load, this
declares those two schemas (no kernel) so that torchvision imports; its resizing is Python code
on torch's own kernels and runs as it would. A call of torchvision.ops.nms then fails (no
kernel): the recorders stand in for it themselves (record_sam.py's batched_nms). Where the
extension loads (a CUDA torch), this does nothing.
"""

import importlib.util
from pathlib import Path

import torch


def _declare_missing_ops():
    spec = importlib.util.find_spec("torchvision")
    try:
        torch.ops.load_library(str(Path(spec.submodule_search_locations[0]) / "_C.so"))
        return None
    except OSError:
        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return lib


_LIBRARY = _declare_missing_ops()  # kept alive: the schemas go with the Library object
