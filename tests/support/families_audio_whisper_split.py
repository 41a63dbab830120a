"""The whisper-split fixture: the whisper fixture's tiny model (the same weights, rebuilt by
families_vision_audio._whisper) exported as many Xenova / onnx-community Whisper repos ship it,
and as optimum-onnx writes it with ``--no-post-process``: onnx/decoder_model.onnx (no past: the
prompt step, which also gives the cross-attention KV) + onnx/decoder_with_past_model.onnx (every
later step; it takes the cross-attention KV as past inputs and returns only the self-attention
presents), no decoder_model_merged.onnx. Checked here before anything is written:

- the rebuilt torch model equals the committed whisper fixture's ONNX (record_audio_pipelines);
- the split graphs' logits equal torch's step by step (the prompt through decoder_model, then a
  token a step through decoder_with_past_model, fed the presents as optimum's ORTModel feeds them).

Writes tests/fixtures/whisper-split/: the whisper fixture's config / generation / tokenizer /
preprocessor files, the three graphs, references/*.npz from onnxruntime (the first second of the
speech clips: encoder; the decoder's prompt step; two with-past steps), the transformers pipeline
cases references/pipeline_automatic-speech-recognition.json (a subset of the whisper fixture's
cases: greedy, detected language, beams, timestamps, chunked and sequential long-form, a batch),
and manifest.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_whisper_split.py

Pinned versions: requirements-export.txt (transformers 4.57.6, optimum-onnx 0.1.0, soundfile).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import families_audio_timestamped as fat  # noqa: E402
import families_vision_audio as fva  # noqa: E402

NAME = "whisper-split"
SOURCE = fva.FIXTURES / "whisper"
TASK = "automatic-speech-recognition-with-past"
SHORT = [rap.CAT_1S, rap.FOX_1S]
GRAPHS = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]


def export(model, fe, tok, tmp: Path, fx: Path) -> None:
    d = fva.save_model_dir(model, tmp, fe, tok)
    out = fva.export_main(d, tmp / "out", TASK, 18, nb_max_frames=100, no_post_process=True)
    if (out / "decoder_model_merged.onnx").exists():
        raise SystemExit("STOP: no_post_process=True still merged the decoders")
    fva.move_onnx(out, fx, {g: g for g in GRAPHS})
    for name in fat.HUB_FILES:  # the whisper fixture's own files, so both fixtures read alike
        shutil.copy(SOURCE / name, fx / name)


def graph_references(fx: Path, model, tok) -> tuple[dict, dict]:
    """encoder_model.npz, decoder_model.npz (the prompt step) and decoder_with_past_model.npz
    (two greedy steps after it) on the first second of cat and fox; logits against torch's."""
    feats = fat.features(model_fe(fx), SHORT)["input_features"]
    es = fva.session(fx / "onnx/encoder_model.onnx")
    ef = fva.cast_feeds(es, {"input_features": feats})
    eo = fva.run(es, ef)
    graphs = {"onnx/encoder_model.onnx": {"reference": fva.save_reference(fx, "onnx/encoder_model.onnx",
                                                                          [(ef, eo)])}}
    with torch.no_grad():
        t_enc = model.model.encoder(torch.from_numpy(feats)).last_hidden_state
    diffs = {"encoder last_hidden_state": rap.assert_close("encoder", t_enc, eo["last_hidden_state"])}
    first = fva.session(fx / "onnx/decoder_model.onnx")
    ids = np.array([fat.prompt(tok, timestamps=True)] * len(SHORT), np.int64)
    feeds = fva.cast_feeds(first, {"input_ids": ids, "encoder_hidden_states": eo["last_hidden_state"]})
    outs = fva.run(first, feeds)
    graphs["onnx/decoder_model.onnx"] = {"reference": fva.save_reference(fx, "onnx/decoder_model.onnx",
                                                                         [(feeds, outs)])}
    past = fva.session(fx / "onnx/decoder_with_past_model.onnx")
    steps, cross = [], {k.replace("present", "past_key_values", 1): v for k, v in outs.items()
                        if ".encoder." in k}
    fed, last = [ids], outs
    for _ in range(2):
        token = last["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        fed.append(token)
        selfs = {k.replace("present", "past_key_values", 1): v for k, v in last.items()
                 if k.startswith("present") and ".decoder." in k}
        step = fva.cast_feeds(past, {"input_ids": token, **selfs, **cross})
        last = fva.run(past, step)
        steps.append((step, last))
    graphs["onnx/decoder_with_past_model.onnx"] = {
        "reference": fva.save_reference(fx, "onnx/decoder_with_past_model.onnx", steps)}
    with torch.no_grad():
        t = model(encoder_outputs=(torch.from_numpy(eo["last_hidden_state"]),),
                  decoder_input_ids=torch.from_numpy(np.concatenate(fed, axis=1))).logits
    ort = np.concatenate([outs["logits"]] + [o["logits"] for _, o in steps], axis=1)
    diffs["decoder logits (prompt step, then 2 with-past steps)"] = rap.assert_close("decoder logits", t, ort)
    return graphs, diffs


def model_fe(fx: Path):
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor.from_pretrained(fx)


EN = rap.EN
NOTES = [
    "same tiny model as the whisper fixture (same weights, sdpa attention), exported without the merge: the "
    "cases are a subset of the whisper fixture's, recorded again on the rebuilt torch model",
    "token_ids / generate_calls: as in the whisper fixture's record (what model.generate returned inside the "
    "pipeline call)",
]


def pipeline_cases(p, model, tok) -> list[dict]:
    spy = rap.WhisperSpy(model, tok)

    def run(*a, **k):
        return rap.run_case(p, *a, hooks=spy, **k)

    cases = [
        run("greedy_en_transcribe", SHORT, {"generate_kwargs": EN}),
        run("detect_language", SHORT, {"generate_kwargs": rap.GREEDY}),
        run("timestamps", SHORT, {"generate_kwargs": EN, "return_timestamps": True}),
        run("num_beams_2", SHORT, {"generate_kwargs": {**EN, "num_beams": 2}}),
        run("chunked_stride", [rap.FOX], {"generate_kwargs": EN, "chunk_length_s": 1.0, "stride_length_s": 0.25}),
        run("longform_timestamps", [rap.CAT, rap.FOX], {"generate_kwargs": EN, "return_timestamps": True},
            note="sequential long-form decoding over the whole clip (1.7 s and 3.3 s, > n_samples)"),
    ]
    p.tokenizer.pad_token_id = model.config.eos_token_id
    setup = f"pipe.tokenizer.pad_token_id = model.config.eos_token_id ({model.config.eos_token_id}, <|endoftext|>)"
    cases.append(rap.compare(cases, run("batch_short", SHORT, {"generate_kwargs": EN}, batch_size=2, setup=setup),
                             "greedy_en_transcribe"))
    spy.close()
    for c in cases:
        c["generate_kwargs"] = c["call_kwargs"].get("generate_kwargs")
    return cases


def main() -> int:
    transformers.logging.set_verbosity_error()
    fx = fva.fresh_fixture(NAME)
    tmp = fva.tmpdir()
    try:
        model, fe, tok = fva._whisper(tmp)
        model.eval()
        print(f"[{NAME}] the rebuilt model against the whisper fixture's ONNX ...", flush=True)
        rap.check_configs("whisper", model)
        same_weights = rap.check_whisper_onnx(SOURCE, model)
        print(f"[{NAME}] exporting without the decoder merge ...", flush=True)
        export(model, fe, tok, tmp, fx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rap.check_configs(NAME, model)
    graphs, diffs = graph_references(fx, model, tok)
    print(f"[{NAME}] pipeline cases ...", flush=True)
    p = rap.pipeline_for(NAME, "automatic-speech-recognition", model)
    cases = pipeline_cases(p, model, p.tokenizer)
    rap.write_record(NAME, "automatic-speech-recognition", cases, notes=NOTES, torch_vs_onnx_max_abs_diff=diffs)
    fva.write_manifest(
        fx, family="whisper", architecture="WhisperForConditionalGeneration", task=TASK, opset=18, graphs=graphs,
        exporter=f"{fva.OPTIMUM_ONNX} main_export(no_post_process=True): decoder_model + decoder_with_past_model",
        notes=fva.WHISPER_NOTES[:2] + [
            "same weights as fixture 'whisper' (families_vision_audio._whisper), attn_implementation='sdpa'",
            "decoder_model.onnx: input_ids + encoder_hidden_states -> logits, present.{i}.decoder.* and "
            "present.{i}.encoder.* (the cross-attention KV); decoder_with_past_model.onnx: input_ids + "
            "past_key_values.{i}.decoder.* / .encoder.* -> logits, present.{i}.decoder.* only",
            f"rebuilt torch model vs the whisper fixture's ONNX: {same_weights}"],
        inputs_from="the first 16000 samples of speech/cat_16k.wav and speech/fox_16k.wav through "
                    "preprocessor_config.json (WhisperFeatureExtractor)")
    fva.verify(fx)
    size = sum(f.stat().st_size for f in fx.rglob("*") if f.is_file())
    print(f"[{NAME}] {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
