"""Signal processing: DFT, STFT (through the ``fft`` primitive), the Hann, Hamming and Blackman
windows and MelWeightMatrix (host constants). Complex values are real tensors with a trailing
dimension of 2 (real, imaginary); a trailing 1 is a real signal."""

import numpy as np

from .. import dtypes
from .registry import op


def _int(v):
    return int(np.asarray(v).reshape(-1)[0])


def _dft(xp, x, length, axis, inverse, onesided):
    dtype = xp.dtype_of(x)
    if dtypes.is_half(dtype):
        x = xp.astype(x, np.float32)
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise ValueError("the DFT axis cannot be the last one (it holds real and imaginary parts)")
    real_signal = x.shape[-1] == 1
    signal = x[..., 0] if real_signal else x[..., 0] + x[..., 1] * 1j
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse and onesided:  # one-sided spectrum in, real signal out
        return xp.astype(xp.fft(signal, n=length, axis=axis, kind="irfft")[..., None], dtype)
    if real_signal and not inverse:
        # A real signal takes the real-input FFT: half the work, and the bins the maths makes
        # real (DC, Nyquist) come out exactly real, where a complex FFT leaves rounding noise
        # there (~1e-6 on sums near 450, against the conformance cases' atol 1e-7).
        y = xp.fft(signal, n=length, axis=axis, kind="rfft")
        re, im = xp.real(y), xp.imag(y)
        if not onesided:
            re, im = _hermitian(xp, re, im, length, axis)
        return xp.astype(xp.stack([re, im], axis=-1), dtype)
    y = xp.fft(signal, n=length, axis=axis, kind="ifft" if inverse else "fft")
    if onesided:
        index = [slice(None)] * y.ndim
        index[axis] = slice(0, length // 2 + 1)
        y = y[tuple(index)]
    return xp.astype(xp.stack([xp.real(y), xp.imag(y)], axis=-1), dtype)


def _hermitian(xp, re, im, length, axis):
    """The full spectrum of a real signal from its one-sided half: X[k] = conj(X[n - k])."""
    k = np.arange(length)
    mirrored = k > length // 2
    source = np.where(mirrored, length - k, k).astype(np.int64)
    sign = np.where(mirrored, -1, 1).astype(np.dtype(xp.dtype_of(im)))
    shape = [1] * im.ndim
    shape[axis] = length
    return (xp.take(re, xp.asarray(source), axis=axis),
            xp.take(im, xp.asarray(source), axis=axis) * xp.asarray(sign.reshape(shape)))


@op("DFT", 17, static=(1,))
def dft_v17(xp, x, dft_length=None, *, axis=1, inverse=0, onesided=0):
    length = None if dft_length is None else _int(dft_length)
    return _dft(xp, x, length, axis, inverse, onesided)


@op("DFT", 20, static=(1, 2))
def dft(xp, x, dft_length=None, axis=None, *, inverse=0, onesided=0):
    length = None if dft_length is None else _int(dft_length)
    return _dft(xp, x, length, -2 if axis is None else _int(axis), inverse, onesided)


@op("STFT", 17, static=(1, 3))
def stft(xp, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    if signal.ndim == 2:  # (batch, length): a real signal, as ONNX Runtime reads it (Kokoro's)
        signal = xp.expand_dims(signal, -1)
    step = _int(frame_step)
    if frame_length is not None:
        width = _int(frame_length)
    else:
        width = window.shape[0] if window is not None else signal.shape[1]
    n_frames = 1 + (signal.shape[1] - width) // step
    index = np.arange(n_frames)[:, None] * step + np.arange(width)[None, :]
    # (batch, frames, width, 1 or 2)
    frames = xp.take(signal, xp.asarray(index.astype(np.int64)), axis=1)
    if window is not None:
        frames = frames * xp.reshape(xp.astype(window, xp.dtype_of(signal)), (1, 1, width, 1))
    if frames.shape[-1] == 1:
        return _real_frames_dft(xp, frames[..., 0], width, onesided)
    return _dft(xp, frames, width, 2, 0, onesided)


def _real_frames_dft(xp, frames, width, onesided):
    """The DFT of real frames (..., width) as one product with a cos / -sin table (float64 on
    the host, rounded once). Why not the FFT: it cancels exactly, so a constant frame under a
    Hann window gets bins of exactly 0 + 0j, where ONNX Runtime's DFT (Bluestein) leaves
    rounding noise, and exports that take the phase as atan(im / re) (Kokoro's vocoder) read
    0 / 0 = NaN there. Rounding: a float32 sum of ``width`` terms, as a matmul."""
    dtype = xp.dtype_of(frames)
    if dtypes.is_half(dtype):
        frames = xp.astype(frames, np.float32)
    bins = width // 2 + 1 if onesided else width
    k, n = np.arange(bins)[None, :], np.arange(width)[:, None]
    angle = 2 * np.pi * ((k * n) % width) / width
    table = np.concatenate([np.cos(angle), -np.sin(angle)], axis=1).astype(
        xp.dtype_of(frames))
    y = xp.matmul(frames, xp.asarray(table))  # (..., 2 * bins): real parts, imaginary parts
    y = xp.stack([y[..., :bins], y[..., bins:]], axis=-1)
    return xp.astype(y, dtype)


def _window(size, periodic, output_datatype, terms):
    """sum_k a_k cos(2 pi k n / N), N = size (periodic) or size - 1 (symmetric)."""
    size = _int(size)
    n = np.arange(size, dtype=np.float64)
    denom = size if periodic else size - 1
    w = sum(a * np.cos(2 * np.pi * k * n / denom) for k, a in enumerate(terms))
    return w.astype(dtypes.to_numpy(output_datatype))


@op("HannWindow", 17, static="all")
def hann_window(xp, size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.5, -0.5))


@op("HammingWindow", 17, static="all")
def hamming_window(xp, size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (25 / 46, -21 / 46))


@op("BlackmanWindow", 17, static="all")
def blackman_window(xp, size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.42, -0.5, 0.08))


@op("MelWeightMatrix", 17, static="all")
def mel_weight_matrix(xp, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype=1):
    n_mel, n_fft, rate = _int(num_mel_bins), _int(dft_length), _int(sample_rate)
    low = float(np.asarray(lower_edge_hertz).reshape(-1)[0])
    high = float(np.asarray(upper_edge_hertz).reshape(-1)[0])
    to_mel = lambda hz: 2595 * np.log10(1 + hz / 700)  # noqa: E731
    low_mel, high_mel = to_mel(low), to_mel(high)
    # n_mel + 2 points spaced evenly in mel from the lower edge, as ONNX's reference spaces them.
    mels = np.arange(n_mel + 2) * (high_mel - low_mel) / (n_mel + 2) + low_mel
    hz = 700 * (10 ** (mels / 2595) - 1)
    bins = ((n_fft + 1) * hz // rate).astype(np.int64)
    out = np.zeros((n_fft // 2 + 1, n_mel))
    for i in range(n_mel):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out.astype(dtypes.to_numpy(output_datatype))
