"""The whisper-timestamped-split fixture: the whisper-timestamped fixture's model (the whisper
fixture's weights, eager attention, rebuilt by families_vision_audio._whisper) exported as a split
pair with the decoder's cross-attentions as outputs: families_audio_timestamped.py's custom ONNX
configs with optimum's ``no_post_process=True``, so onnx/decoder_model.onnx (the prompt step) and
onnx/decoder_with_past_model.onnx (every later step) both output ``cross_attentions.{layer}``, and
there is no decoder_model_merged.onnx. Checked before anything is written: the rebuilt model
equals the whisper fixture's ONNX, and the split graphs' logits equal torch's step by step
(families_audio_whisper_split.graph_references).

Its word-timestamp reference is whisper-timestamped's pipeline record (transformers on this same
torch model): tests/test_whisper_split_words.py runs those cases on this pair. Writes
tests/fixtures/whisper-timestamped-split/: the whisper fixture's hub files, the three graphs,
references/*.npz from onnxruntime (encoder; the decoder's prompt step; two with-past steps), and
manifest.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_timestamped_split.py

Pinned versions: requirements-export.txt (transformers 4.57.6, optimum-onnx 0.1.0, soundfile).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import transformers  # noqa: E402

import families_audio_timestamped as fat  # noqa: E402
import families_audio_whisper_split as fws  # noqa: E402
import families_vision_audio as fva  # noqa: E402

NAME = "whisper-timestamped-split"
SOURCE = fva.FIXTURES / "whisper"


def export(model, fe, tok, tmp: Path, fx: Path) -> None:
    d = fva.save_model_dir(model, tmp, fe, tok)
    config = fat.timestamped_config_class()(model.config, task="automatic-speech-recognition", use_past=True,
                                            preprocessors=[fe, tok])
    custom = {"encoder_model": config.with_behavior("encoder"),
              "decoder_model": config.with_behavior("decoder", use_past=True, use_past_in_inputs=False),
              "decoder_with_past_model": config.with_behavior("decoder", use_past=True, use_past_in_inputs=True)}
    out = fva.export_main(d, tmp / "out", fat.TASK, 18, nb_max_frames=100, model_kwargs={"output_attentions": True},
                          custom_onnx_configs=custom, no_post_process=True)
    if (out / "decoder_model_merged.onnx").exists():
        raise SystemExit("STOP: no_post_process=True still merged the decoders")
    fva.move_onnx(out, fx, {g: g for g in fws.GRAPHS})
    for name in fat.HUB_FILES:  # the whisper fixture's own files, so every Whisper fixture reads alike
        shutil.copy(SOURCE / name, fx / name)


def main() -> int:
    transformers.logging.set_verbosity_error()
    fx = fva.fresh_fixture(NAME)
    tmp = fva.tmpdir()
    try:
        model, fe, tok = fva._whisper(tmp, attn="eager")
        model.eval()
        print(f"[{NAME}] the rebuilt model against the whisper fixture's ONNX ...", flush=True)
        rap.check_configs("whisper", model)
        same_weights = rap.check_whisper_onnx(SOURCE, model)
        print(f"[{NAME}] exporting the split pair with cross-attention outputs ...", flush=True)
        export(model, fe, tok, tmp, fx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rap.check_configs(NAME, model)
    graphs, diffs = fws.graph_references(fx, model, tok)
    fva.write_manifest(
        fx, family="whisper", architecture="WhisperForConditionalGeneration", task=fat.TASK, opset=18,
        graphs=graphs,
        exporter=f"{fva.OPTIMUM_ONNX} main_export(no_post_process=True, model_kwargs={{'output_attentions': True}}, "
                 "custom_onnx_configs: WhisperOnnxConfig + decoder outputs cross_attentions.{i})",
        notes=fva.WHISPER_NOTES[:2] + [
            "same weights as fixture 'whisper' (families_vision_audio._whisper), attn_implementation='eager', "
            "as fixture 'whisper-timestamped'",
            "decoder_model.onnx and decoder_with_past_model.onnx also output cross_attentions.{layer} [batch, "
            "heads, decoder_sequence_length, encoder_sequence_length]: the cross-attention's softmax probabilities",
            "pipeline reference: whisper-timestamped's references/pipeline_automatic-speech-recognition.json",
            f"rebuilt torch model vs the whisper fixture's ONNX: {same_weights}",
            f"torch vs onnxruntime: {diffs}"],
        inputs_from="the first 16000 samples of speech/cat_16k.wav and speech/fox_16k.wav through "
                    "preprocessor_config.json (WhisperFeatureExtractor)")
    fva.verify(fx)
    size = sum(f.stat().st_size for f in fx.rglob("*") if f.is_file())
    print(f"[{NAME}] {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
