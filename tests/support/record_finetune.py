"""Gradient references for fine-tuning (tests/test_finetune.py): PyTorch autograd on the fixtures'
own weights.

Usage (export environment only; a few seconds):
    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_finetune.py

Each model is rebuilt exactly as its family script built it (same config, same seed; the tokenizer
trained the same way for its vocabulary size). Before recording, the rebuilt model must match the
fixture: every float initializer of the ONNX file equals a PyTorch parameter (or its transpose,
for MatMul weights), and the model reproduces the onnxruntime outputs of the fixture's reference
inputs (references/<stem>.npz, step 0); otherwise the script stops.

The loss: cross-entropy over the logits with fixed labels (classifiers), or the causal LM loss
over the shifted input ids, masked by the attention mask (GPT-2). Gradients are taken in float64
(the model and inputs cast to double), so the reference is the exact gradient of the graph's math
up to float64 rounding, and stored in float32. The exporter de-duplicates equal initializers
(every LayerNorm gamma at 1 is one tensor) and transposes MatMul weights, so the gradient of an
ONNX initializer is the sum of its PyTorch parameters' gradients, each transposed back as needed.

Writes ``tests/fixtures/<name>/references/finetune_grads.npz``: ``loss`` (float64), ``labels``,
``grad/<initializer name>`` per float initializer of the first graph, and ``alias/<name>`` for
the other graphs' initializers (GPT-2's merged decoder renames them): the first graph's name.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_common as ec  # noqa: E402

CLASSIFIER_LABELS = {"bert-sequence-classification": [2, 0], "vit": [1, 4]}


def _bert(work):
    import families_text as ft
    from transformers import BertForSequenceClassification

    tok = ft.bert_tokenizer(work)
    ec.seed_everything()
    labels = {0: "negative", 1: "neutral", 2: "positive"}  # as families_text.build_bert_seqcls
    cfg = ft._bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
    return BertForSequenceClassification(cfg)


def _vit(work):
    import families_vision_audio as fva

    return fva._vit()[0]


def _gpt2(work):
    import families_text as ft

    return ft._gpt2(work)[0]


FIXTURES = {
    "bert-sequence-classification": (_bert, ["onnx/model.onnx"], "references/model.npz"),
    "vit": (_vit, ["onnx/model.onnx"], "references/model.npz"),
    "gpt2": (_gpt2, ["onnx/decoder_model.onnx", "onnx/decoder_model_merged.onnx"],
             "references/decoder_model.npz"),
}


def _float_initializers(path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
            if t.data_type == onnx.TensorProto.FLOAT and np.prod(t.dims) > 1}


def _match(name, inits, params):
    """[(torch param name, transposed)] whose values are this initializer's."""
    value = inits[name]
    found = []
    for pname, p in params.items():
        if p.shape == value.shape and np.array_equal(p, value):
            found.append((pname, False))
        elif p.ndim == 2 and p.T.shape == value.shape and np.array_equal(p.T, value):
            found.append((pname, True))
    return found


def _mapping(inits, params):
    """initializer -> its torch params; stops when an initializer has none or a param two."""
    mapping = {name: _match(name, inits, params) for name in inits}
    missing = [n for n, m in mapping.items() if not m]
    if missing:
        raise SystemExit(f"the rebuilt model has no parameter equal to initializer(s) {missing}")
    owners = {}
    for name, matches in mapping.items():
        for pname, _ in matches:
            owners.setdefault(pname, []).append(name)
    shared = {p: names for p, names in owners.items() if len(names) > 1}
    if shared:
        raise SystemExit(f"parameters equal to several initializers (ambiguous): {shared}")
    return mapping


def _loss(name, model, feed, torch):
    logits = model(**feed).logits
    if name in CLASSIFIER_LABELS:
        labels = torch.tensor(CLASSIFIER_LABELS[name])
        return torch.nn.functional.cross_entropy(logits, labels), logits
    ids, mask = feed["input_ids"], feed["attention_mask"]
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    weight = mask[:, 1:].reshape(-1).to(per_token.dtype)
    return (per_token * weight).sum() / weight.sum(), logits


def _feed(name, ref, torch, dtype):
    inputs = {k.split("/")[-1]: ref[k] for k in ref.files if k.startswith("0/in/")}
    feed = {k: torch.from_numpy(v) for k, v in inputs.items()}
    if "pixel_values" in feed:
        feed["pixel_values"] = feed["pixel_values"].to(dtype)
    if name == "gpt2":
        feed["use_cache"] = False
    return feed


def record(name):
    import torch

    build, graphs, reference = FIXTURES[name]
    d = ec.FIXTURES_ROOT / name
    with tempfile.TemporaryDirectory() as work:
        model = build(Path(work)).eval()
    params = {k: p.detach().numpy() for k, p in model.named_parameters()}
    ref = np.load(d / reference)
    with torch.no_grad():
        _, logits = _loss(name, model, _feed(name, ref, torch, torch.float32), torch)
    err = np.abs(logits.numpy() - ref["0/out/logits"]).max()
    if err > 1e-4:
        raise SystemExit(f"{name}: the rebuilt model's logits differ from onnxruntime's by {err}")
    out = {}
    first = _float_initializers(d / graphs[0])
    mapping = _mapping(first, params)
    grads = {}
    for dtype in (torch.float64, torch.float32):
        model.to(dtype).zero_grad()
        loss, _ = _loss(name, model, _feed(name, ref, torch, dtype), torch)
        loss.backward()
        grads[dtype] = {k: p.grad.double().numpy() for k, p in model.named_parameters()
                        if p.grad is not None}
        if dtype == torch.float64:
            out["loss"] = np.float64(loss.item())
    for init, matches in mapping.items():
        total = {dt: sum(grads[dt].get(p, 0) if not t else grads[dt][p].T for p, t in matches)
                 for dt in grads}
        out[f"grad/{init}"] = np.asarray(total[torch.float64], np.float32)
        f32, f64 = total[torch.float32], total[torch.float64]
        rel = np.abs(f32 - f64).max() / max(np.abs(f64).max(), 1e-30)
        print(f"  {init}: torch float32 vs float64 max error / max |grad| = {rel:.1e}")
    for other in graphs[1:]:
        inits = _float_initializers(d / other)
        for alias in inits:
            same = [n for n in first if first[n].shape == inits[alias].shape
                    and np.array_equal(first[n], inits[alias])]
            if len(same) != 1:
                raise SystemExit(f"{other}: initializer {alias!r} matches {same} in {graphs[0]}")
            out[f"alias/{alias}"] = np.array(same[0])
    if name in CLASSIFIER_LABELS:
        out["labels"] = np.array(CLASSIFIER_LABELS[name], np.int64)
    np.savez_compressed(d / "references" / "finetune_grads.npz", **out)
    print(f"{name}: loss {out['loss']:.6f}, {len(mapping)} initializers")


def main(argv):
    for name in argv or list(FIXTURES):
        record(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
