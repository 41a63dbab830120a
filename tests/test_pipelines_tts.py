"""text-to-speech / text-to-audio (VITS, SpeechT5 + HiFi-GAN) against transformers' waveforms
recorded in full by tests/support/record_tts.py (references/pipeline_text-to-speech.json + .npz),
on JAX and MLX; the tokenizers against transformers' ids (record_tts_tokenizers.py); a batch
equals one by one; clear errors; the CLI's --output hello.wav."""

import json
import shutil

import numpy as np
import pytest

import transmuter
from transmuter import cli, hub
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError, registry
from transmuter.preprocess.text.tokenizer import TokenizerError

from .fixtures import ROOT, pipeline_reference, pipeline_references

FIXTURES = [f for f, _ in pipeline_references({"text-to-speech"})]
# The design's bound, relative to the waveform's peak: VITS peaks at 1.0 (measured gap 1.8e-5,
# XLA's and MLX's float32 sums in another order than PyTorch's); the tiny SpeechT5's vocoder
# peaks at 0.011, where an absolute 1e-4 would let a 1% error through (measured gap 6e-9).
TOL = 1e-4
# Options and errors do not depend on the backend: MLX compiles the per-step SpeechT5 shapes in
# milliseconds where XLA takes seconds each.
FAST = "mlx"
_PIPES = {}


def pipe(fixture, backend=FAST):
    if (fixture, backend) not in _PIPES:
        _PIPES[fixture, backend] = transmuter.pipeline("text-to-speech", ROOT / fixture,
                                                       backend=backend)
    return _PIPES[fixture, backend]


def resolved(value, fixture):
    """call_kwargs with the recorded "references/..." paths made absolute."""
    if isinstance(value, dict):
        return {k: resolved(v, fixture) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("references/"):
        return str(ROOT / fixture / value)
    return value


def cases(fixture):
    """(case, recorded audio) of a fixture's reference."""
    ref = pipeline_reference(fixture, "text-to-speech")
    audio = np.load(ROOT / fixture / ref["audio_file"])
    return [(c, audio[c["audio"]]) for c in ref["cases"]]


def call_kwargs(case, fixture):
    kwargs = resolved(case["call_kwargs"], fixture)
    # generate_speech(input_ids, speaker_embeddings, **options): the pipeline's options
    return {"forward_params": kwargs} if case["via"] == "generate_speech" else kwargs


def assert_audio(got, want, where=""):
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, where
    assert got.shape == want.shape, f"{where}: shape {got.shape}, transformers {want.shape}"
    gap = float(np.abs(got - want).max())
    assert gap <= TOL * float(np.abs(want).max()), f"{where}: max |diff| {gap}"


SPEAKER = ROOT / "speecht5" / "references" / "speaker_embeddings.npy"


# --- against transformers --------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_matches_transformers(fixture, backend):
    p = pipe(fixture, backend)
    for case, want in cases(fixture):
        out = p(case["text"], **call_kwargs(case, fixture))
        assert set(out) == {"audio", "sampling_rate"}
        assert out["sampling_rate"] == case["sampling_rate"]
        assert_audio(out["audio"], want, f"{fixture} {case['name']} ({backend})")


def test_the_recorded_cases_cover_the_rules():
    vits = {c["name"] for c, _ in cases("vits")}
    assert {"punctuation", "uppercase", "not_in_vocabulary", "long"} <= vits
    speecht5 = {c["name"]: a.shape for c, a in cases("speecht5")}
    # the stop rule's three ways out: threshold at once, minlen first, maxlen
    assert len({speecht5[n] for n in ("hello", "minlenratio", "maxlenratio")}) == 3


def test_vits_tokenizer_equals_transformers():
    from transmuter.preprocess.text.vits import VitsTokenizer

    ref = json.loads((ROOT / "vits/references/vits_tokenizer_ids.json").read_text())
    tokenizers = {name: VitsTokenizer(t["vocab"], t["config"])
                  for name, t in ref["tokenizers"].items()}
    for case in ref["cases"]:
        got = tokenizers[case["tokenizer"]].encode(case["text"]).ids
        assert got == case["ids"], (case["tokenizer"], case["text"])
    fixture = VitsTokenizer.from_repo(hub.resolve(ROOT / "vits"))
    assert fixture.encode("Hello!").ids == tokenizers["fixture"].encode("Hello!").ids


def test_speecht5_tokenizer_equals_transformers():
    from transmuter.pipelines.audio.tts.speecht5 import SpeechT5Tokenizer

    ref = json.loads((ROOT / "speecht5/references/speecht5_tokenizer_ids.json").read_text())
    tok = SpeechT5Tokenizer.from_repo(hub.resolve(ROOT / "speecht5"))
    for text, want in zip(ref["texts"], ref["ids"]):
        assert tok.encode(text).ids == want, text


def test_speecht5_numbers_equal_transformers(tmp_path):
    """normalize=true in tokenizer_config.json: EnglishNumberNormalizer's text and the tokenizer's
    ids, case by case; where the reference fails (ValueError, IndexError), a TokenizerError."""
    from transmuter.pipelines.audio.tts.speecht5 import SpeechT5Tokenizer
    from transmuter.preprocess.text.speecht5_numbers import spell_numbers

    ref = json.loads((ROOT / "speecht5/references/speecht5_numbers.json").read_text())
    repo = tmp_path / "speecht5-normalize"
    repo.mkdir()
    shutil.copy(ROOT / "speecht5/spm_char.model", repo)
    config = json.loads((ROOT / "speecht5/tokenizer_config.json").read_text())
    (repo / "tokenizer_config.json").write_text(json.dumps({**config, "normalize": True}))
    tok = SpeechT5Tokenizer.from_repo(hub.resolve(repo))
    plain = SpeechT5Tokenizer.from_repo(hub.resolve(ROOT / "speecht5"))
    for case in ref["cases"]:
        text = case["text"]
        if "error" in case:
            with pytest.raises(TokenizerError, match="normalize=true"):
                tok.encode(text)
            continue
        assert spell_numbers(text) == case["spelled"], text
        assert tok.encode(text).ids == case["ids"], text
        assert plain.encode(text).ids != case["ids"] or case["spelled"] == text, text


# --- batches, inputs, options ----------------------------------------------------------------

@pytest.mark.parametrize("fixture", FIXTURES)
def test_batch_equals_one_by_one(fixture):
    p = pipe(fixture)
    kwargs = {"speaker_embeddings": str(SPEAKER)} if fixture == "speecht5" else {}
    texts = ["hello world", "the cat sat", "a", "Hello, World!"]
    one = [p(t, **kwargs) for t in texts]
    for got in (p(texts, batch_size=4, **kwargs), list(p(iter(texts), batch_size=3, **kwargs))):
        assert len(got) == len(one)
        for g, o in zip(got, one):
            assert g["sampling_rate"] == o["sampling_rate"]
            np.testing.assert_array_equal(g["audio"], o["audio"])


def test_text_to_speech_is_an_alias_of_text_to_audio():
    # transformers' TASK_ALIASES: "text-to-speech" -> "text-to-audio"
    assert registry.normalize("text-to-speech") == "text-to-audio"
    p = transmuter.pipeline("text-to-audio", ROOT / "vits", backend=FAST)
    assert type(p) is type(pipe("vits")) and p.task == "text-to-audio"
    case, audio = cases("vits")[0]
    assert_audio(p(case["text"])["audio"], audio, "text-to-audio")


def test_speaker_embeddings_forms_agree():
    p = pipe("speecht5")
    speaker = np.load(SPEAKER)
    want = p("hello world", speaker_embeddings=speaker)["audio"]
    for given in (speaker[0], speaker.tolist(), str(SPEAKER), SPEAKER,
                  speaker.astype(np.float64)):
        np.testing.assert_array_equal(p("hello world", speaker_embeddings=given)["audio"], want)
    # a default given to the pipeline applies to every call
    default = transmuter.pipeline("text-to-speech", ROOT / "speecht5", backend=FAST,
                                  speaker_embeddings=speaker)
    np.testing.assert_array_equal(default("hello world")["audio"], want)


def test_generate_kwargs_win_over_forward_params():
    (case, want), = [(c, a) for c, a in cases("speecht5") if c["name"] == "maxlenratio"]
    options = dict(case["call_kwargs"]["forward_params"])
    options.pop("speaker_embeddings")
    got = pipe("speecht5")(case["text"], speaker_embeddings=str(SPEAKER),
                           forward_params={"threshold": 0.5, "maxlenratio": 20.0},
                           generate_kwargs=options)["audio"]
    assert_audio(got, want, "generate_kwargs")


# --- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("bad,match", [("", "empty"), ("   ", "empty"),
                                       (12, "takes a string"), ([{"text": "hi"}], "a string")])
def test_bad_texts_are_clear_errors(fixture, bad, match):
    kwargs = {"speaker_embeddings": str(SPEAKER)} if fixture == "speecht5" else {}
    with pytest.raises((InputError, PipelineError), match=match):
        pipe(fixture)(bad, **kwargs)


def test_text_with_nothing_the_vocabulary_has():
    with pytest.raises(InputError, match="Nothing is left"):
        pipe("vits")("!!! 42 ???")


def test_missing_speaker_embeddings():
    with pytest.raises(InputError, match="pass speaker_embeddings="):
        pipe("speecht5")("hello world")


@pytest.mark.parametrize("bad,match", [
    (np.zeros((1, 8), np.float32), r"shape \[1, 16\] or \[16\].*got float32 of shape \[1, 8\]"),
    (np.zeros((2, 16), np.float32), r"of shape \[2, 16\]"),
    (np.array(["x"] * 16), "<U1"),
    (np.full(16, np.nan, np.float32), "NaN"),
    ("no/such/speaker.npy", "is not a .npy file"),
])
def test_bad_speaker_embeddings(bad, match):
    with pytest.raises(InputError, match=match):
        pipe("speecht5")("hello world", speaker_embeddings=bad)


def test_bad_options_are_clear_errors():
    speaker = {"speaker_embeddings": str(SPEAKER)}
    with pytest.raises(PipelineError, match="threshold must be a number"):
        pipe("speecht5")("hello world", threshold=-1, **speaker)
    with pytest.raises(PipelineError, match=r"takes no option\(s\) \['temperature'\]"):
        pipe("speecht5")("hello world", generate_kwargs={"temperature": 0.5}, **speaker)
    with pytest.raises(PipelineError, match="forward_params must be a dict"):
        pipe("speecht5")("hello world", forward_params=[1])
    with pytest.raises(PipelineError, match="takes no generate_kwargs"):
        pipe("vits")("hello", generate_kwargs={"max_new_tokens": 3})
    with pytest.raises(PipelineError, match=r"takes no option\(s\) \['speaker_embeddings'\]"):
        pipe("vits")("hello", **speaker)
    with pytest.raises(PipelineError, match="seed must be an int"):
        pipe("vits")("hello", seed="3")
    with pytest.raises(PipelineError, match="threshold must be a number"):
        transmuter.pipeline("text-to-speech", ROOT / "speecht5", backend=FAST, threshold="high")


def _variant(tmp_path, **tokenizer_config):
    """The vits fixture with its tokenizer_config.json changed."""
    folder = tmp_path / "vits"
    shutil.copytree(ROOT / "vits", folder)
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **tokenizer_config}))
    return folder


def test_uroman_model_romanizes_its_text(tmp_path, monkeypatch):
    """is_uroman: non-Latin text is read as uroman romanizes it (the ids themselves are
    compared with transformers' in test_vits_tokenizer_equals_transformers); without the
    package, a clear error where transformers reads the text unromanized."""
    from transmuter.preprocess.text import vits as vits_tokenizer

    p = transmuter.pipeline("text-to-speech", _variant(tmp_path, is_uroman=True), backend=FAST)
    (case, want), = [(c, a) for c, a in cases("vits") if c["name"] == "hello"]
    assert_audio(p(case["text"])["audio"], want, "romanized text")  # Latin text reads as is
    np.testing.assert_array_equal(p("привет мир", seed=0)["audio"],
                                  p("privet mir", seed=0)["audio"])

    def missing():
        raise ImportError("No module named 'uroman'")

    monkeypatch.setattr(vits_tokenizer, "_uroman", missing)
    with pytest.raises(InputError, match="pip install uroman"):
        p("привет мир")
    assert_audio(p(case["text"])["audio"], want, "romanized text")


def test_phonemizing_model_is_refused(tmp_path):
    with pytest.raises(TokenizerError, match="phonemizer package and espeak"):
        transmuter.pipeline("text-to-speech", _variant(tmp_path, phonemize=True), backend=FAST)


def test_a_model_that_does_not_speak():
    with pytest.raises(PipelineError, match="VITS / MMS-TTS, SpeechT5 and Kokoro"):
        transmuter.pipeline("text-to-speech", ROOT / "bert-sequence-classification",
                            backend=FAST)


# --- command line ----------------------------------------------------------------------------

def test_cli_writes_a_wav(tmp_path):
    import soundfile

    (case, want), = [(c, a) for c, a in cases("vits") if c["name"] == "hello"]
    out = tmp_path / "hello.wav"
    assert cli.main(["run", "text-to-speech", str(ROOT / "vits"), case["text"], "--output",
                     str(out), "--backend", FAST, "--quiet"]) == 0
    audio, rate = soundfile.read(out, dtype="float32", always_2d=False)
    assert rate == case["sampling_rate"] and soundfile.info(out).subtype == "FLOAT"
    assert_audio(audio[None], want, "hello.wav")  # a float WAV holds the samples exactly

    jsonl = tmp_path / "out.jsonl"  # several texts: JSON lines naming a WAV file each
    assert cli.main(["run", "text-to-speech", str(ROOT / "vits"), case["text"], "the cat sat",
                     "--output", str(jsonl), "--backend", FAST, "--quiet"]) == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["input"] for r in rows] == [case["text"], "the cat sat"]
    assert rows[0]["output"]["sampling_rate"] == case["sampling_rate"]
    first, _ = soundfile.read(rows[0]["output"]["file"], dtype="float32", always_2d=False)
    np.testing.assert_array_equal(first, audio)


def test_cli_wav_takes_one_input(tmp_path, capsys):
    out = str(tmp_path / "two.wav")
    assert cli.main(["run", "text-to-speech", str(ROOT / "vits"), "a", "b", "--output", out,
                     "--backend", FAST, "--quiet"]) == 2
    assert "holds the audio of one input" in capsys.readouterr().err


def test_vits_seed_reaches_the_graph_noise():
    """seed= keys the graph's RandomNormalLike (test_random_ops checks the key repeats draws);
    the fixture's noise scales are 0, so a seeded call equals an unseeded one."""
    p = pipe("vits")
    np.testing.assert_array_equal(p("hello", seed=3)["audio"], p("hello")["audio"])
