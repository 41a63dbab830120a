"""References for tests/test_torch_topk.py: the order of torch.topk(sorted=False) on CPU, and
MaskFormer's instance post-processing where that order shows (fewer than 64 labels).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_torch_topk.py

Writes tests/fixtures/torch-topk/:
- topk.npz: for case i, ``i/values`` (float32, 1-D) and ``i/indices``, torch.topk(values, k,
  sorted=False).indices, k = len(indices). The cases cover both of ATen's algorithms (partial_sort
  when k * 64 <= n, else nth_element), ties (values drawn from a few levels), NaNs, k = 1 and k = n,
  arrays long enough that introselect partitions many times, and McIlroy's adversary inputs
  (built against the port, src/pipelines/vision/torch_topk.py) that drive introselect to its
  depth limit, where it falls back to a heap select.
- instance.npz + instance.json: Mask2FormerImageProcessor.post_process_instance_segmentation and
  MaskFormerImageProcessor's on random logits with 7 labels and 20 queries (140 pairs, so
  nth_element): the inputs, the segmentation map and segments_info.
The recorder asserts that the references discriminate: in nth_element cases torch's order is not
the sorted order, and the instance segments are not in score order.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import Mask2FormerImageProcessor, MaskFormerImageProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families_vision_audio import FIXTURES, save_npz  # noqa: E402

OUT = FIXTURES / "torch-topk"
# (n, k, kind): "normal" draws, "ties" from 5 levels, "nan" normal with NaNs sprinkled in
CASES = [(n, k, kind) for kind in ("normal", "ties", "nan")
         for n, k in [(10, 1), (10, 10), (140, 20), (700, 10), (639, 10), (640, 10), (641, 10),
                      (4000, 100), (5000, 78), (37, 30), (3, 2), (4, 3), (12600, 200)]]
ADVERSARY = [(64, 32), (200, 100), (1000, 500)]
QUERIES, LABELS, MASK = 20, 7, (16, 16)
SIZES = [(61, 83), (40, 40)]


def draw(rng, n, kind):
    if kind == "ties":
        return rng.integers(0, 5, n).astype(np.float32) / 4
    values = rng.standard_normal(n).astype(np.float32)
    if kind == "nan":
        values[rng.choice(n, max(1, n // 50), replace=False)] = np.nan
    return values


def port():
    """The port under test, loaded from its file (it needs NumPy only; transmuter needs JAX)."""
    path = Path(__file__).resolve().parents[2] / "src" / "pipelines" / "vision" / "torch_topk.py"
    spec = importlib.util.spec_from_file_location("torch_topk", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def adversary(n, k):
    """McIlroy's antiqsort ("A Killer Adversary for Quicksort", 1999) against the port's
    introselect: values are fixed only when compared, so that each pivot lands near an end.
    Returns float32 values, larger first in torch's order."""
    gas, val, state = n, [n] * n, {"solid": 0, "candidate": 0}

    def before(x, y):
        if val[x] == gas and val[y] == gas:
            z = x if x == state["candidate"] else y
            val[z], state["solid"] = state["solid"], state["solid"] + 1
        if val[x] == gas:
            state["candidate"] = x
        elif val[y] == gas:
            state["candidate"] = y
        return val[x] < val[y]

    topk = port()
    topk._introselect(list(range(n)), 0, k - 1, n, 2 * (n.bit_length() - 1), before)
    return -np.array(val, np.float32)


def record_topk(rng):
    arrays, unsorted = {}, 0
    inputs = [(draw(rng, n, kind), k, kind) for n, k, kind in CASES]
    inputs += [(adversary(n, k), k, "adversary") for n, k in ADVERSARY]
    for i, (values, k, kind) in enumerate(inputs):
        n = len(values)
        indices = torch.topk(torch.from_numpy(values), k, sorted=False).indices.numpy()
        arrays[f"{i}/values"], arrays[f"{i}/indices"] = values, indices.astype(np.int64)
        if k * 64 > n and kind == "normal" and k > 2:
            unsorted += not np.array_equal(indices, np.argsort(-values, kind="stable")[:k])
    assert unsorted >= 3, "torch's nth_element order looks sorted: the reference cannot tell"
    save_npz(OUT / "topk.npz", arrays)


def record_instance(rng):
    arrays, cases = {}, []
    for p, processor in enumerate([Mask2FormerImageProcessor(), MaskFormerImageProcessor()]):
        for s, size in enumerate(SIZES):
            key = f"{p}-{s}"
            # a spread of class logits, so that several queries pass the threshold
            class_logits = (rng.standard_normal((1, QUERIES, LABELS + 1)) * 2.5).astype(np.float32)
            mask_logits = rng.standard_normal((1, QUERIES) + MASK).astype(np.float32)
            outputs = type("Outputs", (), {"class_queries_logits": torch.from_numpy(class_logits),
                                           "masks_queries_logits": torch.from_numpy(mask_logits)})
            result = processor.post_process_instance_segmentation(
                outputs, threshold=0.1, target_sizes=[size])[0]
            segments = [{k: (round(float(v), 6) if k == "score" else v) for k, v in seg.items()}
                        for seg in result["segments_info"]]
            scores = [seg["score"] for seg in segments]
            assert scores != sorted(scores, reverse=True), "segments in score order: cannot tell"
            arrays[f"{key}/class_queries_logits"] = class_logits[0]
            arrays[f"{key}/masks_queries_logits"] = mask_logits[0]
            arrays[f"{key}/segmentation"] = result["segmentation"].numpy().astype(np.int32)
            cases.append({"key": key, "image_processor_type": type(processor).__name__,
                          "size": list(size), "threshold": 0.1, "segments_info": segments})
            print(f"{key} {type(processor).__name__} {size}: {len(segments)} segments")
    save_npz(OUT / "instance.npz", arrays)
    (OUT / "instance.json").write_text(json.dumps({"torch": torch.__version__, "cases": cases},
                                                  indent=1) + "\n")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261203)
    record_topk(rng)
    record_instance(rng)


if __name__ == "__main__":
    main()
