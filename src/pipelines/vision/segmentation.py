"""image-segmentation: transformers' ImageSegmentationPipeline: semantic (SegFormer, UperNet, DPT
segmentation heads: a ``logits`` map), panoptic / instance / semantic over DETR's mask head
(``logits`` per query and ``pred_masks``, DetrForSegmentation; see panoptic.py) and over
MaskFormer / Mask2Former heads (``class_queries_logits`` and ``masks_queries_logits``; see
maskformer.py).

    pipe("street.jpg") -> [{"score": None, "label": "road", "mask": PIL "L" image}, ...]
    pipe("street.jpg", subtask="panoptic", threshold=0.9) -> [{"score": 0.98, "label", "mask"}, ...]
"""

import numpy as np

from ...preprocess.image.auto import processor_type
from ...errors import PipelineError
from .base import VisionPipeline, image_size
from .interpolate import bilinear
from .maskformer import instance_segments, resized_masks
from .panoptic import query_segments, semantic_map

SUBTASKS = (None, "semantic", "instance", "panoptic")
# the outputs of a head with per-query masks: (class logits, mask logits)
DETR_HEAD = ("logits", "pred_masks")
MASKFORMER_HEAD = ("class_queries_logits", "masks_queries_logits")


class ImageSegmentationPipeline(VisionPipeline):
    task = "image-segmentation"

    def _sanitize_parameters(self, subtask=None, threshold=0.9, mask_threshold=0.5,
                             overlap_mask_area_threshold=0.5, **unknown):
        super()._sanitize_parameters(**unknown)
        if subtask not in SUBTASKS:
            raise PipelineError(f"subtask must be one of {SUBTASKS[1:]} (or None), got "
                                f"{subtask!r}")
        head = self.query_head()
        names = {v.name for v in self.model.outputs}
        if head is None and ("logits" not in names or subtask in ("instance", "panoptic")):
            heads = ("logits and pred_masks (DETR panoptic), or class_queries_logits and "
                     "masks_queries_logits (MaskFormer, Mask2Former)")
            wanted = heads if subtask in ("instance", "panoptic") else f"logits, or {heads}"
            raise PipelineError(f"{self.task}: subtask {subtask!r} needs a graph with outputs "
                                f"{wanted}; this one gives {sorted(names)}")
        for name, value in (("threshold", threshold), ("mask_threshold", mask_threshold),
                            ("overlap_mask_area_threshold", overlap_mask_area_threshold)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PipelineError(f"{name} must be a number, got {value!r}")
        # transformers' order for subtask=None: panoptic where the head has masks, else semantic
        subtask = subtask or ("panoptic" if head else "semantic")
        return {}, {}, {"subtask": subtask, "thresholds": (
            float(threshold), float(mask_threshold), float(overlap_mask_area_threshold))}

    def query_head(self):
        """DETR_HEAD or MASKFORMER_HEAD when the graph gives per-query classes and masks."""
        names = {v.name for v in self.model.outputs}
        return next((head for head in (MASKFORMER_HEAD, DETR_HEAD) if set(head) <= names), None)

    def postprocess(self, outputs, subtask="semantic", thresholds=(0.9, 0.5, 0.5)):
        out = outputs[0]
        size = image_size(out)
        head = self.query_head()
        if head is None:
            # post_process_semantic_segmentation: logits bilinear to the image's size, argmax
            segmentation = bilinear(self.output(out, "logits"), size).argmax(axis=0)
            return semantic_annotation(segmentation, self.label)
        class_logits, mask_logits = out[head[0]], out[head[1]]
        if head == MASKFORMER_HEAD:
            mask_logits = resized_masks(mask_logits, processor_type(self.image_processor.config))
        if subtask == "semantic":
            return semantic_annotation(semantic_map(class_logits, mask_logits, size), self.label)
        if subtask == "instance" and head == MASKFORMER_HEAD:
            segmentation, segments = instance_segments(class_logits, mask_logits, size,
                                                       thresholds[0])
        else:
            segmentation, segments = query_segments(class_logits, mask_logits, size, *thresholds)
        return [{"score": s["score"], "label": self.label(s["label_id"]),
                 "mask": mask_image(segmentation == s["id"])} for s in segments]


def semantic_annotation(segmentation, label):
    """One entry per class present in the map, in class order (np.unique), with no score."""
    return [{"score": None, "label": label(c), "mask": mask_image(segmentation == c)}
            for c in np.unique(segmentation)]


def mask_image(mask):
    """A boolean mask as the pipeline's PIL "L" image (0 / 255)."""
    from PIL import Image

    return Image.fromarray((mask * 255).astype(np.uint8))
