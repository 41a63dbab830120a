"""object-detection: transformers' ObjectDetectionPipeline over DETR-style heads: DETR's and
YOLOS' softmax (``logits`` [B, queries, classes + 1], the last "no object"; ``pred_boxes`` as
normalized centre x, y, width, height), and the sigmoid heads (``logits`` [B, queries, classes], no
"no object" class) that keep the top k of queries x classes: k = the number of queries for RT-DETR
(v1, v2) and D-FINE (RTDetrImageProcessor.post_process_object_detection, use_focal_loss=True) and
RF-DETR (transformers 5's RfDetrImageProcessor.post_process_object_detection, the same), k = 100
for Conditional and Deformable DETR (their processors' post_process_object_detection).

    pipe("street.jpg")                  -> [{"score", "label", "box": {"xmin", "ymin", "xmax",
                                             "ymax"}}, ...]   (pixels, truncated to ints)
    pipe("street.jpg", exact_boxes=True) -> the same boxes as float pixels
"""

import numpy as np

from ...errors import PipelineError
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
        self.top_k = sigmoid_top_k(self.config, self.image_processor)

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
        if self.top_k is None:
            scores, labels, boxes = softmax_head(out["logits"], boxes)
        else:
            scores, labels, boxes = focal_head(out["logits"], boxes, self.top_k)
        keep = scores > threshold
        return [{"score": float(s), "label": self.label(c), "box": box_dict(b, exact_boxes)}
                for s, c, b in zip(scores[keep], labels[keep], boxes[keep])]


# model types (and their processors) whose post-processing is a sigmoid top-k: over all queries
# (RTDetrImageProcessor with use_focal_loss=True; RfDetrImageProcessor), or the top 100 (top_k's
# default)
TOP_QUERIES = {"rt_detr", "rt_detr_v2", "d_fine", "rf_detr"}
TOP_QUERIES_PROCESSORS = ("RTDetrImageProcessor", "RfDetrImageProcessor")
TOP_100 = {"conditional_detr": "ConditionalDetrImageProcessor",
           "deformable_detr": "DeformableDetrImageProcessor"}


def sigmoid_top_k(config, image_processor):
    """"queries" (RT-DETR, D-FINE, RF-DETR), 100 (Conditional / Deformable DETR) or None (DETR's
    softmax): by config.json's model_type, else by the processor's type."""
    model_type = (config or {}).get("model_type")
    processor = str(getattr(image_processor, "name", ""))
    if model_type in TOP_QUERIES or processor.startswith(TOP_QUERIES_PROCESSORS):
        return "queries"
    if model_type in TOP_100 or processor.startswith(tuple(TOP_100.values())):
        return 100
    return None


def softmax_head(logits, boxes):
    """DETR: softmax, each query's best class but the last ("no object") one, in query order."""
    probs = softmax(logits)[:, :-1]
    return probs.max(-1), probs.argmax(-1), boxes


def focal_head(logits, boxes, top_k):
    """Sigmoid, the top ``top_k`` scores over queries x classes ("queries": as many as there are
    queries; an int: at most that many), best first (ties: the lower query x class index first)."""
    queries, classes = logits.shape[-2:]
    k = queries if top_k == "queries" else min(top_k, queries * classes)
    scores = sigmoid(np.asarray(logits, np.float32)).reshape(-1)
    top = np.argsort(-scores, kind="stable")[:k]
    return scores[top], top % classes, boxes[top // classes]


def corners(boxes):
    """center_to_corners_format: (cx, cy, w, h) -> (x0, y0, x1, y1)."""
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=-1)


def box_dict(box, exact=False):
    """ObjectDetectionPipeline._get_bounding_box: ``box.int()`` truncates toward zero."""
    values = [float(v) for v in box] if exact else [int(v) for v in box]
    return dict(zip(("xmin", "ymin", "xmax", "ymax"), values))
