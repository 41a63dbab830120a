"""DETR's mask head (DetrForSegmentation: ``logits`` [queries, labels + 1] and ``pred_masks``
[queries, h, w]) post-processed as DetrImageProcessor does: post_process_panoptic_segmentation,
post_process_instance_segmentation (both through compute_segments) and
post_process_semantic_segmentation, in NumPy. MaskFormer's and Mask2Former's panoptic and semantic
post-processing are the same functions (transformers copies them): maskformer.py calls these."""

import numpy as np

from ..heads import sigmoid, softmax
from .interpolate import bilinear


def query_segments(logits, pred_masks, size, threshold, mask_threshold, overlap_mask_area_threshold,
                   label_ids_to_fuse=()):
    """(segmentation map [H, W] of segment ids, [{"id", "label_id", "score"}]) at image ``size``:
    post_process_panoptic_segmentation (DETR's, MaskFormer's and Mask2Former's are one function;
    maskformer.py hands it Mask2Former's masks resized to 384x384 first).

    transformers' pipeline passes no label_ids_to_fuse, so panoptic and instance give the same
    segments for DETR: each kept query is its own segment."""
    probs = softmax(np.asarray(logits, np.float32))
    scores, labels = probs.max(-1), probs.argmax(-1)
    # remove_low_and_no_objects: the last class is "no object"
    keep = (labels != probs.shape[-1] - 1) & (scores > threshold)
    if not keep.any():
        return np.full(size, -1, np.int32), []
    mask_probs = sigmoid(np.asarray(pred_masks, np.float32)[keep])
    return compute_segments(mask_probs, scores[keep], labels[keep], size, mask_threshold,
                            overlap_mask_area_threshold, label_ids_to_fuse)


def compute_segments(mask_probs, scores, labels, size, mask_threshold, overlap_mask_area_threshold,
                     label_ids_to_fuse=()):
    """transformers' compute_segments: mask probabilities bilinear to the image, weighted by the
    query's score (in place in transformers, so the mask_threshold area below counts weighted
    probabilities too); each pixel goes to its best query; a query whose label is in
    ``label_ids_to_fuse`` joins the first valid segment of that label."""
    mask_probs = bilinear(mask_probs, size) * scores[:, None, None]
    owner = mask_probs.argmax(0)
    segmentation = np.zeros(size, np.int32)
    segments, fused, current = [], {}, 0
    for k, label in enumerate(int(v) for v in labels):
        if not is_valid_segment(owner == k, mask_probs[k], mask_threshold,
                                overlap_mask_area_threshold):
            continue
        should_fuse = label in label_ids_to_fuse
        if label in fused:
            current = fused[label]
        else:
            current += 1
        segmentation[owner == k] = current
        segments.append({"id": current, "label_id": label, "was_fused": should_fuse,
                         "score": round(float(scores[k]), 6)})
        if should_fuse:
            fused[label] = current
    return segmentation, segments


def is_valid_segment(mask, probs, mask_threshold, overlap_mask_area_threshold):
    """check_segment_validity: the query owns pixels, and enough of its own thresholded area."""
    area, original_area = int(mask.sum()), int((probs >= mask_threshold).sum())
    return area > 0 and original_area > 0 and area / original_area > overlap_mask_area_threshold


def semantic_map(logits, pred_masks, size):
    """post_process_semantic_segmentation: class probabilities (no "no object") times mask
    probabilities summed over queries, bilinear to the image, argmax over classes."""
    classes = softmax(np.asarray(logits, np.float32))[:, :-1]
    masks = sigmoid(np.asarray(pred_masks, np.float32))
    # torch's einsum("qc,qhw->chw") as one BLAS product (NumPy's own einsum loop took 0.56 s for
    # 100 queries x 150 classes at 384x384; this 0.04 s)
    per_class = (classes.T @ masks.reshape(len(masks), -1)).reshape((-1,) + masks.shape[1:])
    return bilinear(per_class, size).argmax(axis=0)
