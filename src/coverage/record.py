"""``transmuter coverage record``: for each case, the feed the task's own preprocessing makes of
its fixed input, and onnxruntime's outputs of the variant's ONNX file on it (graph optimizations
off), with each output's noise for graphs that quantize activations (onnxruntime again, on inputs
and weights moved by 1e-6). Files download through huggingface_hub into its cache.

``records/<org>--<name>/<task>/<variant>.npz`` holds ``input/<name>``, ``output/<name>`` and
``noise/<name>`` arrays; ``recorded.json`` lists each case with its file, or its error."""

import os
import pathlib

import numpy as np

from ..debug.compare import noise_of
from ..debug.reference import outputs, perturbed, perturbed_feeds, quantizes_activations
from ..engine.model import read_proto
from ..errors import TransmuterError
from ..hub.repo import resolve
from ..pipelines import pipeline
from . import cases


def record(folder, *, offline=False, progress=print):
    """Record every case of ``folder``/cases.json; write ``recorded.json``; return its list."""
    done = []
    for group in cases.read(folder, "cases.json", "select"):
        for variant in group["variants"]:
            entry = {"task": group["task"], "repo": group["repo"], "variant": variant}
            try:
                entry.update(record_case(folder, group["task"], group["repo"], variant, offline))
            except Exception as e:  # noqa: BLE001  any failure is the case's result, not the run's
                entry["error"] = f"{type(e).__name__}: {e}"
            progress(f"record {entry['task']} {entry['repo']} {variant}: "
                     f"{entry.get('error', 'recorded')}")
            done.append(entry)
    cases.write(folder, "recorded.json", done)
    return done


def record_case(folder, task, repo, variant, offline):
    """{"file": the ONNX file in the repo, "record": the .npz path relative to ``folder``}."""
    pipe = pipeline(task, repo, variant=variant, local_files_only=offline)
    example = cases.example(task, folder, getattr(pipe, "tokenizer", None))
    feed = {k: np.asarray(v) for k, v in pipe.model_feed(example).items()}
    local = pipe.model.origin[1].replace(os.sep, "/")  # the pipeline loads the cached file
    file = next(f for f in resolve(repo, local_files_only=offline).onnx_files()
                if local.endswith("/" + f))  # its path in the repo, for `run` on any machine
    proto = read_proto(local)
    reference = outputs(proto, feed)
    noise = {}
    if quantizes_activations(proto):
        moved = outputs(perturbed(proto), perturbed_feeds(feed))
        noise = {k: noise_of(v, moved[k]) for k, v in reference.items()}
    name = pathlib.Path("records") / repo.replace("/", "--") / task / f"{variant}.npz"
    path = pathlib.Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"input/{k}": v for k, v in feed.items()}
    for key, value in reference.items():
        if isinstance(value, list):
            raise TransmuterError(f"output {key!r} is a sequence, which a record cannot hold")
        arrays[f"output/{key}"] = value
        arrays[f"noise/{key}"] = np.float64(noise.get(key, 0.0))
    np.savez(path, **arrays)
    return {"file": file, "record": str(name)}
