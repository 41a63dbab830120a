"""SAM's post-processing in NumPy, as transformers' SamProcessor / SamImageProcessor (4.57) do
it: prompt coordinates, ``post_process_masks``, and what automatic mask generation filters with
(``filter_masks``: stability scores, mask boxes, uncompressed RLE;
``post_process_for_mask_generation``: torchvision's ``batched_nms`` over one class)."""

import numpy as np

from .interpolate import bilinear


def resized_shape(original_hw, longest_edge):
    """SamImageProcessor._get_preprocess_shape: the longest side scaled to ``longest_edge``,
    each side rounded half up."""
    scale = longest_edge * 1.0 / max(original_hw)
    return tuple(int(side * scale + 0.5) for side in original_hw)


def scale_points(points, original_hw, longest_edge):
    """SamProcessor._normalize_coordinates: [..., 2] (x, y) in original pixels -> pixels of the
    resized image (float64, as the processor computes them)."""
    (old_h, old_w), (new_h, new_w) = original_hw, resized_shape(original_hw, longest_edge)
    points = np.array(points, np.float64)
    points[..., 0] *= new_w / old_w
    points[..., 1] *= new_h / old_h
    return points


def upscale_masks(low_res, pad_hw, resized_hw, original_hw):
    """post_process_masks without binarizing: [..., h, w] logits bilinear to the padded input
    size, cropped to the resized image, bilinear to the original size."""
    masks = bilinear(low_res, pad_hw)[..., :resized_hw[0], :resized_hw[1]]
    return bilinear(masks, original_hw)


def stability_scores(masks, mask_threshold, offset):
    """_compute_stability_score_pt: IoU of the masks thresholded at threshold +- offset."""
    high = (masks > mask_threshold + offset).sum((-1, -2))
    low = (masks > mask_threshold - offset).sum((-1, -2))
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 is NaN there too: filtered out
        return (high / low).astype(np.float32)  # torch divides int32 counts into float32


def mask_boxes(masks):
    """_batched_mask_to_box: [N, H, W] bool -> [N, 4] int64 (x0, y0, x1, y1), inclusive pixel
    edges; [0, 0, 0, 0] for an empty mask."""
    n, height, width = masks.shape
    if masks.size == 0:
        return np.zeros((n, 4), np.int64)
    rows, cols = masks.any(-1), masks.any(-2)
    top = np.where(rows.any(-1), rows.argmax(-1), 0)
    bottom = np.where(rows.any(-1), height - 1 - rows[:, ::-1].argmax(-1), 0)
    left = np.where(cols.any(-1), cols.argmax(-1), 0)
    right = np.where(cols.any(-1), width - 1 - cols[:, ::-1].argmax(-1), 0)
    return np.stack([left, top, right, bottom], -1).astype(np.int64)


def mask_to_rle(mask):
    """_mask_to_rle_pytorch for one [H, W] bool mask: column-major run lengths, starting with a
    run of False (0 when the first pixel is set)."""
    height, width = mask.shape
    flat = mask.T.reshape(-1)
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    counts = [] if not flat[0] else [0]
    counts += np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()
    return {"size": [height, width], "counts": counts}


def rle_to_mask(rle):
    """_rle_to_mask: the [H, W] bool mask of an uncompressed RLE."""
    height, width = rle["size"]
    values = np.arange(len(rle["counts"])) % 2 == 1
    return np.repeat(values, rle["counts"]).reshape(width, height).T


def nms(boxes, scores, iou_threshold):
    """torchvision.ops.nms (what batched_nms with one class runs): indices kept, by descending
    score (a stable sort: equal scores keep index order); a box is dropped when its IoU with a
    kept one exceeds ``iou_threshold``. Areas are (x1 - x0) * (y1 - y0), as torchvision's."""
    boxes = np.asarray(boxes, np.float32)
    order = np.argsort(-np.asarray(scores, np.float32), kind="stable")
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep, suppressed = [], np.zeros(len(boxes), bool)
    for rank, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(int(i))
        rest = order[rank + 1:]
        low = np.maximum(boxes[i, :2], boxes[rest, :2])
        high = np.minimum(boxes[i, 2:], boxes[rest, 2:])
        inter = np.prod(np.clip(high - low, 0, None), -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (area[i] + area[rest] - inter)
        suppressed[rest[iou.astype(np.float64) > iou_threshold]] = True  # C++: float > double
    return np.array(keep, np.int64)


def point_grid(n_per_side):
    """_build_point_grid: n x n points evenly spaced in [0, 1]^2, row by row, (x, y)."""
    offset = 1 / (2 * n_per_side)
    side = np.linspace(offset, 1 - offset, n_per_side)
    return np.stack(np.meshgrid(side, side), -1).reshape(-1, 2)
