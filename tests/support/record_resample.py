"""Records torchaudio.functional.resample (its defaults) for tests/test_audio_input.py: real speech
(tests/fixtures/speech/cat.wav read by soundfile as float32) and synthetic signals, for the rate
pairs the audio pipelines meet.

    /root/.cache/transmuter-tests/venv-audio/bin/python tests/support/record_resample.py

Writes tests/fixtures/audio_io/resample.npz (float32 outputs, ~0.2 MB; requirements-audio.txt):
- "speech_22050_16000": the whole of cat.wav (22,050 Hz) at 16 kHz.
- "excerpt_{o}_{n}": 0.1 s of cat.wav (o // 10 samples from sample EXCERPT_START; resampling
  takes the samples at whatever rate it is told), for each pair; "excerpt64_{o}_{n}": the same
  in float64 (torchaudio then builds its kernel in float64), stored as float32.
- "noise_{o}_{n}": uniform noise in [-0.9, 0.9] ("noise", stored), full-band for the low-pass.
- "short{L}_{o}_{n}": L = 1, 5, 100 samples ("short{L}", stored), shorter than the kernel.
- "batch_{o}_{n}": a (2, 100) batch (rows "short100" and the noise's first 100 samples).
- "lengths": rows (orig, new, input length, output length) for long inputs, some where
  ceil(new * length / orig) taken in float32 (as torchaudio takes it) is not the exact ceil.
"""

import math
import pathlib

import numpy as np
import soundfile
import torch
import torchaudio
from torchaudio import functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "audio_io" / "resample.npz"
PAIRS = [(22050, 16000), (8000, 16000), (44100, 16000), (48000, 16000), (16000, 48000),
         (16000, 22050), (48000, 44100)]
EXCERPT_START = 2205
SHORT = (1, 5, 100)


def resampled(x, orig, new):
    return F.resample(torch.from_numpy(np.ascontiguousarray(x)), orig, new).numpy()


def float32_ceil_differs(orig, new, near):
    """The first input length from `near` on whose float32 ceil is not the exact ceil."""
    g = math.gcd(orig, new)
    for length in range(near, near + 100_000):
        exact = -(-new // g * length // (orig // g))
        if int(np.ceil(np.float32(new * length / orig))) != exact:
            return length
    raise RuntimeError("no such length")


def main():
    speech, rate = soundfile.read(ROOT / "tests/fixtures/speech/cat.wav", dtype="float32")
    assert rate == 22050, rate
    noise = np.random.default_rng(0).uniform(-0.9, 0.9, 1000).astype(np.float32)
    out = {"noise": noise, "versions": np.array([torch.__version__, torchaudio.__version__]),
           "excerpt_start": np.array(EXCERPT_START),
           "speech_22050_16000": resampled(speech, 22050, 16000)}
    for length in SHORT:
        out[f"short{length}"] = (0.6 * np.sin(0.37 * np.arange(length) + 0.5)).astype(np.float32)
    for o, n in PAIRS:
        excerpt = speech[EXCERPT_START:EXCERPT_START + o // 10]
        out[f"excerpt_{o}_{n}"] = resampled(excerpt, o, n)
        out[f"excerpt64_{o}_{n}"] = resampled(excerpt.astype(np.float64), o, n).astype(np.float32)
        out[f"noise_{o}_{n}"] = resampled(noise, o, n)
        for length in SHORT:
            out[f"short{length}_{o}_{n}"] = resampled(out[f"short{length}"], o, n)
        out[f"batch_{o}_{n}"] = resampled(np.stack([out["short100"], noise[:100]]), o, n)
    rows = []
    for o, n in [(22050, 16000), (44100, 16000), (16000, 22050), (48000, 44100)]:
        for length in (1_440_000, float32_ceil_differs(o, n, 1_440_000)):
            rows.append((o, n, length, resampled(np.zeros(length, np.float32), o, n).shape[-1]))
    out["lengths"] = np.array(rows, dtype=np.int64)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1e3:.0f} kB, {len(out)} arrays)")


if __name__ == "__main__":
    main()
