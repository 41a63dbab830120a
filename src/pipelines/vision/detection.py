"""object-detection: transformers' ObjectDetectionPipeline over DETR-style heads (DETR, YOLOS,
Conditional / Deformable DETR: ``logits`` [B, queries, classes + 1], ``pred_boxes`` as normalized
centre x, y, width, height).

    pipe("street.jpg")                  -> [{"score", "label", "box": {"xmin", "ymin", "xmax",
                                             "ymax"}}, ...]   (pixels, truncated to ints)
    pipe("street.jpg", exact_boxes=True) -> the same boxes as float pixels
"""

import numpy as np

from ..base import PipelineError
from ..heads import softmax
from .base import VisionPipeline, image_size


class ObjectDetectionPipeline(VisionPipeline):
    task = "object-detection"

    def __init__(self, model, config=None, **kwargs):
        names = {v.name for v in model.outputs}
        if not {"logits", "pred_boxes"} <= names:
            raise PipelineError(f"{self.task} runs DETR-style detectors (outputs logits and "
                                f"pred_boxes); this graph gives {sorted(names)}")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, threshold=0.5, exact_boxes=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise PipelineError(f"threshold must be a number, got {threshold!r}")
        return {}, {}, {"threshold": float(threshold), "exact_boxes": bool(exact_boxes)}

    def postprocess(self, outputs, threshold=0.5, exact_boxes=False):
        out = outputs[0]
        # post_process_object_detection: softmax, best class but the "no object" one, corners
        # scaled to the input image's size
        probs = softmax(out["logits"])[:, :-1]
        scores, labels = probs.max(-1), probs.argmax(-1)
        height, width = image_size(out)
        boxes = corners(out["pred_boxes"].astype(np.float32)) * np.array(
            [width, height, width, height], np.float32)
        keep = scores > threshold
        return [{"score": float(s), "label": self.label(c), "box": box_dict(b, exact_boxes)}
                for s, c, b in zip(scores[keep], labels[keep], boxes[keep])]


def corners(boxes):
    """center_to_corners_format: (cx, cy, w, h) -> (x0, y0, x1, y1)."""
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1)


def box_dict(box, exact=False):
    """ObjectDetectionPipeline._get_bounding_box: ``box.int()`` truncates toward zero."""
    values = [float(v) for v in box] if exact else [int(v) for v in box]
    return dict(zip(("xmin", "ymin", "xmax", "ymax"), values))
