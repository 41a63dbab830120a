"""Audio in: `load_audio` turns one audio input of transformers' audio pipelines into mono float32
samples at the model's sampling rate; `resample` is `torchaudio.functional.resample` (its
defaults) in NumPy, which is how transformers' pipelines resample a dict input.

    from transmuter.preprocess.audio.load import load_audio, resample, is_audio
    samples = load_audio("speech.flac", sampling_rate=16000)   # (n,) float32
    samples = load_audio({"array": x, "sampling_rate": 44100}, sampling_rate=16000)

Inputs, as the pipelines take them (transformers' `automatic_speech_recognition.py` and
`audio_classification.py` `preprocess`):
- a NumPy float array: samples taken at `sampling_rate` already, as transformers takes them.
  Integer PCM arrays (int8, uint8, int16, int32) are scaled to [-1, 1] as soundfile scales them.
- a dict `{"raw" | "array": samples, "sampling_rate": sr}` ("raw" first; other keys such as
  datasets' "path" or ASR's "stride" are ignored here), resampled when sr differs; a datasets
  Audio dict not decoded (`{"bytes": ..., "path": ...}`) is decoded from its bytes, else its path.
- a torchcodec `AudioDecoder` (what a datasets >= 4 Audio column yields): its samples, as
  transformers' audio pipelines read it.
- a path (str or os.PathLike), an http(s) URL (preprocess/url.py) or the bytes of an encoded
  file: decoded with soundfile (WAV, FLAC, OGG, MP3), else with `ffmpeg` when it is on PATH (M4A,
  WebM, ...).

Decoding differs from transformers on purpose in two ways. transformers hands a file to
`ffmpeg -ac 1 -ar <rate>`; here a file is decoded at its own rate and resampled by `resample`, so a
file and the same samples given as a dict come out equal (at the file's own rate, e.g. a 16 kHz
file for a 16 kHz model, the samples are identical to transformers'). And channels are averaged,
as ASR averages a (channels, samples) array, where `ffmpeg -ac 1` with float output sums a stereo
pair scaled by 1/sqrt(2).
"""

import functools
import io
import math
import numbers
import os
import shutil
import subprocess
import tempfile

import numpy as np
import soundfile

from ...errors import InputError
from .. import url

# torchaudio.functional.resample's defaults (resampling_method="sinc_interp_hann").
_LOWPASS_FILTER_WIDTH = 6
_ROLLOFF = 0.99

# Float samples are expected in [-1, 1]; a resampled or processed signal may overshoot a little,
# while int16 PCM given as floats peaks in the hundreds or thousands.
_MAX_PEAK = 2.0

# Integer PCM as soundfile (libsndfile) reads it into floats: (x - offset) / scale.
_PCM_SCALE = {np.dtype(np.int8): (0, 2.0**7), np.dtype(np.uint8): (128, 2.0**7),
              np.dtype(np.int16): (0, 2.0**15), np.dtype(np.int32): (0, 2.0**31)}

# Keep each block of the framed signal (frames x taps, float64) near 16 MB.
_BLOCK_BYTES = 16 << 20


def is_audio(x):
    """True for one audio input (an array, a dict, a path or bytes); False for a list, a tuple or
    any other iterable, which the pipelines take as several inputs."""
    if isinstance(x, (list, tuple)):
        return False
    return isinstance(x, (np.ndarray, dict, str, os.PathLike, bytes, bytearray, memoryview)) or (
        hasattr(x, "__array__") or _is_decoder(x))


def _is_decoder(x):
    """A torchcodec AudioDecoder (what a datasets >= 4 Audio column yields), by its method."""
    return callable(getattr(x, "get_all_samples", None))


def load_audio(item, sampling_rate=16000, *, mix_channels=False):
    """Mono float32 samples of one audio input at `sampling_rate` (see the module docstring).

    A 2-D array (given directly or in a dict) raises `InputError`, as transformers' audio
    classification pipelines do, unless `mix_channels=True`: then it is read as (channels,
    samples) and averaged over the channels, as transformers' ASR pipeline does. Bad input
    raises `InputError` naming it."""
    sampling_rate = _check_rate(sampling_rate, "sampling_rate")
    if _is_decoder(item):
        item = _from_decoder(item)
    if isinstance(item, dict):
        samples, rate, what = _from_dict(item)
    elif isinstance(item, (str, os.PathLike)):
        samples, rate, what = _from_path(item)
    elif isinstance(item, (bytes, bytearray, memoryview)):
        what = f"the encoded audio given as bytes ({len(item)} bytes)"
        samples, rate = _decode(bytes(item), what)
    elif isinstance(item, (list, tuple)):
        raise InputError(f"One audio input was expected, got a {type(item).__name__} of "
                         f"{len(item)} items: pass a NumPy array of samples, or give the list to "
                         "the pipeline, which reads each item as one input")
    elif isinstance(item, np.ndarray) or hasattr(item, "__array__"):
        samples = np.asarray(item)
        rate, what = sampling_rate, f"the array of shape {samples.shape} ({samples.dtype})"
    else:
        raise InputError(f"Cannot read audio from a {type(item).__module__}."
                         f"{type(item).__qualname__}: give a NumPy array of samples, a dict "
                         "{'raw' or 'array': samples, 'sampling_rate': rate}, a file path, or the "
                         "bytes of an encoded file")
    samples = _check_samples(samples, what, mix_channels)
    if rate != sampling_rate:
        samples = resample(samples, rate, sampling_rate)
    return samples.astype(np.float32, copy=False)


def resample(samples, orig_sr, new_sr):
    """`torchaudio.functional.resample(samples, orig_sr, new_sr)` with its defaults, over the last
    axis, returned as float32: the rates reduced by their gcd, a Hann-windowed sinc kernel built in
    the samples' dtype as `_get_sinc_resample_kernel` builds it, a strided convolution, and
    torchaudio's output length `ceil(new * length / orig)` (taken in float32, as torchaudio takes
    it)."""
    orig = _check_rate(orig_sr, "orig_sr")
    new = _check_rate(new_sr, "new_sr")
    samples = np.asarray(samples)
    if samples.dtype.kind != "f":
        raise InputError(f"resample takes float samples, got an array of {samples.dtype}: read "
                         "integer PCM with load_audio, which scales it to [-1, 1]")
    if samples.ndim == 0:
        raise InputError("resample takes an array of samples (over its last axis), got a number")
    if orig == new:
        return samples.astype(np.float32, copy=False)
    dtype = np.float64 if samples.dtype == np.float64 else np.float32
    gcd = math.gcd(orig, new)
    orig, new = orig // gcd, new // gcd
    kernel, width = _sinc_kernel(orig, new, np.dtype(dtype))
    rows = samples.astype(dtype, copy=False)
    rows = rows.reshape(math.prod(rows.shape[:-1]), rows.shape[-1])
    # torchaudio: torch.ceil(torch.as_tensor(new * length / orig)), a float32 tensor
    length = int(np.ceil(np.float32(new * samples.shape[-1] / orig)))
    out = np.zeros((len(rows), length), np.float32)
    for i, row in enumerate(rows):
        out[i] = _apply_kernel(row, kernel, width, orig)[:length]
    return out.reshape(samples.shape[:-1] + out.shape[-1:])


@functools.lru_cache(maxsize=16)
def _sinc_kernel(orig, new, dtype):
    """(new, 2 * width + orig) kernel and width, step for step as torchaudio's
    `_get_sinc_resample_kernel` (rates already divided by their gcd)."""
    base_freq = min(orig, new) * _ROLLOFF
    width = math.ceil(_LOWPASS_FILTER_WIDTH * orig / base_freq)
    idx = np.arange(-width, width + orig, dtype=dtype)[None, :] / dtype.type(orig)
    t = np.arange(0, -new, -1, dtype=dtype)[:, None] / dtype.type(new) + idx
    t *= dtype.type(base_freq)
    np.clip(t, -_LOWPASS_FILTER_WIDTH, _LOWPASS_FILTER_WIDTH, out=t)
    window = np.cos(t * dtype.type(math.pi) / dtype.type(_LOWPASS_FILTER_WIDTH)
                    / dtype.type(2)) ** 2
    t *= dtype.type(math.pi)
    with np.errstate(invalid="ignore", divide="ignore"):
        kernels = np.where(t == 0, dtype.type(1.0), np.sin(t) / t)
    kernels *= window * dtype.type(base_freq / orig)
    kernels.flags.writeable = False
    return kernels, width


def _apply_kernel(row, kernel, width, orig):
    """torchaudio's pad (width, width + orig) then conv1d with stride orig, one output phase per
    kernel row; products summed in float64 (torch sums float32 input in float32)."""
    padded = np.pad(row, (width, width + orig))
    taps = kernel.shape[1]
    frames = np.lib.stride_tricks.sliding_window_view(padded, taps)[::orig]
    weights = kernel.astype(np.float64).T
    block = max(1, _BLOCK_BYTES // (taps * 8))
    parts = [frames[i:i + block].astype(np.float64) @ weights
             for i in range(0, len(frames), block)]
    return np.concatenate(parts).reshape(-1)


def _check_rate(rate, name):
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, numbers.Real):
        raise InputError(f"{name} must be a positive whole number of samples per second, got "
                         f"{rate!r}")
    if not float(rate).is_integer() or rate <= 0:
        raise InputError(f"{name} must be a positive whole number of samples per second, got "
                         f"{rate!r}")
    return int(rate)


def _from_decoder(decoder):
    """A torchcodec AudioDecoder as transformers' audio pipelines read one: all its samples
    ((channels, samples), one channel squeezed) and their rate, as a dict."""
    try:
        decoded = decoder.get_all_samples()
        data = decoded.data
        data = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
    except Exception as e:  # noqa: BLE001 - the decoder's own failure, named
        raise InputError(f"The audio decoder {type(decoder).__qualname__} could not decode its "
                         f"samples: {e}") from None
    data = data[0] if data.ndim == 2 and data.shape[0] == 1 else data
    return {"array": data, "sampling_rate": decoded.sample_rate}


def _from_dict(item):
    """transformers' rule: "raw" if it is there (and not None), else "array"; "sampling_rate".
    A datasets Audio dict that was not decoded ({"bytes", "path"}) is decoded from its bytes,
    else its path."""
    samples = item.get("raw")
    key = "raw"
    if samples is None:
        samples, key = item.get("array"), "array"
    if samples is None and (item.get("bytes") is not None or item.get("path") is not None):
        if item.get("bytes") is not None:
            what = f"the dict's 'bytes' ({len(item['bytes'])} bytes)"
            samples, rate = _decode(bytes(item["bytes"]), what)
            return samples, rate, what
        return _from_path(item["path"])
    if samples is None or "sampling_rate" not in item:
        raise InputError("An audio dict needs a 'raw' (or 'array') key with the samples and a "
                         "'sampling_rate' key with their rate (or, undecoded as datasets keeps "
                         f"it, 'bytes' or 'path'); got keys {sorted(map(str, item))}")
    rate = _check_rate(item["sampling_rate"], "The dict's 'sampling_rate'")
    if not (isinstance(samples, (np.ndarray, list, tuple)) or hasattr(samples, "__array__")):
        raise InputError(f"The dict's {key!r} must be an array of samples, got a "
                         f"{type(samples).__qualname__}")
    samples = _asarray(samples, f"The dict's {key!r}")
    return samples, rate, f"the dict's {key!r} (shape {samples.shape}, {samples.dtype})"


def _asarray(samples, what):
    try:
        return np.asarray(samples)
    except ValueError as e:  # ragged nested lists
        raise InputError(f"{what} is not an array of samples: {e}") from None


def _from_path(source):
    path = os.fspath(source)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if url.is_url(path):  # as transformers' audio pipelines: fetched (preprocess/url.py)
        samples, rate = _decode(url.fetch(path, "audio file"), repr(path))
        return samples, rate, repr(path)
    if os.path.isdir(path):
        raise InputError(f"{path!r} is a folder, not an audio file: give its files, one input "
                         "each (a list or an iterable)")
    if not os.path.isfile(path):
        raise InputError(f"No audio file at {path!r}")
    samples, rate = _decode(path, repr(path))
    return samples, rate, repr(path)


def _decode(source, what):
    """Float32 samples, channels averaged, and their rate, from a path or the bytes of a file."""
    frames, rate = _read(source, what)
    return frames.mean(axis=1, dtype=np.float32) if frames.shape[1] > 1 else frames[:, 0], rate


def _read(source, what):
    """(frames, channels) float32 samples and their rate: soundfile first, ffmpeg for what
    libsndfile cannot read."""
    try:
        stream = io.BytesIO(source) if isinstance(source, bytes) else source
        return soundfile.read(stream, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        reason = (str(e).rsplit(": ", 1)[-1] if str(e) else type(e).__name__).rstrip(".")
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise InputError(f"{_cap(what)} is not audio that soundfile can read ({reason}; it "
                         "reads WAV, FLAC, OGG and MP3). If it is another format (M4A, WebM, "
                         "...), ffmpeg is needed to read it: install ffmpeg and put it on PATH"
                         ) from None
    return _ffmpeg_decode(ffmpeg, source, what, reason)


def _ffmpeg_decode(ffmpeg, source, what, reason):
    """The first audio stream as a float WAV at the file's own rate and channels (files, not
    pipes: MP4 and M4A need to seek), read back with soundfile."""
    with tempfile.TemporaryDirectory(prefix="transmuter-audio-") as tmp:
        if isinstance(source, bytes):
            path = os.path.join(tmp, "input")
            with open(path, "wb") as f:
                f.write(source)
            source = path
        out = os.path.join(tmp, "decoded.wav")
        cmd = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", source, "-vn",
               "-map", "0:a:0", "-c:a", "pcm_f32le", "-rf64", "auto", "-f", "wav", out]
        done = subprocess.run(cmd, capture_output=True)
        if done.returncode != 0 or not os.path.isfile(out):
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            detail = lines[-1].removeprefix(f"{source}: ") if lines else f"exit {done.returncode}"
            raise InputError(f"{_cap(what)} is not audio that soundfile or ffmpeg can read "
                             f"(soundfile: {reason}; ffmpeg: {detail})")
        return soundfile.read(out, dtype="float32", always_2d=True)


def _check_samples(samples, what, mix_channels):
    """Float samples of one channel, checked: dtype, shape, non-empty, finite, in range."""
    if samples.dtype in _PCM_SCALE:
        offset, scale = _PCM_SCALE[samples.dtype]
        samples = ((samples.astype(np.float64) - offset) / scale).astype(np.float32)
    elif samples.dtype.kind != "f":
        raise InputError(f"Cannot read audio samples from {what}: give floats in [-1, 1] (or "
                         "int8 / uint8 / int16 / int32 PCM)")
    elif samples.dtype != np.float64:
        samples = samples.astype(np.float32, copy=False)
    samples = _to_mono(samples, what, mix_channels)
    if samples.size == 0:
        raise InputError(f"{_cap(what)} has no samples")
    finite = np.isfinite(samples)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise InputError(f"{_cap(what)} has {bad.size} NaN or infinite sample(s) (the first at "
                         f"index {bad[0]}): audio samples must be finite")
    peak = float(np.abs(samples).max())
    if peak > _MAX_PEAK:
        raise InputError(f"{_cap(what)} peaks at {peak:g}, but float samples are expected in "
                         "[-1, 1]: int16 PCM given as floats should be divided by 32768 (or pass "
                         "the int16 array itself)")
    return samples


def _cap(text):
    return text[:1].upper() + text[1:]


def _to_mono(samples, what, mix_channels):
    if samples.ndim == 1:
        return samples
    if samples.ndim == 0:
        raise InputError(f"{_cap(what)} is a single number, not an array of samples")
    if samples.ndim == 2 and mix_channels and samples.shape[0] <= samples.shape[1]:
        return samples.mean(axis=0)
    layout = ("(channels, samples) with more channels than samples: transpose it if it is "
              "(samples, channels)" if samples.ndim == 2 and mix_channels else
              "several channels or a batch")
    raise InputError(f"One channel of audio was expected, got {what}, {layout}. Mix it down "
                     "first: samples.mean(axis=1) for (samples, channels) as soundfile reads "
                     "it, samples.mean(axis=0) for (channels, samples); several clips go to the "
                     "pipeline as a list")
