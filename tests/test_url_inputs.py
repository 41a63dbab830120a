"""Images and audio given as http(s) URLs (as transformers' pipelines take them), fetched through
huggingface_hub's HTTP session from a loopback server: the same results as the file, retries on a
5xx, a time-out on a stalled server, a size bound, and errors that name the URL."""

import http.server
import io
import threading
import time
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import soundfile

import transmuter
from transmuter.errors import InputError
from transmuter.preprocess import url as url_module
from transmuter.preprocess.audio.load import load_audio
from transmuter.preprocess.image.load import load_image

FIXTURES = Path(__file__).parent / "fixtures"


def png():
    pixels = np.random.default_rng(0).integers(0, 256, (40, 56, 3), dtype=np.uint8)
    out = io.BytesIO()
    PIL.Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def wav():
    samples = np.sin(np.arange(8000) * 0.05).astype(np.float32) * 0.5
    out = io.BytesIO()
    soundfile.write(out, samples, 16000, format="WAV", subtype="PCM_16")
    return out.getvalue()


class Server:
    """path -> body; "/flaky/..." answers 503 once, "/stall/..." sends nothing for 3 s,
    "/moved/..." redirects to the path without it. ``hits`` counts requests per path."""

    def __init__(self, files):
        self.files, self.hits, self.failed = files, {}, set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                kind, _, name = self.path.strip("/").partition("/")
                if kind == "moved":
                    self.send_response(302)
                    self.send_header("Location", f"/ok/{name}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if kind == "flaky" and self.path not in server.failed:
                    server.failed.add(self.path)
                    return self.answer(503, b"busy")
                if kind == "stall":
                    time.sleep(3)
                body = server.files.get(name)
                self.answer(404, b"no such file") if body is None else self.answer(200, body)

            def answer(self, status, body):
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (the stall case)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server({"cat.png": png(), "tone.wav": wav(), "text.txt": b"not media"})
    yield s
    s.close()


def test_image_url_equals_its_bytes(server):
    got = load_image(f"{server.url}/ok/cat.png")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(load_image(png())))
    # a redirect is followed, a 503 retried
    np.testing.assert_array_equal(np.asarray(load_image(f"{server.url}/moved/cat.png")),
                                  np.asarray(got))
    np.testing.assert_array_equal(np.asarray(load_image(f"{server.url}/flaky/cat.png")),
                                  np.asarray(got))
    assert server.hits["/flaky/cat.png"] == 2


def test_audio_url_equals_its_bytes(server):
    np.testing.assert_array_equal(load_audio(f"{server.url}/ok/tone.wav"), load_audio(wav()))


def test_pipelines_take_urls(server, tmp_path):
    (tmp_path / "cat.png").write_bytes(png())
    classify = transmuter.pipeline("image-classification", FIXTURES / "vit")
    assert classify(f"{server.url}/ok/cat.png") == classify(str(tmp_path / "cat.png"))
    (tmp_path / "tone.wav").write_bytes(wav())
    audio = transmuter.pipeline("audio-classification", FIXTURES / "wav2vec2-classifier")
    assert audio([f"{server.url}/ok/tone.wav"]) == audio([str(tmp_path / "tone.wav")])
    results = classify([f"{server.url}/ok/cat.png", f"{server.url}/ok/gone.png"],
                       on_error="return")
    assert isinstance(results[1], InputError) and "/ok/gone.png" in str(results[1])


def test_url_errors_name_the_url(server, monkeypatch):
    with pytest.raises(InputError, match=r"Cannot fetch the image at 'http://127.*/ok/gone.png': "
                                         r"the server answered HTTP 404"):
        load_image(f"{server.url}/ok/gone.png")
    with pytest.raises(InputError, match=r"'http://127.*/ok/text.txt' is not an image file"):
        load_image(f"{server.url}/ok/text.txt")
    with pytest.raises(InputError, match=r"'http://127.*/ok/text.txt' is not audio"):
        load_audio(f"{server.url}/ok/text.txt")
    monkeypatch.setattr(url_module, "MAX_BYTES", 100)
    with pytest.raises(InputError, match=r"The image at .*cat.png' is larger than 100 bytes.*"
                                         r"TRANSMUTER_MAX_URL_BYTES"):
        load_image(f"{server.url}/ok/cat.png")
    with pytest.raises(InputError, match=r"Cannot fetch the audio file at 'http://127.0.0.1:1/"):
        load_audio("http://127.0.0.1:1/nothing-listens.wav")


def test_a_stalled_server_times_out(server, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.3)
    monkeypatch.setattr(url_module, "RETRIES", 0)
    start = time.monotonic()
    with pytest.raises(InputError, match=r"at '.*/stall/cat.png': .*Timeout.*"
                                         r"HF_HUB_DOWNLOAD_TIMEOUT"):
        load_image(f"{server.url}/stall/cat.png")
    assert time.monotonic() - start < 2.5  # the 3 s stall was not waited out


# --- datasets' inputs: KeyDataset, Audio dicts, torchcodec decoders -----------------------------

class KeyDataset:
    """transformers.pipelines.pt_utils.KeyDataset: a torch Dataset (items by index, a length,
    no __iter__) over one column of a datasets.Dataset."""

    def __init__(self, rows, key):
        self.rows, self.key = rows, key

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i][self.key]


class AudioDecoder:
    """torchcodec.decoders.AudioDecoder as datasets >= 4 yields it: get_all_samples() gives
    .data (channels, samples) and .sample_rate."""

    def __init__(self, data, rate):
        self.data, self.rate = data, rate

    def get_all_samples(self):
        from types import SimpleNamespace
        return SimpleNamespace(data=self.data, sample_rate=self.rate)


def test_datasets_inputs(tmp_path):
    tone = load_audio(wav())  # 16 kHz mono, the wav2vec2 fixture's rate
    (tmp_path / "tone.wav").write_bytes(wav())
    audio = transmuter.pipeline("audio-classification", FIXTURES / "wav2vec2-classifier")
    want = audio([tone] * 4)  # one batch of the same samples: equal to the last bit
    rows = [{"audio": {"array": tone, "sampling_rate": 16000, "path": "tone.wav"}, "label": 0},
            {"audio": {"bytes": wav(), "path": None}, "label": 1},      # Audio(decode=False)
            {"audio": {"bytes": None, "path": str(tmp_path / "tone.wav")}, "label": 2},
            {"audio": AudioDecoder(tone[None], 16000), "label": 3}]
    results = audio(KeyDataset(rows, "audio"))
    assert not isinstance(results, list)  # lazy, as any iterable
    assert list(results) == want
    assert audio(AudioDecoder(tone[None], 16000)) == audio(tone)  # one decoder is one input
    with pytest.raises(InputError, match=r"'sampling_rate' key .*\(or, undecoded as datasets "
                                         r"keeps it, 'bytes' or 'path'\)"):
        audio({"bytes": None, "path": None})
    text = transmuter.pipeline("text-classification", FIXTURES / "bert-sequence-classification")
    column = KeyDataset([{"text": "a first text"}, {"text": "another"}], "text")
    assert list(text(column)) == text(["a first text", "another"])


def test_a_real_datasets_column():
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"text": ["a first text", "another", "a third one"]})
    text = transmuter.pipeline("text-classification", FIXTURES / "bert-sequence-classification")
    assert list(text(KeyDataset(rows, "text"))) == text(list(rows["text"]))
    assert list(text(rows["text"])) == text(list(rows["text"]))
