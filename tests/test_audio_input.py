"""transmuter.preprocess.audio.load: resampling against torchaudio's (tests/fixtures/audio_io/
resample.npz, recorded by tests/support/record_resample.py), every input kind giving the same
samples, stereo down-mix, and a clear InputError for each bad input."""

import math
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import soundfile

from transmuter.errors import InputError
from transmuter.preprocess.audio import load as audio
from transmuter.preprocess.audio.load import is_audio, load_audio, resample

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPEECH = FIXTURES / "speech"
REF = np.load(FIXTURES / "audio_io" / "resample.npz")
PAIRS = [(22050, 16000), (8000, 16000), (44100, 16000), (48000, 16000), (16000, 48000),
         (16000, 22050), (48000, 44100)]
# The acceptance: resampled audio within 1e-5 of torchaudio's. Measured ~2e-7: the
# kernels agree to an ulp (float32 sin / cos), torch sums the products in float32, we in float64.
RESAMPLE_ATOL = 1e-5
FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="ffmpeg is not on PATH")


def read(name, **kw):
    samples, _ = soundfile.read(SPEECH / name, dtype=kw.pop("dtype", "float32"), **kw)
    return samples


def ffmpeg_f32(path):
    """ffmpeg's own decode, at the file's rate, of mono `path`: the reference for what only ffmpeg
    reads."""
    cmd = [FFMPEG, "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "f32le", "pipe:1"]
    return np.frombuffer(subprocess.run(cmd, capture_output=True, check=True).stdout, np.float32)


def excerpt(orig):
    start = int(REF["excerpt_start"])
    return read("cat.wav")[start:start + orig // 10]


def close(ours, ref, atol=RESAMPLE_ATOL):
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=atol)


# --- resample against torchaudio ----------------------------------------------------------------

@pytest.mark.parametrize("orig,new", PAIRS)
def test_resample_speech_excerpt_matches_torchaudio(orig, new):
    close(resample(excerpt(orig), orig, new), REF[f"excerpt_{orig}_{new}"])


@pytest.mark.parametrize("orig,new", PAIRS)
def test_resample_float64_matches_torchaudio(orig, new):
    # torchaudio builds its kernel in float64 for float64 input; ours follows, then float32 out
    close(resample(excerpt(orig).astype(np.float64), orig, new), REF[f"excerpt64_{orig}_{new}"])


@pytest.mark.parametrize("orig,new", PAIRS)
def test_resample_noise_matches_torchaudio(orig, new):
    close(resample(REF["noise"], orig, new), REF[f"noise_{orig}_{new}"])


@pytest.mark.parametrize("length", [1, 5, 100])
@pytest.mark.parametrize("orig,new", PAIRS)
def test_resample_short_signals_match_torchaudio(orig, new, length):
    close(resample(REF[f"short{length}"], orig, new), REF[f"short{length}_{orig}_{new}"])


@pytest.mark.parametrize("orig,new", PAIRS)
def test_resample_batch_over_last_axis_matches_torchaudio(orig, new):
    batch = np.stack([REF["short100"], REF["noise"][:100]])
    close(resample(batch, orig, new), REF[f"batch_{orig}_{new}"])


def test_resample_whole_file_matches_torchaudio():
    close(resample(read("cat.wav"), 22050, 16000), REF["speech_22050_16000"])


def test_resample_output_length_is_torchaudios():
    # torchaudio takes ceil(new * length / orig) in float32: one sample short of the exact ceil
    # for some long inputs (the recorder picked such lengths)
    shorter = 0
    for orig, new, length, expected in REF["lengths"]:
        out = resample(np.zeros(int(length), np.float32), int(orig), int(new))
        assert out.shape == (expected,), (orig, new, length)
        shorter += expected < math.ceil(new * length / orig)
    assert shorter > 0


def test_resample_same_rate_returns_float32_samples():
    x = excerpt(16000).astype(np.float64)
    out = resample(x, 16000, 16000)
    assert out.dtype == np.float32 and np.array_equal(out, x.astype(np.float32))


@pytest.mark.parametrize("bad", [0, -8000, 22050.5, "16000", None, True])
def test_resample_bad_rates_raise(bad):
    with pytest.raises(InputError, match="positive whole number"):
        resample(np.zeros(10, np.float32), bad, 16000)


def test_resample_integer_samples_raise():
    with pytest.raises(InputError, match="float samples.*int16"):
        resample(np.zeros(10, np.int16), 22050, 16000)


# --- every input kind, the same samples ---------------------------------------------------------

def input_kinds(name, tmp_path):
    """One recording as every input kind load_audio takes."""
    path = SPEECH / name
    samples, rate = soundfile.read(path, dtype="float32")
    int16 = read(name, dtype="int16")
    soundfile.write(tmp_path / "x.flac", samples, rate)
    return {"path str": str(path), "pathlib": path, "bytes": path.read_bytes(),
            "bytearray": bytearray(path.read_bytes()), "flac": tmp_path / "x.flac",
            "dict raw": {"raw": samples, "sampling_rate": rate},
            "dict array+path": {"array": samples, "sampling_rate": rate, "path": str(path)},
            "dict raw int16": {"raw": int16, "sampling_rate": float(rate)},
            "dict raw list": {"raw": samples.tolist(), "sampling_rate": np.int64(rate)}}


def test_every_input_kind_gives_the_file_samples_at_its_rate(tmp_path):
    ref = read("cat_16k.wav")  # a 16 kHz file for a 16 kHz model: no resampling, exact
    kinds = input_kinds("cat_16k.wav", tmp_path)
    kinds.update({"array": ref, "array int16": read("cat_16k.wav", dtype="int16"),
                  "array int32": read("cat_16k.wav", dtype="int32"),
                  "array float64": read("cat_16k.wav", dtype="float64")})
    for kind, item in kinds.items():
        out = load_audio(item, sampling_rate=16000)
        assert out.dtype == np.float32 and np.array_equal(out, ref), kind


def test_every_input_kind_is_resampled_as_torchaudio_resamples(tmp_path):
    ref = REF["speech_22050_16000"]  # torchaudio's resample of cat.wav (22,050 Hz)
    for kind, item in input_kinds("cat.wav", tmp_path).items():
        close(load_audio(item, sampling_rate=16000), ref)


def test_dict_input_is_not_changed():
    item = {"raw": read("cat.wav"), "sampling_rate": 22050, "stride": (0, 0)}
    load_audio(item)
    assert sorted(item) == ["raw", "sampling_rate", "stride"]


def test_ogg_is_read_by_soundfile(tmp_path):
    # Vorbis is lossy: the reference is libsndfile's decode of the same file, and the decode
    # is still the speech (max error of the codec on this file ~0.07, correlation > 0.99)
    soundfile.write(tmp_path / "x.ogg", read("cat_16k.wav"), 16000)
    ref, _ = soundfile.read(tmp_path / "x.ogg", dtype="float32")
    out = load_audio(tmp_path / "x.ogg")
    assert np.array_equal(out, ref)
    assert np.corrcoef(out, read("cat_16k.wav"))[0, 1] > 0.99


@pytest.mark.parametrize("subtype,dtype,offset",
                         [("PCM_U8", np.uint8, 128), ("PCM_S8", np.int8, 0)])
def test_8bit_pcm_arrays_scale_as_soundfile_reads_them(tmp_path, subtype, dtype, offset):
    pcm = (np.arange(256) - 128 + offset).astype(dtype)
    pcm.tofile(tmp_path / "x.raw")
    ref, _ = soundfile.read(tmp_path / "x.raw", dtype="float32", samplerate=16000, channels=1,
                            subtype=subtype, format="RAW")
    assert np.array_equal(load_audio(pcm), ref)


def test_mp3_reads_as_ffmpeg_decodes_it(tmp_path):
    if "MP3" not in soundfile.available_formats():
        pytest.skip("this libsndfile has no MP3 (libsndfile >= 1.1 with mpg123 / lame)")
    if FFMPEG is None:
        pytest.skip("ffmpeg is not on PATH: it is the reference decoder of the MP3")
    soundfile.write(tmp_path / "x.mp3", read("cat_16k.wav"), 16000, format="MP3")
    # two MP3 decoders (libsndfile's mpg123, ffmpeg's): measured 7e-7 apart
    close(load_audio(tmp_path / "x.mp3"), ffmpeg_f32(tmp_path / "x.mp3"), atol=1e-5)


@needs_ffmpeg
def test_m4a_is_decoded_by_ffmpeg_at_its_rate_then_resampled(tmp_path):
    m4a = tmp_path / "x.m4a"
    subprocess.run([FFMPEG, "-nostdin", "-loglevel", "error", "-i", str(SPEECH / "cat.wav"),
                    "-c:a", "aac", str(m4a)], check=True)
    ref = ffmpeg_f32(m4a)  # 22,050 Hz, as the file is
    assert np.array_equal(load_audio(m4a, sampling_rate=22050), ref)
    close(load_audio(m4a.read_bytes(), sampling_rate=16000), resample(ref, 22050, 16000), atol=0)
    assert np.corrcoef(load_audio(m4a, 22050)[:38462], read("cat.wav"))[0, 1] > 0.99


def test_stereo_file_is_averaged_to_mono():
    # fox_16k_stereo.wav: fox_16k.wav left, half of it right
    ref = read("fox_16k_stereo.wav").mean(axis=1)
    path = SPEECH / "fox_16k_stereo.wav"
    np.testing.assert_allclose(load_audio(path), ref, rtol=0, atol=1e-7)
    np.testing.assert_allclose(load_audio(path.read_bytes()), ref, rtol=0, atol=1e-7)
    close(load_audio(path, 22050), resample(ref, 16000, 22050), atol=1e-6)


def test_two_channel_array_is_averaged_only_when_asked():
    stereo = read("fox_16k_stereo.wav")  # (samples, 2), as soundfile reads it
    with pytest.raises(InputError, match=r"shape \(52593, 2\).*mean\(axis=1\)"):
        load_audio(stereo)
    with pytest.raises(InputError, match=r"\(channels, samples\) with more channels"):
        load_audio(stereo, mix_channels=True)
    # transformers' ASR: a (channels, samples) array is averaged over axis 0
    np.testing.assert_allclose(load_audio(stereo.T, mix_channels=True), stereo.mean(axis=1),
                               rtol=0, atol=1e-7)
    with pytest.raises(InputError, match=r"dict's 'array' \(shape \(2, 52593\)"):
        load_audio({"array": stereo.T, "sampling_rate": 16000})


def test_float16_array_comes_back_float32():
    x = read("cat_16k.wav").astype(np.float16)
    assert np.array_equal(load_audio(x), x.astype(np.float32))


def test_is_audio_tells_one_input_from_several():
    x = read("cat_16k.wav")
    for one in [x, {"raw": x, "sampling_rate": 16000}, "a.wav", SPEECH / "cat.wav", b"RIFF",
                memoryview(b"RIFF")]:
        assert is_audio(one), type(one)
    for several in [[x, x], (x,), iter([x]), (s for s in [x]), 3, None]:
        assert not is_audio(several), type(several)


# --- bad input: a clear InputError naming it ----------------------------------------------------

BAD_ARRAYS = [
    (np.zeros(0, np.float32), r"shape \(0,\).*has no samples"),
    (np.array([0.1, np.nan, 0.2], np.float32), r"1 NaN or infinite.*index 1"),
    (np.array([0.1, 0.2, -np.inf]), r"NaN or infinite.*index 2"),
    (read("cat_16k.wav", dtype="int16").astype(np.float32), r"peaks at \d+.*divided by 32768"),
    (np.zeros(10, np.complex64), r"\(complex64\).*give floats"),
    (np.array([0.1, "x"], dtype=object), r"\(object\).*give floats"),
    (np.zeros(10, bool), r"\(bool\)"),
    (np.arange(10), r"\(int64\).*int16"),
    (np.float32(0.5), "single number"),
    (np.zeros((2, 3, 100), np.float32), r"shape \(2, 3, 100\).*batch"),
]


@pytest.mark.parametrize("bad,message", BAD_ARRAYS)
def test_bad_arrays_raise(bad, message):
    with pytest.raises(InputError, match=message):
        load_audio(bad)


def test_bad_samples_in_a_dict_name_the_dict():
    with pytest.raises(InputError, match=r"dict's 'raw'.*NaN"):
        load_audio({"raw": np.array([np.nan]), "sampling_rate": 8000})


@pytest.mark.parametrize("bad,message", [
    ({"raw": np.zeros(5)}, r"'sampling_rate' key.*got keys \['raw'\]"),
    # a datasets Audio dict left undecoded is read from its path: a missing file is named
    ({"sampling_rate": 16000, "path": "a.wav"}, "No audio file at 'a.wav'"),
    ({"sampling_rate": 16000, "stride": (0, 0)},
     r"'raw' \(or 'array'\).*\['sampling_rate', 'stride'\]"),
    ({"raw": None, "sampling_rate": 16000}, "'raw' \\(or 'array'\\)"),
    ({"raw": "a.wav", "sampling_rate": 16000}, "'raw' must be an array of samples, got a str"),
    ({"array": [[0.1, 0.2], [0.3]], "sampling_rate": 16000}, "'array' is not an array"),
    ({"raw": np.zeros(5), "sampling_rate": 0}, "'sampling_rate' must be a positive whole"),
    ({"raw": np.zeros(5), "sampling_rate": -16000}, "positive whole number.*-16000"),
    ({"raw": np.zeros(5), "sampling_rate": 22050.5}, "positive whole number.*22050.5"),
    ({"raw": np.zeros(5), "sampling_rate": "16k"}, "positive whole number.*'16k'"),
])
def test_bad_dicts_raise(bad, message):
    with pytest.raises(InputError, match=message):
        load_audio(bad)


@pytest.mark.parametrize("rate", [0, -1, 16000.5, "16000", True, None])
def test_bad_target_rate_raises(rate):
    with pytest.raises(InputError, match="sampling_rate must be a positive whole number"):
        load_audio(np.zeros(5, np.float32), sampling_rate=rate)


def test_missing_file_and_folder_raise(tmp_path):
    # (URLs are fetched: tests/test_url_inputs.py)
    with pytest.raises(InputError, match="No audio file at '.*nope.wav'"):
        load_audio(str(tmp_path / "nope.wav"))
    with pytest.raises(InputError, match="is a folder"):
        load_audio(tmp_path)


def test_a_file_that_is_not_audio_raises(tmp_path):
    (tmp_path / "notes.wav").write_text("not audio at all\n")
    with pytest.raises(InputError, match=r"'.*notes.wav'.*soundfile.*Format not recognised"):
        load_audio(tmp_path / "notes.wav")
    with pytest.raises(InputError, match=r"bytes \(5 bytes\).*soundfile"):
        load_audio(b"hello")


def test_an_empty_audio_file_raises(tmp_path):
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    with pytest.raises(InputError, match="'.*empty.wav' has no samples"):
        load_audio(tmp_path / "empty.wav")


def test_without_ffmpeg_other_formats_say_it_is_needed(tmp_path, monkeypatch):
    # An M4A header soundfile does not read; with no ffmpeg on PATH the error says to install it
    m4a = tmp_path / "x.m4a"
    m4a.write_bytes(b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00M4A isommp42" + bytes(64))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("ffmpeg") is None
    with pytest.raises(InputError,
                       match=r"'.*x.m4a' is not audio that soundfile.*ffmpeg is needed.*PATH"):
        load_audio(m4a)
    monkeypatch.setattr(audio.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match=r"as bytes \(\d+ bytes\) is not audio.*ffmpeg is needed"):
        load_audio(m4a.read_bytes())


@pytest.mark.parametrize("bad,message", [
    ([np.zeros(5)], "got a list of 1 items"),
    ((np.zeros(5),), "got a tuple"),
    (3.5, "builtins.float"),
    (object(), "builtins.object"),
])
def test_other_types_raise(bad, message):
    with pytest.raises(InputError, match=message):
        load_audio(bad)
