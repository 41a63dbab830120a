"""Audio feature extractors against transformers' (4.57.6) on real speech.

References: tests/fixtures/audio_features/, recorded by tests/support/record_audio_features.py
(which says what each case holds); the clips are the committed speech in tests/fixtures/speech/
and a seeded 48 kHz signal, made by that script's `clip()` on both sides. No torch.

A single-clip case compares `fe(samples)` with transformers' call on that clip; a batched case
compares `fe.pad([fe(clip) for clip in clips])` with transformers' one call on the clips.
"""

import functools
import json
import pathlib

import numpy as np
import pytest

from transmuter.errors import InputError
from transmuter.preprocess.audio import spectrogram as S
from transmuter.preprocess.audio.features import FeatureExtractor

from .support import record_audio_features as rec

pytest.importorskip("soundfile", reason="the speech fixtures are read with soundfile")

REFS = pathlib.Path(__file__).with_name("fixtures") / "audio_features"
META = json.loads((REFS / "cases.json").read_text())
CASES = {(c["family"], c["name"]): c for c in META["cases"]}

# Our steps are transformers' NumPy steps in the same dtypes (frames in float64, FFT stored as
# complex64, mel and log in float64, cast to float32 last), so values come out equal but for the
# FFT of stacked frames vs one frame at a time (last float64 bit, hidden by the complex64 store)
# and float32 rounding. The bar is 1e-4 on features and 1e-3 dB on log-mel values; in
# each family's units 1e-3 dB is:
TOLERANCE = {
    "whisper": 1e-3 / 40,                    # (log10(power) + 4) / 4: 1 unit = 40 dB
    "ast": 1e-3 / (10 / np.log(10) * 2 * 4.5689974),  # ln(power) / (2 std): 1 unit = 39.7 dB
    "clap": 1e-3,                            # dB already
    "speecht5": 1e-3 / 20,                   # log10(amplitude) targets: 1 unit = 20 dB; the
                                             # waveform side is checked at the same (1e-4 bar)
    "wav2vec2": 1e-4,                        # the bar for features (not a log-mel)
}


@functools.lru_cache(maxsize=None)
def reference(family):
    return dict(np.load(REFS / f"{family}.npz", allow_pickle=False))


@functools.lru_cache(maxsize=None)
def clip(name):
    return rec.clip(name)


def extractor(config_key):
    return FeatureExtractor.from_config(META["configs"][config_key]["config"])


def featurize(fe, case, name, rng=None):
    call = fe.target if case.get("target") else fe
    options = dict(case["options"])
    if isinstance(case["clips"], list):
        options.pop("padding", None)   # transformers' padding=True: pad() pads to the longest
    if rng is not None:
        options["rng"] = rng
    return call(clip(name), **options)


def ours(case):
    """Our outputs of a recorded case, batched cases through pad()."""
    fe = extractor(case["config"])
    rng = np.random.RandomState(case["seed"]) if "seed" in case else None
    if not isinstance(case["clips"], list):
        return featurize(fe, case, case["clips"], rng)
    return fe.pad([featurize(fe, case, name, rng) for name in case["clips"]])


def expected(case):
    ref = reference(case["family"])
    prefix = f"{case['name']}/"
    return {k[len(prefix):]: v for k, v in ref.items()
            if k.startswith(prefix) and not k.endswith("/shape")}


def compare(case, got, want, tolerance):
    """Keys, dtypes, shapes (a stored selection: the full shape) and values."""
    assert sorted(got) == sorted(want), f"output keys {sorted(got)} != {sorted(want)}"
    ref = reference(case["family"])
    for key, value in want.items():
        full = ref.get(f"{case['name']}/{key}/shape")
        mine = got[key]
        assert mine.dtype == value.dtype, f"{key}: dtype {mine.dtype} != {value.dtype}"
        assert mine.shape == (tuple(full) if full is not None else value.shape), key
        if full is not None:
            mine = rec.select(mine, case["select"])
        if value.dtype.kind in "biu":
            np.testing.assert_array_equal(mine, value, err_msg=key)
        else:
            np.testing.assert_allclose(mine, value, rtol=0, atol=tolerance, err_msg=key)


# Whisper long-form batches are the one place pad() cannot equal transformers' batched call:
# transformers pads the *samples* with zeros before the STFT, so a shorter clip's last frames
# see zeros where the clip alone sees its reflection, and its frame mask counts the partial last
# frame (ceil(len / hop)) that the clip alone drops. Those frames are left out below.
EDGE = {("whisper", "fixture_longest")}


@pytest.mark.parametrize("family,name", sorted(k for k, c in CASES.items()
                                                  if k not in EDGE and c.get("path") != "torch"))
def test_equals_transformers(family, name):
    case = CASES[(family, name)]
    compare(case, ours(case), expected(case), TOLERANCE[family])


def test_whisper_torch_path():
    """transformers' torch path (what it runs when torch is installed, hence what the ASR
    pipeline's references saw) runs its STFT and mel projection in float32: measured 1.4e-5
    (cat) and 3.5e-5 (35 s, 1.4e-3 dB, in quiet bins) from the NumPy path, which we equal. Held
    to the issue's 1e-4 on features: the 1e-3 dB bar is for matching transformers' NumPy path."""
    for name in ("base_cat_torch", "base_longform_torch"):
        case = CASES[("whisper", name)]
        compare(case, ours(case), expected(case), 1e-4)


def test_ast_torchaudio_path():
    """transformers' AST path where torchaudio is installed (kaldi.fbank, float32 throughout,
    recorded with torchaudio 2.9.1): measured 4.5e-5 from the NumPy path we follow (1.8e-3 dB),
    held to the issue's 1e-4 on features."""
    ref = dict(np.load(REFS / "ast_torchaudio.npz", allow_pickle=False))
    for name, config_key, clip_name in rec.AST_TORCHAUDIO:
        got = extractor(config_key)(clip(clip_name))["input_values"]
        want = ref[f"{name}/input_values"]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=name)


def test_whisper_longform_batch_pads_with_silence():
    case = CASES[("whisper", "fixture_longest")]
    got, want = ours(case), expected(case)
    fe = extractor(case["config"])
    frames = [clip(name).shape[0] // fe.hop_length for name in case["clips"]]
    assert got["input_features"].shape == want["input_features"].shape
    for row, n in enumerate(frames):
        keep = np.ones(want["input_features"].shape[-1], bool)
        if n < keep.size:
            keep[n - 3:n + 3] = False    # windows reaching the clip's end (n_fft / 2 = 1.25 hops)
        np.testing.assert_allclose(got["input_features"][row][:, keep],
                                   want["input_features"][row][:, keep], atol=TOLERANCE["whisper"])
        mask = want["attention_mask"][row].copy()
        mask[n:n + 1] = 0                # transformers' rounded-up partial frame
        np.testing.assert_array_equal(got["attention_mask"][row], mask)


def test_interface():
    for key, entry in META["configs"].items():
        config = entry["config"]
        fe = FeatureExtractor.from_config(config)
        assert fe.sampling_rate == config.get("sampling_rate", fe.sampling_rate)
        assert isinstance(fe.sampling_rate, int)
        assert fe.model_input_names == META["model_input_names"][config["feature_extractor_type"]]


def test_whisper_config_n_samples_is_derived():
    """transformers ignores the config's n_samples / nb_max_frames (chunk_length decides)."""
    config = dict(META["configs"]["whisper-fixture"]["config"], n_samples=7, nb_max_frames=7)
    fe = FeatureExtractor.from_config(config)
    assert (fe.n_samples, fe.nb_max_frames) == (16000, 100)
    assert fe(clip("cat"))["input_features"].shape == (16, 100)


def test_clap_global_rng_as_transformers():
    """Without seed / rng the crops come from NumPy's global RandomState, as transformers'."""
    case = CASES[("clap", "fusion16k_cat")]
    fe = extractor(case["config"])
    np.random.seed(case["seed"])
    got = fe(clip("cat"))
    compare(case, got, expected(case), TOLERANCE["clap"])
    again = fe(clip("cat"), seed=case["seed"])
    np.testing.assert_array_equal(again["input_features"], got["input_features"])


def test_clap_short_clip_draws_nothing_but_is_longer():
    fe = extractor("clap-16k-fusion")
    rng = np.random.RandomState(0)
    state = rng.get_state()[1].copy()
    item = fe(clip("fox_short"), rng=rng)
    assert item["is_longer"].tolist() == [True]   # transformers' pick among a batch of one
    np.testing.assert_array_equal(rng.get_state()[1], state)


def test_spectrogram_complex_and_amplitude():
    """The spectrogram without mel filters (float64 magnitudes, complex64 STFT) agrees with the
    log-mel path's frames: power 2 of the complex STFT is the power spectrogram."""
    x = clip("cat_head")
    window = S.window_function(400, "hann")
    stft = S.spectrogram(x, window, 400, 160, power=None)
    power = S.spectrogram(x, window, 400, 160, power=2.0)
    assert stft.dtype == np.complex64 and power.dtype == np.float64
    np.testing.assert_allclose(np.abs(stft.astype(np.complex128)) ** 2, power, rtol=1e-12)


# ---- errors ----------------------------------------------------------------------------------


def test_unknown_type_lists_supported():
    with pytest.raises(InputError, match="WhisperFeatureExtractor") as info:
        FeatureExtractor.from_config({"feature_extractor_type": "SeamlessM4TFeatureExtractor"})
    assert "SeamlessM4TFeatureExtractor" in str(info.value)
    with pytest.raises(InputError, match="names no feature_extractor_type"):
        FeatureExtractor.from_config({"sampling_rate": 16000})
    with pytest.raises(InputError, match="dict"):
        FeatureExtractor.from_config("preprocessor_config.json")


@pytest.mark.parametrize("config_key,option,value,message", [
    ("whisper-fixture", "dither", 0.5, "dither"),
    ("whisper-fixture", "hop_length", 0, "hop_length"),
    ("whisper-fixture", "sampling_rate", "16k", "sampling_rate"),
    ("whisper-fixture", "padding_side", "middle", "padding_side"),
    ("ast-fixture", "std", 0, "std"),
    ("ast-fixture", "do_normalize", "yes", "do_normalize"),
    ("clap-fixture", "truncation", "crop", "truncation"),
    ("clap-fixture", "padding", "mirror", "padding"),
    ("clap-fixture", "max_length_s", 0.00001, "max_length_s"),
    ("speecht5-fixture", "win_function", "kaiser", "win_function"),
])
def test_bad_config_option(config_key, option, value, message):
    config = dict(META["configs"][config_key]["config"], **{option: value})
    with pytest.raises(InputError, match=message):
        FeatureExtractor.from_config(config)


@pytest.mark.parametrize("samples,message", [
    (np.zeros((800, 2), np.float32), "stereo"),
    ((np.ones(800) * 1000).astype(np.int16), "int16"),
    (np.zeros(0, np.float32), "empty"),
    (np.array([0.0, np.nan] * 400, np.float32), "NaN"),
    ("cat.wav", "1-D NumPy float array"),
])
def test_bad_samples(samples, message):
    for key in ("whisper-fixture", "ast-fixture", "wav2vec2-fixture", "clap-fixture"):
        with pytest.raises(InputError, match=message):
            extractor(key)(samples)


def test_bad_calls():
    with pytest.raises(InputError, match="400 samples"):
        extractor("ast-fixture")(np.zeros(399, np.float32))
    with pytest.raises(InputError, match="64 bins"):
        extractor("clap-fixture")(clip("cat"), truncation="fusion")
    with pytest.raises(InputError, match="RandomState"):
        extractor("clap-fixture")(clip("cat"), rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="padding"):
        extractor("whisper-fixture")(clip("cat"), padding="middle")


def test_bad_pad():
    fe = extractor("wav2vec2-mask")
    items = [fe(clip("fox_head")), fe(clip("cat_head"))]
    with pytest.raises(InputError, match="at least"):
        fe.pad(items, length=100)
    with pytest.raises(InputError, match="non-empty"):
        fe.pad([])
    with pytest.raises(InputError, match="different keys"):
        fe.pad([items[0], {"input_values": items[1]["input_values"]}])
    padded = fe.pad(items, length=9000)
    assert padded["input_values"].shape == (2, 9000)
    assert padded["attention_mask"].sum(1).tolist() == [8000, 5000]
    ast = extractor("ast-fixture")
    with pytest.raises(InputError, match="pads every clip"):
        ast.pad([ast(clip("cat"))], length=100)
    assert ast.pad([ast(clip("cat"))], length=64)["input_values"].shape == (1, 64, 32)
