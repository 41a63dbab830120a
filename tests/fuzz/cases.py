"""Which case an index of a seed is: its class, backend, graph and kind, drawn from
``random.Random(f"{seed}:{index}")`` alone, so that ``SEED:INDEX`` replays it anywhere."""

import dataclasses
import random

# (fixture, graph file): encoders, a merged decoder (If on use_cache_branch), a
# GroupQueryAttention decoder and its q4 (MatMulNBits) file, speech, vision, text+vision.
GRAPHS = [
    ("bert", "onnx/model.onnx"),
    ("gpt2", "onnx/decoder_model_merged.onnx"),
    ("llama-gqa", "onnx/model.onnx"),
    ("llama-gqa", "onnx/model_q4.onnx"),
    ("t5", "onnx/encoder_model.onnx"),
    ("vit", "onnx/model.onnx"),
    ("whisper", "onnx/encoder_model.onnx"),
    ("clip", "onnx/model.onnx"),
    ("bert", "onnx/model_q4.onnx"),
]

# Kinds per class, each with its weight. Structural kinds go through the onnx API.
KINDS = {
    "structural": {
        "drop-node-input": 3, "duplicate-node-input": 2, "rename-node-input": 3,
        "drop-node-output": 2, "duplicate-node-output": 2, "rename-node-output": 2,
        "attribute-value": 5, "attribute-type": 3,
        "initializer-dims": 3, "initializer-dtype": 3, "initializer-data": 3,
        "input-type": 2, "input-shape": 3, "output-type": 2, "output-shape": 2,
        "opset-version": 2, "remove-opset-import": 1, "unknown-op": 1,
        "cut-graph": 2, "drop-node": 2, "output-to-intermediate": 2,
    },
    "bytes": {"flip-bytes": 4, "truncate": 2, "splice": 1, "zero-run": 1},
    "external": {
        "valid": 2, "wrong-offset": 2, "wrong-length": 2, "missing-file": 1,
        "absolute-outside": 1, "dotdot-outside": 1, "symlink-outside": 2,
        "symlink-dir-outside": 1, "hardlink-outside": 1, "fifo": 1, "dev-zero": 1,
        "truncated-file": 1, "nul-in-location": 1, "location-is-folder": 1,
        "from-bytes": 1, "from-proto": 1,
    },
    "inputs": {
        "wrong-dtype": 3, "wrong-rank": 2, "wrong-shape": 3, "missing-name": 2,
        "unknown-name": 2, "ids-out-of-range": 4, "nan-inf": 2, "huge-dim": 1,
        "zero-dim": 1, "list": 2, "masked-array": 2, "big-endian": 2, "non-contiguous": 2,
        "scalar": 1, "python-objects": 1,
    },
    "repo": {"wrong-type": 3, "missing-key": 2, "list-for-dict": 2, "negative-length": 2,
             "bad-json": 1, "huge-value": 1, "delete-file": 1},
}
# Shares of the classes in a run (most cases are cheap structural ones; pipelines are slower).
CLASS_WEIGHTS = {"structural": 40, "bytes": 12, "external": 12, "inputs": 26, "repo": 10}
BACKENDS = ("jax", "mlx")
# JAX compiles a whole graph per new model (seconds): compiled mode is a sample of the cases.
COMPILED_SHARE = {"jax": 0.1, "mlx": 0.3}


@dataclasses.dataclass
class Case:
    seed: int
    index: int
    cls: str
    kind: str
    backend: str
    fixture: str
    graph: str
    mode: str  # "eager" (transmuter.run) or "compiled" (model(**feed))

    @property
    def id(self):
        return f"{self.seed}:{self.index}"

    def rng(self, purpose="mutate"):
        """The case's own random stream for ``purpose``: mutations never shift one another."""
        return random.Random(f"{self.seed}:{self.index}:{purpose}")

    def label(self):
        return f"{self.cls}/{self.kind} {self.backend} {self.fixture}/{self.graph} {self.mode}"


def _pick(rng, weights):
    names = list(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


def make_case(seed, index, classes=None, backends=None) -> Case:
    """The case ``index`` of ``seed`` (``classes``/``backends`` narrow the draw)."""
    rng = random.Random(f"{seed}:{index}")
    weights = {c: w for c, w in CLASS_WEIGHTS.items() if not classes or c in classes}
    cls = _pick(rng, weights)
    kind = _pick(rng, KINDS[cls])
    backend = rng.choice([b for b in BACKENDS if not backends or b in backends])
    fixture, graph = rng.choice(GRAPHS)
    if cls == "repo":
        from .repo import PIPELINES

        fixture, graph = rng.choice(sorted(PIPELINES)), "pipeline"
    mode = "compiled" if rng.random() < COMPILED_SHARE[backend] else "eager"
    return Case(seed, index, cls, kind, backend, fixture, graph, mode)


def parse_id(text):
    seed, index = text.split(":")
    return int(seed), int(index)
