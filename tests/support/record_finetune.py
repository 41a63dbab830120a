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

``curve`` (or ``python record_finetune.py curve``) also records the same 30 steps under
``torch.autocast("cpu", torch.bfloat16)`` (``finetune_curve_bf16.npz``, for compute_type="bf16"),
and records the token-classification curve
(``record_token_curve``), the MNRL curve through bert-st-dense's Dense modules
(``record_dense_curve``; ``python record_finetune.py dense`` records it alone), and records the loss of 30 AdamW steps of the BERT
classifier on CURVE_TEXTS / CURVE_LABELS in batches of CURVE_BATCH (in order, no shuffling),
tokenized by the fixture's own tokenizer (transformers' AutoTokenizer on the fixture folder,
padded to the longest row of each batch), with torch.optim.AdamW(lr, betas, eps, weight_decay of
CURVE_ADAMW): ``references/finetune_curve.npz`` holds ``loss`` [30] (float32, the mean
cross-entropy of each step's batch before its update), ``trained`` (the initializers that train:
those that are one PyTorch parameter each; the exporter merged equal weights into shared
initializers, which would tie them in the ONNX graph, so those stay frozen on both sides) and
``ids/<batch>`` (the input ids of each batch, for the test to check its tokenization), with the
``texts``, ``labels``, ``batch`` size and ``adamw/<option>`` it used.

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


CURVE_TEXTS = ["Hello world!", "My name is Sarah and I live in London.", "The cat sat on the mat.",
               "I love this film.", "What a dreadful, boring day.", "It is fine, I suppose.",
               "The weather in Paris is lovely in spring.", "No.", "Terrible service, never again!",
               "An average meal at an average price."]
CURVE_LABELS = [2, 1, 1, 2, 0, 1, 2, 0, 0, 1]
CURVE_BATCH = 4
CURVE_STEPS = 30
CURVE_ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def record_curve(name="bert-sequence-classification", autocast=False):
    """``autocast``: the forward under ``torch.autocast("cpu", torch.bfloat16)`` (mixed
    precision: float32 weights, bfloat16 matmuls), into finetune_curve_bf16.npz."""
    import contextlib

    import torch
    from transformers import AutoTokenizer

    build, graphs, _ = FIXTURES[name]
    d = ec.FIXTURES_ROOT / name
    ec.seed_everything()
    with tempfile.TemporaryDirectory() as work:
        # eval(): no dropout (attention's too), as in the ONNX graph, which is the inference
        # graph; gradients flow all the same
        model = build(Path(work)).eval()
    tok = AutoTokenizer.from_pretrained(d)
    params = {k: p.detach().numpy() for k, p in model.named_parameters()}
    mapping = _mapping(_float_initializers(d / graphs[0]), params)
    trained = sorted(n for n, m in mapping.items() if len(m) == 1)
    train = {m[0][0] for n, m in mapping.items() if len(m) == 1}
    for pname, p in model.named_parameters():
        p.requires_grad_(pname in train)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  **CURVE_ADAMW)
    batches = [range(i, min(i + CURVE_BATCH, len(CURVE_TEXTS)))
               for i in range(0, len(CURVE_TEXTS), CURVE_BATCH)]
    out, losses = {}, []
    for step in range(CURVE_STEPS):
        rows = batches[step % len(batches)]
        feed = tok([CURVE_TEXTS[i] for i in rows], padding=True, return_tensors="pt")
        out.setdefault(f"ids/{step % len(batches)}", feed["input_ids"].numpy())
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else \
            contextlib.nullcontext()
        with cast:
            logits = model(**feed).logits
        loss = torch.nn.functional.cross_entropy(logits.float(),
                                                 torch.tensor([CURVE_LABELS[i] for i in rows]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    out.update(loss=np.array(losses, np.float32), trained=np.array(trained),
               texts=np.array(CURVE_TEXTS), labels=np.array(CURVE_LABELS), batch=CURVE_BATCH,
               **{f"adamw/{k}": np.array(v) for k, v in CURVE_ADAMW.items()})
    stem = "finetune_curve_bf16" if autocast else "finetune_curve"
    np.savez_compressed(d / "references" / f"{stem}.npz", **out)
    print(f"{name}: {len(trained)} of {len(mapping)} initializers train; loss "
          f"{losses[0]:.5f} -> {losses[-1]:.5f}")


PAIRS = [("A man is eating food.", "A man eats something."),
         ("The cat sits on the mat.", "A cat is sitting."),
         ("Paris is the capital of France.", "France's capital city is Paris."),
         ("I like green tea in the morning.", "Tea is nice early in the day."),
         ("It will rain tomorrow in London, where the weather is often grey but the museums "
          "are free and the parks are wide and green.", "Rain is expected."),
         ("The match ended with a late goal.", "A goal came late in the game.")]
PAIR_SCORES = [0.9, 0.8, 1.0, 0.6, 0.4, 0.7]
PAIR_BATCH = 4
PAIR_STEPS = 8
PAIR_ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def record_embedding_curves(name="bert-sentence-transformers"):
    """sentence-transformers' MultipleNegativesRankingLoss and CosineSimilarityLoss on PAIRS:
    PAIR_STEPS steps of torch.optim.AdamW (PAIR_ADAM: no weight decay, plain Adam) each, from the
    fixture's weights, in batches of PAIR_BATCH in order, tokenized by SentenceTransformer
    itself (max_seq_length 24, as the fixture). Writes references/finetune_embedding_curves.npz:
    ``loss/<kind>`` per step, ``trained`` (as record_curve), ``pairs``, ``scores``, ``batch``,
    ``adam/<option>``."""

    import families_pipelines as fp
    import families_text as ft
    import torch
    from sentence_transformers import SentenceTransformer, losses, models
    from transformers import BertModel

    d = ec.FIXTURES_ROOT / name
    out = {}
    for kind in ("multiple-negatives-ranking", "cosine-similarity"):
        tok = fp._tokenizer()
        ec.seed_everything()
        bert = BertModel(ft._bert_config(tok)).eval()
        with tempfile.TemporaryDirectory() as work:
            bert.save_pretrained(work)
            tok.save_pretrained(work)
            body = models.Transformer(work, max_seq_length=24)
        st = SentenceTransformer(modules=[body, models.Pooling(32, "mean"), models.Normalize()],
                                 device="cpu").eval()  # eval: no dropout, as the ONNX graph
        params = {k: p.detach().numpy() for k, p in bert.named_parameters()}
        mapping = _mapping(_float_initializers(d / "onnx" / "model.onnx"), params)
        train = {"0.model." + m[0][0] for m in mapping.values() if len(m) == 1}
        out["trained"] = np.array(sorted(n for n, m in mapping.items() if len(m) == 1))
        for pname, p in st.named_parameters():
            p.requires_grad_(pname in train)
        loss_fn = (losses.MultipleNegativesRankingLoss(st) if kind.startswith("multiple")
                   else losses.CosineSimilarityLoss(st))
        optimizer = torch.optim.AdamW([p for p in st.parameters() if p.requires_grad],
                                      **PAIR_ADAM)
        batches = [range(i, min(i + PAIR_BATCH, len(PAIRS)))
                   for i in range(0, len(PAIRS), PAIR_BATCH)]
        curve = []
        for step in range(PAIR_STEPS):
            rows = batches[step % len(batches)]
            features = [st.tokenize([PAIRS[i][c] for i in rows]) for c in (0, 1)]
            labels = torch.tensor([PAIR_SCORES[i] for i in rows])
            loss = loss_fn(features, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        out[f"loss/{kind}"] = np.array(curve, np.float32)
        print(f"{name} {kind}: loss {curve[0]:.5f} -> {curve[-1]:.5f}")
    out.update(pairs=np.array(PAIRS), scores=np.array(PAIR_SCORES, np.float32),
               batch=PAIR_BATCH, **{f"adam/{k}": np.array(v) for k, v in PAIR_ADAM.items()})
    np.savez_compressed(d / "references" / "finetune_embedding_curves.npz", **out)


DENSE_TEXTS = ["A man is playing a guitar.", "The weather is lovely today."]


def record_dense_curve(name="bert-st-dense"):
    """sentence-transformers' MultipleNegativesRankingLoss on PAIRS through the fixture's whole
    module list (Transformer, mean Pooling, Dense 32->24 Tanh, Dense 24->16 GELU, Normalize):
    PAIR_STEPS steps of torch.optim.AdamW (PAIR_ADAM) in batches of PAIR_BATCH, the BERT weights
    that are one initializer each and both Dense modules' weights training (the Dense modules
    loaded from the fixture's own 2_Dense / 3_Dense files). Writes
    references/finetune_dense_curve.npz: ``loss`` per step, ``trained`` (the initializers),
    ``dense/<module path>/<tensor>`` (each Dense weight after training), ``texts`` (DENSE_TEXTS)
    and ``embeddings`` (the trained model's SentenceTransformer.encode of them), with ``pairs``,
    ``batch`` and ``adam/<option>``."""
    import families_text as ft
    import torch
    from sentence_transformers import SentenceTransformer, losses, models
    from transformers import BertModel, BertTokenizerFast

    d = ec.FIXTURES_ROOT / name
    tok = BertTokenizerFast.from_pretrained(str(ec.FIXTURES_ROOT / "bert"))
    ec.seed_everything()  # as families_text_seeds.build_st_dense
    bert = BertModel(ft._bert_config(tok)).eval()
    params = {k: p.detach().numpy() for k, p in bert.named_parameters()}
    mapping = _mapping(_float_initializers(d / "onnx" / "model.onnx"), params)
    with tempfile.TemporaryDirectory() as work:
        bert.save_pretrained(work)
        tok.save_pretrained(work)
        body = models.Transformer(work, max_seq_length=32)
    dense = [models.Dense.load(str(d / path)) for path in ("2_Dense", "3_Dense")]
    st = SentenceTransformer(modules=[body, models.Pooling(32, "mean"), *dense,
                                      models.Normalize()], device="cpu").eval()
    train = {"0.model." + m[0][0] for m in mapping.values() if len(m) == 1}
    for pname, p in st.named_parameters():
        p.requires_grad_(pname in train or pname.startswith(("2.", "3.")))
    loss_fn = losses.MultipleNegativesRankingLoss(st)
    optimizer = torch.optim.AdamW([p for p in st.parameters() if p.requires_grad], **PAIR_ADAM)
    batches = [range(i, min(i + PAIR_BATCH, len(PAIRS))) for i in range(0, len(PAIRS), PAIR_BATCH)]
    curve = []
    for step in range(PAIR_STEPS):
        rows = batches[step % len(batches)]
        loss = loss_fn([st.tokenize([PAIRS[i][c] for i in rows]) for c in (0, 1)], None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    out = {"loss": np.array(curve, np.float32),
           "trained": np.array(sorted(n for n, m in mapping.items() if len(m) == 1)),
           "texts": np.array(DENSE_TEXTS),
           "embeddings": st.encode(DENSE_TEXTS, batch_size=1).astype(np.float32),
           "pairs": np.array(PAIRS), "batch": PAIR_BATCH,
           **{f"adam/{k}": np.array(v) for k, v in PAIR_ADAM.items()}}
    for index, path in ((2, "2_Dense"), (3, "3_Dense")):
        for tensor, value in st[index].state_dict().items():
            out[f"dense/{path}/{tensor}"] = value.detach().numpy().astype(np.float32)
    np.savez_compressed(d / "references" / "finetune_dense_curve.npz", **out)
    print(f"{name} MNRL through Dense: loss {curve[0]:.5f} -> {curve[-1]:.5f}")


NER_EXAMPLES = [
    ("My name is Wolfgang and I live in Berlin .".split(),
     ["O", "O", "O", "B-PER", "O", "O", "O", "O", "B-LOC", "O"]),
    ("Clara works for the United Nations in New York .".split(),
     ["B-PER", "O", "O", "O", "B-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "O"]),
    ("Angela Merkel visited Washington last Tuesday".split(),
     ["B-PER", "I-PER", "O", "B-LOC", "O", "B-MISC"]),
    ("The Volkswagen plant in Zwickau builds electric cars".split(),
     ["O", "B-ORG", "O", "O", "B-LOC", "O", "O", "O"]),
    ("Oxfordshire".split(), ["B-LOC"]),
    ("Barcelona beat Real Madrid 3-1 in the Copa del Rey final".split(),
     ["B-ORG", "O", "B-ORG", "I-ORG", "O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"]),
    ("Nobody said anything".split(), ["O", "O", "O"]),
]
NER_BATCH = 3
NER_STEPS = 12


def _aligned(word_ids, word_labels, label2id):
    """transformers' token-classification recipe (the course's tokenize_and_align_labels): a
    word's label on its first sub-token, -100 on its other sub-tokens and on special tokens."""
    out, previous = [], None
    for word in word_ids:
        out.append(-100 if word is None or word == previous else label2id[word_labels[word]])
        previous = word
    return out


def record_token_curve(name="bert-token-classification"):
    """NER_STEPS AdamW steps (CURVE_ADAMW) of the NER fixture on NER_EXAMPLES (pre-split words
    with word labels) in batches of NER_BATCH in order: transformers' fast tokenizer with
    ``is_split_into_words=True``, labels aligned by ``_aligned``, and the model's own loss
    (``BertForTokenClassification(labels=...)``: cross-entropy over the labelled tokens).
    Writes references/finetune_token_curve.npz: ``loss`` per step, ``trained``, ``ids/<batch>``
    and ``labels/<batch>`` (the aligned labels, -100 padded to the batch's longest row),
    ``words/<i>``, ``tags/<i>``, ``batch``, ``adamw/<option>``."""
    import families_text as ft
    import torch
    from transformers import AutoTokenizer, BertForTokenClassification

    d = ec.FIXTURES_ROOT / name
    with tempfile.TemporaryDirectory() as work:  # as families_text.build_bert_ner
        tok = ft.bert_tokenizer(Path(work), lowercase=False)
        ec.seed_everything()
        labels = dict(enumerate(ft.NER_LABELS))
        cfg = ft._bert_config(tok, id2label=labels, label2id={v: k for k, v in labels.items()})
        model = BertForTokenClassification(cfg).eval()  # eval: no dropout, as the ONNX graph
    ref = np.load(d / "references" / "model.npz")
    with torch.no_grad():
        logits = model(**_feed(name, ref, torch, torch.float32)).logits.numpy()
    err = np.abs(logits - ref["0/out/logits"]).max()
    if err > 1e-4:
        raise SystemExit(f"{name}: the rebuilt model's logits differ from onnxruntime's by {err}")
    fast = AutoTokenizer.from_pretrained(d)
    params = {k: p.detach().numpy() for k, p in model.named_parameters()}
    mapping = _mapping(_float_initializers(d / "onnx" / "model.onnx"), params)
    trained = sorted(n for n, m in mapping.items() if len(m) == 1)
    train = {m[0][0] for m in mapping.values() if len(m) == 1}
    for pname, p in model.named_parameters():
        p.requires_grad_(pname in train)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  **CURVE_ADAMW)
    batches = [range(i, min(i + NER_BATCH, len(NER_EXAMPLES)))
               for i in range(0, len(NER_EXAMPLES), NER_BATCH)]
    out, losses = {}, []
    for step in range(NER_STEPS):
        b = step % len(batches)
        rows = batches[b]
        feed = fast([NER_EXAMPLES[i][0] for i in rows], is_split_into_words=True,
                    padding=True, return_tensors="pt")
        aligned = [_aligned(feed.word_ids(j), NER_EXAMPLES[i][1], cfg.label2id)
                   for j, i in enumerate(rows)]
        target = torch.tensor(aligned)
        out.setdefault(f"ids/{b}", feed["input_ids"].numpy())
        out.setdefault(f"labels/{b}", target.numpy())
        loss = model(**feed, labels=target).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    for i, (words, tags) in enumerate(NER_EXAMPLES):
        out[f"words/{i}"], out[f"tags/{i}"] = np.array(words), np.array(tags)
    out.update(loss=np.array(losses, np.float32), trained=np.array(trained), batch=NER_BATCH,
               **{f"adamw/{k}": np.array(v) for k, v in CURVE_ADAMW.items()})
    np.savez_compressed(d / "references" / "finetune_token_curve.npz", **out)
    print(f"{name}: {len(trained)} of {len(mapping)} initializers train; loss "
          f"{losses[0]:.5f} -> {losses[-1]:.5f}")


def main(argv):
    if argv == ["curve"]:
        record_curve()
        record_curve(autocast=True)
        record_embedding_curves()
        record_token_curve()
        record_dense_curve()
        return 0
    if argv == ["dense"]:
        record_dense_curve()
        return 0
    for name in argv or list(FIXTURES):
        record(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
