"""Repo files of pipelines: a fixture folder copied, one of its JSON files made wrong (wrong
types, missing keys, lists for dicts, negative lengths, bad JSON), then the pipeline built and
called. Without a peer for a mutated repo, an answer passes when it has the shape of the
unmutated repo's answer (same types and keys, no NaN): a traceback or a crash never does."""

import json
import math
import os
import shutil

from tests import fixtures

IMAGE = str(fixtures.ROOT / "vit" / "references" / "image_0.png")
# fixture -> (task, pipeline options, call arguments, the JSON files that are mutated).
PIPELINES = {
    "bert-sequence-classification": ("text-classification", {}, (["I love it.", "Bad."],), {},
                                     ["config.json", "tokenizer_config.json",
                                      "special_tokens_map.json"]),
    "bert": ("feature-extraction", {}, ("hello world",), {},
             ["config.json", "tokenizer_config.json"]),
    "vit": ("image-classification", {}, (IMAGE,), {},
            ["config.json", "preprocessor_config.json"]),
    "clip": ("zero-shot-image-classification", {}, (IMAGE,), {"candidate_labels": ["cat", "dog"]},
             ["config.json", "tokenizer_config.json", "preprocessor_config.json"]),
    "gpt2": ("text-generation", {}, ("Hello",), {"max_new_tokens": 2, "do_sample": False},
             ["config.json", "tokenizer_config.json", "generation_config.json"]),
}
LENGTH_KEYS = ("max_position_embeddings", "model_max_length", "max_length", "n_positions",
               "vocab_size", "num_labels", "height", "width", "shortest_edge", "crop_size",
               "image_size", "max_new_tokens", "hidden_size", "n_ctx", "patch_size",
               "num_channels", "resample", "rescale_factor", "pad_token_id", "eos_token_id")
WRONG_VALUES = ["12", "", None, [], {}, [1, 2], {"a": 1}, 1.5, True, -1, "\udcff"]


def _paths(obj, prefix=()):
    """Every key path into ``obj`` (dicts and lists), up to depth 3."""
    found = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in items:
        found.append(prefix + (key,))
        if len(prefix) < 2:
            found.extend(_paths(value, prefix + (key,)))
    return found


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()


def _mutate(rng, kind, data):
    """(new JSON value or text, detail) for ``kind`` of cases.KINDS['repo']."""
    paths = _paths(data)
    if kind == "bad-json":
        text = json.dumps(data)
        return rng.choice([text[: rng.randrange(len(text))], b"\xff\xfe" + text.encode(), ""]), \
            "bad JSON"
    if kind == "list-for-dict":
        dicts = [p for p in paths if isinstance(_get(data, p), dict)]
        if not dicts or rng.random() < 0.3:
            return [data], "file is a list"
        p = rng.choice(dicts)
        _set(data, p, list(_get(data, p).values()))
        return data, f"{'.'.join(map(str, p))} a list"
    if kind in ("negative-length", "huge-value"):
        named = [p for p in paths if str(p[-1]) in LENGTH_KEYS] or paths
        p = rng.choice(named)
        value = rng.choice([-1, -512, 0, -2**63]) if kind == "negative-length" else \
            rng.choice([10**30, 2**63, 1e308, math.inf, 2**31])
        _set(data, p, value)
        return data, f"{'.'.join(map(str, p))} = {value!r}"
    if not paths:
        return [], "empty file -> list"
    p = rng.choice(paths)
    if kind == "missing-key":
        _set(data, p, _DELETE)
        return data, f"{'.'.join(map(str, p))} removed"
    value = rng.choice(WRONG_VALUES)
    _set(data, p, value)
    return data, f"{'.'.join(map(str, p))} = {value!r}"


def _get(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def build(rng, kind, fixture, root):
    """A copy of ``fixture`` under ``root`` with one file made wrong; (folder, detail)."""
    folder = os.path.join(root, fixture)
    shutil.copytree(fixtures.ROOT / fixture, folder,
                    ignore=shutil.ignore_patterns("references", "*_fp16.onnx", "*q4*.onnx",
                                                  "*quantized.onnx"))
    name = rng.choice([f for f in PIPELINES[fixture][4] if os.path.exists(os.path.join(folder, f))])
    path = os.path.join(folder, name)
    if kind == "delete-file":
        os.remove(path)
        return folder, f"{name} deleted"
    with open(path) as f:
        data = json.load(f)
    new, detail = _mutate(rng, kind, data)
    if isinstance(new, (str, bytes)):
        with open(path, "wb") as f:
            f.write(new if isinstance(new, bytes) else new.encode("utf-8", "surrogatepass"))
    else:
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            json.dump(new, f)
    return folder, f"{name}: {detail}"


def call(folder, fixture, backend):
    """Build the pipeline of ``folder`` and call it once."""
    import transmuter

    task, options, args, kwargs, _ = PIPELINES[fixture]
    pipe = transmuter.pipeline(task, folder, backend=backend, **options)
    return pipe(*args, **kwargs)


def shape_of(result):
    """Types and keys of a pipeline answer, its lengths left out (labels may come and go)."""
    if isinstance(result, dict):
        # A label is whatever config.json's id2label holds (transformers keeps an int there).
        return {k: "label" if k == "label" else shape_of(v) for k, v in sorted(result.items())}
    if isinstance(result, (list, tuple)):
        shapes = {json.dumps(shape_of(v), sort_keys=True) for v in result}
        return ["list", sorted(shapes)]
    if hasattr(result, "shape") and hasattr(result, "dtype"):
        return f"array[{len(result.shape)}]"
    return type(result).__name__


def has_nan(result):
    if isinstance(result, dict):
        return any(has_nan(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return any(has_nan(v) for v in result)
    if isinstance(result, float):
        return math.isnan(result)
    if hasattr(result, "dtype") and getattr(result.dtype, "kind", "") == "f":
        import numpy as np

        return bool(np.isnan(np.asarray(result)).any())
    return False
