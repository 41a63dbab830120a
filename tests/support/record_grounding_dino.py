"""References of the grounding-dino fixture (tests/test_pipelines_grounding_dino.py), recorded on
the PyTorch model families_grounding_dino.py builds (rebuilt here, seeded: the checks below fail
if it is not the model the ONNX file holds).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_grounding_dino.py

1. The graph under onnxruntime equals the PyTorch model (the original one: transformers' own
   phrase masks, not the export's replacement) on inputs unlike the export's example: one image
   and a batch of three, each label alone (prompts of other lengths), a padded pair of prompts.
2. references/pipeline_zero-shot-object-detection.json: transformers'
   pipeline("zero-shot-object-detection") on the photos, a few label sets, threshold / top_k, a
   list of dicts; each call also with the pipeline's boxes as floats (``exact_outputs``: its
   _get_bounding_box swapped for one that does not truncate).
3. references/grounded.json: GroundingDinoProcessor's route (the labels joined into one prompt,
   "a cat. a remote control.", then post_process_grounded_object_detection with threshold and
   text_threshold), in the pipeline's output format: score, the decoded phrase as label, box as
   the pipeline truncates it (and as floats), best first, top_k.
4. references/processor.npz: the fixture processor's input_ids, token_type_ids, attention_mask,
   pixel_values and pixel_mask for chelsea.png with the joined prompt; references/
   real_tokenizer.json: input_ids of IDEA-Research/grounding-dino-tiny's own tokenizer
   (../shared/hub-files) for a few prompts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import families_grounding_dino as fam  # noqa: E402
from families_vision_audio import FIXTURES, run, save_json, save_npz, session  # noqa: E402

FX = FIXTURES / fam.NAME
TASK = fam.TASK
CALLS = [
    {"candidate_labels": ["a cat", "a remote control"], "threshold": 0.0, "top_k": 5},
    {"candidate_labels": ["a cat", "a remote control"], "threshold": 0.0},
    {"candidate_labels": ["a person", "a rocket", "the sky", "coffee mug"], "threshold": 0.5},
]
GROUNDED = [
    {"candidate_labels": ["a cat", "a remote control"], "threshold": 0.0, "text_threshold": 0.5},
    {"candidate_labels": ["a person", "a rocket", "the sky"], "threshold": 0.4,
     "text_threshold": 0.6, "top_k": 8},
]
REAL_PROMPTS = ["a cat. a remote control.", "a cat", "Astronaut's helmet, red flag?"]
KEYS = ("xmin", "ymin", "xmax", "ymax")


def load():
    from transformers import GroundingDinoProcessor

    proc = GroundingDinoProcessor.from_pretrained(FX)
    model = fam.build_model(proc.tokenizer)
    images = [Image.open(FX / p).convert("RGB") for p in fam.photos_description()["images"]]
    return proc, model, images


def check_graph(proc, model, images):
    sess = session(FX / "onnx/model.onnx")
    cases = [(images[:1], fam.EXAMPLE_LABELS), (images, [fam.EXAMPLE_LABELS] * 3),
             (images[1:2], "a cat"), (images[2:3], "a remote control"),
             (images[:2], ["a person.", "the sky is red. a rocket?"])]
    worst = 0.0
    for batch, text in cases:
        feeds = fam.feeds_for(proc, batch, text)
        with torch.no_grad():
            want = model(**feeds)
        got = run(sess, {k: v.numpy() for k, v in feeds.items()})
        for k in fam.OUTPUT_NAMES:
            w = want[k].numpy()
            assert np.array_equal(np.isfinite(w), np.isfinite(got[k])), k
            finite = np.isfinite(w)
            np.testing.assert_allclose(got[k][finite], w[finite], rtol=1e-4, atol=1e-4, err_msg=k)
            worst = max(worst, float(np.abs(got[k][finite] - w[finite]).max()))
    print(f"onnxruntime == torch on {len(cases)} input sets, worst |diff| {worst:.2e}")


def record_pipeline(proc, model, images):
    from transformers import pipeline

    p = pipeline(TASK, model=model, tokenizer=proc.tokenizer, image_processor=proc.image_processor,
                 device="cpu")
    exact = pipeline(TASK, model=model, tokenizer=proc.tokenizer,
                     image_processor=proc.image_processor, device="cpu")
    exact._get_bounding_box = lambda box: dict(zip(KEYS, box.tolist()))
    calls = []
    for kwargs in CALLS:
        calls.append({"call_kwargs": kwargs, "outputs": [p(x, **kwargs) for x in images],
                      "exact_outputs": [exact(x, **kwargs) for x in images]})
    labels = CALLS[0]["candidate_labels"]
    listed = p([{"image": x, "candidate_labels": labels} for x in images], threshold=0.2)
    batch = {"call": "pipe([{'image': image, 'candidate_labels': labels} for image in images], "
                     "threshold=0.2)", "candidate_labels": labels, "threshold": 0.2,
             "outputs": listed}
    save_json(FX / "references" / f"pipeline_{TASK}.json",
              {"task": TASK, "inputs": fam.photos_description(), "calls": calls, "batch": batch})
    return calls


def grounded_call(proc, model, image, kwargs):
    feeds = fam.feeds_for(proc, [image], kwargs["candidate_labels"])
    with torch.no_grad():
        out = model(**feeds)
    post = proc.post_process_grounded_object_detection(
        out, feeds["input_ids"], threshold=kwargs["threshold"],
        text_threshold=kwargs["text_threshold"], target_sizes=[(image.height, image.width)])[0]
    found = [{"score": s.item(), "label": label, "box": dict(zip(KEYS, b.int().tolist())),
              "exact_box": dict(zip(KEYS, b.tolist()))}
             for s, label, b in zip(post["scores"], post["text_labels"], post["boxes"])]
    found = sorted(found, key=lambda r: r["score"], reverse=True)  # as the pipeline sorts
    return found[:kwargs["top_k"]] if kwargs.get("top_k") else found


def record_grounded(proc, model, images):
    calls = [{"call_kwargs": kwargs, "outputs": [grounded_call(proc, model, x, kwargs) for x in images]}
             for kwargs in GROUNDED]
    save_json(FX / "references" / "grounded.json",
              {"what": "GroundingDinoProcessor(images=image, text=candidate_labels) -> model -> "
                       "post_process_grounded_object_detection(threshold, text_threshold, "
                       "target_sizes=[(h, w)]); scores, text_labels, boxes (int() as the pipeline "
                       "truncates, and exact), sorted by score as the pipeline sorts, top_k",
               "prompts": [proc._preprocess_input_text(c["candidate_labels"]) for c in GROUNDED],
               "inputs": fam.photos_description(), "calls": calls})
    return calls


def record_processor(proc, images):
    from transformers import AutoTokenizer

    enc = proc(images=images[:1], text=fam.EXAMPLE_LABELS, return_tensors="np")
    save_npz(FX / "references" / "processor.npz",
             {k: np.asarray(enc[k]) for k in fam.INPUT_NAMES})
    real = AutoTokenizer.from_pretrained(fam.HUB)
    save_json(FX / "references" / "real_tokenizer.json",
              {"tokenizer": "IDEA-Research/grounding-dino-tiny (../shared/hub-files)",
               "input_ids": {t: real(t)["input_ids"] for t in REAL_PROMPTS},
               "joined": {"labels": fam.EXAMPLE_LABELS,
                          "prompt": proc._preprocess_input_text(fam.EXAMPLE_LABELS)}})


def spread(calls):
    scores = [r["score"] for c in calls for out in c["outputs"] for r in out]
    gap = min((abs(a["score"] - b["score"]) for c in calls for out in c["outputs"]
               for a, b in zip(out, out[1:])), default=1.0)
    boxes = {tuple(r["box"].values()) for c in calls for out in c["outputs"] for r in out}
    return len(scores), max(scores) - min(scores), gap, len(boxes)


def main():
    torch.set_num_threads(1)
    proc, model, images = load()
    check_graph(proc, model, images)
    calls = record_pipeline(proc, model, images)
    grounded = record_grounded(proc, model, images)
    record_processor(proc, images)
    n, width, gap, boxes = spread(calls[1:2])
    assert boxes > 10 and width > 1e-2 and gap > 1e-6, (boxes, width, gap)
    print(f"pipeline: {n} detections, score spread {width:.4f}, smallest gap {gap:.2e}, "
          f"{boxes} distinct boxes")
    labels = {r["label"] for c in grounded for out in c["outputs"] for r in out}
    print(f"grounded: {sum(len(o) for c in grounded for o in c['outputs'])} detections, "
          f"labels {sorted(labels)}")


if __name__ == "__main__":
    main()
