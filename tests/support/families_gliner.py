"""Tiny random GLiNER fixtures for the zero-shot-entity-recognition pipeline.

Usage (the gliner environment, tests/support/requirements-gliner.txt; no network, no Hub):

    /work/venvs/gliner/bin/python tests/support/families_gliner.py               # both
    /work/venvs/gliner/bin/python tests/support/families_gliner.py gliner-span   # one of them

Each fixture is a GLiNER model built by the gliner package itself (``GLiNER.from_config``) around a
tiny random BERT backbone (hidden 32, 2 layers; its config.json is written to a scratch folder and
passed as ``model_name``, with the tokenizer files of the committed ``tests/fixtures/bert``). gliner
adds its ``<<ENT>>``/``<<SEP>>`` tokens to the tokenizer and resizes the embeddings, as it does for
a real backbone. The defaults of a real GLiNER config are kept (max_width 12, one bidirectional LSTM
layer, subtoken_pooling "first", the whitespace words splitter):

    gliner-span   span_mode "markerV0" (UniEncoderSpanGLiNER): logits [B, words, 12, labels]
    gliner-token  span_mode "token_level" (UniEncoderTokenGLiNER): logits [B, words, labels, 3]

Export is gliner's own ``export_to_onnx`` (torch.onnx, opset 19), laid out as the onnx-community
repos are: gliner_config.json and the tokenizer files at the root, the graph in onnx/model.onnx.

Random weights give every span (word) nearly the same score for a label, near 0.5: a part common
to all representations dominates and the logits are small. ``_spread_scores`` changes weights only:
the bias of the head's last layer (span_rep_layer's out_project for spans, the scorer's out_mlp for
tokens) loses its mean output over 24 CORPUS lines, and the scoring layer (prompt_rep_layer's last
Linear for spans, out_mlp's last for tokens) is scaled by ``LOGIT_SCALE`` (logit std ~2): the scores
then spread over (0, 1), so threshold 0.5 keeps some spans and drops others (on gliner-span,
flat_ner, multi_label and the thresholds 0.3/0.8 each change the result; on gliner-token,
flat_ner and threshold 0.3 do).

References:
    references/model.npz      onnxruntime outputs of onnx/model.onnx on a batch made by gliner's own
                              collator (tests/test_models.py checks the graph on JAX and MLX)
    references/pipeline_zero-shot-entity-recognition.json
                              ``GLiNER.predict_entities(text, labels, ...)`` on the PyTorch model,
                              one text at a time, for several thresholds, flat_ner, multi_label and
                              label sets. The generator refuses a call whose decoded spans change
                              when the logits move by NOISE (1e-4), so the recorded spans cannot
                              flip on float noise; ``margin`` is each call's smallest distance of
                              a candidate score from its threshold.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export_common as ec  # noqa: E402

TASK = "zero-shot-entity-recognition"
EXPORTER = "gliner 0.2.29 export_to_onnx (torch.onnx, dynamo=False)"
OPSET = 19
LOGIT_SCALE = {"gliner-span": 400.0, "gliner-token": 60.0}
NOISE = 1e-4  # logits; see _stability
SPAN_MODES = {"gliner-span": "markerV0", "gliner-token": "token_level"}
BACKBONE = "tiny-random-bert (tests/support/families_gliner.py)"

TEXTS = [
    "My name is Sarah and I live in London.",
    "Clara works for the United Nations in New York.",
    "Dr. Alice Brown teaches physics at the University of Cambridge.",
    "John Smith visited Paris with his friend Maria last summer; the train from Madrid "
    "to Lisbon was late again, but the well-known museum opened in 1990.",
    "Amazon, Google and Microsoft are large technology companies.",
]
LABELS = ["person", "location", "organization"]
CALLS = [
    (TEXTS, {"labels": LABELS}),
    (TEXTS, {"labels": LABELS, "flat_ner": False}),
    (TEXTS, {"labels": LABELS, "flat_ner": False, "multi_label": True}),
    (TEXTS, {"labels": LABELS, "multi_label": True}),
    (TEXTS, {"labels": LABELS, "threshold": 0.3}),
    (TEXTS, {"labels": LABELS, "threshold": 0.8}),
    (TEXTS[1:3], {"labels": ["city", "date", "sports team", "university"]}),
    (TEXTS[3:], {"labels": ["person"]}),
]

FIXTURES = {name: None for name in SPAN_MODES}


def _backbone(work: Path) -> Path:
    """A tiny BERT config + the committed bert tokenizer, in a folder gliner loads by path."""
    from transformers import BertConfig

    folder = work / "backbone"
    folder.mkdir()
    src = ec.FIXTURES_ROOT / "bert"
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copyfile(src / f, folder / f)
    BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=512).save_pretrained(folder)
    return folder


def _build_model(name: str, backbone: Path):
    from gliner import GLiNER

    ec.seed_everything()
    model = GLiNER.from_config(
        {"model_name": str(backbone), "hidden_size": 32, "span_mode": SPAN_MODES[name],
         "dropout": 0.0, "max_len": 384},
        backbone_from_pretrained=False, load_tokenizer=True)
    model.eval()
    _spread_scores(model, name)
    return model


def _spread_scores(model, name: str) -> None:
    """Random weights give every span (token) nearly the same score for a label: a common part
    of the representations dominates. Center the last layer of the span (token) head on the
    CORPUS, so what differs between spans is what the scores see, then scale the scoring layer by
    LOGIT_SCALE. Only weights change; the graph and the gliner code are untouched."""
    import torch

    head = model.model
    centered = (head.span_rep_layer.span_rep_layer.out_project[-1] if name == "gliner-span"
                else head.scorer.out_mlp[-1])
    scaled = head.prompt_rep_layer[-1] if name == "gliner-span" else head.scorer.out_mlp[-1]
    seen = []
    hook = centered.register_forward_hook(lambda mod, inp, out: seen.append(out.reshape(
        -1, out.shape[-1])))
    with torch.no_grad():
        for text in ec.CORPUS[:24]:
            model.predict_entities(text, LABELS)
        hook.remove()
        centered.bias.sub_(torch.cat(seen).mean(0))
        scaled.weight.mul_(LOGIT_SCALE[name])
        scaled.bias.mul_(LOGIT_SCALE[name])


def _export(model, d: Path, work: Path) -> None:
    out = work / "export"
    model.export_to_onnx(out, opset=OPSET)
    (d / "onnx").mkdir()
    shutil.move(out / "model.onnx", d / "onnx" / "model.onnx")
    for f in out.iterdir():
        if f.is_file():
            shutil.copyfile(f, d / f.name)
    # model_name is the scratch path of the backbone: name what it was instead. gliner reads it
    # only when encoder_config is absent, and the saved config carries encoder_config in full.
    cfg = json.loads((d / "gliner_config.json").read_text())
    cfg["model_name"] = cfg["encoder_config"]["_name_or_path"] = BACKBONE
    (d / "gliner_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _graph_reference(model, d: Path) -> None:
    """ORT outputs on one batch of two texts with different word counts, made by gliner's
    collator exactly as ``inference`` makes it."""
    prepared = model.prepare_batch([TEXTS[0], TEXTS[2]], LABELS)
    batch = model.collate_batch(prepared["input_x"], prepared["entity_types"])
    sess = ec.ort_session(d / "onnx" / "model.onnx")
    feeds = {}
    for i in sess.get_inputs():
        value = batch[i.name].numpy()
        feeds[i.name] = value.astype(np.int64) if i.type == "tensor(int64)" else value
    steps = ec.encoder_reference(d / "onnx" / "model.onnx", feeds)
    ec.save_reference(d / "references" / "model.npz", steps)
    ec.write_manifest(d, "gliner", type(model).__name__, TASK, OPSET,
                      {"onnx/model.onnx": {"reference": "references/model.npz",
                                           "static_inputs": []}}, exporter=EXPORTER)


def _decode(model, batch, logits, kwargs):
    spans = model.decoder.decode(
        batch["tokens"], batch["id_to_classes"], logits, flat_ner=kwargs.get("flat_ner", True),
        threshold=kwargs.get("threshold", 0.5), multi_label=kwargs.get("multi_label", False))
    return [(s.start, s.end, s.entity_type) for s in spans[0]]


def _stability(model, text, kwargs) -> float:
    """The smallest distance of a candidate score from the threshold; and a SystemExit unless the
    decoded spans (labels, order) stay the same when the logits move by NOISE: float noise of
    another runtime (~1e-6) then cannot change the recorded output."""
    import torch

    prepared = model.prepare_batch([text], kwargs["labels"])
    batch = model.collate_batch(prepared["input_x"], prepared["entity_types"])
    logits = model.run_batch(batch, threshold=kwargs.get("threshold", 0.5)).logits
    want = _decode(model, batch, logits, kwargs)
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        noisy = logits + NOISE * torch.randn(logits.shape, generator=gen)
        if _decode(model, batch, noisy, kwargs) != want:
            raise SystemExit(f"{text!r} {kwargs}: the spans change under {NOISE} logit noise; "
                             "change the texts, the labels or LOGIT_SCALE")
    words = len(prepared["tokens"][0])
    probs = torch.sigmoid(logits[0, :words]).double().numpy()
    if model.config.span_mode != "token_level":  # only spans inside the text are candidates
        k = np.arange(probs.shape[1])
        probs = probs[np.arange(words)[:, None] + k[None, :] < words]
    return float(np.abs(probs - kwargs.get("threshold", 0.5)).min())


def _pipeline_reference(model, d: Path) -> None:
    calls = []
    for texts, kwargs in CALLS:
        outputs = [model.predict_entities(text, **kwargs) for text in texts]
        margin = min(_stability(model, text, kwargs) for text in texts)
        calls.append({"inputs": texts, "call_kwargs": kwargs, "outputs": outputs,
                      "margin": margin})
    if not any(o for c in calls for o in c["outputs"]):
        raise SystemExit(f"{d.name}: no entity in any reference; raise LOGIT_SCALE")
    path = d / "references" / f"pipeline_{TASK}.json"
    ec.save_pipeline_record(path, TASK, calls, peer="gliner 0.2.29 GLiNER.predict_entities "
                            "(PyTorch model)")
    record = json.loads(path.read_text())  # keep each call's margin next to it
    for entry, call in zip(record["calls"], calls):
        entry["margin"] = call["margin"]
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def build(name: str) -> None:
    d = ec.reset_dir(ec.FIXTURES_ROOT / name)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        model = _build_model(name, _backbone(work))
        _export(model, d, work)
        _graph_reference(model, d)
        _pipeline_reference(model, d)
    ec.verify_fixture(d)


def main(argv: list[str]) -> int:
    return ec.run_fixtures(__file__, FIXTURES, build, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
