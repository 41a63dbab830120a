"""M-RoPE positions (Qwen2-VL, Qwen2.5-VL): transformers 4.57 ``Qwen2VLModel.get_rope_index`` for
one prompt with images. Text tokens count up on all three axes; an image's merged tokens take
(temporal, row, column) offsets from the position after the text before it; the text after an
image starts at the largest position so far + 1. The steppers feed these to a graph whose
position_ids is [3, batch, sequence], and continue each row from its largest + 1
(``rope_deltas``)."""

import numpy as np

from ..errors import InputError


def rope_index(ids, grids, image_token_id, vision_start_token_id, merge):
    """[3, len(ids)] int64 positions of one prompt's ``ids``; ``grids``: each image's (t, h, w)
    in patches, in prompt order (None or empty: text positions)."""
    ids = [int(i) for i in ids]
    n = len(ids)
    if grids is None or not len(grids):
        return np.broadcast_to(np.arange(n, dtype=np.int64), (3, n)).copy()
    starts = [i for i, t in enumerate(ids[:-1]) if t == vision_start_token_id]
    images = sum(ids[i + 1] == image_token_id for i in starts)
    if images > len(grids):
        raise InputError(f"The prompt opens {images} images (vision_start + image token) but "
                         f"{len(grids)} were given")
    pieces, at = [], 0
    for t, h, w in np.asarray(grids, np.int64)[:images]:
        end = ids.index(image_token_id, at)
        first = _next(pieces)
        pieces.append(np.broadcast_to(np.arange(end - at) + first, (3, end - at)))
        t, h, w = int(t), int(h) // merge, int(w) // merge
        grid = np.stack(np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"))
        pieces.append(grid.reshape(3, -1) + end - at + first)
        at = end + t * h * w
    if at < n:
        first = _next(pieces)
        pieces.append(np.broadcast_to(np.arange(n - at) + first, (3, n - at)))
    return np.concatenate(pieces, axis=1).astype(np.int64)


def _next(pieces):
    return int(pieces[-1].max()) + 1 if pieces else 0
