"""MaskFormer / Mask2Former heads (``class_queries_logits`` [queries, labels + 1] and
``masks_queries_logits`` [queries, h, w]) post-processed as MaskFormerImageProcessor and
Mask2FormerImageProcessor do, in NumPy. Panoptic and semantic are DETR's functions (panoptic.py:
query_segments, semantic_map) on the masks `resized_masks` gives; the instance route is
MaskFormer's own: a top-k over queries x labels.

The two processors differ in one step: Mask2Former's first resizes the mask logits to 384x384
("the preprocessed image size for all models", whatever the input's size), then resizes again to
the image; MaskFormer's resizes once.
"""

import numpy as np

from ..heads import sigmoid, softmax
from .interpolate import bilinear, nearest
from .torch_topk import topk_unsorted

MASK2FORMER_MASK_SIZE = (384, 384)


def resized_masks(mask_logits, processor_type):
    """The mask logits the post-processing starts from (bilinear, as torch's interpolate)."""
    mask_logits = np.asarray(mask_logits, np.float32)
    if processor_type in ("Mask2FormerImageProcessor", "Mask2FormerImageProcessorFast"):
        return bilinear(mask_logits, MASK2FORMER_MASK_SIZE)
    return mask_logits


def instance_segments(class_logits, mask_logits, size, threshold):
    """post_process_instance_segmentation: the num_queries best (query, label) pairs by class
    probability, each scored by its probability times its mask's mean sigmoid over the pixels
    where its logit is > 0; masks binarized there, then resized to the image (nearest). Kept when
    the mask is not empty and the score >= threshold; segment ids from 0, a later segment painting
    over an earlier one (the segmentation map is -1 where none is).

    mask_threshold and overlap_mask_area_threshold do not enter (transformers' pipeline passes
    them; this function ignores them, as transformers' does)."""
    probs = softmax(np.asarray(class_logits, np.float32))[:, :-1]
    n_queries, n_labels = probs.shape
    flat = probs.reshape(-1)
    top = topk_unsorted(flat, n_queries)  # torch.topk(sorted=False)'s order: it sets the ids
    labels, queries = top % n_labels, top // n_labels
    masks = mask_logits[queries]
    binary = masks > 0
    area = binary.reshape(n_queries, -1).sum(1, dtype=np.float32)
    mask_scores = (sigmoid(masks) * binary).reshape(n_queries, -1).sum(1) / (area + 1e-6)
    scores = (flat[top] * mask_scores).astype(np.float32)
    binary = nearest(binary, size)
    segmentation = np.full(size, -1, np.int32)
    segments = []
    for j in range(n_queries):
        if binary[j].any() and scores[j] >= threshold:
            segmentation[binary[j]] = len(segments)
            segments.append({"id": len(segments), "label_id": int(labels[j]), "was_fused": False,
                             "score": round(float(scores[j]), 6)})
    return segmentation, segments
