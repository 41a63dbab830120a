"""image-segmentation: transformers' ImageSegmentationPipeline, semantic subtask (SegFormer,
UperNet, DPT segmentation heads).

    pipe("street.jpg") -> [{"score": None, "label": "road", "mask": PIL "L" image}, ...]
"""

import numpy as np

from ..base import PipelineError
from .base import VisionPipeline, image_size
from .interpolate import bilinear

SUBTASKS = (None, "semantic", "instance", "panoptic")


class ImageSegmentationPipeline(VisionPipeline):
    task = "image-segmentation"

    def _sanitize_parameters(self, subtask=None, threshold=0.9, mask_threshold=0.5,
                             overlap_mask_area_threshold=0.5, **unknown):
        super()._sanitize_parameters(**unknown)
        if subtask not in SUBTASKS:
            raise PipelineError(f"subtask must be one of {SUBTASKS[1:]} (or None), got "
                                f"{subtask!r}")
        if subtask in ("instance", "panoptic") or "logits" not in {v.name for v in
                                                                  self.model.outputs}:
            raise PipelineError(f"{self.task}: only semantic segmentation (a 'logits' output of "
                                "[batch, labels, height, width]) is supported yet; instance and "
                                "panoptic heads (DETR panoptic, MaskFormer) are not")
        return {}, {}, {}

    def postprocess(self, outputs):
        from PIL import Image

        out = outputs[0]
        # post_process_semantic_segmentation: logits bilinear to the image's size, argmax
        segmentation = bilinear(self.output(out, "logits"), image_size(out)).argmax(axis=0)
        return [{"score": None, "label": self.label(label),
                 "mask": Image.fromarray(((segmentation == label) * 255).astype(np.uint8))}
                for label in np.unique(segmentation)]
