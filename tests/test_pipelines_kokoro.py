"""text-to-speech on Kokoro: the tiny fixture (tests/fixtures/kokoro, made by
tests/support/record_kokoro.py) against the kokoro package's KModel on PyTorch, on JAX and MLX;
voices, blends and the style row kokoro-js picks; long phonemes split under 510; stream=True;
text through a stand-in phonemizer (the real one is preprocess/phonemes' own, tested there);
clear errors; the CLI's WAV files; examples/read_aloud.py."""

import json
import pathlib
import shutil

import numpy as np
import pytest
import soundfile

import transmuter
from transmuter import cli
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError
from transmuter.pipelines.audio.tts import kokoro
from transmuter.preprocess import phonemes as g2p

from .fixtures import ROOT

FIXTURE = ROOT / "kokoro"
REFERENCE = json.loads((FIXTURE / "references/kokoro.json").read_text())
ARRAYS = np.load(FIXTURE / "references/kokoro.npz")
CASES = {c["name"]: c for c in REFERENCE["cases"]}
# Of the peak. onnxruntime and torch differ by up to 4.8e-5 on these cases (float32 in other op
# orders through ALBERT, LSTMs and the vocoder: record_kokoro.py); we by up to 7.7e-5 (MLX,
# "past_rows"). 2e-4 lets those through and not a wrong style row, speed or op (>1e-2).
TOL = 2e-4
FAST = "mlx"  # options and errors do not depend on the backend; MLX compiles faster
_PIPES = {}


def pipe(backend=FAST):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("text-to-speech", FIXTURE, backend=backend)
    return _PIPES[backend]


def voice_rows(name):
    return np.fromfile(FIXTURE / f"voices/{name}.bin", np.float32).reshape(-1, 256)


def assert_audio(got, name, where=""):
    want = ARRAYS[f"{name}/audio"]
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, where
    assert got.shape == want.shape, f"{where}: {got.shape[0]} samples, torch {want.shape[0]}"
    gap = float(np.abs(got - want).max() / np.abs(want).max())
    assert gap <= TOL, f"{where}: max |diff| {gap} of the peak"


# Each new phoneme count and frame count compiles (kokoro.py's docstring): ~10 s a case on JAX on
# two shared cores, so JAX runs one case by default (the longest, past the voice's last row)
JAX_DEFAULT = {"past_rows"}


@pytest.mark.parametrize("backend,name", [
    pytest.param(b, n, marks=() if b == "mlx" or n in JAX_DEFAULT else pytest.mark.slow)
    for b in ("jax", "mlx") for n in CASES])
def test_matches_the_kokoro_package_on_torch(backend, name):
    case = CASES[name]
    out = pipe(backend)({"phonemes": case["phonemes"]}, voice=case["voice"], speed=case["speed"])
    assert set(out) == {"audio", "sampling_rate"} and out["sampling_rate"] == 24000
    assert_audio(out["audio"], name, f"{name} ({backend})")


def test_style_row_is_kokoro_js_token_count_clamped_to_the_voice():
    speech, feeds = pipe().speech, []
    run = speech.run
    speech.run = lambda feed: feeds.append(feed) or {"waveform": np.zeros(3, np.float32)}
    try:
        for case in REFERENCE["cases"]:
            rows = voice_rows(case["voice"])
            speech.speak_ids(case["ids"], rows, case["speed"])
            style = feeds[-1]["style"]
            assert np.array_equal(style[0], rows[min(len(case["ids"]) - 2, len(rows) - 1)])
            assert np.array_equal(style, ARRAYS[f"{case['name']}/style"])  # what torch got
            assert feeds[-1]["input_ids"].tolist() == [case["ids"]]
            assert feeds[-1]["speed"].tolist() == [np.float32(case["speed"])]
    finally:
        speech.run = run


def test_voices_by_name_blend_weights_and_arrays():
    speech = pipe().speech
    heart, adam = voice_rows("af_heart"), voice_rows("am_adam")
    assert np.array_equal(speech.voice("af_heart")[0], heart)
    blend = speech.voice("af_heart:0.6,am_adam:0.4")
    assert blend[1] == "af_heart"
    np.testing.assert_allclose(blend[0], 0.6 * heart + 0.4 * adam, rtol=1e-6, atol=1e-7)
    # no weights: the mean, as the kokoro package's load_voice("a,b")
    np.testing.assert_allclose(speech.voice("af_heart,am_adam")[0], (heart + adam) / 2,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(speech.voice({"af_heart": 3, "am_adam": 1})[0],
                               0.75 * heart + 0.25 * adam, rtol=1e-6, atol=1e-7)
    assert speech.voice(heart.reshape(-1, 1, 256))[0].shape == heart.shape
    assert speech.voice(heart[5])[0].shape == (1, 256)  # one style for every length


def test_a_blend_speaks_its_mixed_style():
    p = pipe()
    feed = {"phonemes": CASES["one"]["phonemes"]}
    mixed = p(feed, voice=0.5 * voice_rows("af_heart") + 0.5 * voice_rows("bf_emma"))
    assert np.array_equal(p(feed, voice="af_heart,bf_emma")["audio"], mixed["audio"])
    assert not np.allclose(mixed["audio"][:100], p(feed)["audio"][:100])


def test_long_phonemes_split_under_510_at_sentence_then_clause_ends():
    count = pipe().speech.count
    sentence = "ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ, ænd ðə kˈæt slˈɛpt."
    text = " ".join([sentence] * 12)  # 12 x 76 phonemes
    parts = kokoro.split(text, count)
    assert [count(p) for p in parts] == [count(" ".join([sentence] * 6))] * 2
    assert all(p.endswith(".") for p in parts) and " ".join(parts) == text
    # no sentence end in reach: the last comma, then the last word
    clauses = kokoro.split(text.replace(".", ""), count)
    assert all(count(p) <= 510 for p in clauses) and all(p.endswith(",") for p in clauses[:-1])
    words = kokoro.split("ə " * 400, count)
    assert [count(p) for p in words] == [509, 289]  # 255 words and their 254 spaces
    assert kokoro.split("a" * 600, count) == ["a" * 510, "a" * 90]
    assert kokoro.split("həlˈoʊ wˈɜːld! ðɪs ɪz ɐ tˈɛst.", count, sentences=True) == [
        "həlˈoʊ wˈɜːld!", "ðɪs ɪz ɐ tˈɛst."]
    chunks = list(pipe().preprocess({"phonemes": text}))
    assert [len(c["ids"]) for c in chunks] == [count(p) + 2 for p in parts]


def test_stream_yields_each_sentence_as_it_is_spoken():
    hello = CASES["hello"]
    parts = pipe()({"phonemes": f"{hello['phonemes']}  {hello['phonemes']}"}, stream=True)
    assert not isinstance(parts, (list, dict))
    first = next(parts)
    assert first["phonemes"] == hello["phonemes"] and first["sampling_rate"] == 24000
    assert_audio(first["audio"], "hello", "first sentence")
    rest = list(parts)
    assert len(rest) == 1
    assert_audio(rest[0]["audio"], "hello", "second sentence")


def test_text_goes_through_the_phonemizer_in_the_voices_language(monkeypatch):
    calls = []

    def phonemize(text, language="a", normalize=True):
        calls.append((text, language))
        return {"Hello world!": CASES["hello"]["phonemes"], "This is a test.":
                CASES["slow"]["phonemes"]}[text]

    monkeypatch.setattr(g2p, "phonemize", phonemize)
    out = pipe()("Hello world!", voice="af_heart")
    assert calls == [("Hello world!", "a")]
    assert_audio(out["audio"], "hello", "text")
    out = pipe()("Hello world!\n\nThis is a test.\n", voice="bf_emma", speed=0.8)
    assert calls[1:] == [("Hello world!", "b"), ("This is a test.", "b")]  # a call per paragraph
    slow = ARRAYS["slow/audio"]
    assert out["audio"].shape[0] > slow.shape[0]
    np.testing.assert_allclose(out["audio"][-slow.shape[0]:], slow,
                               atol=TOL * np.abs(slow).max())
    assert pipe()("Hello world!", voice="af_heart", language="b") and calls[-1][1] == "b"


def test_errors_name_the_fix(monkeypatch):
    p = pipe()
    with pytest.raises(PipelineError, match=r"Unknown voice 'af_nobody'.*af_heart, am_adam, "
                                            r"bf_emma"):
        p({"phonemes": "ə"}, voice="af_nobody")
    with pytest.raises(PipelineError, match="speed must be a positive number"):
        p({"phonemes": "ə"}, speed=0)
    with pytest.raises(PipelineError, match="weight must be a number"):
        p({"phonemes": "ə"}, voice="af_heart:lots")
    with pytest.raises(PipelineError, match=r"array \[rows, 1, 256\]"):
        p({"phonemes": "ə"}, voice=np.zeros((4, 128)))
    with pytest.raises(PipelineError, match="takes voice=, speed= and language="):
        p({"phonemes": "ə"}, pitch=2)
    with pytest.raises(InputError, match="phonemes"):
        p({"text": "ə"})
    with pytest.raises(InputError, match="No Kokoro phoneme is left"):
        p({"phonemes": "123#"})
    with pytest.raises(PipelineError, match="stream=True speaks one input"):
        p([{"phonemes": "ə"}], stream=True)

    def missing(text, language="a", normalize=True):
        raise NotImplementedError("phonemize: being written")

    monkeypatch.setattr(g2p, "phonemize", missing)
    with pytest.raises(PipelineError, match=r"phonemizer .*give phonemes directly"):
        p("Hello")


def test_cli_writes_wav_files(tmp_path, monkeypatch):
    monkeypatch.setattr(g2p, "phonemize", lambda text, language="a", normalize=True:
                        CASES["hello"]["phonemes"])
    out = tmp_path / "hello.wav"
    assert cli.main(["run", "text-to-speech", str(FIXTURE), "Hello world!", "--output", str(out),
                     "--backend", FAST, "--quiet"]) == 0
    audio, rate = soundfile.read(out, dtype="float32", always_2d=False)
    assert rate == 24000 and soundfile.info(out).subtype == "FLOAT"
    assert_audio(audio, "hello", "hello.wav")  # a float WAV holds the samples exactly
    # phonemes from a .jsonl file, options as JSON: a WAV file per line
    lines = tmp_path / "phonemes.jsonl"
    lines.write_text("".join(json.dumps({"phonemes": CASES[n]["phonemes"]}, ensure_ascii=False)
                             + "\n" for n in ("slow", "slow")), encoding="utf-8")
    jsonl = tmp_path / "out.jsonl"
    assert cli.main(["run", "text-to-speech", str(FIXTURE), "--input", str(lines), "--output",
                     str(jsonl), "--options", '{"voice": "bf_emma", "speed": 0.8}',
                     "--backend", FAST, "--quiet"]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == 2
    slow, _ = soundfile.read(rows[1]["output"]["file"], dtype="float32", always_2d=False)
    assert_audio(slow, "slow", "out_files")


def test_read_aloud_example_writes_a_wav_per_paragraph(tmp_path):
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "examples/read_aloud.py"
    spec = importlib.util.spec_from_file_location("read_aloud", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    book = tmp_path / "book.txt"
    book.write_text(f"{CASES['hello']['phonemes']}\n\n\n{CASES['one']['phonemes']}\n",
                    encoding="utf-8")
    written = module.main([str(book), "--model", str(FIXTURE), "--phonemes", "--backend", FAST])
    assert [p.name for p in written] == ["book_001.wav", "book_002.wav"]
    assert written[0].parent == tmp_path / "book_audio"
    for wav, name in zip(written, ("hello", "one")):
        assert_audio(soundfile.read(wav, dtype="float32")[0], name, wav.name)


def test_a_folder_in_kokoro_onnx_layout(tmp_path):
    """kokoro-onnx's files: the graph at the root, every voice in one .npz (its voices-v1.0.bin
    is one), the vocabulary in vocab.json; no config.json, no tokenizer.json."""
    shutil.copy(FIXTURE / "onnx/model.onnx", tmp_path / "kokoro-tiny.onnx")
    with open(tmp_path / "voices-tiny.bin", "wb") as f:
        np.savez(f, **{n: voice_rows(n).reshape(-1, 1, 256) for n in ("af_heart", "am_adam")})
    vocab = json.loads((FIXTURE / "tokenizer.json").read_text())["model"]["vocab"]
    (tmp_path / "vocab.json").write_text(json.dumps({"vocab": {k: v for k, v in vocab.items()
                                                               if k != "$"}}))
    p = transmuter.pipeline("text-to-speech", tmp_path, backend=FAST)
    assert isinstance(p, kokoro.KokoroTextToAudioPipeline)
    assert p.speech.voices == ["af_heart", "am_adam"]
    text = "həlˈoʊ wˈɜːld!#42"  # characters outside the vocabulary are dropped by both
    assert p.speech.ids(text) == pipe().speech.ids(text) == CASES["hello"]["ids"]
    out = p({"phonemes": CASES["hello"]["phonemes"]}, voice="af_heart")
    assert_audio(out["audio"], "hello", "kokoro-onnx layout")
    with pytest.raises(PipelineError, match="Unknown voice 'bf_emma'.*af_heart, am_adam"):
        p({"phonemes": "ə"}, voice="bf_emma")
