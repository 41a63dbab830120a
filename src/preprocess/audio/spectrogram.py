"""Spectrogram math shared by the audio feature extractors: a NumPy port of transformers'
audio_utils.py (4.57), limited to what the extractors in features.py use.

The numbers follow transformers step by step so features match: frames are cut from the
waveform promoted to float64, each frame's FFT is stored as complex64 (as transformers' buffer
is), magnitudes are taken in float64, the mel projection and the log run in float64, and only a
log spectrogram is cast to `dtype` at the end. Where transformers loops over frames we work on all
frames at once; the FFT of a stack of rows may differ from the row-by-row one in the last float64
bit, which the complex64 store hides.
"""

import numpy as np

MEL_SCALES = ("htk", "slaney", "kaldi")
WINDOWS = ("boxcar", "hamming", "hamming_window", "hann", "hann_window", "povey")
LOG_MELS = (None, "log", "log10", "dB")


def _check_scale(mel_scale):
    if mel_scale not in MEL_SCALES:
        raise ValueError(f"mel_scale should be one of {', '.join(MEL_SCALES)}, got {mel_scale!r}")


def hertz_to_mel(freq, mel_scale="htk"):
    """Hertz to mels on the HTK, Slaney (linear below 1 kHz, log above) or Kaldi scale."""
    _check_scale(mel_scale)
    if mel_scale == "htk":
        return 2595.0 * np.log10(1.0 + (freq / 700.0))
    if mel_scale == "kaldi":
        return 1127.0 * np.log(1.0 + (freq / 700.0))
    min_log_hertz, min_log_mel, logstep = 1000.0, 15.0, 27.0 / np.log(6.4)
    mels = 3.0 * freq / 200.0
    if isinstance(freq, np.ndarray):
        log_region = freq >= min_log_hertz
        mels[log_region] = min_log_mel + np.log(freq[log_region] / min_log_hertz) * logstep
    elif freq >= min_log_hertz:
        mels = min_log_mel + np.log(freq / min_log_hertz) * logstep
    return mels


def mel_to_hertz(mels, mel_scale="htk"):
    """The inverse of hertz_to_mel."""
    _check_scale(mel_scale)
    if mel_scale == "htk":
        return 700.0 * (np.power(10, mels / 2595.0) - 1.0)
    if mel_scale == "kaldi":
        return 700.0 * (np.exp(mels / 1127.0) - 1.0)
    min_log_hertz, min_log_mel, logstep = 1000.0, 15.0, np.log(6.4) / 27.0
    freq = 200.0 * mels / 3.0
    if isinstance(mels, np.ndarray):
        log_region = mels >= min_log_mel
        freq[log_region] = min_log_hertz * np.exp(logstep * (mels[log_region] - min_log_mel))
    elif mels >= min_log_mel:
        freq = min_log_hertz * np.exp(logstep * (mels - min_log_mel))
    return freq


def _triangular_filter_bank(fft_freqs, filter_freqs):
    """(num_frequency_bins, num_filters) triangles with corners at consecutive filter_freqs."""
    filter_diff = np.diff(filter_freqs)
    slopes = np.expand_dims(filter_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    return np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))


def mel_filter_bank(num_frequency_bins, num_mel_filters, min_frequency, max_frequency,
                    sampling_rate, norm=None, mel_scale="htk", triangularize_in_mel_space=False):
    """(num_frequency_bins, num_mel_filters) float64 projection from a spectrogram to mels.

    norm="slaney" divides each triangle by its width in hertz (constant energy per channel);
    triangularize_in_mel_space draws the triangles on the mel axis, as Kaldi / torchaudio do.
    """
    if norm not in (None, "slaney"):
        raise ValueError(f'norm must be None or "slaney", got {norm!r}')
    if num_frequency_bins < 2:
        raise ValueError(f"num_frequency_bins must be >= 2, got {num_frequency_bins}")
    if min_frequency > max_frequency:
        raise ValueError(f"min_frequency {min_frequency} is above max_frequency {max_frequency}")
    mel_min = hertz_to_mel(min_frequency, mel_scale=mel_scale)
    mel_max = hertz_to_mel(max_frequency, mel_scale=mel_scale)
    mel_freqs = np.linspace(mel_min, mel_max, num_mel_filters + 2)
    filter_freqs = mel_to_hertz(mel_freqs, mel_scale=mel_scale)
    if triangularize_in_mel_space:
        fft_bin_width = sampling_rate / ((num_frequency_bins - 1) * 2)
        fft_freqs = hertz_to_mel(fft_bin_width * np.arange(num_frequency_bins), mel_scale=mel_scale)
        filter_freqs = mel_freqs
    else:
        # sampling_rate // 2, an integer division, as transformers (and librosa) write it
        fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    filters = _triangular_filter_bank(fft_freqs, filter_freqs)
    if norm == "slaney":
        enorm = 2.0 / (filter_freqs[2:num_mel_filters + 2] - filter_freqs[:num_mel_filters])
        filters *= np.expand_dims(enorm, 0)
    return filters


def optimal_fft_length(window_length):
    """The next power of two at or above window_length."""
    return 2 ** int(np.ceil(np.log2(window_length)))


def window_function(window_length, name="hann", periodic=True, frame_length=None, center=True):
    """A float64 window; zero-padded (centered or not) to frame_length when that is given."""
    length = window_length + 1 if periodic else window_length
    if name == "boxcar":
        window = np.ones(length)
    elif name in ("hamming", "hamming_window"):
        window = np.hamming(length)
    elif name in ("hann", "hann_window"):
        window = np.hanning(length)
    elif name == "povey":
        window = np.power(np.hanning(length), 0.85)
    else:
        raise ValueError(f"Unknown window function {name!r}; known: {', '.join(WINDOWS)}")
    if periodic:
        window = window[:-1]
    if frame_length is None:
        return window
    if window_length > frame_length:
        raise ValueError(f"window_length {window_length} exceeds frame_length {frame_length}")
    padded = np.zeros(frame_length)
    offset = (frame_length - window_length) // 2 if center else 0
    padded[offset:offset + window_length] = window
    return padded


def _frames(waveform, frame_length, hop_length):
    """(num_frames, frame_length) float64 copies of the frames transformers' loop visits."""
    num_frames = int(1 + np.floor((waveform.size - frame_length) / hop_length))
    if num_frames < 1:
        raise ValueError(f"The waveform ({waveform.size} samples) is shorter than one frame "
                         f"({frame_length} samples)")
    view = np.lib.stride_tricks.sliding_window_view(waveform, frame_length)
    return np.array(view[::hop_length][:num_frames], dtype=np.float64)


def spectrogram(waveform, window, frame_length, hop_length, fft_length=None, power=1.0,
                center=True, pad_mode="reflect", onesided=True, preemphasis=None,
                mel_filters=None, mel_floor=1e-10, log_mel=None, reference=1.0, min_value=1e-10,
                db_range=None, remove_dc_offset=False, dtype=np.float32):
    """(num_frequency_bins or num_mel_filters, num_frames) spectrogram of one mono waveform, as
    transformers' audio_utils.spectrogram (without dither). `power` 1 gives amplitudes, 2 power,
    None the complex64 STFT; `log_mel` None, "log", "log10" or "dB"."""
    fft_length = frame_length if fft_length is None else fft_length
    _check_spectrogram_args(waveform, window, frame_length, hop_length, fft_length, power,
                            mel_filters, log_mel)
    if center:
        half = int(frame_length // 2)
        waveform = np.pad(waveform, [(half, half)], mode=pad_mode)
    frames = _frames(waveform.astype(np.float64), frame_length, hop_length)
    if remove_dc_offset:
        frames = frames - frames.mean(axis=1, keepdims=True)
    if preemphasis is not None:
        # transformers: buffer[1:] -= p * buffer[:-1] reads the frame before the update
        frames[:, 1:] -= preemphasis * frames[:, :-1]
        frames[:, 0] *= 1 - preemphasis
    frames *= window.astype(np.float64)
    fft = np.fft.rfft if onesided else np.fft.fft
    spec = fft(frames, n=fft_length, axis=1).astype(np.complex64)
    if power is None:
        return spec.T
    spec = (np.abs(spec, dtype=np.float64) ** power).T
    if mel_filters is not None:
        spec = np.maximum(mel_floor, np.dot(mel_filters.T, spec))
    if log_mel is None:
        return spec
    return np.asarray(_log(spec, log_mel, power, reference, min_value, db_range), dtype)


def _check_spectrogram_args(waveform, window, frame_length, hop_length, fft_length, power,
                            mel_filters, log_mel):
    if frame_length > fft_length:
        raise ValueError(f"frame_length ({frame_length}) may not exceed fft_length ({fft_length})")
    if len(window) != frame_length:
        raise ValueError(f"The window ({len(window)}) must be frame_length ({frame_length}) long")
    if hop_length <= 0:
        raise ValueError(f"hop_length must be positive, got {hop_length}")
    if waveform.ndim != 1:
        raise ValueError(f"The waveform must be one-dimensional, got shape {waveform.shape}")
    if np.iscomplexobj(waveform):
        raise ValueError("Complex-valued waveforms are not supported")
    if power is None and mel_filters is not None:
        raise ValueError("mel_filters need a power spectrogram: set power to 1.0 or 2.0")
    if log_mel not in LOG_MELS:
        raise ValueError(f"Unknown log_mel {log_mel!r}; known: {LOG_MELS}")


def _log(spec, log_mel, power, reference, min_value, db_range):
    if log_mel == "log":
        return np.log(spec)
    if log_mel == "log10":
        return np.log10(spec)
    if power == 1.0:
        return amplitude_to_db(spec, reference, min_value, db_range)
    if power == 2.0:
        return power_to_db(spec, reference, min_value, db_range)
    raise ValueError(f"log_mel 'dB' needs power 1.0 or 2.0, got {power}")


def _to_db(spectrogram, factor, reference, min_value, db_range):
    if reference <= 0.0:
        raise ValueError("reference must be greater than zero")
    if min_value <= 0.0:
        raise ValueError("min_value must be greater than zero")
    reference = max(min_value, reference)
    spectrogram = np.clip(spectrogram, a_min=min_value, a_max=None)
    spectrogram = factor * (np.log10(spectrogram) - np.log10(reference))
    if db_range is not None:
        if db_range <= 0.0:
            raise ValueError("db_range must be greater than zero")
        spectrogram = np.clip(spectrogram, a_min=spectrogram.max() - db_range, a_max=None)
    return spectrogram


def power_to_db(spectrogram, reference=1.0, min_value=1e-10, db_range=None):
    """10 * log10(spectrogram / reference), clipped below at min_value (and db_range below the
    peak when given), as librosa.power_to_db."""
    return _to_db(spectrogram, 10.0, reference, min_value, db_range)


def amplitude_to_db(spectrogram, reference=1.0, min_value=1e-5, db_range=None):
    """20 * log10(spectrogram / reference), clipped as power_to_db."""
    return _to_db(spectrogram, 20.0, reference, min_value, db_range)


def shrink_bilinear(values, rows):
    """(rows, columns) float32 resample of a (frames, columns) float32 array along its first axis
    with torch's interpolate(mode="bilinear", align_corners=False), which CLAP's fusion uses to
    shrink a long mel spectrogram (columns keep their size, so their weights are exactly 1, 0).
    Weights are computed in float32 as ATen's CPU kernel computes them."""
    frames = values.shape[0]
    scale = np.float32(frames) / np.float32(rows)
    src = scale * (np.arange(rows, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5)
    src = np.maximum(src, np.float32(0.0))
    low = np.floor(src).astype(np.int64)
    high = np.minimum(low + 1, frames - 1)
    lam1 = np.clip(src - low.astype(np.float32), np.float32(0.0), np.float32(1.0))
    lam0 = np.float32(1.0) - lam1
    return values[low] * lam0[:, None] + values[high] * lam1[:, None]
