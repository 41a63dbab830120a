"""t5-split: the t5 fixture's tiny model (the same weights: families_text._t5) exported as optimum-onnx
writes it before its merge (decoder_model.onnx + decoder_with_past_model.onnx, no
decoder_model_merged.onnx), as many Xenova / onnx-community text2text repos ship it. Checked: the
rebuilt model's transformers pipeline outputs equal the t5 fixture's record (same weights). Writes
tests/fixtures/t5-split/: hub files, onnx/encoder_model.onnx + the split pair, references/*.npz
(onnxruntime: the encoder, the decoder's first step, three with-past steps on SEQ2SEQ_TEXTS) and
references/pipeline_text2text-generation.json (transformers' pipeline on the same calls as t5's).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_text_split.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import export_common as ec  # noqa: E402
import families_text as ft  # noqa: E402

NAME = "t5-split"
TASK = "text2text-generation-with-past"


def split_references(d: Path, ids: np.ndarray, mask: np.ndarray, start: int, steps: int = 3) -> dict:
    enc = ec.encoder_reference(d / "onnx/encoder_model.onnx", {"input_ids": ids, "attention_mask": mask})
    hidden = enc[0][1]["last_hidden_state"]
    first = ec.ort_session(d / "onnx/decoder_model.onnx")
    names = {i.name for i in first.get_inputs()}
    feeds = {"input_ids": np.full((len(ids), 1), start, np.int64), "encoder_hidden_states": hidden,
             "encoder_attention_mask": mask}
    feeds = {k: v for k, v in feeds.items() if k in names}
    out = ec._run(first, feeds)
    past = ec.ort_session(d / "onnx/decoder_with_past_model.onnx")
    past_names = [i.name for i in past.get_inputs()]
    cross = {"past_key_values." + k[len("present."):]: v for k, v in out.items() if ".encoder." in k}
    with_past, last = [], out
    for _ in range(steps):
        new = {"input_ids": last["logits"][:, -1].argmax(-1).astype(np.int64)[:, None],
               "encoder_attention_mask": mask, "encoder_hidden_states": hidden}
        for n in past_names:
            if n.startswith("past_key_values."):
                new[n] = cross[n] if ".encoder." in n else last["present." + n[len("past_key_values."):]]
        new = {k: v for k, v in new.items() if k in past_names}
        last = ec._run(past, new)
        with_past.append((new, last))
    graphs = {}
    for stem, recorded in (("encoder_model", enc), ("decoder_model", [(feeds, out)]),
                           ("decoder_with_past_model", with_past)):
        ec.save_reference(d / f"references/{stem}.npz", recorded)
        graphs[f"onnx/{stem}.onnx"] = {"reference": f"references/{stem}.npz", "static_inputs": []}
    return graphs


def main() -> int:
    d = ec.reset_dir(ec.FIXTURES_ROOT / NAME)
    with tempfile.TemporaryDirectory() as work:
        model, tok = ft._t5(Path(work))
        model.eval()
        ft._save_hub_files(d, model, tok, generation=True)
        ec.export_optimum(model, tok, TASK, d / "onnx", 18)
        ft._drop(d / "onnx", ["decoder_model_merged.onnx"])
        enc = tok(ft.SEQ2SEQ_TEXTS, padding=True, return_tensors="np")
        ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
        graphs = split_references(d, ids, mask, model.config.decoder_start_token_id)
        ec.write_manifest(d, "t5", model.__class__.__name__, TASK, 18, graphs)
        ft._record_calls(d, "text2text-generation", model, tok, [(ft.SEQ2SEQ_TEXTS, dict(ft.GEN_KW))])
    ours = json.loads((d / "references/pipeline_text2text-generation.json").read_text())
    theirs = json.loads((ec.FIXTURES_ROOT / "t5/references/pipeline_text2text-generation.json").read_text())
    if ours["calls"][0]["outputs"] != theirs["calls"][0]["outputs"]:
        raise SystemExit("STOP: the rebuilt t5 differs from the t5 fixture's record")
    ec.verify_fixture(d)
    print(sorted(p.name for p in (d / "onnx").iterdir()),
          f"{sum(f.stat().st_size for f in d.rglob('*') if f.is_file()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
