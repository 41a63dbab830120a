"""Reading the committed fixtures (tests/fixtures/<name>/manifest.json and references)."""

import json
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).with_name("fixtures")


def manifests():
    """(fixture name, manifest dict) for every fixture folder."""
    for path in sorted(ROOT.glob("*/manifest.json")):
        yield path.parent.name, json.loads(path.read_text())


def graph_cases():
    """(fixture, onnx path relative to the fixture, graph entry) for every graph with a reference."""
    for name, manifest in manifests():
        for rel, entry in manifest.get("graphs", {}).items():
            if entry.get("reference"):
                yield name, rel, entry


def steps(fixture, reference):
    """[(inputs, outputs)] per recorded step of a reference .npz."""
    data = np.load(ROOT / fixture / reference, allow_pickle=False)
    found = {}
    for key in data.files:
        step, kind, name = key.split("/", 2)
        found.setdefault(int(step), ({}, {}))[0 if kind == "in" else 1][name] = data[key]
    return [found[k] for k in sorted(found)]


def variant_of(path):
    """fp32, fp16, q4, q4f16, quantized, ... from an ONNX file name."""
    stem = pathlib.Path(path).stem
    for suffix in ("q4f16", "fp16", "q4", "quantized", "int8", "uint8", "bnb4"):
        if stem.endswith("_" + suffix):
            return suffix
    return "fp32"


def pipeline_references(tasks=None):
    """(fixture, task) of every recorded transformers pipeline output
    (references/pipeline_<task>.json), of ``tasks`` when given: tests parametrize over these, so
    a new fixture's references are checked as soon as they are committed."""
    found = []
    for path in sorted(ROOT.glob("*/references/pipeline_*.json")):
        task = path.stem[len("pipeline_"):]
        if tasks is None or task in tasks:
            found.append((path.parent.parent.name, task))
    return found


def pipeline_reference(fixture, task):
    return json.loads((ROOT / fixture / "references" / f"pipeline_{task}.json").read_text())
