"""object-detection: transformers' ObjectDetectionPipeline over DETR-style heads (DETR, YOLOS,
Conditional / Deformable DETR: ``logits`` [B, queries, classes + 1], ``pred_boxes`` as normalized
centre x, y, width, height) and the sigmoid head of RT-DETR (v1, v2) and D-FINE (``logits``
[B, queries, classes]: no "no object" class; RTDetrImageProcessor.post_process_object_detection
with use_focal_loss=True).

    pipe("street.jpg")                  -> [{"score", "label", "box": {"xmin", "ymin", "xmax",
                                             "ymax"}}, ...]   (pixels, truncated to ints)
    pipe("street.jpg", exact_boxes=True) -> the same boxes as float pixels
"""

import numpy as np

from ..base import PipelineError
from ..heads import sigmoid, softmax
from .base import VisionPipeline, image_size


class ObjectDetectionPipeline(VisionPipeline):
    task = "object-detection"

    def __init__(self, model, config=None, **kwargs):
        names = {v.name for v in model.outputs}
        if not {"logits", "pred_boxes"} <= names:
            raise PipelineError(f"{self.task} runs DETR-style detectors (outputs logits and "
                                f"pred_boxes); this graph gives {sorted(names)}")
        super().__init__(model, config, **kwargs)
        self.focal = is_rt_detr(self.config, self.image_processor)

    def _sanitize_parameters(self, threshold=0.5, exact_boxes=False, **unknown):
        super()._sanitize_parameters(**unknown)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise PipelineError(f"threshold must be a number, got {threshold!r}")
        return {}, {}, {"threshold": float(threshold), "exact_boxes": bool(exact_boxes)}

    def postprocess(self, outputs, threshold=0.5, exact_boxes=False):
        out = outputs[0]
        height, width = image_size(out)
        # post_process_object_detection: corners scaled to the input image's size
        boxes = corners(out["pred_boxes"].astype(np.float32)) * np.array(
            [width, height, width, height], np.float32)
        scores, labels, boxes = (focal_head if self.focal else softmax_head)(out["logits"], boxes)
        keep = scores > threshold
        return [{"score": float(s), "label": self.label(c), "box": box_dict(b, exact_boxes)}
                for s, c, b in zip(scores[keep], labels[keep], boxes[keep])]


# model types whose checkpoints use RTDetrImageProcessor's focal (sigmoid top-k) post-processing
FOCAL_MODEL_TYPES = {"rt_detr", "rt_detr_v2", "d_fine"}


def is_rt_detr(config, image_processor):
    """RT-DETR's head (RT-DETR v1 / v2, D-FINE): by config.json's model_type, else by its
    processor's type."""
    if (config or {}).get("model_type") in FOCAL_MODEL_TYPES:
        return True
    return str(getattr(image_processor, "name", "")).startswith("RTDetrImageProcessor")


def softmax_head(logits, boxes):
    """DETR: softmax, each query's best class but the last ("no object") one, in query order."""
    probs = softmax(logits)[:, :-1]
    return probs.max(-1), probs.argmax(-1), boxes


def focal_head(logits, boxes):
    """RT-DETR (use_focal_loss=True): sigmoid, the top ``queries`` scores over queries x classes,
    best first (ties: the lower query x class index first)."""
    queries, classes = logits.shape[-2:]
    scores = sigmoid(np.asarray(logits, np.float32)).reshape(-1)
    top = np.argsort(-scores, kind="stable")[:queries]
    return scores[top], top % classes, boxes[top // classes]


def corners(boxes):
    """center_to_corners_format: (cx, cy, w, h) -> (x0, y0, x1, y1)."""
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1)


def box_dict(box, exact=False):
    """ObjectDetectionPipeline._get_bounding_box: ``box.int()`` truncates toward zero."""
    values = [float(v) for v in box] if exact else [int(v) for v in box]
    return dict(zip(("xmin", "ymin", "xmax", "ymax"), values))
