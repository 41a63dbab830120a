"""Record transformers' audio feature extractors: the references of tests/test_audio_features.py.

Run in the export venv (transformers 4.57.6, torch CPU, soundfile):

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_audio_features.py

Each case runs one transformers extractor class, built from a config dict, on committed real
speech (tests/fixtures/speech/) or, for CLAP's 48 kHz, on a signal synthesized here from a fixed
seed (`clip()`: the test makes the same samples). Written to tests/fixtures/audio_features/:

    cases.json        the configs (the Hub ones read from ../shared/hub-files/ at record time and
                      stored here, their `mel_filters` lists dropped: transformers recomputes
                      them), the clips, and per case: extractor, config, clips, call options,
                      `seed` (np.random.seed before the call: CLAP's crops), `path`, `select`
    <family>.npz      "<case>/<key>" per output key; a single clip's outputs without the batch
                      axis, a batched call's with it

`path`: Whisper runs transformers' NumPy path (`_np_extract_fbank_features`, what it runs without
torch) unless "torch" (its torch STFT, what it runs here and in the pipelines' references).
AST runs its NumPy path (torchaudio is absent from the export venv); `--torchaudio`, run with the
audio venv (torch 2.9.1 + torchaudio, requirements-audio.txt), records its torchaudio path
(transformers' steps copied: that venv has no transformers) into ast_torchaudio.npz.

Size (< 1.5 MB): Whisper's 30 s windows are stored whole only for short clips (the padding frames
are one value and compress away); the long-form and truncation cases and CLAP's 48 kHz 10 s
windows store frame ranges (`select`: axis and [start, stop) ranges, plus "<case>/<key>/shape").
"""

import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEECH = ROOT / "fixtures" / "speech"
OUT = ROOT / "fixtures" / "audio_features"
HUB = ROOT.parents[1] / "shared" / "hub-files"

# Clips: (file, start, stop) slices of committed speech, or ("synth", seconds) at 48 kHz.
CLIPS = {
    "cat": ("cat_16k.wav", 0, None),               # 1.74 s
    "fox": ("fox_16k.wav", 0, None),               # 3.29 s
    "long35": ("long.flac", 0, 35 * 16000),        # past Whisper's 30 s: truncation / long-form
    "fox_head": ("fox_16k.wav", 0, 8000),
    "cat_head": ("cat_16k.wav", 4000, 9000),
    "fox_short": ("fox_16k.wav", 16000, 24000),    # 0.5 s: CLAP pads it
    "synth12": ("synth", 12.0),                    # longer than CLAP's 10 s window
    "synth3": ("synth", 3.0),
}


def clip(name):
    """The float32 samples of a clip, identical on the recording and the testing side."""
    spec = CLIPS[name]
    if spec[0] == "synth":
        return synth(spec[1])
    import soundfile

    samples, _ = soundfile.read(SPEECH / spec[0], dtype="float32", always_2d=False)
    return samples[spec[1]:spec[2]]


def synth(seconds, rate=48000, seed=0):
    """A rising chirp under a slow tremolo, plus Gaussian noise from a legacy RandomState (whose
    stream NumPy keeps stable across versions)."""
    t = np.arange(int(seconds * rate)) / rate
    chirp = np.sin(2 * np.pi * (200.0 * t + 400.0 * t * t)) * (0.6 + 0.4 * np.sin(np.pi * t))
    noise = np.random.RandomState(seed).randn(t.size)
    return (0.3 * chirp + 0.02 * noise).astype(np.float32)


def select(array, spec):
    """The stored part of an output: the [start, stop) ranges along spec["axis"]."""
    if spec is None:
        return array
    return np.concatenate([np.take(array, np.arange(a, b), axis=spec["axis"])
                           for a, b in spec["ranges"]], axis=spec["axis"])


def _hub(path):
    config = json.loads((HUB / path).read_text())
    config.pop("mel_filters", None)
    return {"source": f"../shared/hub-files/{path}", "config": config}


def _fixture(name):
    path = ROOT / "fixtures" / name / "preprocessor_config.json"
    return {"source": f"tests/fixtures/{name}/preprocessor_config.json",
            "config": json.loads(path.read_text())}


def configs():
    found = {
        "whisper-base": _hub("openai/whisper-base/preprocessor_config.json"),
        "whisper-tiny.en": _hub("Xenova/whisper-tiny.en/preprocessor_config.json"),
        "speecht5_tts": _hub("Xenova/speecht5_tts/preprocessor_config.json"),
        "whisper-fixture": _fixture("whisper"),
        "ast-fixture": _fixture("ast"),
        "wav2vec2-fixture": _fixture("wav2vec2"),
        "clap-fixture": _fixture("clap"),
        "speecht5-fixture": _fixture("speecht5"),
    }
    large = dict(found["whisper-base"]["config"], feature_size=128)
    found["whisper-large-v3"] = {"source": "whisper-base's with feature_size 128, as "
                                           "openai/whisper-large-v3's", "config": large}
    found["ast-audioset"] = {"source": "as MIT/ast-finetuned-audioset-10-10-0.4593's", "config": {
        "feature_extractor_type": "ASTFeatureExtractor", "feature_size": 1, "num_mel_bins": 128,
        "max_length": 1024, "mean": -4.2677393, "std": 4.5689974, "do_normalize": True,
        "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False,
        "sampling_rate": 16000}}
    # Xenova/clap-htsat-unfused's preprocessor_config.json is not in ../shared/hub-files/:
    # transformers' defaults (48 kHz, 64 mels, 10 s, fusion, repeatpad) stand for it.
    found["clap-defaults"] = {"source": "ClapFeatureExtractor() defaults", "config": {
        "feature_extractor_type": "ClapFeatureExtractor", "feature_size": 64,
        "sampling_rate": 48000, "hop_length": 480, "max_length_s": 10, "fft_window_size": 1024,
        "frequency_min": 0, "frequency_max": 14000, "top_db": None, "truncation": "fusion",
        "padding": "repeatpad", "padding_value": 0.0, "return_attention_mask": False}}
    found["clap-defaults-rand_trunc"] = {"source": "clap-defaults with rand_trunc", "config": dict(
        found["clap-defaults"]["config"], truncation="rand_trunc")}
    at_16k = dict(found["clap-defaults"]["config"], sampling_rate=16000, hop_length=160,
                  max_length_s=1, fft_window_size=400, frequency_min=50, frequency_max=8000)
    found["clap-16k-fusion"] = {"source": "clap-defaults at 16 kHz, 1 s, 50-8000 Hz",
                                "config": at_16k}
    found["wav2vec2-mask"] = {"source": "the wav2vec2 fixture's with return_attention_mask",
                              "config": dict(found["wav2vec2-fixture"]["config"],
                                             return_attention_mask=True)}
    return found


LONG = {"truncation": False, "padding": "longest", "return_attention_mask": True}
FRAMES = lambda *ranges: {"axis": 1, "ranges": [list(r) for r in ranges]}  # noqa: E731

# name, family, config, clips (a list: one batched call), call options, extra
CASES = [
    ("base_cat", "whisper", "whisper-base", "cat", {}, {}),
    ("base_cat_torch", "whisper", "whisper-base", "cat", {}, {"path": "torch"}),
    ("base_fox_mask", "whisper", "whisper-base", "fox", {"return_attention_mask": True}, {}),
    ("large_cat", "whisper", "whisper-large-v3", "cat", {}, {}),
    ("tiny_truncated", "whisper", "whisper-tiny.en", "long35", {"return_attention_mask": True},
     {"select": FRAMES((0, 40), (2950, 3000))}),
    ("base_longform", "whisper", "whisper-base", "long35", LONG,
     {"select": FRAMES((0, 40), (2980, 3020), (3460, 3500))}),
    ("base_longform_torch", "whisper", "whisper-base", "long35", LONG,
     {"select": FRAMES((2980, 3020), (3460, 3500)), "path": "torch"}),
    ("fixture_cat", "whisper", "whisper-fixture", "cat", {}, {}),
    ("fixture_batch", "whisper", "whisper-fixture", ["cat", "fox_head"],
     {"return_attention_mask": True}, {}),
    ("fixture_longest", "whisper", "whisper-fixture", ["fox", "cat"], LONG, {}),
    ("audioset_cat", "ast", "ast-audioset", "cat", {}, {}),
    ("fixture_fox", "ast", "ast-fixture", "fox", {}, {}),
    ("fixture_batch", "ast", "ast-fixture", ["cat", "fox"], {}, {}),
    ("fixture_cat", "wav2vec2", "wav2vec2-fixture", "cat", {}, {}),
    ("mask_fox_head", "wav2vec2", "wav2vec2-mask", "fox_head", {}, {}),
    ("mask_batch", "wav2vec2", "wav2vec2-fixture", ["fox_head", "cat_head"],
     {"padding": True, "return_attention_mask": True}, {}),
    ("fixture_cat", "clap", "clap-fixture", "cat", {}, {"seed": 3}),
    ("fixture_short", "clap", "clap-fixture", "fox_short", {}, {}),
    ("fixture_short_repeat", "clap", "clap-fixture", "fox_short", {"padding": "repeat"}, {}),
    ("fixture_short_pad", "clap", "clap-fixture", "fox_short", {"padding": "pad"}, {}),
    ("fixture_batch", "clap", "clap-fixture", ["cat", "fox_short", "fox"], {}, {"seed": 5}),
    ("fusion16k_cat", "clap", "clap-16k-fusion", "cat", {}, {"seed": 7}),
    ("fusion16k_short", "clap", "clap-16k-fusion", "fox_short", {}, {"seed": 7}),
    ("fusion16k_batch", "clap", "clap-16k-fusion", ["fox", "cat"], {},
     {"seed": 11, "select": {"axis": 2, "ranges": [[0, 20], [81, 101]]}}),
    ("defaults_synth12", "clap", "clap-defaults", "synth12", {},
     {"seed": 13, "select": FRAMES((0, 48), (960, 1001))}),
    ("defaults_synth3", "clap", "clap-defaults", "synth3", {},
     {"seed": 13, "select": FRAMES((0, 48), (960, 1001))}),
    ("rand_trunc_synth12", "clap", "clap-defaults-rand_trunc", "synth12", {},
     {"seed": 17, "select": FRAMES((0, 48), (960, 1001))}),
    ("tts_cat_head", "speecht5", "speecht5_tts", "cat_head", {}, {}),
    ("tts_target_cat", "speecht5", "speecht5_tts", "cat", {}, {"target": True}),
    ("fixture_target_batch", "speecht5", "speecht5-fixture", ["fox", "cat"], {"padding": True},
     {"target": True}),
]


def run_case(found, family, config_key, clips, options, extra):
    """transformers' outputs of one case, as NumPy arrays."""
    import transformers
    import transformers.models.whisper.feature_extraction_whisper as whisper_module

    config = found[config_key]["config"]
    fe = getattr(transformers, config["feature_extractor_type"])(**config)
    batched = isinstance(clips, list)
    audio = [clip(c) for c in clips] if batched else clip(clips)
    if "seed" in extra:
        np.random.seed(extra["seed"])
    arg = {"audio_target": audio} if extra.get("target") else {}
    call = lambda: fe(*(() if arg else (audio,)), **arg, sampling_rate=fe.sampling_rate,  # noqa
                      return_tensors="np", **options)
    torch_available = whisper_module.is_torch_available
    if extra.get("path") != "torch":
        whisper_module.is_torch_available = lambda: False
    try:
        out = call()
    finally:
        whisper_module.is_torch_available = torch_available
    return {k: (np.asarray(v) if batched else np.asarray(v)[0]) for k, v in out.items()}


def record():
    found = configs()
    OUT.mkdir(parents=True, exist_ok=True)
    stored, cases = {}, []
    for name, family, config_key, clips, options, extra in CASES:
        outputs = run_case(found, family, config_key, clips, options, extra)
        spec = extra.get("select")
        for key, value in outputs.items():
            part = stored.setdefault(family, {})
            if value.dtype == np.float64:
                raise SystemExit(f"{name}/{key}: transformers gave float64")
            if spec is not None and key != "is_longer" and value.ndim > spec["axis"]:
                part[f"{name}/{key}/shape"] = np.array(value.shape)
                value = select(value, spec)
            part[f"{name}/{key}"] = value
        cases.append({"name": name, "family": family, "config": config_key, "clips": clips,
                      "options": options, **extra})
        print(name, {k: (v.shape, str(v.dtype)) for k, v in outputs.items()})
    for family, arrays in stored.items():
        np.savez_compressed(OUT / f"{family}.npz", **arrays)
    import transformers

    names = {f["config"]["feature_extractor_type"] for f in found.values()}
    meta = {"transformers": transformers.__version__, "numpy": np.__version__,
            "model_input_names": {n: getattr(transformers, n).model_input_names
                                  for n in sorted(names)},
            "configs": found, "clips": CLIPS, "cases": cases}
    (OUT / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{OUT}: {total / 1e6:.2f} MB")


AST_TORCHAUDIO = [("audioset_cat", "ast-audioset", "cat"), ("audioset_fox", "ast-audioset", "fox"),
                  ("fixture_fox", "ast-fixture", "fox")]


def record_torchaudio():
    """ASTFeatureExtractor's torchaudio path (transformers 4.57.6, taken where torchaudio is
    installed), its steps copied: kaldi.fbank, zero-pad / truncate to max_length, normalize.
    Run with the audio venv (torch 2.9.1 + torchaudio, no transformers)."""
    import torch
    import torchaudio
    import torchaudio.compliance.kaldi as ta_kaldi

    found, arrays = configs(), {}
    for name, config_key, clip_name in AST_TORCHAUDIO:
        config = found[config_key]["config"]
        waveform = torch.from_numpy(clip(clip_name)).unsqueeze(0)
        fbank = ta_kaldi.fbank(waveform, sample_frequency=config["sampling_rate"],
                               window_type="hanning", num_mel_bins=config["num_mel_bins"])
        difference = config["max_length"] - fbank.shape[0]
        if difference > 0:
            fbank = torch.nn.ZeroPad2d((0, 0, 0, difference))(fbank)
        fbank = fbank[:config["max_length"]].numpy()
        if config["do_normalize"]:
            fbank = (fbank - config["mean"]) / (config["std"] * 2)
        arrays[f"{name}/input_values"] = fbank
    arrays["versions"] = np.array([torch.__version__, torchaudio.__version__])
    np.savez_compressed(OUT / "ast_torchaudio.npz", **arrays)
    print({k: v.shape for k, v in arrays.items()})


if __name__ == "__main__":
    record_torchaudio() if "--torchaudio" in sys.argv else record()
