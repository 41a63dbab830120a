"""Tiny-model fixture factory for the VISION and AUDIO families.

Builds random-weight models from `transformers` config classes (no Hub access), builds their
image processors / feature extractors / tokenizers offline, exports them with optimum-onnx the way
the Hub's Xenova / onnx-community files were made, and records references (see
tests/support/README.md for the fixture contract):

  * references/<onnx stem>.npz       onnxruntime (ORT_DISABLE_ALL, 1 thread) outputs on fixed inputs
  * references/pipeline_<task>.json  transformers pipeline outputs on the torch model
  * references/image_<i>.png, references/audio_<i>.npy   the synthetic inputs the references used

Usage (regenerates deterministically; no argument = every fixture):

    /work/venvs/export/bin/python tests/support/families_vision_audio.py [names...]

Pinned versions (the export environment these files were made with):

    python 3.11, torch 2.13.0+cpu, transformers 4.57.6, optimum 2.1.0, optimum-onnx 0.1.0,
    onnxruntime 1.32.0, onnx 1.23.2, tokenizers 0.22.2, sentencepiece 0.2.3, numpy 2.4.6,
    pillow 13.0.0, scipy 1.17.1
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # optimum's decoder merge picks names of de-duplicated initializers from Python sets: fix the hash seed
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402

import export_common as ec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
OPTIMUM_ONNX = "optimum-onnx 0.1.0"
EXPORTER = f"{OPTIMUM_ONNX} main_export"

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

# ----------------------------------------------------------------------------------------------
# Deterministic synthetic inputs
# ----------------------------------------------------------------------------------------------

CORPUS = (
    "the quick brown fox jumps over the lazy dog . a photo of a cat . a photo of a dog . "
    "hello world , this is a tiny test of the transmuter library . the cat sat on the mat . "
    "speech to text and text to speech with tiny random models . one two three four five six "
    "seven eight nine ten . an image of a red square and a blue circle . she sells sea shells "
    "by the sea shore . the rain in spain stays mainly in the plain . hello there , how are you ?"
)


def make_image(seed: int, height: int, width: int) -> Image.Image:
    """A smooth colour gradient plus seeded noise, uint8 RGB."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height)[:, None]
    x = np.linspace(0.0, 1.0, width)[None, :]
    base = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                     np.broadcast_to((x + y) / 2, (height, width))], axis=-1)
    img = 255.0 * (0.7 * base + 0.3 * rng.random((height, width, 3)))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


IMAGE_SPECS = [(0, 40, 48), (1, 32, 32)]  # (seed, height, width)


def make_audio(seed: int, seconds: float, freq: float, sr: int = 16000) -> np.ndarray:
    """A sine + seeded gaussian noise waveform, float32 in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    wav = 0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.shape)
    return wav.astype(np.float32)


AUDIO_SPECS = [(0, 1.0, 440.0), (1, 0.75, 660.0)]  # (seed, seconds, frequency)


def write_images(fx: Path) -> list[Image.Image]:
    (fx / "references").mkdir(parents=True, exist_ok=True)
    images = []
    for seed, h, w in IMAGE_SPECS:
        img = make_image(seed, h, w)
        img.save(fx / "references" / f"image_{seed}.png")
        images.append(Image.open(fx / "references" / f"image_{seed}.png").convert("RGB"))
    return images


def write_audio(fx: Path, sr: int = 16000) -> list[np.ndarray]:
    (fx / "references").mkdir(parents=True, exist_ok=True)
    clips = []
    for seed, seconds, freq in AUDIO_SPECS:
        wav = make_audio(seed, seconds, freq, sr)
        np.save(fx / "references" / f"audio_{seed}.npy", wav)
        clips.append(wav)
    return clips


def image_inputs_description() -> dict:
    return {
        "images": [f"references/image_{s}.png" for s, _, _ in IMAGE_SPECS],
        "how_made": "make_image(seed, height, width) in tests/support/families_vision_audio.py: "
        "255*(0.7*gradient + 0.3*rng.random) with numpy default_rng(seed), uint8 RGB PNG",
        "specs": [{"seed": s, "height": h, "width": w} for s, h, w in IMAGE_SPECS],
    }


def audio_inputs_description(sr: int = 16000) -> dict:
    return {
        "audio": [f"references/audio_{s}.npy" for s, _, _ in AUDIO_SPECS],
        "sampling_rate": sr,
        "how_made": "make_audio(seed, seconds, freq): 0.5*sin(2*pi*freq*t) + 0.05*N(0,1) with numpy "
        "default_rng(seed), float32",
        "specs": [{"seed": s, "seconds": d, "frequency": f} for s, d, f in AUDIO_SPECS],
    }


# ----------------------------------------------------------------------------------------------
# Tiny offline tokenizers
# ----------------------------------------------------------------------------------------------


def _train_bpe(words: Counter, n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE on symbol tuples; ties broken lexicographically so the result is deterministic."""
    words = Counter({tuple(w): c for w, c in words.items()})
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new_words: Counter = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += c
        words = new_words
    return merges


def _byte_encoder() -> dict[int, str]:
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    return bytes_to_unicode()


def gpt2_style_vocab(n_merges: int = 60, specials=("<|endoftext|>",), specials_first=False):
    """Byte-level BPE vocab like GPT-2's: 256 byte symbols, merges, then specials."""
    be = _byte_encoder()
    words = Counter()
    for i, w in enumerate(CORPUS.split(" ")):
        text = (" " + w) if i else w
        words[tuple(be[b] for b in text.encode("utf-8"))] += 1
    merges = _train_bpe(words, n_merges)
    vocab: dict[str, int] = {}
    if specials_first:
        for s in specials:
            vocab[s] = len(vocab)
    for b in be:  # GPT-2's order: printable bytes first ('!' is id 0, 'Ġ' is id 220)
        vocab.setdefault(be[b], len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if not specials_first:
        for s in specials:
            vocab[s] = len(vocab)
    return vocab, merges


def clip_style_vocab(n_merges: int = 60):
    """CLIP's layout: 256 byte symbols, the same with '</w>', merges, <|startoftext|>, <|endoftext|>."""
    be = _byte_encoder()
    words = Counter()
    for w in re.findall(r"[a-z]+|[0-9]|[^\sa-z0-9]+", CORPUS.lower()):
        sym = [be[b] for b in w.encode("utf-8")]
        sym[-1] = sym[-1] + "</w>"
        words[tuple(sym)] += 1
    merges = _train_bpe(words, n_merges)
    vocab: dict[str, int] = {}
    for b in be:  # CLIP's order follows bytes_to_unicode too
        vocab[be[b]] = len(vocab)
    for b in be:
        vocab[be[b] + "</w>"] = len(vocab)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def write_vocab_merges(tmp: Path, vocab: dict, merges: list, header: str = "#version: 0.2\n"):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (tmp / "merges.txt").write_text(header + "".join(f"{a} {b}\n" for a, b in merges))
    return str(tmp / "vocab.json"), str(tmp / "merges.txt")


def train_sentencepiece(tmp: Path, name: str, vocab_size: int, model_type: str, **kw) -> str:
    import sentencepiece as spm

    tmp.mkdir(parents=True, exist_ok=True)
    corpus = tmp / f"{name}.txt"
    corpus.write_text("\n".join(s.strip() for s in CORPUS.split(" . ")) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp / name), vocab_size=vocab_size, model_type=model_type,
        character_coverage=1.0, num_threads=1, seed_sentencepiece_size=1000, shuffle_input_sentence=False,
        minloglevel=2, **kw,
    )
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString((tmp / f"{name}.model").read_bytes())
    m.trainer_spec.ClearField("input")  # the scratch paths would make the file differ per run
    m.trainer_spec.model_prefix = name
    (tmp / f"{name}.model").write_bytes(m.SerializeToString())
    return str(tmp / f"{name}.model")


# ----------------------------------------------------------------------------------------------
# Export, references, verification
# ----------------------------------------------------------------------------------------------


def seed(n: int = 0):
    torch.manual_seed(n)
    np.random.seed(n)


def perturb(model, scale: float = 0.05, s: int = 1234):
    """Add seeded noise to every parameter: random-init logits are otherwise near-uniform (std 0.02
    init) and LayerNorm gamma/beta would sit at exactly 1/0, hiding mistakes in tests."""
    g = torch.Generator().manual_seed(s)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return model


def fresh_fixture(name: str) -> Path:
    fx = FIXTURES / name
    if fx.exists():
        shutil.rmtree(fx)
    (fx / "onnx").mkdir(parents=True)
    (fx / "references").mkdir()
    return fx


@contextlib.contextmanager
def quiet():
    """Silence the exporter's chatter (warnings still reach stderr)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


def export_main(model_dir: Path, out: Path, task: str, opset: int, **kw) -> Path:
    from optimum.exporters.onnx import main_export

    with quiet():
        main_export(str(model_dir), output=str(out), task=task, opset=opset, device="cpu",
                    do_validation=False, local_files_only=True, **kw)
    return out


def export_from_model(model, out: Path, task: str, opset: int, **kw) -> Path:
    """main_export's inner step on an already-loaded model (used for the eager-attention variants)."""
    from optimum.exporters.onnx import onnx_export_from_model

    with quiet():
        onnx_export_from_model(model, output=str(out), task=task, opset=opset, device="cpu",
                               do_validation=False, **kw)
    return out


def move_onnx(src: Path, fx: Path, names: dict[str, str]) -> None:
    """Copy exported graphs into fx/onnx (name map: exported file -> fixture file)."""
    for s, d in names.items():
        m = onnx.load(str(src / s), load_external_data=True)
        onnx.save(m, str(fx / "onnx" / d))  # single file, no external data for tiny models


def session(path: Path) -> ort.InferenceSession:
    return ec.ort_session(path)


def run(sess: ort.InferenceSession, feeds: dict) -> dict:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def save_reference(fx: Path, graph: str, steps: list[tuple[dict, dict]]) -> str:
    stem = Path(graph).stem
    arrays = {}
    for i, (ins, outs) in enumerate(steps):
        for k, v in ins.items():
            arrays[f"{i}/in/{k}"] = np.asarray(v)
        for k, v in outs.items():
            arrays[f"{i}/out/{k}"] = np.asarray(v)
    rel = f"references/{stem}.npz"
    save_npz(fx / rel, arrays)
    return rel


def save_npz(path: Path, arrays: dict) -> None:
    """np.savez_compressed equivalent with fixed zip timestamps, so reruns are byte-identical."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(v), allow_pickle=False)
            info = zipfile.ZipInfo(k + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def reference_single(fx: Path, graph: str, feeds: dict) -> str:
    sess = session(fx / graph)
    feeds = cast_feeds(sess, feeds)
    return save_reference(fx, graph, [(feeds, run(sess, feeds))])


_ORT_TO_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(double)": np.float64}


def cast_feeds(sess, feeds: dict) -> dict:
    types = {i.name: i.type for i in sess.get_inputs()}
    return {k: np.ascontiguousarray(np.asarray(v).astype(_ORT_TO_NP[types[k]])) for k, v in feeds.items()
            if k in types}


def decoder_steps(sess, first: dict, n_cache_steps: int, token_input: str = "input_ids",
                  logits: str = "logits", past_map=None, next_feeds=None) -> list[tuple[dict, dict]]:
    """Prompt step (use_cache_branch False, empty past) + n KV-cache steps, greedy."""
    in_meta = {i.name: i for i in sess.get_inputs()}
    feeds = dict(first)
    steps = []
    for step in range(n_cache_steps + 1):
        feeds = cast_feeds(sess, feeds)
        missing = set(in_meta) - set(feeds)
        assert not missing, f"missing decoder inputs {missing}"
        outs = run(sess, feeds)
        steps.append((feeds, outs))
        new = dict(feeds)
        for name, val in outs.items():
            # merged decoders return placeholder cross-attention presents on cache steps: keep step 0's
            if name.startswith("present") and not (step > 0 and ".encoder." in name):
                new[name.replace("present", "past_key_values", 1)] = val
        if "use_cache_branch" in in_meta:
            new["use_cache_branch"] = np.array([True])
        if next_feeds is not None:
            new = next_feeds(new, outs)
        else:
            nxt = outs[logits][:, -1, :].argmax(-1)[:, None]
            new[token_input] = nxt.astype(np.int64)
        feeds = new
    return steps


def empty_past(sess, batch: int) -> dict:
    """Zero-length past key/values with the right head/dim sizes (from the graph's input shapes)."""
    feeds = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            shape = [batch if d_i == 0 else (0 if d_i == 2 else d) for d_i, d in enumerate(i.shape)]
            assert all(isinstance(d, int) for d in shape), (i.name, i.shape)
            feeds[i.name] = np.zeros(shape, _ORT_TO_NP[i.type])
    return feeds


def graph_summary(path: Path) -> dict:
    m = onnx.load(str(path))
    ops: Counter = Counter()

    def walk(g):
        for n in g.node:
            ops[(n.domain or "ai.onnx") + "::" + n.op_type if n.domain not in ("", "ai.onnx") else n.op_type] += 1
            for a in n.attribute:
                if a.g is not None and a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(m.graph)

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    inits = {i.name for i in m.graph.initializer}
    return {
        "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "inputs": {i.name: dims(i) for i in m.graph.input if i.name not in inits},
        "outputs": {o.name: dims(o) for o in m.graph.output},
        "ops": dict(sorted(ops.items())),
    }


def verify(fx: Path) -> None:
    """onnx.checker on every graph, then rerun ORT on each reference's recorded inputs."""
    manifest = json.loads((fx / "manifest.json").read_text())
    for graph, info in manifest["graphs"].items():
        onnx.checker.check_model(str(fx / graph), full_check=True)
        sess = session(fx / graph)
        ref = np.load(fx / info["reference"])
        steps = sorted({int(k.split("/")[0]) for k in ref.files})
        for s in steps:
            feeds = {k.split("/", 2)[2]: ref[k] for k in ref.files if k.startswith(f"{s}/in/")}
            outs = run(sess, feeds)
            for k in ref.files:
                if k.startswith(f"{s}/out/"):
                    name = k.split("/", 2)[2]
                    np.testing.assert_allclose(outs[name], ref[k], rtol=1e-5, atol=1e-6,
                                               err_msg=f"{fx.name}/{graph} step {s} {name}")
    print(f"  verified {fx.name}: {len(manifest['graphs'])} graph(s)")


def write_manifest(fx: Path, *, family: str, architecture: str, task: str, opset: int, graphs: dict,
                   exporter: str = EXPORTER, notes: list[str] | None = None, **extra) -> None:
    manifest = {"family": family, "architecture": architecture, "exporter": exporter, "opset": opset,
                "task": task, "graphs": {}}
    for g, info in graphs.items():
        entry = {"reference": info["reference"], "static_inputs": info.get("static_inputs", [])}
        entry.update({k: v for k, v in info.items() if k not in entry})
        entry["summary"] = graph_summary(fx / g)
        manifest["graphs"][g] = entry
    manifest.update(extra)
    if notes:
        manifest["notes"] = notes
    (fx / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")


def fp16_variant(src: Path, dst: Path, keep_io_types: bool) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = onnx.load(str(src))
    uniquify_subgraph_names(m.graph)
    m16 = convert_float_to_float16(m, keep_io_types=keep_io_types, disable_shape_infer=False)
    toposort(m16.graph)  # the converter appends its io Casts at the end of the node list
    onnx.save(m16, str(dst))


def uniquify_subgraph_names(graph, prefix: str = "") -> None:
    """Give values defined inside If/Loop bodies names unique to their branch. optimum's merged decoders
    reuse names such as '/model/decoder/Cast_2_output_0' in both branches with different dtypes,
    which convert_float_to_float16 (name-based) mistakes for one value. Renaming changes no maths."""
    for n in graph.node:
        for a in n.attribute:
            if a.type != onnx.AttributeProto.GRAPH:
                continue
            g, tag = a.g, f"{prefix}{n.name or n.op_type}.{a.name}/"
            local = {o for sn in g.node for o in sn.output if o} | {i.name for i in g.input}
            local |= {i.name for i in g.initializer}
            ren = {x: tag + x for x in local}
            _rename_in_graph(g, ren)
            uniquify_subgraph_names(g, tag)


def _rename_in_graph(g, ren: dict) -> None:
    for sn in g.node:
        for k, x in enumerate(sn.input):
            if x in ren:
                sn.input[k] = ren[x]
        for k, x in enumerate(sn.output):
            if x in ren:
                sn.output[k] = ren[x]
        for a in sn.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                # nested scopes may shadow names; only rename references that are not defined there
                inner = {o for nn in a.g.node for o in nn.output} | {i.name for i in a.g.input}
                _rename_in_graph(a.g, {k: v for k, v in ren.items() if k not in inner})
    for coll in (g.input, g.output, g.value_info):
        for vi in coll:
            if vi.name in ren:
                vi.name = ren[vi.name]
    for init in g.initializer:
        if init.name in ren:
            init.name = ren[init.name]


def _subgraph_refs(node) -> set:
    refs = set()
    for a in node.attribute:
        gs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in gs:
            for n in g.node:
                refs.update(i for i in n.input if i)
                refs |= _subgraph_refs(n)
            refs.update(o.name for o in g.output)
    return refs


def toposort(graph) -> None:
    """Stable topological sort of a graph's nodes (subgraph outer-scope references count)."""
    producers = {o: i for i, n in enumerate(graph.node) for o in n.output}
    deps = []
    for n in graph.node:
        names = set(i for i in n.input if i) | _subgraph_refs(n)
        deps.append({producers[x] for x in names if x in producers})
    done, order = set(), []
    nodes = list(graph.node)

    def visit(i, stack=()):
        if i in done:
            return
        for d in sorted(deps[i]):
            if d not in done and d != i:
                visit(d)
        done.add(i)
        order.append(i)

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for i in range(len(nodes)):
        visit(i)
    if order != list(range(len(nodes))):
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del graph.node[:]
        graph.node.extend(copies[i] for i in order)
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                toposort(g)


def quantized_variant(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8, per_channel=False, reduce_range=False)


def save_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Image.Image):
        a = np.asarray(o)
        return {"pil_image": {"mode": o.mode, "size": list(o.size), "sum": int(a.astype(np.int64).sum()),
                              "md5": hashlib.md5(a.tobytes()).hexdigest()}}
    raise TypeError(type(o))


def tensor_stats(t) -> dict:
    a = np.asarray(t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t, dtype=np.float64)
    return {"shape": list(a.shape), "mean": a.mean(), "std": a.std(), "min": a.min(), "max": a.max(),
            "sum": a.sum()}


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="tmuter_fx_"))


def save_model_dir(model, tmp: Path, *others) -> Path:
    d = tmp / "torch_model"
    model.save_pretrained(d)
    for o in others:
        o.save_pretrained(d)
    return d


def copy_hub_files(src: Path, fx: Path, extra_skip=()) -> None:
    """Copy config / processor / tokenizer files from a saved model dir (never the weights)."""
    for f in sorted(src.iterdir()):
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".pt")) and f.name not in extra_skip:
            shutil.copy(f, fx / f.name)


# ----------------------------------------------------------------------------------------------
# Families
# ----------------------------------------------------------------------------------------------

LABELS5 = ["cat", "dog", "bird", "fish", "horse"]


def _id2label(labels):
    return {i: n for i, n in enumerate(labels)}


def _vit(attn="sdpa"):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8, num_channels=3, qkv_bias=True,
                    id2label=_id2label(LABELS5), label2id={n: i for i, n in enumerate(LABELS5)})
    seed(0)
    model = perturb(ViTForImageClassification._from_config(cfg, attn_implementation=attn).eval())
    proc = ViTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=2, do_rescale=True,
                             rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5],
                             image_std=[0.5, 0.5, 0.5])
    return model, proc


def pipeline_image_classification(fx, model, proc, images):
    from transformers import pipeline

    p = pipeline("image-classification", model=model, image_processor=proc, device="cpu")
    kwargs = {"top_k": 5}
    out = p(images, **kwargs)
    save_json(fx / "references" / "pipeline_image-classification.json",
              {"task": "image-classification", "inputs": image_inputs_description(), "call_kwargs": kwargs,
               "outputs": out, "torch_logits": [tensor_stats(model(**proc(images=images, return_tensors="pt")).logits)]})


def build_vit():
    fx = fresh_fixture("vit")
    tmp = tmpdir()
    model, proc = _vit()
    d = save_model_dir(model, tmp, proc)
    out = export_main(d, tmp / "out", "image-classification", 18)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    fp16_variant(fx / "onnx/model.onnx", fx / "onnx/model_fp16.onnx", keep_io_types=True)
    quantized_variant(fx / "onnx/model.onnx", fx / "onnx/model_quantized.onnx")
    graphs = {}
    for g in ["onnx/model.onnx", "onnx/model_fp16.onnx", "onnx/model_quantized.onnx"]:
        graphs[g] = {"reference": reference_single(fx, g, {"pixel_values": pv})}
    graphs["onnx/model_fp16.onnx"]["variant"] = "convert_float_to_float16(keep_io_types=True): float32 IO"
    graphs["onnx/model_quantized.onnx"]["variant"] = "quantize_dynamic(weight_type=QUInt8, per_channel=False)"
    pipeline_image_classification(fx, model, proc, images)
    write_manifest(fx, family="vit", architecture="ViTForImageClassification", task="image-classification",
                   opset=18, graphs=graphs, inputs_from="references/image_*.png through preprocessor_config.json")
    shutil.rmtree(tmp)
    return fx


def build_vit_opset14():
    fx = fresh_fixture("vit-opset14")
    tmp = tmpdir()
    model, proc = _vit(attn="eager")
    d = save_model_dir(model, tmp, proc)
    out = export_from_model(model, tmp / "out", "image-classification", 14, preprocessors=[proc])
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", {"pixel_values": pv})}}
    write_manifest(fx, family="vit", architecture="ViTForImageClassification", task="image-classification",
                   opset=14, graphs=graphs, exporter=f"{OPTIMUM_ONNX} onnx_export_from_model",
                   notes=["same weights as fixture 'vit' (seed 0); loaded with attn_implementation='eager' "
                          "and exported with onnx_export_from_model (main_export's inner step) at opset 14"])
    shutil.rmtree(tmp)
    return fx



# ---- Whisper ---------------------------------------------------------------------------------


def whisper_tokenizer(tmp: Path):
    """A tiny multilingual-Whisper-shaped tokenizer: byte-level BPE, <|endoftext|>, then the
    special tokens in Whisper's order (99 languages), then 1501 timestamp tokens <|0.00|>..<|30.00|>."""
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer, WhisperTokenizerFast
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    vocab, merges = gpt2_style_vocab(60, specials=("<|endoftext|>",))
    vf, mf = write_vocab_merges(tmp / "whisper_tok_src", vocab, merges)
    slow = WhisperTokenizer(vf, mf, model_max_length=64)
    langs = [f"<|{c}|>" for c in list(LANGUAGES)[:99]]  # whisper v1/v2 have 99 languages
    specials = ["<|endoftext|>", "<|startoftranscript|>", *langs, "<|translate|>", "<|transcribe|>",
                "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
    slow.add_special_tokens({"additional_special_tokens": specials})
    slow.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", lstrip=False, rstrip=False, normalized=False,
                                special=False) for i in range(1501)])
    slow.save_pretrained(tmp / "whisper_tok_slow")
    fast = WhisperTokenizerFast.from_pretrained(tmp / "whisper_tok_slow")
    return fast, langs


def _whisper(tmp: Path, attn="sdpa"):
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    tok, langs = whisper_tokenizer(tmp)
    tid = tok.convert_tokens_to_ids
    eot, sot = tid("<|endoftext|>"), tid("<|startoftranscript|>")
    suppress = sorted({tid(t) for t in ["!", '"', "#", "(", ")", "<|translate|>", "<|transcribe|>",
                                          "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>"]}
                      | {sot})
    begin_suppress = [tid("\u0120"), eot]
    cfg = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=50, max_target_positions=64, decoder_start_token_id=sot, bos_token_id=eot,
        eos_token_id=eot, pad_token_id=eot, begin_suppress_tokens=begin_suppress, suppress_tokens=suppress,
        use_cache=True, architectures=["WhisperForConditionalGeneration"],
    )
    seed(0)
    model = perturb(WhisperForConditionalGeneration._from_config(cfg, attn_implementation=attn).eval())
    with torch.no_grad():  # tied embedding: make text tokens win greedy decoding over specials/timestamps
        model.model.decoder.embed_tokens.weight[:eot] *= 4.0
    gen = GenerationConfig(
        alignment_heads=[[1, 0], [1, 1]], begin_suppress_tokens=begin_suppress, bos_token_id=eot,
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot,
        forced_decoder_ids=[[1, None], [2, tid("<|transcribe|>")]], is_multilingual=True,
        lang_to_id={l: tid(l) for l in langs}, task_to_id={"transcribe": tid("<|transcribe|>"),
                                                            "translate": tid("<|translate|>")},
        max_initial_timestamp_index=50, max_length=64, no_timestamps_token_id=tid("<|notimestamps|>"),
        prev_sot_token_id=tid("<|startofprev|>"), return_timestamps=False, suppress_tokens=suppress,
    )
    model.generation_config = gen
    fe = WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, chunk_length=1, n_fft=400,
                                 padding_value=0.0, return_attention_mask=False)
    fe.processor_class = "WhisperProcessor"
    return model, fe, tok


def _whisper_refs(fx: Path, fe, tok, variants: dict[str, str]) -> dict:
    """variants: encoder graph -> decoder graph (paths under fx)."""
    clips = write_audio(fx)
    feats = fe(clips, sampling_rate=16000, return_tensors="np")["input_features"]
    tid = tok.convert_tokens_to_ids
    prompt = np.array([[tid("<|startoftranscript|>"), tid("<|en|>"), tid("<|transcribe|>"),
                        tid("<|notimestamps|>")]] * 2, dtype=np.int64)
    graphs = {}
    for enc, dec in variants.items():
        es = session(fx / enc)
        ef = cast_feeds(es, {"input_features": feats})
        eo = run(es, ef)
        graphs[enc] = {"reference": save_reference(fx, enc, [(ef, eo)])}
        ds = session(fx / dec)
        first = {"input_ids": prompt, "encoder_hidden_states": eo["last_hidden_state"],
                 "use_cache_branch": np.array([False]), **empty_past(ds, 2)}
        graphs[dec] = {"reference": save_reference(fx, dec, decoder_steps(ds, first, 3)),
                       "static_inputs": ["use_cache_branch"]}
    return graphs


def pipeline_asr_whisper(fx, model, fe, tok, clips):
    from transformers import pipeline

    p = pipeline("automatic-speech-recognition", model=model, tokenizer=tok, feature_extractor=fe, device="cpu")
    kwargs = {"generate_kwargs": {"do_sample": False, "num_beams": 1, "max_new_tokens": 8, "language": "en",
                                  "task": "transcribe"}}
    outs = [p({"raw": c, "sampling_rate": 16000}, **kwargs) for c in clips]
    feats = fe(clips, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(feats.input_features, do_sample=False, num_beams=1, max_new_tokens=8,
                             language="en", task="transcribe")
    save_json(fx / "references" / "pipeline_automatic-speech-recognition.json",
              {"task": "automatic-speech-recognition", "inputs": audio_inputs_description(),
               "call": "pipeline(task)({'raw': audio, 'sampling_rate': 16000}, **call_kwargs), one clip per call",
               "call_kwargs": kwargs, "outputs": outs,
               "generate_token_ids": {"call": "model.generate(batched input_features, same generate_kwargs)",
                                      "ids": ids.tolist(),
                                      "decoded": tok.batch_decode(ids, skip_special_tokens=False)}})


WHISPER_NOTES = [
    "tiny multilingual-Whisper layout: byte-level BPE (60 merges) + <|endoftext|> + Whisper's specials "
    "(99 languages) + 1501 timestamp tokens, so ids are small but ordered as in openai/whisper-*",
    "feature extractor: 16 mel bins, chunk_length=1 (n_samples 16000, nb_max_frames 100); "
    "max_source_positions=50",
    "decoder_model_merged.onnx: If on use_cache_branch; prompt step uses zero-length past (dim 2 = 0)",
]


def build_whisper():
    fx = fresh_fixture("whisper")
    tmp = tmpdir()
    model, fe, tok = _whisper(tmp)
    d = save_model_dir(model, tmp, fe, tok)
    out = export_main(d, tmp / "out", "automatic-speech-recognition-with-past", 18, nb_max_frames=100)
    move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                        "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    copy_hub_files(d, fx)
    for stem in ["encoder_model", "decoder_model_merged"]:
        fp16_variant(fx / f"onnx/{stem}.onnx", fx / f"onnx/{stem}_fp16.onnx", keep_io_types=False)
        quantized_variant(fx / f"onnx/{stem}.onnx", fx / f"onnx/{stem}_quantized.onnx")
    graphs = _whisper_refs(fx, fe, tok, {
        "onnx/encoder_model.onnx": "onnx/decoder_model_merged.onnx",
        "onnx/encoder_model_fp16.onnx": "onnx/decoder_model_merged_fp16.onnx",
        "onnx/encoder_model_quantized.onnx": "onnx/decoder_model_merged_quantized.onnx",
    })
    for g in graphs:
        if "_fp16" in g:
            graphs[g]["variant"] = "convert_float_to_float16(keep_io_types=False): float16 IO incl. KV cache"
        if "_quantized" in g:
            graphs[g]["variant"] = "quantize_dynamic(weight_type=QUInt8, per_channel=False)"
    clips = [np.load(fx / "references" / f"audio_{s}.npy") for s, _, _ in AUDIO_SPECS]
    pipeline_asr_whisper(fx, model, fe, tok, clips)
    write_manifest(fx, family="whisper", architecture="WhisperForConditionalGeneration",
                   task="automatic-speech-recognition-with-past", opset=18, graphs=graphs, notes=WHISPER_NOTES,
                   inputs_from="references/audio_*.npy through preprocessor_config.json (WhisperFeatureExtractor)")
    shutil.rmtree(tmp)
    return fx


def build_whisper_opset14():
    fx = fresh_fixture("whisper-opset14")
    tmp = tmpdir()
    model, fe, tok = _whisper(tmp, attn="eager")
    d = save_model_dir(model, tmp, fe, tok)
    out = export_from_model(model, tmp / "out", "automatic-speech-recognition-with-past", 14,
                            preprocessors=[fe, tok], nb_max_frames=100)
    move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                        "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    copy_hub_files(d, fx)
    graphs = _whisper_refs(fx, fe, tok, {"onnx/encoder_model.onnx": "onnx/decoder_model_merged.onnx"})
    write_manifest(fx, family="whisper", architecture="WhisperForConditionalGeneration",
                   task="automatic-speech-recognition-with-past", opset=14, graphs=graphs,
                   exporter=f"{OPTIMUM_ONNX} onnx_export_from_model",
                   notes=WHISPER_NOTES + ["same weights as fixture 'whisper'; attn_implementation='eager', opset 14"])
    shutil.rmtree(tmp)
    return fx



# ---- CLIP / SigLIP (zero-shot-image-classification) -------------------------------------------

ZS_TEXTS = ["a photo of a cat", "a photo of a dog", "hello world"]
ZS_LABELS = ["cat", "dog", "bird"]


def clip_tokenizer(tmp: Path):
    from transformers import CLIPTokenizer, CLIPTokenizerFast

    vocab, merges = clip_style_vocab(60)
    vf, mf = write_vocab_merges(tmp / "clip_tok_src", vocab, merges)
    slow = CLIPTokenizer(vf, mf, model_max_length=16)
    slow.save_pretrained(tmp / "clip_tok_slow")
    return CLIPTokenizerFast.from_pretrained(tmp / "clip_tok_slow")


def siglip_tokenizer(tmp: Path):
    from transformers import SiglipTokenizer

    spm_path = train_sentencepiece(tmp / "siglip_spm", "spiece", 64, "unigram", pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1)
    return SiglipTokenizer(spm_path, model_max_length=64)


def pipeline_zero_shot_image(fx, model, proc, tok, images, kwargs):
    from transformers import pipeline

    p = pipeline("zero-shot-image-classification", model=model, image_processor=proc, tokenizer=tok, device="cpu")
    out = p(images, **kwargs)
    save_json(fx / "references" / "pipeline_zero-shot-image-classification.json",
              {"task": "zero-shot-image-classification", "inputs": image_inputs_description(),
               "call_kwargs": kwargs, "outputs": out})


def _zero_shot_fixture(name, family, arch, model, proc, tok, text_kwargs, notes):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc, tok)
    out = export_main(d, tmp / "out", "zero-shot-image-classification", 18)
    produced = sorted(f.name for f in out.glob("*.onnx"))
    move_onnx(out, fx, {f: f for f in produced})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    enc = tok(ZS_TEXTS, return_tensors="np", **text_kwargs)
    graphs = {}
    for f in produced:
        g = f"onnx/{f}"
        feeds = {"pixel_values": pv, **{k: v for k, v in enc.items()}}
        graphs[g] = {"reference": reference_single(fx, g, feeds)}
    pipeline_zero_shot_image(fx, model, proc, tok, images, {"candidate_labels": ZS_LABELS})
    write_manifest(fx, family=family, architecture=arch, task="zero-shot-image-classification", opset=18,
                   graphs=graphs, notes=notes + [f"optimum exported: {produced}"],
                   text_inputs={"texts": ZS_TEXTS, "tokenizer_kwargs": text_kwargs})
    shutil.rmtree(tmp)
    return fx


def build_clip():
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    tmp = tmpdir()
    tok = clip_tokenizer(tmp)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=16, projection_dim=16,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8, projection_dim=16),
        projection_dim=16, architectures=["CLIPModel"],
    )
    seed(0)
    model = perturb(CLIPModel(cfg).eval())
    proc = CLIPImageProcessor(do_resize=True, size={"shortest_edge": 32}, resample=3, do_center_crop=True,
                              crop_size={"height": 32, "width": 32}, do_rescale=True, rescale_factor=1 / 255,
                              do_normalize=True, image_mean=[0.48145466, 0.4578275, 0.40821073],
                              image_std=[0.26862954, 0.26130258, 0.27577711], do_convert_rgb=True)
    fx = _zero_shot_fixture("clip", "clip", "CLIPModel", model, proc, tok, {"padding": True},
                            ["text_model.onnx / vision_model.onnx (Xenova's split files) are not produced by "
                             "optimum-onnx 0.1.0 main_export for clip; only the joint model.onnx"])
    shutil.rmtree(tmp)
    return fx


def build_siglip():
    from transformers import SiglipConfig, SiglipImageProcessor, SiglipModel

    tmp = tmpdir()
    tok = siglip_tokenizer(tmp)
    cfg = SiglipConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        architectures=["SiglipModel"],
    )
    seed(0)
    model = perturb(SiglipModel(cfg).eval())
    proc = SiglipImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=3, do_rescale=True,
                                rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5, 0.5, 0.5],
                                image_std=[0.5, 0.5, 0.5])
    fx = _zero_shot_fixture("siglip", "siglip", "SiglipModel", model, proc, tok,
                            {"padding": "max_length", "max_length": 64},
                            ["tokenizer is sentencepiece (spiece.model, unigram, 64 pieces) as google/siglip-* ship it; "
                             "transformers has no SiglipTokenizerFast, so no tokenizer.json",
                             "model.onnx has no attention_mask input (SigLIP pads to max_length=64)"])
    shutil.rmtree(tmp)
    return fx



# ---- Image task heads: DETR, YOLOS, SegFormer, DPT ----------------------------------------------

DET_LABELS = ["N/A", "person", "car", "cat"]

# Perturbation scales for the image heads. With the default 0.05 their pipeline references could not
# discriminate: DPT's depth was 0.0 everywhere (the head's last ReLU clipped it all), SegFormer gave one
# label over the whole image, and every DETR / YOLOS query gave the same box with scores within 1e-4.
# These larger (still seeded) scales give maps, labels, boxes and scores that vary; DPT grows fast with
# the scale (0.15 already gives depths ~10), so it gets a smaller one.
HEAD_PERTURB = {"detr": 0.2, "yolos": 0.2, "segformer": 0.2, "dpt": 0.12}
# DETR's decoder queries start at zero and differ only by query_position_embeddings: redraw those with
# std 2.0 (seeded) so each query attends differently and reports its own box.
DETR_QUERY_STD = 2.0


def _image_fixture(name, family, arch, task, model, proc, pipeline_fn=None, notes=(), opset=18):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, proc)
    out = export_main(d, tmp / "out", task, opset)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    enc = proc(images=images, return_tensors="np")
    feeds = {"pixel_values": enc["pixel_values"]}
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", feeds)}}
    if pipeline_fn is not None:
        pipeline_fn(fx, model, proc, images)
    write_manifest(fx, family=family, architecture=arch, task=task, opset=opset, graphs=graphs, notes=list(notes),
                   inputs_from="references/image_*.png through preprocessor_config.json")
    shutil.rmtree(tmp)
    return fx


def pipeline_object_detection(fx, model, proc, images):
    from transformers import pipeline

    p = pipeline("object-detection", model=model, image_processor=proc, device="cpu")
    kwargs = {"threshold": 0.0}
    out = p(images, **kwargs)
    save_json(fx / "references" / "pipeline_object-detection.json",
              {"task": "object-detection", "inputs": image_inputs_description(), "call_kwargs": kwargs,
               "outputs": out})


def pipeline_image_segmentation(fx, model, proc, images):
    from transformers import pipeline

    p = pipeline("image-segmentation", model=model, image_processor=proc, device="cpu")
    kwargs = {"subtask": "semantic"}
    out = p(images, **kwargs)
    save_json(fx / "references" / "pipeline_image-segmentation.json",
              {"task": "image-segmentation", "inputs": image_inputs_description(), "call_kwargs": kwargs,
               "outputs": out, "mask_encoding": "PIL 'L' masks summarised as size, pixel sum and md5 of bytes"})


def pipeline_depth_estimation(fx, model, proc, images):
    from transformers import pipeline

    p = pipeline("depth-estimation", model=model, image_processor=proc, device="cpu")
    out = p(images)
    save_json(fx / "references" / "pipeline_depth-estimation.json",
              {"task": "depth-estimation", "inputs": image_inputs_description(), "call_kwargs": {},
               "outputs": [{"predicted_depth": tensor_stats(o["predicted_depth"]), "depth": o["depth"]} for o in out]})


def build_detr():
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    backbone = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                            layer_type="basic", out_features=["stage4"])
    cfg = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None, backbone_config=backbone,
                     d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=6,
                     id2label=_id2label(DET_LABELS), label2id={n: i for i, n in enumerate(DET_LABELS)},
                     architectures=["DetrForObjectDetection"])
    seed(0)
    model = perturb(DetrForObjectDetection(cfg).eval(), HEAD_PERTURB["detr"])
    queries = model.model.query_position_embeddings.weight
    with torch.no_grad():
        queries.copy_(torch.randn(queries.shape, generator=torch.Generator().manual_seed(0)) * DETR_QUERY_STD)
    proc = DetrImageProcessor(format="coco_detection", do_resize=True, size={"shortest_edge": 64, "longest_edge": 96},
                              do_rescale=True, do_normalize=True, image_mean=[0.485, 0.456, 0.406],
                              image_std=[0.229, 0.224, 0.225], do_pad=True)
    return _image_fixture("detr", "detr", "DetrForObjectDetection", "object-detection", model, proc,
                          pipeline_object_detection,
                          ["backbone: transformers ResNet (use_timm_backbone=False), 4 basic stages, out stage4 "
                           "(stride 32)", "images resized to shortest_edge 64 then padded to the batch max; "
                           "the graph has no pixel_mask input (optimum's DETR export takes pixel_values only)",
                           "pipeline threshold 0.0 so every query is reported",
                           "seeded weight noise std 0.2 and query_position_embeddings redrawn with std 2.0 "
                           "(distinct boxes and scores per query)"])


def build_yolos():
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    cfg = YolosConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      image_size=[32, 32], patch_size=8, num_detection_tokens=6, use_mid_position_embeddings=False,
                      id2label=_id2label(DET_LABELS), label2id={n: i for i, n in enumerate(DET_LABELS)},
                      architectures=["YolosForObjectDetection"])
    seed(0)
    model = perturb(YolosForObjectDetection(cfg).eval(), HEAD_PERTURB["yolos"])
    proc = YolosImageProcessor(format="coco_detection", do_resize=True, size={"shortest_edge": 32, "longest_edge": 48},
                               do_rescale=True, do_normalize=True, image_mean=[0.485, 0.456, 0.406],
                               image_std=[0.229, 0.224, 0.225], do_pad=True)
    return _image_fixture("yolos", "yolos", "YolosForObjectDetection", "object-detection", model, proc,
                          pipeline_object_detection,
                          ["position embeddings are interpolated to the input size inside the graph (bicubic Resize)",
                           "pipeline threshold 0.0 so every detection token is reported",
                           "seeded weight noise std 0.2 (distinct boxes and scores per detection token)"])


def build_segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    labels = ["wall", "floor", "sky", "tree", "road"]
    cfg = SegformerConfig(num_channels=3, num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1],
                          hidden_sizes=[8, 16, 24, 32], patch_sizes=[7, 3, 3, 3], strides=[4, 2, 2, 2],
                          num_attention_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2], decoder_hidden_size=32,
                          id2label=_id2label(labels), label2id={n: i for i, n in enumerate(labels)},
                          architectures=["SegformerForSemanticSegmentation"])
    seed(0)
    model = perturb(SegformerForSemanticSegmentation(cfg).eval(), HEAD_PERTURB["segformer"])
    proc = SegformerImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=2, do_rescale=True,
                                   do_normalize=True, image_mean=[0.485, 0.456, 0.406],
                                   image_std=[0.229, 0.224, 0.225], do_reduce_labels=True)
    return _image_fixture("segformer", "segformer", "SegformerForSemanticSegmentation", "semantic-segmentation",
                          model, proc, pipeline_image_segmentation,
                          ["logits are at 1/4 of the input resolution (8x8 for 32x32)",
                           "seeded weight noise std 0.2 (several labels per image)"])


def build_dpt():
    from transformers import DPTConfig, DPTForDepthEstimation, DPTImageProcessor

    cfg = DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64, image_size=32,
                    patch_size=8, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 16, 32, 32],
                    reassemble_factors=[4, 2, 1, 0.5], fusion_hidden_size=16, head_in_index=-1,
                    readout_type="project", is_hybrid=False, architectures=["DPTForDepthEstimation"])
    seed(0)
    model = perturb(DPTForDepthEstimation(cfg).eval(), HEAD_PERTURB["dpt"])
    # Scale the head's final 1x1 conv by 0.1 (exact through its ReLU and the pipeline's bicubic resize):
    # depths ~0.05 rather than ~0.5, so float32 noise (~1e-7 a pixel) summed over the ~2000 pixels of
    # the recorded predicted_depth `sum` stays well inside the tests' absolute 1e-4.
    last = model.head.head[-2]
    with torch.no_grad():
        last.weight.mul_(0.1)
        last.bias.mul_(0.1)
    proc = DPTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, keep_aspect_ratio=False,
                             ensure_multiple_of=1, resample=3, do_rescale=True, do_normalize=True,
                             image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_pad=False)
    return _image_fixture("dpt", "dpt", "DPTForDepthEstimation", "depth-estimation", model, proc,
                          pipeline_depth_estimation,
                          ["4 ViT layers (one per reassemble stage, backbone_out_indices [0,1,2,3])",
                           "pipeline record keeps predicted_depth summary stats and the depth image's md5",
                           "seeded weight noise std 0.12 (depth varies across pixels; at 0.05 it was all 0), "
                           "head's last 1x1 conv then scaled by 0.1"])



# ---- wav2vec2 (CTC), AST (audio-classification) ------------------------------------------------


def _audio_fixture(name, family, arch, task, model, fe, tok=None, pipeline_fn=None, notes=(), opset=18,
                   feed_name="input_values", **export_kw):
    fx = fresh_fixture(name)
    tmp = tmpdir()
    d = save_model_dir(model, tmp, *[x for x in (fe, tok) if x is not None])
    out = export_main(d, tmp / "out", task, opset, **export_kw)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    clips = write_audio(fx, fe.sampling_rate)
    enc = fe(clips, sampling_rate=fe.sampling_rate, return_tensors="np", padding=True)
    feeds = {feed_name: enc[feed_name]}
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", feeds)}}
    if pipeline_fn is not None:
        pipeline_fn(fx, model, fe, tok, clips)
    write_manifest(fx, family=family, architecture=arch, task=task, opset=opset, graphs=graphs, notes=list(notes),
                   inputs_from="references/audio_*.npy through preprocessor_config.json (batch padded)")
    shutil.rmtree(tmp)
    return fx


def pipeline_asr_ctc(fx, model, fe, tok, clips):
    from transformers import pipeline

    p = pipeline("automatic-speech-recognition", model=model, tokenizer=tok, feature_extractor=fe, device="cpu")
    outs = [p({"raw": c, "sampling_rate": 16000}) for c in clips]
    save_json(fx / "references" / "pipeline_automatic-speech-recognition.json",
              {"task": "automatic-speech-recognition", "inputs": audio_inputs_description(),
               "call": "pipeline(task)({'raw': audio, 'sampling_rate': 16000}), one clip per call",
               "call_kwargs": {}, "outputs": outs})


def pipeline_audio_classification(fx, model, fe, tok, clips):
    from transformers import pipeline

    p = pipeline("audio-classification", model=model, feature_extractor=fe, device="cpu")
    kwargs = {"top_k": 5}
    outs = [p({"raw": c, "sampling_rate": 16000}, **kwargs) for c in clips]
    save_json(fx / "references" / "pipeline_audio-classification.json",
              {"task": "audio-classification", "inputs": audio_inputs_description(),
               "call": "pipeline(task)({'raw': audio, 'sampling_rate': 16000}, **call_kwargs), one clip per call",
               "call_kwargs": kwargs, "outputs": outs})


def build_wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    tmp = tmpdir()
    letters = list("ETAOINSHRDLUCMFWYPVBGKQJXZ'")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, **{c: i + 5 for i, c in enumerate(letters)}}
    (tmp / "vocab.json").write_text(json.dumps(vocab))
    tok = Wav2Vec2CTCTokenizer(str(tmp / "vocab.json"), unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                               eos_token="</s>", word_delimiter_token="|", do_lower_case=False)
    fe = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                  return_attention_mask=False)
    cfg = Wav2Vec2Config(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                         num_feat_extract_layers=3, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                         feat_extract_norm="group", do_stable_layer_norm=False, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2, architectures=["Wav2Vec2ForCTC"])
    seed(0)
    model = perturb(Wav2Vec2ForCTC(cfg).eval())
    with torch.no_grad():  # let letters compete with <pad> in greedy CTC
        model.lm_head.bias[0] -= 0.5
    fx = _audio_fixture("wav2vec2", "wav2vec2", "Wav2Vec2ForCTC", "automatic-speech-recognition", model, fe, tok,
                        pipeline_asr_ctc,
                        ["3 conv feature layers (stride 20 total), group-norm feature extractor, no attention_mask "
                         "input (feat_extract_norm='group')", "batch reference pads the 0.75 s clip with zeros"])
    shutil.rmtree(tmp)
    return fx


def build_ast():
    from transformers import ASTConfig, ASTFeatureExtractor, ASTForAudioClassification

    labels = ["Speech", "Music", "Sine wave", "Noise", "Silence"]
    cfg = ASTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=16,
                    frequency_stride=10, time_stride=10, max_length=64, num_mel_bins=32,
                    id2label=_id2label(labels), label2id={n: i for i, n in enumerate(labels)},
                    architectures=["ASTForAudioClassification"])
    seed(0)
    model = perturb(ASTForAudioClassification(cfg).eval())
    fe = ASTFeatureExtractor(feature_size=1, sampling_rate=16000, num_mel_bins=32, max_length=64, padding_value=0.0,
                             do_normalize=True, mean=-4.2677393, std=4.5689974, return_attention_mask=False)
    return _audio_fixture("ast", "audio-spectrogram-transformer", "ASTForAudioClassification", "audio-classification",
                          model, fe, None, pipeline_audio_classification,
                          ["fbank: 32 mel bins, max_length 64 frames (clips truncated / padded to 0.65 s)",
                           "input_values is (batch, 64, 32); patches 16x16 with stride 10 -> 2x5 patches"])



# ---- VisionEncoderDecoder (ViT + GPT-2), image-to-text-with-past -------------------------------


def gpt2_tokenizer(tmp: Path):
    from transformers import GPT2Tokenizer, GPT2TokenizerFast

    vocab, merges = gpt2_style_vocab(60, specials=("<|endoftext|>",))
    vf, mf = write_vocab_merges(tmp / "gpt2_tok_src", vocab, merges)
    GPT2Tokenizer(vf, mf, model_max_length=32).save_pretrained(tmp / "gpt2_tok_slow")
    return GPT2TokenizerFast.from_pretrained(tmp / "gpt2_tok_slow")


def vision_encoder_decoder_model(tmp: Path):
    """(model, image processor, tokenizer) of the vision-encoder-decoder fixture (seeded: the
    same weights each call; families_image_to_text_split.py exports them again)."""
    from transformers import (GenerationConfig, GPT2Config, ViTConfig, ViTImageProcessor, VisionEncoderDecoderConfig,
                              VisionEncoderDecoderModel)

    tok = gpt2_tokenizer(tmp)
    eos = tok.eos_token_id
    enc = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                    patch_size=8)
    dec = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=32, add_cross_attention=True,
                     is_decoder=True, bos_token_id=eos, eos_token_id=eos)
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    cfg.decoder_start_token_id = eos
    cfg.pad_token_id = eos
    cfg.eos_token_id = eos
    cfg.architectures = ["VisionEncoderDecoderModel"]
    seed(0)
    model = perturb(VisionEncoderDecoderModel(config=cfg).eval())
    model.generation_config = GenerationConfig(decoder_start_token_id=eos, bos_token_id=eos, eos_token_id=eos,
                                               pad_token_id=eos, max_length=16)
    proc = ViTImageProcessor(do_resize=True, size={"height": 32, "width": 32}, resample=2, do_rescale=True,
                             do_normalize=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    return model, proc, tok


def build_vision_encoder_decoder():
    fx = fresh_fixture("vision-encoder-decoder")
    tmp = tmpdir()
    model, proc, tok = vision_encoder_decoder_model(tmp)
    eos = tok.eos_token_id
    d = save_model_dir(model, tmp, proc, tok)
    out = export_main(d, tmp / "out", "image-to-text-with-past", 18)
    move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                        "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    copy_hub_files(d, fx)
    images = write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    es = session(fx / "onnx/encoder_model.onnx")
    ef = cast_feeds(es, {"pixel_values": pv})
    eo = run(es, ef)
    graphs = {"onnx/encoder_model.onnx": {"reference": save_reference(fx, "onnx/encoder_model.onnx", [(ef, eo)])}}
    ds = session(fx / "onnx/decoder_model_merged.onnx")
    first = {"input_ids": np.array([[eos]] * 2, np.int64), "encoder_hidden_states": eo["last_hidden_state"],
             "use_cache_branch": np.array([False]), **empty_past(ds, 2)}
    graphs["onnx/decoder_model_merged.onnx"] = {
        "reference": save_reference(fx, "onnx/decoder_model_merged.onnx", decoder_steps(ds, first, 3)),
        "static_inputs": ["use_cache_branch"]}
    # references/pipeline_image-to-text.json: record_image_to_text.py (rebuilds this model)
    write_manifest(fx, family="vision-encoder-decoder", architecture="VisionEncoderDecoderModel",
                   task="image-to-text-with-past", opset=18, graphs=graphs,
                   notes=["encoder ViT (32x32, patch 8), decoder GPT-2 with cross-attention",
                          "decoder prompt is decoder_start_token_id (<|endoftext|>); 3 greedy KV-cache steps"])
    shutil.rmtree(tmp)
    return fx


# ---- VITS (text-to-speech) ----------------------------------------------------------------------

TTS_TEXTS = ["hello world", "the cat sat"]


def build_vits():
    from transformers import VitsConfig, VitsModel, VitsTokenizer, pipeline

    fx = fresh_fixture("vits")
    tmp = tmpdir()
    chars = ["_", " ", *"abcdefghijklmnopqrstuvwxyz", "'", "<unk>"]
    (tmp / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
    tok = VitsTokenizer(str(tmp / "vocab.json"), pad_token="_", unk_token="<unk>", language=None, add_blank=True,
                        normalize=True, phonemize=False, is_uroman=False)
    cfg = VitsConfig(vocab_size=len(chars), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     window_size=4, ffn_dim=64, ffn_kernel_size=3, flow_size=16, spectrogram_bins=17,
                     upsample_initial_channel=32, upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8],
                     resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]], prior_encoder_num_flows=2,
                     prior_encoder_num_wavenet_layers=2, posterior_encoder_num_wavenet_layers=2,
                     duration_predictor_filter_channels=32, duration_predictor_num_flows=2,
                     depth_separable_num_layers=2, use_stochastic_duration_prediction=True,
                     noise_scale=0.0, noise_scale_duration=0.0, sampling_rate=16000,
                     architectures=["VitsModel"])
    seed(0)
    model = perturb(VitsModel(cfg).eval(), scale=0.02)
    d = save_model_dir(model, tmp, tok)
    out = export_main(d, tmp / "out", "text-to-audio", 18)
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx, extra_skip=("vocab.json.bak",))
    enc = tok(TTS_TEXTS, return_tensors="np", padding=True)
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", dict(enc))}}
    p = pipeline("text-to-speech", model=model, tokenizer=tok, device="cpu")
    outs = [p(t) for t in TTS_TEXTS]
    save_json(fx / "references" / "pipeline_text-to-speech.json",
              {"task": "text-to-speech", "inputs": TTS_TEXTS, "call_kwargs": {},
               "outputs": [{"sampling_rate": o["sampling_rate"], "audio": tensor_stats(o["audio"])} for o in outs]})
    write_manifest(fx, family="vits", architecture="VitsModel", task="text-to-audio", opset=18, graphs=graphs,
                   notes=["noise_scale = noise_scale_duration = 0 in config.json so the RandomNormalLike ops in the "
                          "graph are multiplied by 0 and the references are deterministic",
                          "stochastic duration predictor; waveform length depends on predicted durations "
                          "(data-dependent shapes: CumSum / Range / Expand)", "tokenizer: characters, add_blank"],
                   text_inputs={"texts": TTS_TEXTS, "tokenizer_kwargs": {"padding": True}})
    shutil.rmtree(tmp)
    return fx


# ---- SpeechT5 (text-to-speech: encoder, merged decoder, postnet + HiFi-GAN) -------------------


def build_speecht5():
    from transformers import (SpeechT5Config, SpeechT5FeatureExtractor, SpeechT5ForTextToSpeech, SpeechT5HifiGan,
                              SpeechT5HifiGanConfig, SpeechT5Processor, SpeechT5Tokenizer)

    fx = fresh_fixture("speecht5")
    tmp = tmpdir()
    spm_path = train_sentencepiece(tmp / "t5spm", "spm_char", 40, "char", bos_id=0, pad_id=1, eos_id=2, unk_id=3)
    tok = SpeechT5Tokenizer(spm_path)
    fe = SpeechT5FeatureExtractor(feature_size=1, sampling_rate=16000, num_mel_bins=16, hop_length=16, win_length=64,
                                  fmin=80, fmax=7600, reduction_factor=2, do_normalize=False, return_attention_mask=True)
    proc = SpeechT5Processor(feature_extractor=fe, tokenizer=tok)
    cfg = SpeechT5Config(vocab_size=len(tok), hidden_size=32, encoder_layers=2, encoder_attention_heads=2,
                         encoder_ffn_dim=64, decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=64,
                         num_mel_bins=16, speaker_embedding_dim=16, speech_decoder_prenet_units=32,
                         speech_decoder_postnet_units=32, speech_decoder_postnet_layers=2,
                         speech_decoder_postnet_kernel=5, speech_decoder_prenet_dropout=0.0,
                         max_speech_positions=128, max_text_positions=64,
                         encoder_max_relative_position=16, reduction_factor=2, pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, decoder_start_token_id=2, architectures=["SpeechT5ForTextToSpeech"])
    seed(0)
    model = perturb(SpeechT5ForTextToSpeech(cfg).eval())
    voc_cfg = SpeechT5HifiGanConfig(model_in_dim=16, sampling_rate=16000, upsample_initial_channel=32,
                                    upsample_rates=[4, 4], upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3],
                                    resblock_dilation_sizes=[[1, 3]], normalize_before=True)
    seed(1)
    vocoder = perturb(SpeechT5HifiGan(voc_cfg).eval())
    d = save_model_dir(model, tmp, proc)
    vocoder.save_pretrained(tmp / "vocoder")
    out = export_main(d, tmp / "out", "text-to-audio", 18, model_kwargs={"vocoder": str(tmp / "vocoder")})
    produced = sorted(f.name for f in out.glob("*.onnx"))
    print("  optimum produced", produced)
    if "decoder_model_merged.onnx" not in produced:
        # optimum-onnx 0.1.0 post-processing does not merge SpeechT5's decoders; merge them the same way
        from optimum.onnx import merge_decoders

        merge_decoders(str(out / "decoder_model.onnx"), str(out / "decoder_with_past_model.onnx"),
                       save_path=str(out / "decoder_model_merged.onnx"), strict=False)
        produced.append("decoder_model_merged.onnx")
    keep = {"encoder_model.onnx", "decoder_model_merged.onnx", "decoder_postnet_and_vocoder.onnx"}
    move_onnx(out, fx, {f: f for f in produced if f in keep})
    copy_hub_files(d, fx)
    (fx / "vocoder").mkdir()
    for f in ["config.json"]:
        shutil.copy(tmp / "vocoder" / f, fx / "vocoder" / f)
    text = "hello world"
    ids = tok(text, return_tensors="np")["input_ids"]
    rng = np.random.default_rng(7)
    spk = rng.standard_normal((1, 16)).astype(np.float32)
    spk /= np.linalg.norm(spk)
    np.save(fx / "references" / "speaker_embeddings.npy", spk)
    es = session(fx / "onnx/encoder_model.onnx")
    ef = cast_feeds(es, {"input_ids": ids})
    eo = run(es, ef)
    graphs = {"onnx/encoder_model.onnx": {"reference": save_reference(fx, "onnx/encoder_model.onnx", [(ef, eo)])}}
    ds = session(fx / "onnx/decoder_model_merged.onnx")
    first = {"output_sequence": np.zeros((1, 1, 16), np.float32), "speaker_embeddings": spk,
             "encoder_hidden_states": eo["encoder_outputs"], "encoder_attention_mask": eo["encoder_attention_mask"],
             "use_cache_branch": np.array([False]), **empty_past(ds, 1)}

    def next_feeds(new, outs):
        new["output_sequence"] = outs["output_sequence_out"]
        return new

    steps = decoder_steps(ds, first, 3, next_feeds=next_feeds)
    graphs["onnx/decoder_model_merged.onnx"] = {
        "reference": save_reference(fx, "onnx/decoder_model_merged.onnx", steps), "static_inputs": ["use_cache_branch"]}
    spectrogram = np.concatenate([o["spectrum"] for _, o in steps], axis=0)
    ps = session(fx / "onnx/decoder_postnet_and_vocoder.onnx")
    pf = cast_feeds(ps, {"spectrogram": spectrogram})
    graphs["onnx/decoder_postnet_and_vocoder.onnx"] = {
        "reference": save_reference(fx, "onnx/decoder_postnet_and_vocoder.onnx", [(pf, run(ps, pf))])}
    with torch.no_grad():
        speech = model.generate_speech(torch.tensor(ids), torch.tensor(spk), vocoder=vocoder, threshold=0.5,
                                       minlenratio=0.0, maxlenratio=2.0)
    save_json(fx / "references" / "pipeline_text-to-speech.json",
              {"task": "text-to-speech", "inputs": {"text": text, "speaker_embeddings": "references/speaker_embeddings.npy"},
               "call": "model.generate_speech(input_ids, speaker_embeddings, vocoder=vocoder, threshold=0.5, "
                       "minlenratio=0.0, maxlenratio=2.0) on the torch model (the pipeline wraps the same call)",
               "call_kwargs": {"threshold": 0.5, "minlenratio": 0.0, "maxlenratio": 2.0},
               "outputs": {"waveform": tensor_stats(speech)}})
    write_manifest(fx, family="speecht5", architecture="SpeechT5ForTextToSpeech", task="text-to-audio", opset=18,
                   graphs=graphs,
                   notes=["speech_decoder_prenet_dropout=0.0: SpeechT5's prenet applies bernoulli dropout even in "
                          "eval (RandomUniformLike in the graph, as in Xenova/speecht5_tts); with p=0 the mask is "
                          "all zeros, so outputs are deterministic but the prenet path contributes only its "
                          "final-layer bias + positions (output_sequence values do not affect outputs)",
                          "optimum exports batch 1 only (SpeechT5 batched generation is unsupported)",
                          "decoder takes the full output_sequence each step (prenet) plus the KV cache; "
                          "step k+1's output_sequence is step k's output_sequence_out",
                          "postnet+vocoder reference input is the concatenation of the 4 steps' spectrum outputs",
                          "vocoder/config.json: the tiny SpeechT5HifiGan (weights only live in the ONNX graph)",
                          "optimum-onnx 0.1.0 main_export leaves decoder_model.onnx + decoder_with_past_model.onnx "
                          "unmerged for SpeechT5; decoder_model_merged.onnx is optimum.onnx.merge_decoders(strict=False) "
                          "of the two, as in Xenova/speecht5_tts; the unmerged files are not kept"],
                   text_inputs={"text": text, "speaker_embeddings": "references/speaker_embeddings.npy"})
    shutil.rmtree(tmp)
    return fx



# ---- CLAP (zero-shot-audio-classification) ------------------------------------------------------
# optimum-onnx 0.1.0 has no CLAP config; a small custom OnnxConfig is passed to main_export.


def _clap_onnx_config(model_config, frames: int, mels: int):
    from optimum.exporters.onnx import OnnxConfig
    from optimum.utils import DummyInputGenerator, DummyTextInputGenerator, NormalizedTextAndVisionConfig

    class ClapNormalizedConfig(NormalizedTextAndVisionConfig):
        TEXT_CONFIG = "text_config"
        VISION_CONFIG = "audio_config"

    class ClapDummyAudio(DummyInputGenerator):
        SUPPORTED_INPUT_NAMES = ("input_features",)

        def __init__(self, task, normalized_config, batch_size=2, **kwargs):
            self.batch_size = batch_size

        def generate(self, input_name, framework="pt", int_dtype="int64", float_dtype="fp32"):
            return self.random_float_tensor([self.batch_size, 1, frames, mels], framework=framework, dtype=float_dtype)

    class ClapOnnxConfig(OnnxConfig):
        NORMALIZED_CONFIG_CLASS = ClapNormalizedConfig
        DUMMY_INPUT_GENERATOR_CLASSES = (DummyTextInputGenerator, ClapDummyAudio)
        DEFAULT_ONNX_OPSET = 18

        @property
        def inputs(self):
            return {"input_ids": {0: "text_batch_size", 1: "sequence_length"},
                    "attention_mask": {0: "text_batch_size", 1: "sequence_length"},
                    "input_features": {0: "audio_batch_size"}}

        @property
        def outputs(self):
            return {"logits_per_audio": {0: "audio_batch_size", 1: "text_batch_size"},
                    "logits_per_text": {0: "text_batch_size", 1: "audio_batch_size"},
                    "text_embeds": {0: "text_batch_size"}, "audio_embeds": {0: "audio_batch_size"}}

    return ClapOnnxConfig(model_config, task="feature-extraction")


def roberta_tokenizer(tmp: Path):
    from transformers import RobertaTokenizer, RobertaTokenizerFast

    vocab, merges = gpt2_style_vocab(60, specials=("<s>", "<pad>", "</s>", "<unk>"), specials_first=True)
    vocab["<mask>"] = len(vocab)
    vf, mf = write_vocab_merges(tmp / "roberta_tok_src", vocab, merges)
    RobertaTokenizer(vf, mf, model_max_length=32).save_pretrained(tmp / "roberta_tok_slow")
    return RobertaTokenizerFast.from_pretrained(tmp / "roberta_tok_slow")


def build_clap():
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel, ClapProcessor, pipeline

    fx = fresh_fixture("clap")
    tmp = tmpdir()
    tok = roberta_tokenizer(tmp)
    fe = ClapFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, max_length_s=1,
                              fft_window_size=400, padding_value=0.0, return_attention_mask=False,
                              frequency_min=50, frequency_max=8000, truncation="rand_trunc", padding="repeatpad")
    proc = ClapProcessor(feature_extractor=fe, tokenizer=tok)
    cfg = ClapConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=34, projection_dim=16, pad_token_id=1,
                         bos_token_id=0, eos_token_id=2),
        audio_config=dict(window_size=4, num_mel_bins=16, spec_size=64, patch_size=4, patch_stride=[4, 4],
                          hidden_size=32, patch_embeds_hidden_size=16, depths=[1, 1], num_attention_heads=[1, 2],
                          projection_dim=16, enable_fusion=False, num_hidden_layers=2),
        projection_dim=16, architectures=["ClapModel"],
    )
    seed(0)
    model = perturb(ClapModel(cfg).eval())
    d = save_model_dir(model, tmp, proc)
    frames = fe.nb_max_samples // fe.hop_length + 1
    onnx_cfg = _clap_onnx_config(model.config, frames, 16)
    out = export_main(d, tmp / "out", "feature-extraction", 18, custom_onnx_configs={"model": onnx_cfg})
    move_onnx(out, fx, {"model.onnx": "model.onnx"})
    copy_hub_files(d, fx)
    clips = write_audio(fx)
    feats = fe(clips, sampling_rate=16000, return_tensors="np")["input_features"]
    enc = tok(ZS_TEXTS, return_tensors="np", padding=True)
    feeds = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "input_features": feats}
    graphs = {"onnx/model.onnx": {"reference": reference_single(fx, "onnx/model.onnx", feeds)}}
    p = pipeline("zero-shot-audio-classification", model=model, tokenizer=tok, feature_extractor=fe, device="cpu")
    kwargs = {"candidate_labels": ["speech", "music", "noise"]}
    outs = [p(c, **kwargs) for c in clips]
    save_json(fx / "references" / "pipeline_zero-shot-audio-classification.json",
              {"task": "zero-shot-audio-classification", "inputs": audio_inputs_description(),
               "call": "pipeline(task)(audio_array, **call_kwargs), one clip per call", "call_kwargs": kwargs,
               "outputs": outs})
    write_manifest(fx, family="clap", architecture="ClapModel", task="zero-shot-audio-classification", opset=18,
                   graphs=graphs, exporter=f"{EXPORTER} with a custom OnnxConfig (optimum-onnx 0.1.0 has none for clap)",
                   notes=["unfused HTSAT audio encoder: 16 mel bins, spec_size 64 (freq_ratio 4, 101 frames interpolated to 256), 2 Swin stages",
                          "feature extractor at 16 kHz, max_length_s=1 (101 frames), repeatpad; clips <= 1 s so "
                          "rand_trunc never triggers (deterministic)",
                          "model.onnx only; Xenova's text_model.onnx / audio_model.onnx splits are not produced"],
                   text_inputs={"texts": ZS_TEXTS, "tokenizer_kwargs": {"padding": True}})
    shutil.rmtree(tmp)
    return fx


BUILDERS = {
    "vit": build_vit,
    "vit-opset14": build_vit_opset14,
    "whisper": build_whisper,
    "whisper-opset14": build_whisper_opset14,
    "clip": build_clip,
    "siglip": build_siglip,
    "detr": build_detr,
    "yolos": build_yolos,
    "segformer": build_segformer,
    "dpt": build_dpt,
    "wav2vec2": build_wav2vec2,
    "ast": build_ast,
    "vision-encoder-decoder": build_vision_encoder_decoder,
    "vits": build_vits,
    "speecht5": build_speecht5,
    "clap": build_clap,
}


def main(argv: list[str], builders=None) -> int:
    """Build the fixtures named in ``argv`` (all of ``builders`` when none; default: BUILDERS)."""
    builders = BUILDERS if builders is None else builders
    names = argv or list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        print(f"unknown fixtures {unknown}; known: {list(builders)}")
        return 2
    t_all = time.time()
    for n in names:
        t0 = time.time()
        print(f"[{n}] building ...", flush=True)
        fx = builders[n]()
        verify(fx)
        size = sum(f.stat().st_size for f in fx.rglob("*") if f.is_file())
        print(f"[{n}] done in {time.time() - t0:.1f}s, {size / 1e6:.2f} MB", flush=True)
    print(f"all done in {time.time() - t_all:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
