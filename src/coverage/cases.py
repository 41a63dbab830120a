"""Which models the coverage matrix runs: the most downloaded ONNX repos of each task, listed by
the Hub's model list (``huggingface_hub.list_models``), each with the variants its files hold,
and the fixed input each task's preprocessing turns into the graph's feed.

A case is one (task, repo, variant); ``cases.json`` in the coverage folder holds the selection:
``[{"task", "repo", "downloads", "variants": [...]}, ...]``."""

import json
import pathlib
import re

import numpy as np

from ..errors import TransmuterError
from ..hub.variants import DTYPE_SUFFIXES

# Tasks whose pipeline gives its graph one feed per input (pipelines/base.py model_feed);
# generating tasks (text-generation, speech recognition, translation) run a decoding loop, whose
# first step alone would say little
TASKS = ("feature-extraction", "text-classification", "token-classification", "fill-mask",
         "question-answering", "image-classification", "image-feature-extraction",
         "object-detection", "depth-estimation", "audio-classification")
LIBRARIES = ("onnx", "transformers.js")  # the Hub's tags of repos with ONNX files
TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
IMAGE, AUDIO = "image.png", "audio.wav"  # made in the coverage folder (inputs/) on first use
# the fill-mask example masks with the tokenizer's own mask token, written here as {mask}
EXAMPLES = {
    "fill-mask": "The quick brown fox jumps over the {mask} dog.",
    "question-answering": {"question": "What does the fox jump over?", "context": TEXT},
}
MODALITY = {"image-classification": IMAGE, "image-feature-extraction": IMAGE,
            "object-detection": IMAGE, "depth-estimation": IMAGE, "audio-classification": AUDIO}

_SUFFIXES = sorted(((s, d) for d, s in DTYPE_SUFFIXES.items() if s), key=lambda x: -len(x[0]))


def select(tasks=TASKS, per_task=5, libraries=LIBRARIES, token=None):
    """For each task, the ``per_task`` most downloaded repos tagged with any of ``libraries``
    that hold ONNX files, with their variants: a list of case groups (cases.json)."""
    from huggingface_hub import HfApi
    api = HfApi(token=token)
    found = []
    for task in tasks:
        repos = {}
        for library in libraries:
            for info in api.list_models(filter=library, pipeline_tag=task, sort="downloads",
                                        limit=per_task * 2,
                                        expand=["downloads", "siblings", "pipeline_tag"]):
                files = [s.rfilename for s in info.siblings or ()]
                held = variants(files)
                if held and info.id not in repos:
                    repos[info.id] = {"task": task, "repo": info.id,
                                      "downloads": info.downloads or 0, "variants": held}
        ranked = sorted(repos.values(), key=lambda r: -r["downloads"])
        found += ranked[:per_task]
    return found


def variants(files, component="model"):
    """The dtypes (fp32, fp16, q8, q4, ...) of ``onnx/{component}*.onnx`` among ``files``, in
    transformers.js's naming (hub/variants.py)."""
    held = []
    for name in files:
        match = re.fullmatch(rf"onnx/{component}(\w*)\.onnx", name)
        if not match:
            continue
        suffix = match.group(1)
        dtype = "fp32" if not suffix else next((d for s, d in _SUFFIXES if suffix == s), None)
        if dtype is not None and dtype not in held:
            held.append(dtype)
    return sorted(held, key=list(DTYPE_SUFFIXES).index)


def write(folder, name, value):
    path = pathlib.Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1) + "\n")
    return path


def read(folder, name, step):
    path = pathlib.Path(folder) / name
    if not path.is_file():
        raise TransmuterError(f"{path} is missing: run `transmuter coverage {step}` first")
    return json.loads(path.read_text())


def example(task, folder, tokenizer=None):
    """The fixed input of ``task``: a text, a question with its context, or the path of an image
    or a recording made in ``folder``/inputs (the same bytes on every machine)."""
    if task in MODALITY:
        path = pathlib.Path(folder) / "inputs" / MODALITY[task]
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            (_image if MODALITY[task] == IMAGE else _audio)(path)
        return str(path)
    value = EXAMPLES.get(task, TEXT)
    if task == "fill-mask":
        value = value.format(mask=getattr(tokenizer, "mask_token", None) or "[MASK]")
    return value


def _image(path):
    """A 96 x 128 picture of soft gradients and a disc: features at several scales."""
    from PIL import Image
    y, x = np.mgrid[0:96, 0:128].astype(np.float32)
    disc = ((x - 80) ** 2 + (y - 40) ** 2 < 400) * 120
    rgb = np.stack([x * 2, y * 2.5 + disc, 255 - x - disc / 2], -1)
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(path)


def _audio(path):
    """Two seconds at 16 kHz: a 440 Hz tone, a 660 Hz tone, a little seeded noise."""
    import soundfile
    t = np.arange(32000) / 16000
    tone = np.where(t < 1, np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)) * 0.3
    noise = np.random.default_rng(0).standard_normal(t.size) * 0.01
    soundfile.write(path, (tone + noise).astype(np.float32), 16000)
