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
