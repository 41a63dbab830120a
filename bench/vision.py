"""Image pipelines, images/s end to end: Transmuter vs onnxruntime with the same preprocessing vs
transformers on PyTorch, on ViT-B/16 (image-classification) and CLIP ViT-B/16
(zero-shot-image-classification, 5 candidate labels) of bench/_vision_models.py (random weights).

    python bench/vision.py [--tasks image-classification,zero-shot-image-classification]
                           [--batch 1,16] [--images 64] [--repeat 3] [--backend jax|mlx]
                           [--layers 12] [--no-torch]

The inputs are --images file paths (12 of scikit-image's sample photos, JPEG and PNG at their
natural sizes, 300x400 to 1411x1411, cycled). A pass is one call over all of them at batch size B,
timed whole: decoding the files, preprocessing, the model, postprocessing (softmax, top 5 labels;
zero-shot: softmax over logits_per_image, all labels ranked). images/s = images / seconds.

- Transmuter: ``transmuter.pipeline(task, folder, batch_size=B)(paths)`` (zero-shot:
  ``candidate_labels=LABELS``), on --backend.
- onnxruntime: the same onnx/model.onnx, ORT_ENABLE_ALL, as many intra-op threads as cores, fed
  by Transmuter's image processor (``load_image`` + ``image_processor_for``, B images
  stacked) and postprocessed here in NumPy; the zero-shot label texts are tokenized once, untimed.
- transformers: ``transformers.pipeline(task, model=folder, device="cpu")(paths, batch_size=B)``
  on the torch weights the file was exported from, torch threads = cores, in the export
  environment ($TRANSMUTER_EXPORT_PYTHON) as a subprocess that stays up for the whole task and
  times a pass when asked (so its passes alternate with the others'); it reports its seconds and
  each image's top label and top-2 scores as JSON.

Each peer makes one untimed pass first (compiles, warms caches); those outputs are checked before
any timing: Transmuter's top-1 label must equal onnxruntime's on every image, and PyTorch's except
where the top two scores are within 1e-4 (random weights give near ties; such images are counted
in the "ties" column). Then --repeat timed passes, the peers alternating; the best pass counts.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

import transmuter
from _vision_models import EXPORT_PYTHON, TASKS, model_folder, ort_session, photos
from transmuter.preprocess.image.load import load_image
from transmuter.preprocess.image.auto import image_processor_for

LABELS = ["cat", "dog", "a rocket", "coffee cup", "astronaut"]
TEMPLATE = "This is a photo of {}."  # the zero-shot pipelines' default hypothesis_template
TIE = 1e-4

TORCH = textwrap.dedent("""
    import json, os, sys, time
    out, sys.stdout = sys.stdout, sys.stderr  # only our JSON lines on the pipe
    import torch, transformers
    task, folder = sys.argv[1], sys.argv[2]
    paths, labels = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    torch.set_num_threads(os.cpu_count())
    transformers.logging.set_verbosity_error()
    pipe = transformers.pipeline(task, model=folder, device="cpu")
    kw = {"candidate_labels": labels} if labels else {}
    print(json.dumps({"processor": type(pipe.image_processor).__name__,
                      "threads": torch.get_num_threads()}), file=out, flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        res = pipe(paths, batch_size=int(line), **kw)
        seconds = time.perf_counter() - start
        top = [[r[0]["label"], r[0]["score"], r[1]["score"]] for r in res]
        print(json.dumps({"seconds": seconds, "top": top}), file=out, flush=True)
""")


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def top(ranked):
    """(label, top score, second score) of one image's ranked [{"label", "score"}, ...]."""
    return ranked[0]["label"], ranked[0]["score"], ranked[1]["score"]


class OrtPeer:
    """The model on onnxruntime, fed by Transmuter's image processor, postprocessed plainly."""

    def __init__(self, folder, task):
        self.session = ort_session(folder / "onnx" / "model.onnx")
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.processor = image_processor_for(
            json.loads((folder / "preprocessor_config.json").read_text()))
        self.text = {}
        if task == "zero-shot-image-classification":
            self.output, self.names = "logits_per_image", LABELS
            self.text = self.tokenize(folder, [TEMPLATE.format(x) for x in LABELS])
        else:
            id2label = json.loads((folder / "config.json").read_text())["id2label"]
            self.output, self.names = "logits", [id2label[str(i)] for i in range(len(id2label))]

    def tokenize(self, folder, texts):
        """The texts as CLIPTokenizerFast gives them with padding=True: padded to the longest
        with the pad token, attention mask 1 on the tokens."""
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
        pad = json.loads((folder / "tokenizer_config.json").read_text())["pad_token"]
        ids = [e.ids for e in tok.encode_batch(texts)]
        length = max(map(len, ids))
        feed = {"input_ids": np.full((len(ids), length), tok.token_to_id(pad), np.int64),
                "attention_mask": np.zeros((len(ids), length), np.int64)}
        for row, x in enumerate(ids):
            feed["input_ids"][row, :len(x)] = x
            feed["attention_mask"][row, :len(x)] = 1
        return {k: v for k, v in feed.items() if k in self.inputs}

    def __call__(self, paths, batch):
        out = []
        for i in range(0, len(paths), batch):
            pixels = np.stack([self.processor(load_image(p))["pixel_values"]
                               for p in paths[i:i + batch]])
            logits = self.session.run([self.output], {"pixel_values": pixels, **self.text})[0]
            for scores in softmax(logits):
                best = np.argsort(-scores, kind="stable")[:5]
                out.append(top([{"label": self.names[j], "score": float(scores[j])}
                                for j in best]))
        return out


class TorchPeer:
    """transformers' pipeline in the export environment; ``peer(batch)`` times one pass there."""

    def __init__(self, folder, task, paths):
        self.log = tempfile.TemporaryFile("w+")
        labels = LABELS if task == "zero-shot-image-classification" else []
        self.proc = subprocess.Popen(
            [EXPORT_PYTHON, "-c", TORCH, task, str(folder), json.dumps(paths), json.dumps(labels)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise SystemExit("the transformers peer stopped:\n" + self.log.read()[-3000:])
        return json.loads(line)

    def __call__(self, batch):
        """(top label and top-2 scores per image, seconds) of one pass there."""
        self.proc.stdin.write(f"{batch}\n")
        self.proc.stdin.flush()
        out = self._read()
        return out["top"], out["seconds"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def check(task, batch, ours, ref, theirs):
    """Stop unless the top-1 labels agree (see the docstring); the number of near ties excused."""
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a[0] != b[0]:
            raise SystemExit(f"{task} batch {batch}: image {i}: Transmuter says {a[0]!r} "
                             f"({a[1]:.6f}), onnxruntime {b[0]!r} ({b[1]:.6f})")
    ties = 0
    for i, (a, b) in enumerate(zip(ours, theirs or [])):
        near = min(a[1] - a[2], b[1] - b[2]) < TIE
        ties += near
        if a[0] != b[0] and not near:
            raise SystemExit(f"{task} batch {batch}: image {i}: Transmuter says {a[0]!r} "
                             f"({a[1]:.6f}), PyTorch {b[0]!r} ({b[1]:.6f}; second {b[2]:.6f})")
    return ties


def stopwatch(fn):
    def run():
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start
    return run


def bench_task(task, args, paths):
    name = next(k for k, v in TASKS.items() if v == task)
    folder = model_folder(name, args.layers)
    ort_peer = OrtPeer(folder, task)
    torch_peer = None if args.no_torch else TorchPeer(folder, task, paths)
    kw = {"candidate_labels": LABELS} if task == "zero-shot-image-classification" else {}
    try:
        for batch in args.batches:
            pipe = transmuter.pipeline(task, folder, backend=args.backend, batch_size=batch)
            peers = {"transmuter": stopwatch(lambda: [top(r) for r in pipe(paths, **kw)]),
                     "ort": stopwatch(lambda: ort_peer(paths, batch))}
            if torch_peer:
                peers["torch"] = lambda: torch_peer(batch)
            ties, best = timed(peers, args.repeat, task, batch)
            report(task, batch, len(paths), best, ties)
    finally:
        if torch_peer:
            torch_peer.close()


def timed(peers, repeat, task, batch):
    """Each peer (``() -> (outputs, seconds)``) once untimed, the outputs checked, then ``repeat``
    passes alternating between the peers; (near ties excused, best seconds per peer)."""
    outputs = {name: fn()[0] for name, fn in peers.items()}
    ties = check(task, batch, outputs["transmuter"], outputs["ort"], outputs.get("torch"))
    best = dict.fromkeys(peers, float("inf"))
    for _ in range(repeat):
        for name, fn in peers.items():
            best[name] = min(best[name], fn()[1])
    return ties, best


def report(task, batch, n, best, ties):
    rate = {k: n / s for k, s in best.items()}
    torch_col = f"{rate['torch']:>10.1f}" if "torch" in rate else f"{'':>10}"
    vs_torch = f"{rate['transmuter'] / rate['torch']:>7.2f}x" if "torch" in rate else f"{'':>8}"
    ties = f"{ties:>5}" if "torch" in rate else ""
    print(f"{task:<31} {batch:>5} {rate['transmuter']:>11.1f} {rate['ort']:>8.1f} {torch_col} "
          f"{rate['transmuter'] / rate['ort']:>6.2f}x {vs_torch} {ties}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS.values()))
    parser.add_argument("--batch", default="1,16")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batch.split(",")]
    tasks = args.tasks.split(",")
    unknown = set(tasks) - set(TASKS.values())
    if unknown:
        raise SystemExit(f"unknown task(s) {sorted(unknown)}; choose from {list(TASKS.values())}")
    paths = photos(args.images)
    print(f"{args.images} images ({len(set(paths))} photos, JPEG / PNG); ViT-B/16 and CLIP "
          f"ViT-B/16 sizes, {args.layers} layers, random weights; {os.cpu_count()} cores; "
          f"backend {args.backend}; best of {args.repeat}; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'task':<31} {'batch':>5} {'transmuter':>11} {'ort':>8} {'torch':>10} "
          f"{'vs ort':>7} {'vs torch':>8} {'ties':>5}   (images/s)", flush=True)
    for task in tasks:
        bench_task(task, args, paths)


if __name__ == "__main__":
    sys.exit(main())
