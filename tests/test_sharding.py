"""Several devices on one host (issue 18): ``devices=`` splits each batch over them.

This process has JAX initialised with one CPU device, so the multi-device cases run in one
subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (``_worker`` below, run as
``python -m tests.test_sharding``). There each pipeline runs twice, with ``devices=jax.devices()``
and without, on the recorded references' inputs; the worker sends back both results and what it
saw of the arrays' shardings, and the tests here compare:

- the 4-device results with the recorded transformers / sentence-transformers outputs (TOL) and
  with one device's (SAME_TOL);
- every batch-axis input and output split in equal row shares over the 4 devices (padded rows
  included: a batch of 3 runs as 4 rows, 5 as 8), the weights replicated on all 4;
- generation (gpt2, a position_ids cache): greedy ids equal transformers', the KV cache split on
  its batch axis at every step;
- a ``jax.sharding.Mesh`` of 2 x 2 splits the batch over all 4 devices, outputs equal to
  onnxruntime's recorded ones.

The subprocess compiles each graph for 1 and 4 devices (~45 s of CPU cold on 2 cores, ~10 s with
JAX's persistent compilation cache warm), so it covers one generation cache mode; the in-place
GroupQueryAttention cache (llama-gqa) gives transformers' ids on 4 devices too (docs/scaling.md).

Errors (bad device lists, MLX, a model loaded by hand) run here, on the one device.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError, shared

from .fixtures import ROOT, pipeline_reference, steps
from .test_pipelines_text import assert_close

DEVICES = 4
# The design's bound against the recorded PyTorch outputs (XLA sums in another order: ~1e-6).
TOL = 1e-4
# 4 devices vs 1: each shard runs the same XLA CPU kernels on its rows as one device runs on all
# of them (rows are independent in these graphs), so the numbers come out equal in practice;
# 1e-6 allows a kernel that tiles a 2-row shard differently from an 8-row batch.
SAME_TOL = 1e-6
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (task, fixture, construction options, batch_size, how many times the recorded inputs repeat):
# 3 sentences x 2 at batch 5 run as a batch of 5 rows (padded to 8) and one of 1 (padded to 4).
ENCODERS = [
    ("text-embedding", "bert-sentence-transformers", {"sequence_length": 32}, 5, 2),
    ("text-classification", "bert-sequence-classification", {"sequence_length": 32}, 3, 2),
    ("image-classification", "vit", {"variant": "fp32"}, 3, 2),
]
GENERATORS = ["gpt2"]
# The recorded call compared: text-classification's with top_k=None, whose list output is a list
# per input (the first call's single-label output is a list only for a single input).
CALLS = {"bert-sequence-classification": 1}


# --- the worker (4 devices) ----------------------------------------------------------------------

def _inputs(task, fixture):
    ref = pipeline_reference(fixture, task)
    if task == "image-classification":
        paths = [str(ROOT / fixture / p) for p in ref["inputs"]["images"]]
        return paths, ref.get("call_kwargs", {})
    call = ref["calls"][CALLS.get(fixture, 0)]
    return call["inputs"], call["call_kwargs"]


def _spy_puts(model, seen):
    """Record, for every call, the devices and shard shapes of the inputs placed on them."""
    put = model.placement.put_inputs

    def recording(inputs, batched):
        placed = put(inputs, batched)
        seen.append({k: _shards(v) for k, v in placed.items() if hasattr(v, "sharding")})
        return placed

    model.placement.put_inputs = recording


def _shards(array):
    return sorted((s.device.id, list(s.data.shape)) for s in array.addressable_shards)


class _Outputs:
    """A compiled function that records its outputs' shards (the KV cache's presents)."""

    def __init__(self, fn, seen, prefix=""):
        self.fn, self.seen, self.prefix = fn, seen, prefix

    def __call__(self, *args, **kwargs):
        out = self.fn(*args, **kwargs)
        self.seen.append({k: _shards(v) for k, v in out.items() if k.startswith(self.prefix)})
        return out

    def __getattr__(self, name):
        return getattr(self.fn, name)


def _encoder_case(task, fixture, options, batch_size, repeat):
    inputs, kwargs = _inputs(task, fixture)
    inputs = inputs * repeat
    one = transmuter.pipeline(task, ROOT / fixture, batch_size=batch_size, **options)
    many = transmuter.pipeline(task, ROOT / fixture, batch_size=batch_size,
                               devices=jax.devices(), **options)
    placed, outputs = [], []
    _spy_puts(many.model, placed)
    first = many(inputs[0], **kwargs)  # a batch of 1: compiles, then the spy sees outputs too
    compiled = shared.of(many.model)["compiled"]
    shared.of(many.model)["compiled"] = _Outputs(compiled, outputs)
    return {"one": _plain(one(inputs, **kwargs)), "many": _plain(many(inputs, **kwargs)),
            "single": _plain(first), "single_one": _plain(one(inputs[0], **kwargs)),
            "placed": placed, "outputs": outputs,
            "params": [_shards(v) for v in many.model.params.values()]}


def _generation_case(fixture):
    call = pipeline_reference(fixture, "text-generation")["calls"][1]  # greedy, with ids
    inputs = call["inputs"] * (DEVICES // len(call["inputs"]))
    pipe = transmuter.pipeline("text-generation", ROOT / fixture, variant="fp32",
                               devices=jax.devices())
    gen, presents = pipe.generator, []
    gen.fn = _Outputs(gen.fn, presents, "present")
    gen.first_fn = gen.fn if gen.first_fn is gen.fn.fn else \
        _Outputs(gen.first_fn, presents, "present")
    return {"many": pipe(inputs, batch_size=DEVICES, **call["call_kwargs"]),
            "presents": presents}


def _mesh_case():
    """A 2 x 2 mesh on the recorded onnxruntime inputs, tiled to 4 rows (one compile)."""
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))
    fixture = "bert-sentence-transformers"
    model = transmuter.load(ROOT / fixture / "onnx" / "model.onnx", devices=mesh)
    feed, want = steps(fixture, "references/model.npz")[0]
    copies = DEVICES // len(feed["input_ids"])
    feed = {k: np.tile(v, (copies, 1)) for k, v in feed.items()}
    out = transmuter.compile(model, feed)(feed)
    return {"shards": {k: _shards(v) for k, v in out.items()},
            "diff": max(float(np.abs(np.asarray(out[k]) - np.tile(w, (copies, 1, 1))).max())
                        for k, w in want.items())}


def _plain(value):
    return json.loads(json.dumps(value, default=lambda x: np.asarray(x).tolist()))


def _worker():
    assert len(jax.devices()) == DEVICES, jax.devices()
    report = {"encoders": {f"{t}/{f}": _encoder_case(t, f, o, b, r) for t, f, o, b, r in ENCODERS},
              "generation": {f: _generation_case(f) for f in GENERATORS}, "mesh": _mesh_case()}
    print("REPORT " + json.dumps(report))


# --- the tests -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def report():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}")
    done = subprocess.run([sys.executable, "-m", "tests.test_sharding"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1][len("REPORT "):])


@pytest.mark.parametrize("task,fixture,options,batch_size,repeat", ENCODERS,
                         ids=[f for _, f, *_ in ENCODERS])
def test_devices_equal_one_device_and_transformers(report, task, fixture, options, batch_size,
                                                   repeat):
    case = report["encoders"][f"{task}/{fixture}"]
    ref = pipeline_reference(fixture, task)
    want = (ref["outputs"] if task == "image-classification" else
            ref["calls"][CALLS.get(fixture, 0)]["outputs"])
    assert_close(case["many"], want * repeat, TOL, "4 devices vs recorded")
    assert_close(case["many"], case["one"], SAME_TOL, "4 devices vs 1")
    assert_close(case["single"], want[0], TOL, "a batch of 1 on 4 devices")
    assert_close(case["single"], case["single_one"], SAME_TOL, "a batch of 1, 4 devices vs 1")


@pytest.mark.parametrize("task,fixture,options,batch_size,repeat", ENCODERS,
                         ids=[f for _, f, *_ in ENCODERS])
def test_each_device_gets_its_share(report, task, fixture, options, batch_size, repeat):
    case = report["encoders"][f"{task}/{fixture}"]
    n = len(_inputs(task, fixture)[0]) * repeat
    # the batch of 1 first, then batches of batch_size rows and the rest, each padded up to a
    # power of two at most batch_size, then to a multiple of 4
    sizes = [1] + [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    padded = [-(-min(1 << max(s - 1, 0).bit_length(), max(s, batch_size)) // DEVICES) * DEVICES
              for s in sizes]
    seen = set()
    for call in case["placed"]:
        assert call, "no input was placed on the devices"
        for name, shards in call.items():
            rows = sum(s[0] for _, s in shards)
            assert shards == [[d, [rows // DEVICES, *shards[0][1][1:]]] for d in range(DEVICES)], \
                f"{name}: {shards} (a batch of {rows} rows)"
            seen.add(rows)
    assert seen == set(padded)
    assert case["outputs"], "no call after the first"
    for call in case["outputs"]:
        for name, shards in call.items():
            rows = sum(s[0] for _, s in shards)
            assert rows in seen and [d for d, _ in shards] == list(range(DEVICES)), \
                f"{name}: {shards}"
            assert all(s[0] == rows // DEVICES for _, s in shards), f"{name}: {shards}"
    for shards in case["params"]:  # every weight whole on every device
        assert [d for d, _ in shards] == list(range(DEVICES))
        assert len({tuple(s) for _, s in shards}) == 1


@pytest.mark.parametrize("fixture", GENERATORS)
def test_generation_rows_on_different_devices(report, fixture):
    """Greedy ids are exact, so equal to transformers' means equal to one device's (which
    test_generation_pipeline.py checks against the same reference)."""
    case = report["generation"][fixture]
    call = pipeline_reference(fixture, "text-generation")["calls"][1]
    assert case["many"] == call["outputs"] * (DEVICES // len(call["inputs"]))
    assert case["presents"], "the decoder was never called"
    for call in case["presents"]:  # every step: each device holds one row of every cache
        assert call
        for name, shards in call.items():
            assert [d for d, _ in shards] == list(range(DEVICES)), f"{name}: {shards}"
            assert all(s[0] == 1 for _, s in shards), f"{name}: {shards}"


def test_a_mesh_splits_the_batch_over_all_its_devices(report):
    case = report["mesh"]
    assert case["diff"] <= TOL  # against onnxruntime's recorded outputs
    for name, shards in case["shards"].items():
        assert [d for d, _ in shards] == list(range(DEVICES)), f"{name}: {shards}"
        assert all(s[0] == 1 for _, s in shards), f"{name}: {shards}"  # 4 rows, 1 each


# --- errors and the one-device path (this process: one CPU device) ------------------------------

MODEL = ROOT / "bert-sentence-transformers" / "onnx" / "model.onnx"


@pytest.mark.parametrize("devices,match", [
    ([], "empty"),
    (["cpu:0"], r"devices\[0\] is str"),
    (42, "list of jax devices"),
    ("twice", "more than once"),
])
def test_bad_device_lists_are_refused(devices, match):
    if devices == "twice":
        devices = [jax.devices()[0]] * 2
    with pytest.raises(InputError, match=match):
        transmuter.load(MODEL, devices=devices)


def test_mlx_refuses_devices():
    pytest.importorskip("mlx.core")
    with pytest.raises(InputError, match="backend='jax'"):
        transmuter.load(MODEL, backend="mlx", devices=jax.devices())


def test_one_device_is_the_usual_path():
    assert transmuter.load(MODEL, devices=jax.devices()).placement is None
    assert transmuter.load(MODEL, devices=jax.devices()[0]).placement is None


def test_a_model_loaded_by_hand_takes_devices_at_load():
    model = transmuter.load(MODEL)
    with pytest.raises(PipelineError, match="load"):
        transmuter.pipeline("text-embedding", model, config=ROOT / "bert-sentence-transformers",
                            devices=jax.devices())


if __name__ == "__main__":
    _worker()
