"""vision-encoder-decoder-split: the vision-encoder-decoder fixture's model (the same seeded
weights: families_vision_audio.vision_encoder_decoder_model) exported as optimum-onnx writes it
before its merge (decoder_model.onnx + decoder_with_past_model.onnx, no
decoder_model_merged.onnx), as optimum's image-to-text exports ship without post-processing.

Checked before anything is written: the encoder's outputs on the fixture's images equal the
vision-encoder-decoder fixture's recorded ones within 1e-6 (the same weights through the same
exporter), and the split pair's greedy logits over 3 steps equal the merged decoder's recorded
steps within 1e-5. So the vision-encoder-decoder fixture's transformers pipeline record
(references/pipeline_image-to-text.json) is this fixture's reference too:
tests/test_pipelines_image_to_text.py runs the split pair against it. Writes
tests/fixtures/vision-encoder-decoder-split/: hub files, onnx/encoder_model.onnx + the pair,
references/*.npz (onnxruntime: the encoder, the first step, 3 with-past steps).

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_image_to_text_split.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import export_common as ec  # noqa: E402
import families_vision_audio as fva  # noqa: E402

NAME = "vision-encoder-decoder-split"
MERGED = fva.FIXTURES / "vision-encoder-decoder"
STEPS = 3


def split_steps(fx: Path, hidden: np.ndarray, start: int) -> tuple[list, list]:
    """onnxruntime's greedy steps: decoder_model on the start token, then decoder_with_past_model
    (its cross-attention pasts from the first step's presents)."""
    first = fva.session(fx / "onnx/decoder_model.onnx")
    feeds = fva.cast_feeds(first, {"input_ids": np.full((len(hidden), 1), start, np.int64),
                                   "encoder_hidden_states": hidden})
    out = fva.run(first, feeds)
    past = fva.session(fx / "onnx/decoder_with_past_model.onnx")
    cross = {k.replace("present", "past_key_values", 1): v for k, v in out.items()
             if ".encoder." in k}
    steps, last = [], out
    for _ in range(STEPS):
        new = {"input_ids": last["logits"][:, -1].argmax(-1)[:, None].astype(np.int64),
               "encoder_hidden_states": hidden, **cross}
        new.update({k.replace("present", "past_key_values", 1): v for k, v in last.items()
                    if k.startswith("present") and ".encoder." not in k})
        new = fva.cast_feeds(past, new)
        last = fva.run(past, new)
        steps.append((new, last))
    return [(feeds, out)], steps


def check_same_model(encoder_out: dict, first: list, steps: list) -> None:
    (_, merged_enc), = ec.load_reference(MERGED / "references/encoder_model.npz")
    worst = np.abs(encoder_out["last_hidden_state"] - merged_enc["last_hidden_state"]).max()
    merged = ec.load_reference(MERGED / "references/decoder_model_merged.npz")
    ours = [o["logits"] for _, o in first + steps]
    diffs = [np.abs(a - o["logits"]).max() for a, (_, o) in zip(ours, merged)]
    print(f"encoder vs the merged fixture's {worst:.2e}, logits per step {diffs}")
    if len(diffs) != STEPS + 1 or not worst <= 1e-6 or not max(diffs) <= 1e-5:
        raise SystemExit("STOP: the rebuilt model differs from the vision-encoder-decoder fixture")


def main() -> int:
    fx = fva.fresh_fixture(NAME)
    tmp = fva.tmpdir()
    model, proc, tok = fva.vision_encoder_decoder_model(tmp)
    d = fva.save_model_dir(model, tmp, proc, tok)
    out = fva.export_main(d, tmp / "out", "image-to-text-with-past", 18)
    fva.move_onnx(out, fx, {n: n for n in ("encoder_model.onnx", "decoder_model.onnx",
                                           "decoder_with_past_model.onnx")})
    fva.copy_hub_files(d, fx)
    images = fva.write_images(fx)
    es = fva.session(fx / "onnx/encoder_model.onnx")
    ef = fva.cast_feeds(es, {"pixel_values": proc(images=images, return_tensors="np")["pixel_values"]})
    eo = fva.run(es, ef)
    first, steps = split_steps(fx, eo["last_hidden_state"], model.config.decoder_start_token_id)
    check_same_model(eo, first, steps)
    graphs = {}
    for graph, recorded in (("onnx/encoder_model.onnx", [(ef, eo)]), ("onnx/decoder_model.onnx", first),
                            ("onnx/decoder_with_past_model.onnx", steps)):
        graphs[graph] = {"reference": fva.save_reference(fx, graph, recorded)}
    fva.write_manifest(fx, family="vision-encoder-decoder", architecture="VisionEncoderDecoderModel",
                       task="image-to-text-with-past", opset=18, graphs=graphs,
                       notes=["vision-encoder-decoder's weights, the decoder split as optimum exports it",
                              "pipeline reference: ../vision-encoder-decoder/references/pipeline_image-to-text.json"])
    shutil.rmtree(tmp)
    ec.verify_fixture(fx)
    print(sorted(p.name for p in (fx / "onnx").iterdir()),
          f"{sum(f.stat().st_size for f in fx.rglob('*') if f.is_file()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
