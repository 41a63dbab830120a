"""image-segmentation: transformers' ImageSegmentationPipeline: semantic (SegFormer, UperNet, DPT
segmentation heads: a ``logits`` map) and panoptic / instance / semantic over DETR's mask head
(``logits`` per query and ``pred_masks``, DetrForSegmentation; see panoptic.py).

    pipe("street.jpg") -> [{"score": None, "label": "road", "mask": PIL "L" image}, ...]
    pipe("street.jpg", subtask="panoptic", threshold=0.9) -> [{"score": 0.98, "label", "mask"}, ...]
"""

import numpy as np

from ..base import PipelineError
from .base import VisionPipeline, image_size
from .interpolate import bilinear
from .panoptic import query_segments, semantic_map

SUBTASKS = (None, "semantic", "instance", "panoptic")


class ImageSegmentationPipeline(VisionPipeline):
    task = "image-segmentation"

    def _sanitize_parameters(self, subtask=None, threshold=0.9, mask_threshold=0.5,
                             overlap_mask_area_threshold=0.5, **unknown):
        super()._sanitize_parameters(**unknown)
        if subtask not in SUBTASKS:
            raise PipelineError(f"subtask must be one of {SUBTASKS[1:]} (or None), got "
                                f"{subtask!r}")
        names = {v.name for v in self.model.outputs}
        masks = {"logits", "pred_masks"} <= names
        if "logits" not in names or (subtask in ("instance", "panoptic") and not masks):
            raise PipelineError(f"{self.task}: subtask {subtask!r} needs a graph with outputs "
                                f"{'logits and pred_masks (DETR panoptic)' if subtask else 'logits'}; "
                                f"this one gives {sorted(names)} (MaskFormer heads are not supported)")
        for name, value in (("threshold", threshold), ("mask_threshold", mask_threshold),
                            ("overlap_mask_area_threshold", overlap_mask_area_threshold)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PipelineError(f"{name} must be a number, got {value!r}")
        # transformers' order for subtask=None: panoptic where the head has masks, else semantic
        subtask = subtask or ("panoptic" if masks else "semantic")
        return {}, {}, {"subtask": subtask, "masks": masks, "thresholds": (
            float(threshold), float(mask_threshold), float(overlap_mask_area_threshold))}

    def postprocess(self, outputs, subtask="semantic", masks=False, thresholds=(0.9, 0.5, 0.5)):
        out = outputs[0]
        size = image_size(out)
        if subtask != "semantic":
            segmentation, segments = query_segments(out["logits"], out["pred_masks"], size,
                                                    *thresholds)
            return [{"score": s["score"], "label": self.label(s["label_id"]),
                     "mask": mask_image(segmentation == s["id"])} for s in segments]
        if masks:
            segmentation = semantic_map(out["logits"], out["pred_masks"], size)
        else:
            # post_process_semantic_segmentation: logits bilinear to the image's size, argmax
            segmentation = bilinear(self.output(out, "logits"), size).argmax(axis=0)
        return [{"score": None, "label": self.label(label), "mask": mask_image(segmentation == label)}
                for label in np.unique(segmentation)]


def mask_image(mask):
    """A boolean mask as the pipeline's PIL "L" image (0 / 255)."""
    from PIL import Image

    return Image.fromarray((mask * 255).astype(np.uint8))
