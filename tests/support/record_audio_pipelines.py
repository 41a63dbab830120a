"""Richer transformers pipeline references for the audio fixtures, on real speech.

Rewrites ``references/pipeline_<task>.json`` of the fixtures whisper, wav2vec2, ast and clap
(tiny random models of families_vision_audio.py) with several cases each: the original sine clips
first (outputs checked unchanged), then the committed espeak-ng speech of tests/fixtures/speech/
with the options users pass (language / task / timestamps / beams / chunking for Whisper, char and
word timestamps and chunking for CTC, top_k / function_to_apply for audio classification,
hypothesis_template for CLAP).

The PyTorch models are rebuilt with families_vision_audio.py's own builders (same seeds), never
re-exported: the ONNX files, tokenizers, feature extractors and .npz references stay as committed.
Before recording, each rebuilt model is run against onnxruntime on the committed onnx/ graph with
the committed reference inputs, and must agree to 1e-4 (else the script stops). The pipelines load
the tokenizer and feature extractor from the fixture folder, as a user (and our pipeline) would.

Format (paths relative to tests/fixtures; an "audio" entry is a path, or {"path", "start", "stop"}
in samples for a slice):

    {"task": ..., "cases": [{"name", "audio": [...], "sampling_rate", "call_kwargs", "batch_size",
                             "call", "outputs": [...], ...}, ...]}

Usage (export environment, plus ``pip install soundfile``):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_audio_pipelines.py [names...]

Pinned versions: those of families_vision_audio.py (requirements-export.txt), soundfile 0.14.0.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import families_vision_audio as fva  # noqa: E402

FIXTURES = fva.FIXTURES
SR = 16000
ONNX_ATOL = 1e-4  # torch vs onnxruntime on the same graph inputs: float32 kernels differ by ~1e-6


# ----------------------------------------------------------------------------------------------
# Rebuilding the torch models (no export)
# ----------------------------------------------------------------------------------------------


class _Captured(Exception):
    """Raised from the patched save_model_dir: the builder has made its model, stop before export."""

    def __init__(self, model, others):
        super().__init__("captured")
        self.model, self.others = model, others


def capture_model(builder):
    """Run a families_vision_audio builder up to its save_model_dir call and return the model.

    fresh_fixture is patched to a scratch folder so the committed fixture is never touched, and
    save_model_dir raises before anything is saved or exported."""
    saved = fva.fresh_fixture, fva.save_model_dir, fva.tmpdir
    made: list[Path] = []

    def scratch(*_):
        made.append(saved[2]())
        return made[-1]

    def fake_save(model, tmp, *others):
        raise _Captured(model, others)

    fva.fresh_fixture, fva.save_model_dir, fva.tmpdir = scratch, fake_save, scratch
    try:
        builder()
    except _Captured as c:
        return c.model.eval()
    finally:
        fva.fresh_fixture, fva.save_model_dir, fva.tmpdir = saved
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
    raise RuntimeError(f"{builder.__name__} did not reach save_model_dir")


def rebuild_whisper():
    tmp = fva.tmpdir()
    try:
        model, _, _ = fva._whisper(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model.eval()


# ----------------------------------------------------------------------------------------------
# torch == onnxruntime on the committed graphs
# ----------------------------------------------------------------------------------------------


def reference_steps(fx: Path, stem: str) -> list[dict]:
    ref = np.load(fx / "references" / f"{stem}.npz")
    steps = sorted({int(k.split("/")[0]) for k in ref.files})
    return [{k.split("/", 2)[2]: ref[k] for k in ref.files if k.startswith(f"{s}/in/")} for s in steps]


def ort_outputs(fx: Path, graph: str, feeds: dict) -> dict:
    return fva.run(fva.session(fx / graph), feeds)


def assert_close(name: str, torch_out, ort_out) -> float:
    t = torch_out.detach().numpy() if isinstance(torch_out, torch.Tensor) else np.asarray(torch_out)
    diff = float(np.abs(t - ort_out).max())
    if not diff <= ONNX_ATOL:
        raise SystemExit(f"STOP: rebuilt torch model differs from the committed ONNX on {name}: max |diff| {diff}")
    print(f"  torch vs onnx {name}: max |diff| {diff:.2e}")
    return diff


def check_whisper_onnx(fx: Path, model) -> dict:
    enc_in = reference_steps(fx, "encoder_model")[0]
    enc = ort_outputs(fx, "onnx/encoder_model.onnx", enc_in)["last_hidden_state"]
    with torch.no_grad():
        t_enc = model.model.encoder(torch.from_numpy(enc_in["input_features"])).last_hidden_state
    diffs = {"encoder last_hidden_state": assert_close("whisper encoder", t_enc, enc)}
    # Each decoder step's logits against the torch decoder run on the whole sequence so far.
    ids = None
    for k, feeds in enumerate(reference_steps(fx, "decoder_model_merged")):
        out = ort_outputs(fx, "onnx/decoder_model_merged.onnx", feeds)["logits"]
        ids = feeds["input_ids"] if ids is None else np.concatenate([ids, feeds["input_ids"]], axis=1)
        with torch.no_grad():
            t = model(encoder_outputs=(torch.from_numpy(feeds["encoder_hidden_states"]),),
                      decoder_input_ids=torch.from_numpy(ids)).logits[:, -out.shape[1]:]
        diffs[f"decoder step {k} logits"] = assert_close(f"whisper decoder step {k}", t, out)
    return diffs


def check_single_onnx(fx: Path, model, outputs: dict) -> dict:
    """model.onnx on its reference inputs vs the torch model; outputs: onnx name -> torch attribute."""
    feeds = reference_steps(fx, "model")[0]
    ort = ort_outputs(fx, "onnx/model.onnx", feeds)
    with torch.no_grad():
        t = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return {name: assert_close(f"{fx.name} {name}", getattr(t, attr), ort[name]) for name, attr in outputs.items()}


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------

CAT, FOX, LONG = "speech/cat_16k.wav", "speech/fox_16k.wav", "speech/long.flac"


def clip(path: str, start: int, stop: int) -> dict:
    """An "audio" entry for samples [start, stop) of a file."""
    return {"path": path, "start": start, "stop": stop}


CAT_1S, FOX_1S = clip(CAT, 0, SR), clip(FOX, 0, SR)
LONG_10S = clip(LONG, 0, 10 * SR)


def sine(name: str) -> list[str]:
    return [f"{name}/references/audio_{s}.npy" for s, _, _ in fva.AUDIO_SPECS]


def read(rel: str) -> np.ndarray:
    if rel.endswith(".npy"):
        return np.load(FIXTURES / rel)
    samples, sr = soundfile.read(FIXTURES / rel, dtype="float32")
    assert sr == SR and samples.ndim == 1, (rel, sr, samples.shape)  # no resampling in these references
    return samples


def load_audio(entry) -> np.ndarray:
    if isinstance(entry, dict):
        return read(entry["path"])[entry["start"]:entry["stop"]]
    return read(entry)


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------


def run_case(p, name: str, audio: list, call_kwargs: dict, *, batch_size=None, raw_arrays=False,
             before_each=None, hooks=None, input_extra=None, **extra) -> dict:
    """Call pipeline ``p`` on each clip of ``audio`` (or on the list, with batch_size) and record it.

    Inputs are {"raw", "sampling_rate"} dicts, fresh for every call (the ASR pipeline pops their keys),
    or plain arrays with raw_arrays (zero-shot audio takes no dict). before_each(i) runs before clip i's
    call; hooks (a Spy) collects what the model was asked per pipeline call. An exception is recorded
    as the case's "error"."""
    clips = [load_audio(a) for a in audio]

    def inp(c):
        return c.copy() if raw_arrays else {"raw": c.copy(), "sampling_rate": SR, **copy.deepcopy(input_extra or {})}

    form = "array" if raw_arrays else "{'raw': array, 'sampling_rate': 16000}"
    case = {"name": name, "audio": audio, "sampling_rate": SR, "input_form": "array" if raw_arrays else "dict",
            "call_kwargs": call_kwargs, "batch_size": batch_size}
    if input_extra:
        case["input_extra"] = input_extra  # more keys of each input dict
    try:
        if batch_size is None:
            case["call"] = f"pipeline(task)({form}, **call_kwargs), one clip per call"
            outs = []
            for i, c in enumerate(clips):
                if before_each is not None:
                    before_each(i)
                if hooks is not None:
                    hooks.new_call()
                outs.append(p(inp(c), **copy.deepcopy(call_kwargs)))
        else:
            case["call"] = f"pipeline(task)([{form}, ...], batch_size={batch_size}, **call_kwargs), one call"
            if hooks is not None:
                hooks.new_call()
            outs = p([inp(c) for c in clips], batch_size=batch_size, **copy.deepcopy(call_kwargs))
        case["outputs"] = jsonable(outs)
    except Exception as e:  # noqa: BLE001 - transformers' refusal is itself the reference
        case["error"] = {"type": type(e).__name__, "message": str(e)}
    if hooks is not None:
        case.update(hooks.record())
    case.update(extra)
    print(f"  {name}: {summary(case)}", flush=True)
    return case


def jsonable(obj):
    """Tuples to lists, tensors / numpy to Python; floats untouched."""
    return json.loads(json.dumps(obj, default=fva._json_default))


def summary(case: dict) -> str:
    if "error" in case:
        return f"ERROR {case['error']['type']}: {case['error']['message'][:100]}"
    return json.dumps(case["outputs"])[:160]


def write_record(name: str, task: str, cases: list[dict], **extra) -> Path:
    """One case a line (token id lists would take a line a number with indent)."""
    path = FIXTURES / name / "references" / f"pipeline_{task}.json"
    head = json.dumps({"task": task, **extra}, indent=1)[:-2]
    body = ",\n  ".join(json.dumps(jsonable(c), separators=(",", ":")) for c in cases)
    path.write_text(f'{head},\n "cases": [\n  {body}\n ]\n}}\n')
    json.loads(path.read_text())
    size = path.stat().st_size
    print(f"[{name}] wrote {path.relative_to(FIXTURES.parent.parent)} ({size / 1e3:.1f} kB, {len(cases)} cases)")
    return path


def check_sine(name: str, task: str, case: dict) -> None:
    """The first case must reproduce the committed record's outputs: texts and labels exactly, scores to
    SINE_ATOL (the committed record was made on another CPU; float32 matmul kernels differ by an ulp)."""
    path = FIXTURES / name / "references" / f"pipeline_{task}.json"
    if not path.exists():  # a fixture whose first record this is (families_audio_more.py)
        print(f"  {name}: no earlier record to check the sine case against")
        return
    old = json.loads(path.read_text())
    # families_vision_audio.py writes the one-case format; a rerun of this script finds its own cases
    source = "this script's previous record" if "cases" in old else "families_vision_audio.py's record"
    old_outputs = old["cases"][0]["outputs"] if "cases" in old else old["outputs"]
    diff = max_float_diff(case.get("outputs"), jsonable(old_outputs))
    if diff is None or diff > SINE_ATOL:
        raise SystemExit(f"STOP: {name} sine case differs from {source} (max float diff {diff}):\n"
                         f"{case.get('outputs')}\n{old_outputs}")
    key = "families_vision_audio_record_max_abs_diff"
    case[key] = old["cases"][0].get(key) if "cases" in old else diff
    print(f"  {name}: sine case equals {source} (floats within {diff:.1e})")


SINE_ATOL = 1e-6


def max_float_diff(a, b):
    """Largest |a - b| over the floats of two JSON values of the same shape; None if anything else differs."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b)
    if type(a) is not type(b):
        return None
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return None
        parts = [max_float_diff(a[k], b[k]) for k in a]
    elif isinstance(a, list):
        if len(a) != len(b):
            return None
        parts = [max_float_diff(x, y) for x, y in zip(a, b)]
    else:
        return 0.0 if a == b else None
    return None if None in parts else max(parts, default=0.0)


def pipeline_for(name: str, task: str, model, tokenizer: bool = True):
    """transformers' pipeline on the rebuilt model, with the fixture's own tokenizer / feature extractor."""
    from transformers import AutoFeatureExtractor, AutoTokenizer, pipeline

    fx = FIXTURES / name
    tok = AutoTokenizer.from_pretrained(fx) if tokenizer else None
    fe = AutoFeatureExtractor.from_pretrained(fx)
    return pipeline(task, model=model, tokenizer=tok, feature_extractor=fe, device="cpu")


def check_configs(name: str, model) -> None:
    """The rebuilt model's config (and generation config) equal the fixture's committed files."""
    from transformers import AutoConfig, GenerationConfig

    fx = FIXTURES / name
    drop = {"transformers_version", "_attn_implementation_autoset", "_name_or_path"}

    def clean(d):
        return {k: v for k, v in d.items() if k not in drop}

    generation = {}
    if (fx / "generation_config.json").exists():
        generation = clean(GenerationConfig.from_pretrained(fx).to_diff_dict())
        if clean(model.generation_config.to_diff_dict()) != generation:
            raise SystemExit(f"STOP: rebuilt {name} generation config differs from the committed one")
    ours, theirs = clean(model.config.to_diff_dict()), clean(AutoConfig.from_pretrained(fx).to_diff_dict())
    # save_pretrained writes dtype and moves generation parameters to generation_config.json
    differ = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    differ = {k for k in differ if k != "dtype" and not (k in generation and generation[k] == ours.get(k))}
    if differ:
        raise SystemExit(f"STOP: rebuilt {name} config differs from {fx / 'config.json'} on {sorted(differ)}")


def compare(cases: list[dict], batched: dict, single_name: str) -> dict:
    """Mark a batched case with whether it equals the one-clip-per-call case of the same options."""
    single = next(c for c in cases if c["name"] == single_name)
    equal = batched.get("outputs") == single.get("outputs")
    diff = max_float_diff(batched.get("outputs"), single.get("outputs"))
    batched["equals_case"] = {"case": single_name, "equal": equal,
                              "max_abs_diff": diff}  # null: texts, labels or lengths differ
    if not equal:
        print(f"  NOTE: {batched['name']} differs from {single_name} (max float diff {diff})")
    return batched


# ----------------------------------------------------------------------------------------------
# Whisper (automatic-speech-recognition, seq2seq)
# ----------------------------------------------------------------------------------------------


class WhisperSpy:
    """Records what the pipeline's calls of model.generate returned (token ids, word-level token
    timestamps) and which language model.detect_language picked, per pipeline call."""

    def __init__(self, model, tok):
        self.model, self.tok, self.calls, self.quiet = model, tok, [], False
        generate, detect = model.generate, model.detect_language

        def spy_generate(*args, **kwargs):
            out = generate(*args, **kwargs)
            entry = self._entry(out, kwargs.get("input_features"))
            if self._greedy_short_form(out, kwargs):
                self.quiet = True  # the rerun's language detection is not the pipeline's
                try:
                    entry["top5_scores"] = self._top5(generate(*args, **kwargs, output_scores=True,
                                                               return_dict_in_generate=True), out)
                finally:
                    self.quiet = False
            self.calls[-1]["generate"].append(entry)
            return out

        def spy_detect(*args, **kwargs):
            ids = detect(*args, **kwargs)
            if not self.quiet:
                self.calls[-1]["languages"].extend(tok.convert_ids_to_tokens(ids.tolist()))
            return ids

        model.generate, model.detect_language = spy_generate, spy_detect

    def close(self):
        del self.model.generate, self.model.detect_language

    def new_call(self):
        self.calls.append({"generate": [], "languages": []})

    def _greedy_short_form(self, out, kwargs) -> bool:
        """One window, one beam, plain ids: there generate's scores are cheap to get and line up with them."""
        config = kwargs.get("generation_config")
        beams = kwargs.get("num_beams", getattr(config, "num_beams", 1))
        frames = self.model.config.max_source_positions * 2
        return (isinstance(out, torch.Tensor) and beams == 1 and not kwargs.get("return_timestamps")
                and kwargs["input_features"].shape[-1] <= frames)

    @staticmethod
    def _top5(rerun, out, steps: int = 3) -> list:
        """For the first generated steps, the 5 best [token id, processed score] (logits after Whisper's
        logits processors: suppressed tokens, timestamp rules) of each row. The tiny model's texts hardly
        depend on the prompt; these scores do. The rerun must give the same ids."""
        n = len(rerun["scores"])
        assert torch.equal(rerun["sequences"][:, -n:], out[:, -n:]), "rerun of generate differs"
        rows = []
        for b in range(out.shape[0]):
            best = [torch.topk(step[b], 5) for step in rerun["scores"][:steps]]
            rows.append([[[int(i), float(v)] for v, i in zip(t.values, t.indices)] for t in best])
        return rows

    def _entry(self, out, feats) -> dict:
        entry = {"input_features_shape": list(feats.shape)}
        if isinstance(out, torch.Tensor):
            ids = out
        else:  # return_timestamps="word": a dict with sequences and token_timestamps (or segments)
            ids = out["sequences"]
            if "segments" in out:
                ts = [torch.cat([s["token_timestamps"] for s in segs]).tolist() for segs in out["segments"]]
            else:
                ts = out["token_timestamps"].tolist()
            entry["token_timestamps"] = ts
        entry["token_ids"] = ids.tolist()
        entry["decoded"] = self.tok.batch_decode(ids, skip_special_tokens=False)
        return entry

    def record(self) -> dict:
        calls, self.calls = self.calls, []
        rec = {"token_ids": [[g.pop("token_ids") for g in c["generate"]] for c in calls],
               "generate_calls": [c["generate"] for c in calls]}
        if any(c["languages"] for c in calls):
            rec["detected_language"] = [c["languages"] for c in calls]
        return rec


GREEDY = {"do_sample": False, "num_beams": 1, "max_new_tokens": 10}
EN = {**GREEDY, "language": "en", "task": "transcribe"}
WORD_NOTE = ("word timestamps come from the torch model's cross-attentions of generation_config.alignment_heads "
             "[[1, 0], [1, 1]] (transformers' DTW over the median-filtered, normalised weights); the committed "
             "decoder_model_merged.onnx has no cross-attention outputs, so an ONNX pipeline needs an export "
             "that has them to reproduce this case")
WHISPER_NOTES = [
    "the fixture's WhisperFeatureExtractor has chunk_length 1 s (n_samples 16000, 100 frames) and "
    "max_source_positions 50: time_precision = chunk_length / max_source_positions = 0.02 s",
    "audio longer than n_samples (1 s here, 30 s for real Whisper) with no chunk_length_s goes to generate's "
    "sequential long-form decoding (features padding='longest', truncation=False, attention_mask), which "
    "refuses to run without return_timestamps=True (case longform_without_timestamps_is_an_error); short-form "
    "cases therefore use the first second of the speech clips",
    "the pipeline's own generation defaults apply when generation_config.json does not set them: num_beams=5 "
    "(this fixture sets none; see case pipeline_default_num_beams) and max_new_tokens 256 unless max_length is "
    "set (it is, 64): greedy cases pass num_beams=1 explicitly",
    "token_ids / generate_calls: what model.generate returned inside the pipeline call (one list per pipeline "
    "call, one entry per generate call, e.g. per chunk); short-form sequences hold the generated tokens only "
    "(the <|startoftranscript|><|lang|><|task|>... prompt stripped); top5_scores (greedy short-form calls "
    "without timestamps): per row, per first 3 steps, the 5 best [id, score] of generate's processed scores",
    "random tiny model: its texts are repetitive (e.g. '3' or '\\x1b' repeated), timestamps can run past the "
    "audio's end; they are still exactly what transformers returns",
]


def whisper_cases(p, model, tok) -> list[dict]:
    spy = WhisperSpy(model, tok)
    run = lambda *a, **k: run_case(p, *a, hooks=spy, **k)  # noqa: E731
    short = [CAT_1S, FOX_1S]
    sine_kwargs = {"generate_kwargs": {"do_sample": False, "num_beams": 1, "max_new_tokens": 8, "language": "en",
                                       "task": "transcribe"}}
    cases = [run("sine", sine("whisper"), sine_kwargs)]
    check_sine("whisper", "automatic-speech-recognition", cases[0])
    cases += [
        run("greedy_en_transcribe", short, {"generate_kwargs": EN}),
        run("translate", short, {"generate_kwargs": {**EN, "task": "translate"}}),
        run("detect_language", short, {"generate_kwargs": GREEDY},
            note="no language and no task: forced_decoder_ids [[1, null], [2, <|transcribe|>]] of the generation "
                 "config make generate detect the language (detected_language: model.detect_language's pick, the "
                 "argmax of the first step's logits over lang_to_id) and transcribe"),
        run("detect_language_return_language", short, {"generate_kwargs": GREEDY, "return_language": True},
            note="return_language=True: the output gets chunks with a 'language' key; it is taken from language "
                 "tokens in the generated ids, and short-form generate strips the prompt, so it is null"),
        run("detect_language_translate", short, {"generate_kwargs": {**GREEDY, "task": "translate"}},
            note="task given, no language: forced_decoder_ids are ignored, the language is detected, then "
                 "<|translate|>"),
        run("timestamps", short, {"generate_kwargs": EN, "return_timestamps": True}),
        run("num_beams_2", short, {"generate_kwargs": {**EN, "num_beams": 2}}),
        run("pipeline_default_num_beams", short,
            {"generate_kwargs": {"max_new_tokens": 10, "language": "en", "task": "transcribe"}},
            note="no num_beams: the pipeline's default generation config gives num_beams=5"),
        run("word_timestamps", short, {"generate_kwargs": EN, "return_timestamps": "word"}, note=WORD_NOTE,
            needs=["cross-attentions"]),
        run("longform_without_timestamps_is_an_error", [CAT, FOX], {"generate_kwargs": EN},
            note="clips longer than n_samples (1 s) with no chunk_length_s and no return_timestamps"),
        run("longform_timestamps", [CAT, FOX], {"generate_kwargs": EN, "return_timestamps": True},
            note="sequential long-form decoding over the whole clip (1.7 s and 3.3 s, > n_samples)"),
        run("longform_word_timestamps", [CAT, FOX], {"generate_kwargs": EN, "return_timestamps": "word"},
            note=WORD_NOTE + "; long-form: token timestamps concatenated over the segments",
            needs=["cross-attentions"]),
        run("chunked_default_stride", [FOX], {"generate_kwargs": EN, "chunk_length_s": 1.0},
            note="stride_length_s defaults to chunk_length_s / 6 on each side"),
        run("chunked_stride", [FOX], {"generate_kwargs": EN, "chunk_length_s": 1.0, "stride_length_s": 0.25}),
        run("chunked_timestamps", [FOX], {"generate_kwargs": EN, "chunk_length_s": 1.0, "return_timestamps": True}),
        run("long10s_chunked_default_stride", [LONG_10S], {"generate_kwargs": EN, "chunk_length_s": 1.0}),
        run("long10s_chunked_stride", [LONG_10S],
            {"generate_kwargs": EN, "chunk_length_s": 1.0, "stride_length_s": [0.25, 0.125]},
            note="stride_length_s as [left, right]"),
        run("long10s_chunked_timestamps", [LONG_10S],
            {"generate_kwargs": EN, "chunk_length_s": 1.0, "return_timestamps": True}),
        run("longform_sequential", [LONG], {"generate_kwargs": EN, "return_timestamps": True},
            note="the whole 65 s of long.flac: features of the whole audio go to generate's sequential long-form "
                 "loop (seek by the last timestamp of each 1 s window)"),
    ]
    cases.append(run("batch_without_pad_token_is_an_error", short, {"generate_kwargs": EN}, batch_size=2,
                     note="the fixture's tokenizer has no pad_token (openai/whisper-* have <|endoftext|>)"))
    # What the error message says to do; the batch cases below run with it.
    p.tokenizer.pad_token_id = model.config.eos_token_id
    setup = f"pipe.tokenizer.pad_token_id = model.config.eos_token_id ({model.config.eos_token_id}, <|endoftext|>)"
    cases.append(compare(cases, run("batch_short", short, {"generate_kwargs": EN}, batch_size=2, setup=setup),
                         "greedy_en_transcribe"))
    cases.append(run("batch_longform_different_lengths_is_an_error", [CAT, FOX],
                     {"generate_kwargs": EN, "return_timestamps": True}, batch_size=2, setup=setup,
                     note="transformers' batch collate (pipelines/base.py _pad) pads 3-D tensors along dim 1, "
                          "which for Whisper's (batch, mels, frames) long-form features is the mel axis: clips "
                          "of different lengths past n_samples cannot share a batch"))
    same = [CAT, clip(FOX, 0, len(load_audio(CAT)))]
    cases.append(run("longform_timestamps_equal_lengths", same, {"generate_kwargs": EN, "return_timestamps": True},
                     note="cat and the first len(cat) samples of fox: long-form clips of one length"))
    cases.append(compare(cases, run("batch_longform_equal_lengths", same,
                                    {"generate_kwargs": EN, "return_timestamps": True}, batch_size=2,
                                    setup=setup),
                         "longform_timestamps_equal_lengths"))
    cases.append(compare(cases, run("batch_chunked_stride", [FOX],
                                    {"generate_kwargs": EN, "chunk_length_s": 1.0, "stride_length_s": 0.25},
                                    batch_size=4, setup=setup,
                                    note="the chunks of one recording share batches of 4"),
                         "chunked_stride"))
    spy.close()
    for c in cases:
        c["generate_kwargs"] = c["call_kwargs"].get("generate_kwargs")
    return cases


def record_whisper() -> Path:
    model = rebuild_whisper()
    check_configs("whisper", model)
    check = check_whisper_onnx(FIXTURES / "whisper", model)
    p = pipeline_for("whisper", "automatic-speech-recognition", model)
    cases = whisper_cases(p, model, p.tokenizer)
    return write_record("whisper", "automatic-speech-recognition", cases, notes=WHISPER_NOTES,
                        torch_vs_onnx_max_abs_diff=check)


# ----------------------------------------------------------------------------------------------
# wav2vec2 (automatic-speech-recognition, CTC)
# ----------------------------------------------------------------------------------------------

CTC_NOTES = [
    "CTC decode keeps special tokens other than the blank: the pipeline decodes with skip_special_tokens=False "
    "(grouped repeats, <pad> removed, '|' -> ' '), so <s> </s> <unk> stay in the text",
    "timestamps: offsets in logit frames times inputs_to_logits_ratio (20 here: conv strides 5*2*2) / 16000",
    "chunk_length_s / stride_length_s are rounded to multiples of inputs_to_logits_ratio samples; each chunk's "
    "logits lose their stride frames (rescaled to logit frames) and the argmax ids are concatenated before one "
    "decode",
    "no attention_mask (feat_extract_norm='group', return_attention_mask False): a batch pads with zeros and "
    "the group norm sees the padding, so a padded batch need not equal one by one (see equals_case)",
]


def ctc_cases(name: str, p) -> list[dict]:
    speech, half = [CAT, FOX], [clip(CAT, 0, SR // 2), clip(FOX, SR // 2, SR)]
    cases = [run_case(p, "sine", sine(name), {})]
    check_sine(name, "automatic-speech-recognition", cases[0])
    cases += [
        run_case(p, "plain", speech, {}),
        run_case(p, "char_timestamps", half, {"return_timestamps": "char"},
                 note="half-second slices: a char chunk per logit run (800 logit frames a second) is large"),
        run_case(p, "word_timestamps", speech, {"return_timestamps": "word"}),
        run_case(p, "chunked_default_stride", [FOX], {"chunk_length_s": 0.5},
                 note="stride_length_s defaults to chunk_length_s / 6 on each side"),
        run_case(p, "chunked_stride", [FOX], {"chunk_length_s": 0.5, "stride_length_s": 0.1}),
        run_case(p, "chunked_stride_char_timestamps", [half[1]],
                 {"chunk_length_s": 0.2, "stride_length_s": 0.04, "return_timestamps": "char"}),
        run_case(p, "long10s_chunked_stride", [LONG_10S], {"chunk_length_s": 2.0, "stride_length_s": [0.4, 0.2]},
                 note="stride_length_s as [left, right]"),
        run_case(p, "long10s_chunked_word_timestamps", [LONG_10S],
                 {"chunk_length_s": 2.0, "stride_length_s": 0.4, "return_timestamps": "word"}),
        run_case(p, "input_stride", [FOX], {}, input_extra={"stride": [1600, 800]},
                 note="the input dict's own 'stride': (left, right) samples decoded away after the forward pass"),
        run_case(p, "whisper_style_timestamps_is_an_error", [CAT], {"return_timestamps": True}),
    ]
    cases.append(compare(cases, run_case(p, "batch_plain", speech, {}, batch_size=2), "plain"))
    cases.append(compare(cases, run_case(p, "batch_chunked_stride", [FOX],
                                         {"chunk_length_s": 0.5, "stride_length_s": 0.1}, batch_size=4,
                                         note="the chunks of one recording share batches of 4"),
                         "chunked_stride"))
    return cases


def record_wav2vec2() -> Path:
    model = capture_model(fva.build_wav2vec2)
    check_configs("wav2vec2", model)
    check = check_single_onnx(FIXTURES / "wav2vec2", model, {"logits": "logits"})
    p = pipeline_for("wav2vec2", "automatic-speech-recognition", model)
    return write_record("wav2vec2", "automatic-speech-recognition", ctc_cases("wav2vec2", p), notes=CTC_NOTES,
                        torch_vs_onnx_max_abs_diff=check)


# ----------------------------------------------------------------------------------------------
# AST (audio-classification)
# ----------------------------------------------------------------------------------------------

CLASSIFY_NOTES = [
    "top_k given at call time: None means every label, more than num_labels is clipped to num_labels; with no "
    "top_k at all the call's _sanitize_parameters also passes top_k=None, i.e. every label (the __init__ "
    "default of 5 is overridden)",
    "function_to_apply: 'softmax' (default, also for None), 'sigmoid' or 'none' (the logits); anything else "
    "is a ValueError; scores sorted by torch.topk",
]


def classify_cases(name: str, p, num_labels: int) -> list[dict]:
    speech = [CAT, FOX]
    cases = [run_case(p, "sine", sine(name), {"top_k": 5})]
    check_sine(name, "audio-classification", cases[0])
    cases += [
        run_case(p, "default", speech, {}),
        run_case(p, "top_k_2", speech, {"top_k": 2}),
        run_case(p, "top_k_none", speech, {"top_k": None}),
        run_case(p, "top_k_above_num_labels", speech, {"top_k": num_labels + 5}),
        run_case(p, "sigmoid", speech, {"function_to_apply": "sigmoid", "top_k": None}),
        run_case(p, "sigmoid_top_k_2", speech, {"function_to_apply": "sigmoid", "top_k": 2}),
        run_case(p, "no_function", speech, {"function_to_apply": "none", "top_k": None}),
        run_case(p, "softmax_explicit", speech, {"function_to_apply": "softmax", "top_k": 3}),
        run_case(p, "long10s", [LONG_10S], {"top_k": None}),
        run_case(p, "bad_function_is_an_error", [CAT], {"function_to_apply": "relu"}),
    ]
    cases.append(compare(cases, run_case(p, "batch_default", speech, {}, batch_size=2), "default"))
    return cases


def record_ast() -> Path:
    model = capture_model(fva.build_ast)
    check_configs("ast", model)
    check = check_single_onnx(FIXTURES / "ast", model, {"logits": "logits"})
    p = pipeline_for("ast", "audio-classification", model, tokenizer=False)
    notes = CLASSIFY_NOTES + ["ASTFeatureExtractor max_length 64 frames: clips are cut to their first ~0.65 s "
                              "(and shorter ones padded), so long10s scores only its start"]
    return write_record("ast", "audio-classification", classify_cases("ast", p, model.config.num_labels),
                        notes=notes, torch_vs_onnx_max_abs_diff=check)


# ----------------------------------------------------------------------------------------------
# CLAP (zero-shot-audio-classification)
# ----------------------------------------------------------------------------------------------

LABELS = ["speech", "music", "noise"]
LONG_LABELS = ["speech", "a dog barking in the rain", "music", "the cat sat on the mat"]  # 15, 27, 19, 22 tokens
TOO_LONG = "the quick brown fox jumps over the lazy dog"  # 42 tokens: past max_position_embeddings (34)
CLAP_NOTES = [
    "the fixture's ClapFeatureExtractor runs at 16 kHz (max_length_s 1: 16000 samples), so the speech files go "
    "in as they are (real CLAP checkpoints take 48 kHz)",
    "the pipeline takes a plain float array (no {'raw', 'sampling_rate'} dict): call(array, candidate_labels=..)",
    "hypothesis_template defaults to 'This is a sound of {}.'; the labels' sentences are tokenized together "
    "with padding=True; scores are the softmax of logits_per_audio over the labels, sorted high to low",
    "clips shorter than 1 s are tiled whole (repeatpad: int(16000 / n) copies) then zero-padded; exactly 1 s is "
    "used as is; longer clips are cropped at a random offset (truncation 'rand_trunc', np.random.randint), see "
    "case rand_trunc_seeded",
]


def clap_cases(p, tok) -> list[dict]:
    speech_1s = [CAT_1S, FOX_1S]
    run = lambda *a, **k: run_case(p, *a, raw_arrays=True, **k)  # noqa: E731
    cases = [run("sine", sine("clap"), {"candidate_labels": LABELS})]
    check_sine("clap", "zero-shot-audio-classification", cases[0])
    lengths = [len(tok(f"This is a sound of {x}.")["input_ids"]) for x in LONG_LABELS]
    cases += [
        run("speech_1s", speech_1s, {"candidate_labels": LABELS},
            note="the first 16000 samples: exactly max_length, neither padded nor cropped"),
        run("speech_short_repeatpad", [clip(CAT, 0, 9600), clip(FOX, 8000, 14000)], {"candidate_labels": LABELS},
            note="0.6 s and 0.375 s slices: tiled then zero-padded to 1 s"),
        run("hypothesis_template", speech_1s,
            {"candidate_labels": LABELS, "hypothesis_template": "This is the sound of {}."}),
        run("labels_of_different_lengths", speech_1s, {"candidate_labels": LONG_LABELS},
            label_token_lengths=lengths, note="sentences of different token counts, padded together"),
        run("one_label", speech_1s, {"candidate_labels": ["speech"]}),
        run("label_too_long_is_an_error", [CAT_1S], {"candidate_labels": ["speech", TOO_LONG]},
            note="the pipeline tokenizes without truncation: a sentence past the text model's positions fails "
                 "inside the model (an ONNX pipeline should say which label is too long)"),
        rand_trunc_case(p),
    ]
    cases.append(compare(cases, run("batch_speech_1s", speech_1s, {"candidate_labels": LABELS}, batch_size=2),
                         "speech_1s"))
    return cases


def rand_trunc_case(p) -> dict:
    """Whole clips (> 1 s): transformers crops 1 s at np.random.randint(0, overflow + 1). The global numpy
    RNG is seeded before each call and the offsets it drew are recorded; the same crop given as a 1 s
    slice must score the same (checked here), so a test can compare the slice without the RNG."""
    offsets = []
    randint = np.random.randint

    def spy(*args, **kwargs):
        offsets.append(int(randint(*args, **kwargs)))
        return offsets[-1]

    np.random.randint = spy
    try:
        case = run_case(p, "rand_trunc_seeded", [CAT, FOX], {"candidate_labels": LABELS}, raw_arrays=True,
                        before_each=lambda i: np.random.seed(i),
                        setup="np.random.seed(i) before the call on clip i")
    finally:
        np.random.randint = randint
    case["rand_trunc_offsets"] = offsets
    crops = [clip(a, o, o + SR) for a, o in zip(case["audio"], offsets)]
    same = run_case(p, "rand_trunc_crops", crops, {"candidate_labels": LABELS}, raw_arrays=True)
    diff = max_float_diff(case["outputs"], same["outputs"])
    if diff is None or diff > SINE_ATOL:
        raise SystemExit(f"STOP: clap rand_trunc crop does not score as its slice (max diff {diff})")
    case["crops"] = crops
    case["note"] = ("crops[i] = samples [offset, offset + 16000) of clip i, the window transformers drew; "
                    f"scoring crops[i] directly gives the same outputs (max |diff| {diff})")
    return case


def record_clap() -> Path:
    model = capture_model(fva.build_clap)
    check_configs("clap", model)
    check = check_single_onnx(FIXTURES / "clap", model, {n: n for n in ["logits_per_audio", "logits_per_text",
                                                                        "text_embeds", "audio_embeds"]})
    p = pipeline_for("clap", "zero-shot-audio-classification", model)
    return write_record("clap", "zero-shot-audio-classification", clap_cases(p, p.tokenizer), notes=CLAP_NOTES,
                        torch_vs_onnx_max_abs_diff=check)


RECORDERS = {"whisper": record_whisper, "wav2vec2": record_wav2vec2, "ast": record_ast, "clap": record_clap}


def main(argv: list[str]) -> int:
    names = argv or list(RECORDERS)
    unknown = [n for n in names if n not in RECORDERS]
    if unknown:
        print(f"unknown fixtures {unknown}; known: {list(RECORDERS)}")
        return 2
    transformers.logging.set_verbosity_error()
    for n in names:
        print(f"[{n}] recording ...", flush=True)
        RECORDERS[n]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
