"""The whisper-timestamped fixture: the whisper fixture's tiny model (the same weights, rebuilt by
families_vision_audio._whisper) exported with its decoder's cross-attentions as outputs, as the
transformers.js / onnx-community "timestamped" Whisper exports are made for word timestamps.

optimum-onnx 0.1.0 has no Whisper option for it; its documented way is what transformers.js's
conversion script does: ``model_kwargs={"output_attentions": True}`` (eager attention) and custom
ONNX configs whose decoder outputs add ``cross_attentions.{layer}`` [batch, heads, decoder_len,
encoder_len] (the attention probabilities, softmax applied). The merged decoder has them in both
branches. Checked here before anything is written:

- the rebuilt torch model equals the committed whisper fixture's ONNX (record_audio_pipelines);
- the export's encoder, logits and cross-attentions equal torch's ``output_attentions=True``
  ones step by step (prompt step, then a token a step, fed the tokens transformers generated).

Writes tests/fixtures/whisper-timestamped/: the whisper fixture's config / generation / tokenizer /
preprocessor files, onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx, references/*.npz
from onnxruntime (the graphs' inputs and outputs on the first second of the speech clips),
references/token_timestamps.npz (onnxruntime's cross-attentions of each step next to transformers'
``generate(return_token_timestamps=True)`` for the same tokens), the transformers pipeline cases
references/pipeline_automatic-speech-recognition.json, and manifest.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_timestamped.py

Pinned versions: requirements-export.txt (transformers 4.57.6, optimum-onnx 0.1.0, soundfile).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import families_vision_audio as fva  # noqa: E402

NAME = "whisper-timestamped"
SOURCE = fva.FIXTURES / "whisper"
HUB_FILES = ["added_tokens.json", "config.json", "generation_config.json", "merges.txt",
             "preprocessor_config.json", "special_tokens_map.json", "tokenizer.json",
             "tokenizer_config.json", "vocab.json"]
TASK = "automatic-speech-recognition-with-past"
ATTENTION_ATOL = 1e-5  # probabilities in [0, 1]: torch vs onnxruntime float32 kernels, ~1e-7 seen
SHORT = [rap.CAT_1S, rap.FOX_1S]


def timestamped_config_class():
    """WhisperOnnxConfig with the decoder's cross-attentions as outputs (transformers.js's
    scripts/extra/whisper.py)."""
    from optimum.exporters.onnx.base import ConfigBehavior
    from optimum.exporters.onnx.model_configs import WhisperOnnxConfig

    class TimestampedWhisperOnnxConfig(WhisperOnnxConfig):
        @property
        def outputs(self):
            outputs = super().outputs
            if self._behavior is ConfigBehavior.DECODER:
                for i in range(self._config.decoder_layers):
                    outputs[f"cross_attentions.{i}"] = {0: "batch_size", 2: "decoder_sequence_length",
                                                        3: "encoder_sequence_length_out"}
            return outputs

    return TimestampedWhisperOnnxConfig


def export(model, fe, tok, tmp: Path, fx: Path) -> None:
    d = fva.save_model_dir(model, tmp, fe, tok)
    config = timestamped_config_class()(model.config, task="automatic-speech-recognition", use_past=True,
                                        preprocessors=[fe, tok])
    custom = {"encoder_model": config.with_behavior("encoder"),
              "decoder_model": config.with_behavior("decoder", use_past=True, use_past_in_inputs=False),
              "decoder_with_past_model": config.with_behavior("decoder", use_past=True, use_past_in_inputs=True)}
    out = fva.export_main(d, tmp / "out", TASK, 18, nb_max_frames=100, model_kwargs={"output_attentions": True},
                          custom_onnx_configs=custom)
    fva.move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                            "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    for name in HUB_FILES:  # the whisper fixture's own files, so both fixtures read alike
        shutil.copy(SOURCE / name, fx / name)


# ----------------------------------------------------------------------------------------------
# onnxruntime on the graphs, against torch
# ----------------------------------------------------------------------------------------------


def features(fe, entries) -> dict:
    """The pipeline's short-form features (attention_mask too: generate's num_frames)."""
    clips = [rap.load_audio(e) for e in entries]
    return fe(clips, sampling_rate=rap.SR, return_tensors="np", return_attention_mask=True)


def prompt(tok, timestamps: bool) -> list[int]:
    tid = tok.convert_tokens_to_ids
    ids = [tid("<|startoftranscript|>"), tid("<|en|>"), tid("<|transcribe|>")]
    return ids if timestamps else ids + [tid("<|notimestamps|>")]


def teacher_forced(fx: Path, encoder_states: np.ndarray, ids: np.ndarray, n_prompt: int) -> list[tuple]:
    """The merged decoder over ``ids`` [batch, n] as generate runs it: the prompt in one step, then
    one token a step with the cache; the last token is never fed (nothing comes after it)."""
    sess = fva.session(fx / "onnx/decoder_model_merged.onnx")
    feeds = {"input_ids": ids[:, :n_prompt], "encoder_hidden_states": encoder_states,
             "use_cache_branch": np.array([False]), **fva.empty_past(sess, ids.shape[0])}
    steps = []
    for k in range(n_prompt, ids.shape[1]):  # k: the next token to feed
        feeds = fva.cast_feeds(sess, feeds)
        outs = fva.run(sess, feeds)
        steps.append((feeds, outs))
        if k == ids.shape[1] - 1:
            break
        new = dict(feeds, input_ids=ids[:, k:k + 1], use_cache_branch=np.array([True]))
        for name, val in outs.items():
            # the cache branch's encoder presents are placeholders: keep the prompt step's
            if name.startswith("present") and not (len(steps) > 1 and ".encoder." in name):
                new[name.replace("present", "past_key_values", 1)] = val
        feeds = new
    return steps


def stacked_cross_attentions(steps: list[tuple], layers: int) -> list[np.ndarray]:
    return [np.concatenate([outs[f"cross_attentions.{i}"] for _, outs in steps], axis=2) for i in range(layers)]


def encoder_states(fx: Path, input_features: np.ndarray) -> np.ndarray:
    sess = fva.session(fx / "onnx/encoder_model.onnx")
    return fva.run(sess, fva.cast_feeds(sess, {"input_features": input_features}))["last_hidden_state"]


def graph_references(fx: Path, model, fe, tok) -> tuple[dict, dict]:
    """encoder_model.npz and decoder_model_merged.npz (prompt step + 1 cache step, greedy on the
    logits) on the first second of cat and fox; the encoder, logits and cross-attentions of every
    step against torch's."""
    feats = features(fe, SHORT)["input_features"]
    es = fva.session(fx / "onnx/encoder_model.onnx")
    ef = fva.cast_feeds(es, {"input_features": feats})
    eo = fva.run(es, ef)
    graphs = {"onnx/encoder_model.onnx": {"reference": fva.save_reference(fx, "onnx/encoder_model.onnx", [(ef, eo)])}}
    with torch.no_grad():
        t_enc = model.model.encoder(torch.from_numpy(feats)).last_hidden_state
    diffs = {"encoder last_hidden_state": rap.assert_close("encoder", t_enc, eo["last_hidden_state"])}
    ds = fva.session(fx / "onnx/decoder_model_merged.onnx")
    ids = np.array([prompt(tok, timestamps=True)] * len(SHORT), np.int64)
    first = {"input_ids": ids, "encoder_hidden_states": eo["last_hidden_state"],
             "use_cache_branch": np.array([False]), **fva.empty_past(ds, len(SHORT))}
    steps = fva.decoder_steps(ds, first, 1)  # both If branches; one step keeps the file small
    graphs["onnx/decoder_model_merged.onnx"] = {
        "reference": fva.save_reference(fx, "onnx/decoder_model_merged.onnx", steps),
        "static_inputs": ["use_cache_branch"]}
    fed = np.concatenate([f["input_ids"] for f, _ in steps], axis=1)
    with torch.no_grad():
        t = model(encoder_outputs=(torch.from_numpy(eo["last_hidden_state"]),),
                  decoder_input_ids=torch.from_numpy(fed), output_attentions=True)
    diffs["decoder logits"] = rap.assert_close("decoder logits", t.logits, np.concatenate(
        [o["logits"] for _, o in steps], axis=1))
    for i, ort in enumerate(stacked_cross_attentions(steps, model.config.decoder_layers)):
        diffs[f"cross_attentions.{i}"] = attention_close(f"cross_attentions.{i}", t.cross_attentions[i], ort)
    return graphs, diffs


def attention_close(name: str, torch_out, ort_out) -> float:
    diff = float(np.abs(torch_out.detach().numpy() - ort_out).max())
    if not diff <= ATTENTION_ATOL:
        raise SystemExit(f"STOP: {name} of the export differs from torch's output_attentions: max |diff| {diff}")
    print(f"  torch vs onnx {name}: max |diff| {diff:.2e}")
    return diff


# ----------------------------------------------------------------------------------------------
# What generate hands the DTW
# ----------------------------------------------------------------------------------------------


class AlignmentSpy:
    """Wraps the model's generate (to see the features) and _extract_token_timestamps (to see what
    it was given: the sequences with their prompt, num_frames, num_input_ids, the per-step
    cross-attentions, beam_indices, and what it returned)."""

    def __init__(self, model):
        self.model, self.calls, self.features = model, [], None
        generate, extract = model.generate, model._extract_token_timestamps

        def spy_generate(*args, **kwargs):
            self.features = kwargs.get("input_features")
            return generate(*args, **kwargs)

        def spy_extract(outputs, alignment_heads, time_precision=0.02, num_frames=None, num_input_ids=None):
            stamps = extract(outputs, alignment_heads, time_precision=time_precision, num_frames=num_frames,
                             num_input_ids=num_input_ids)
            layers = [torch.cat([step[i] for step in outputs.cross_attentions], dim=2).numpy()
                      for i in range(model.config.decoder_layers)]
            beams = outputs.get("beam_indices") if hasattr(outputs, "get") else None
            self.calls.append({
                "sequences": outputs.sequences.tolist(), "num_input_ids": num_input_ids,
                "num_frames": None if num_frames is None else np.asarray(num_frames).tolist(),
                "time_precision": time_precision, "timestamps": stamps.tolist(),
                "beam_indices": None if beams is None else beams.tolist(),
                "_layers": layers, "_features": self.features.numpy()})
            return stamps

        model.generate, model._extract_token_timestamps = spy_generate, spy_extract

    def take(self) -> list[dict]:
        calls, self.calls = self.calls, []
        return calls


def extra_generate(p, model, spy: AlignmentSpy, case: dict) -> None:
    """For a case that asks for no word timestamps: generate(return_token_timestamps=True) on each
    clip with the pipeline's features and generate kwargs, and whether it made the same tokens.
    The class's generate is called, past the WhisperSpy (whose record of the case is closed)."""
    fe, kwargs = p.feature_extractor, case["call_kwargs"]
    generate_kwargs = dict(kwargs.get("generate_kwargs") or {}, generation_config=p.generation_config)
    if kwargs.get("return_timestamps"):
        generate_kwargs["return_timestamps"] = True
    entries = []
    for clip_entry, pipeline_ids in zip(case["audio"], case["token_ids"]):
        f = fe(rap.load_audio(clip_entry), sampling_rate=rap.SR, return_tensors="pt", return_attention_mask=True)
        spy.features = f["input_features"]
        with torch.no_grad():
            out = type(model).generate(model, input_features=f["input_features"], attention_mask=f["attention_mask"],
                                       return_token_timestamps=True, **generate_kwargs)
        entries.append({"sequences": out["sequences"].tolist(), "token_timestamps": out["token_timestamps"].tolist(),
                        "same_tokens_as_the_pipeline": out["sequences"][:, -len(pipeline_ids[0][0]):].tolist()
                        == pipeline_ids[0]})
    case["token_timestamps_call"] = ("model.generate(input_features, attention_mask, return_token_timestamps=True, "
                                     "generation_config=pipe.generation_config, **generate_kwargs"
                                     + (", return_timestamps=True)" if kwargs.get("return_timestamps") else ")")
                                     + " on each clip's features as the pipeline makes them")
    case["generate_token_timestamps"] = entries


# ----------------------------------------------------------------------------------------------
# Pipeline cases
# ----------------------------------------------------------------------------------------------

EN = rap.EN
NOTES = [
    "same tiny model as the whisper fixture (same weights), eager attention; its decoder also outputs "
    "cross_attentions.{layer} [batch, heads, decoder_len, encoder_len], the attention probabilities",
    "time_precision: generate's _extract_token_timestamps is called with its default 0.02 (the pipeline's "
    "_decode_asr uses chunk_length / max_source_positions = 1 / 50 = 0.02 here too)",
    "num_frames: generate takes attention_mask.sum(-1) of the features (the pipeline asks the feature extractor "
    "for return_attention_mask=True, also per chunk); the mask is the samples' mask every hop_length samples, so "
    "ceil(samples / 160) frames; the attention is cut to num_frames // 2 encoder frames",
    "alignment (per pipeline call, per _extract_token_timestamps call): sequences as generate had them (the "
    "prompt, the generated tokens), num_input_ids (the prompt's length), num_frames, and the timestamps it "
    "returned (one per token of sequences: 0.0 for the prompt, the last token repeats the one before); "
    "generate_calls[].token_timestamps is the part the pipeline hands _decode_asr (the kept segment's tokens)",
    "needs: ['cross-attentions'] marks the word-timestamp cases (as in the whisper fixture's record): a pipeline "
    "runs them from the decoder's cross_attentions outputs, which this export has",
    "generate_token_timestamps (cases without word timestamps): generate(return_token_timestamps=True) on the same "
    "features and kwargs; same_tokens_as_the_pipeline says it generated what the pipeline's call did",
]


def pipeline_cases(p, model, tok) -> list[dict]:
    tokens = rap.WhisperSpy(model, tok)
    align = AlignmentSpy(model)
    recorded = []

    def run(name, audio, kwargs, **extra):
        if kwargs.get("return_timestamps") == "word":  # as the whisper fixture's record marks them
            extra["needs"] = ["cross-attentions"]
        case = rap.run_case(p, name, audio, kwargs, hooks=tokens, **extra)
        calls = align.take()
        if calls:
            case["alignment"] = [{k: v for k, v in c.items() if not k.startswith("_")} for c in calls]
            recorded.append((name, calls))
        return case

    word = {"generate_kwargs": EN, "return_timestamps": "word"}
    cases = [run("greedy_en_transcribe", SHORT, {"generate_kwargs": EN}),
             run("timestamps", SHORT, {"generate_kwargs": EN, "return_timestamps": True})]
    for case in cases:
        extra_generate(p, model, align, case)
        calls = align.take()
        case["alignment"] = [{k: v for k, v in c.items() if not k.startswith("_")} for c in calls]
        recorded.append((case["name"], calls))
    cases += [
        run("word_timestamps", SHORT, word),
        run("word_timestamps_return_language", SHORT, dict(word, return_language=True)),
        run("word_timestamps_num_beams_2", SHORT, {"generate_kwargs": {**EN, "num_beams": 2},
                                                   "return_timestamps": "word"},
            note="beam search: _extract_token_timestamps gathers each step's cross-attentions from the beam "
                 "that made the token (beam_indices)"),
        run("chunked_word_timestamps", [rap.FOX], {**word, "chunk_length_s": 1.0},
            note="chunk_length_s 1.0 (stride 1/6 s a side): one generate call per chunk, num_frames from each "
                 "chunk's attention mask (the last chunk is shorter); chunk_strides: chunk_iter's (chunk_len, "
                 "stride_left, stride_right) in samples, in seconds for _decode_asr",
            chunk_strides=chunk_strides(p.feature_extractor, rap.FOX, 1.0)),
    ]
    p.tokenizer.pad_token_id = model.config.eos_token_id
    setup = f"pipe.tokenizer.pad_token_id = model.config.eos_token_id ({model.config.eos_token_id})"
    cases.append(rap.compare(cases, run("batch_word_timestamps", SHORT, word, batch_size=2, setup=setup,
                                        note="one generate call for both clips"), "word_timestamps"))
    tokens.close()
    for c in cases:
        c["generate_kwargs"] = c["call_kwargs"].get("generate_kwargs")
    return cases, recorded


def chunk_strides(fe, entry, chunk_length_s: float) -> list:
    """transformers' chunk_iter strides for the default stride_length_s (chunk_length_s / 6)."""
    from transformers.pipelines.automatic_speech_recognition import chunk_iter

    n, stride = int(round(chunk_length_s * rap.SR)), int(round(chunk_length_s / 6 * rap.SR))
    return [list(item["stride"]) for item in chunk_iter(rap.load_audio(entry), fe, n, stride, stride)]


def same_as_whisper_record(cases: list[dict]) -> dict:
    """This model's word-timestamp outputs against the whisper fixture's record (sdpa model)."""
    old = json.loads((SOURCE / "references" / "pipeline_automatic-speech-recognition.json").read_text())
    old = {c["name"]: c for c in old.get("cases", [])}  # none before record_audio_pipelines.py runs
    out = {}
    for c in cases:
        if c["name"] in old and "outputs" in c:
            out[c["name"]] = rap.max_float_diff(c["outputs"], old[c["name"]].get("outputs"))
    print(f"  against the whisper fixture's record (max float diff; None: texts differ): {out}")
    return out


# ----------------------------------------------------------------------------------------------
# token_timestamps.npz: onnxruntime's cross-attentions next to transformers' timestamps
# ----------------------------------------------------------------------------------------------


def alignment_reference(fx: Path, recorded: list, layers: int) -> dict:
    """For every _extract_token_timestamps call of the cases: the merged decoder run over its
    sequences (teacher-forced, a row per fed token), stacked per layer, with num_frames,
    num_input_ids and transformers' timestamps. Greedy calls: the attention equals torch's."""
    arrays, diffs = {}, {}
    for name, calls in recorded:
        for k, call in enumerate(calls):
            seqs = np.array(call["sequences"], np.int64)
            states = encoder_states(fx, call["_features"])  # beams too: one sequence per input
            steps = teacher_forced(fx, states, seqs, call["num_input_ids"])
            ort = stacked_cross_attentions(steps, layers)
            key = f"{name}/{k}"
            for i, a in enumerate(ort):
                arrays[f"{key}/layer{i}"] = a.astype(np.float32)
            arrays[f"{key}/timestamps"] = np.array(call["timestamps"], np.float32)
            arrays[f"{key}/sequences"] = seqs
            arrays[f"{key}/num_input_ids"] = np.array(call["num_input_ids"], np.int64)
            if call["num_frames"] is not None:
                arrays[f"{key}/num_frames"] = np.array(call["num_frames"], np.int64)
            if call["beam_indices"] is None:
                diffs[key] = max(attention_close(f"{key} cross_attentions.{i}", torch.from_numpy(t), o)
                                 for i, (t, o) in enumerate(zip(call["_layers"], ort)))
    fva.save_npz(fx / "references" / "token_timestamps.npz", arrays)
    return diffs


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
        print(f"[{NAME}] exporting with cross-attention outputs ...", flush=True)
        export(model, fe, tok, tmp, fx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rap.check_configs(NAME, model)
    graphs, diffs = graph_references(fx, model, fe, tok)
    print(f"[{NAME}] pipeline cases ...", flush=True)
    p = rap.pipeline_for(NAME, "automatic-speech-recognition", model)
    cases, recorded = pipeline_cases(p, model, p.tokenizer)
    against_whisper = same_as_whisper_record(cases)
    teacher = alignment_reference(fx, recorded, model.config.decoder_layers)
    rap.write_record(NAME, "automatic-speech-recognition", cases, notes=NOTES,
                     torch_vs_onnx_max_abs_diff={**diffs, "teacher_forced_cross_attentions": teacher},
                     max_float_diff_to_the_whisper_fixture_record=against_whisper)
    fva.write_manifest(
        fx, family="whisper", architecture="WhisperForConditionalGeneration", task=TASK, opset=18, graphs=graphs,
        exporter=f"{fva.OPTIMUM_ONNX} main_export(model_kwargs={{'output_attentions': True}}, custom_onnx_configs: "
                 "WhisperOnnxConfig + decoder outputs cross_attentions.{i})",
        notes=fva.WHISPER_NOTES + [
            "same weights as fixture 'whisper' (families_vision_audio._whisper), attn_implementation='eager'",
            "decoder_model_merged.onnx also outputs cross_attentions.{layer} [batch, heads, decoder_sequence_length, "
            "encoder_sequence_length]: softmax probabilities of the cross-attention (both If branches)",
            f"rebuilt torch model vs the whisper fixture's ONNX: {same_weights}",
            "references/token_timestamps.npz: {case}/{call}/layer{i} the merged decoder's cross_attentions over "
            "the sequences transformers generated (prompt step, then a token a step, the last token not fed), "
            "stacked on the tokens axis; timestamps: transformers' _extract_token_timestamps output; sequences, "
            "num_input_ids, num_frames: what generate gave it"],
        inputs_from="the first 16000 samples of speech/cat_16k.wav and speech/fox_16k.wav through "
                    "preprocessor_config.json (WhisperFeatureExtractor)")
    fva.verify(fx)
    size = sum(f.stat().st_size for f in fx.rglob("*") if f.is_file())
    print(f"[{NAME}] {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
