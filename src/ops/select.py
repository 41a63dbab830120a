"""Selection: TopK, Unique, NonMaxSuppression, Compress, ReverseSequence.

TopK runs on every backend through the ``topk`` primitive (k must be known on the host). Unique and
NonMaxSuppression have value-dependent output shapes and run on the host; Compress needs its
condition on the host (a traced condition is a graph break)."""

import numpy as np

from .registry import op


def _int(v):
    return int(np.asarray(v).reshape(-1)[0])


def _topk(xp, x, k, axis, largest):
    axis = axis + x.ndim if axis < 0 else axis
    if k == 0:
        shape = x.shape[:axis] + (0,) + x.shape[axis + 1:]
        return xp.zeros(shape, xp.dtype_of(x)), xp.zeros(shape, np.int64)
    values, indices = xp.topk(x, k, axis=axis, largest=bool(largest))
    return values, xp.astype(indices, np.int64)


@op("TopK", 1)
def top_k_v1(xp, x, *, k, axis=-1):
    return _topk(xp, x, k, axis, True)


@op("TopK", 10, static=(1,))
def top_k_v10(xp, x, k, *, axis=-1):
    return _topk(xp, x, _int(k), axis, True)


@op("TopK", 11, static=(1,))
def top_k(xp, x, k, *, axis=-1, largest=1, sorted=1):
    # Unsorted output may come in any order: sorted is a valid order.
    return _topk(xp, x, _int(k), axis, largest)


@op("Unique", 11, host=True)
def unique(xp, x, *, axis=None, sorted=1):
    x = np.asarray(x)
    if axis is None:
        flat = x.reshape(-1)
    else:
        axis = axis + x.ndim if axis < 0 else axis
        flat = np.moveaxis(x, axis, 0)
    keys = flat.reshape(flat.shape[0], -1) if flat.ndim > 1 else flat
    # Group equal rows: the first occurrence of each, in sorted or first-occurrence order.
    rows = [tuple(r) if keys.ndim > 1 else r for r in keys.tolist()]
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(r, i)
    order = list(first)
    if sorted:
        order.sort()
    rank = {r: j for j, r in enumerate(order)}
    indices = np.array([first[r] for r in order], np.int64)
    inverse = np.array([rank[r] for r in rows], np.int64)
    counts = np.bincount(inverse, minlength=len(order)).astype(np.int64)
    y = flat[indices] if len(indices) else flat[:0]
    if axis is not None:
        y = np.moveaxis(y, 0, axis)
    return y, indices, inverse, counts


def _corners(box, center_point_box):
    if center_point_box:
        xc, yc, w, h = box
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = box
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def _iou(a, b):
    ih = min(a[2], b[2]) - max(a[0], b[0])
    iw = min(a[3], b[3]) - max(a[1], b[1])
    if ih <= 0 or iw <= 0:
        return 0.0
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@op("NonMaxSuppression", 10, host=True)
def non_max_suppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    max_out = 0 if max_output_boxes_per_class is None else _int(max_output_boxes_per_class)
    iou_th = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).reshape(-1)[0])
    score_th = None if score_threshold is None else float(
        np.asarray(score_threshold).reshape(-1)[0])
    boxes, scores = np.asarray(boxes, np.float64), np.asarray(scores, np.float64)
    selected = []
    for b in range(scores.shape[0]):
        corners = [_corners(box, center_point_box) for box in boxes[b]]
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.argsort(-s, kind="stable")
            if score_th is not None:
                candidates = [i for i in candidates if s[i] > score_th]
            kept = []
            for i in candidates:
                if len(kept) >= max_out:
                    break
                if all(_iou(corners[i], corners[j]) <= iou_th for j in kept):
                    kept.append(i)
            selected += [(b, c, i) for i in kept]
    return np.array(selected, np.int64).reshape(-1, 3)


@op("Compress", 9, static=(1,))
def compress(xp, x, condition, *, axis=None):
    keep = np.nonzero(np.asarray(condition).reshape(-1))[0]
    if axis is None:
        x, axis = xp.reshape(x, (-1,)), 0
    axis = axis + x.ndim if axis < 0 else axis
    keep = keep[keep < x.shape[axis]]
    return xp.take(x, xp.asarray(keep.astype(np.int64)), axis=axis)


@op("ReverseSequence", 10)
def reverse_sequence(xp, x, sequence_lens, *, batch_axis=1, time_axis=0):
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    t = xp.arange(steps, dtype=np.int64)
    lens = xp.astype(sequence_lens, np.int64)
    # index[t, b] = lens[b] - 1 - t for t < lens[b], else t; laid out along (time, batch).
    grid_t, grid_l = t[:, None], lens[None, :]
    index = xp.where(grid_t < grid_l, grid_l - 1 - grid_t, grid_t)
    if time_axis > batch_axis:
        index = xp.transpose(index)
    shape = [1] * x.ndim
    shape[time_axis], shape[batch_axis] = steps, batch
    index = xp.broadcast_to(xp.reshape(index, tuple(shape)), x.shape)
    return xp.take_along_axis(x, index, axis=time_axis)
