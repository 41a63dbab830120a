"""Read a text file aloud with Kokoro: one WAV file per paragraph, with a progress bar.

    python examples/read_aloud.py book.txt
    python examples/read_aloud.py book.txt --voice bf_emma --speed 1.1 --out book_audio/
    python examples/read_aloud.py book.txt --voice "af_heart:0.7,am_adam:0.3"
    python examples/read_aloud.py phonemes.txt --phonemes    # paragraphs of Kokoro phonemes

Paragraphs are separated by blank lines; book.txt gives book_audio/book_001.wav, _002, ... (24 kHz
float WAV). They stream through one text-to-speech pipeline (a generator, so the bar moves as each
paragraph is spoken); a paragraph past the model's 510 phonemes is cut at sentence ends and its
parts' audio joined (pipelines/audio/tts/kokoro.py).
"""

import argparse
import pathlib
import re

import soundfile

import transmuter


def paragraphs(path):
    text = pathlib.Path(path).read_text(encoding="utf-8")
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("text", help="a UTF-8 text file")
    parser.add_argument("--model", default="onnx-community/Kokoro-82M-v1.0-ONNX")
    parser.add_argument("--voice", default="af_heart")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--out", help="the folder for the WAV files (default: <text>_audio/)")
    parser.add_argument("--phonemes", action="store_true",
                        help="the paragraphs are Kokoro phonemes, not text")
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    args = parser.parse_args(argv)
    source = pathlib.Path(args.text)
    out = pathlib.Path(args.out or source.with_name(f"{source.stem}_audio"))
    out.mkdir(parents=True, exist_ok=True)
    tts = transmuter.pipeline("text-to-speech", args.model, voice=args.voice, speed=args.speed,
                              backend=args.backend)
    items = paragraphs(source)
    inputs = ({"phonemes": p} for p in items) if args.phonemes else iter(items)
    written = []
    for number, speech in enumerate(tts(inputs, progress=True), 1):
        path = out / f"{source.stem}_{number:03d}.wav"
        soundfile.write(path, speech["audio"], speech["sampling_rate"], subtype="FLOAT")
        written.append(path)
    print(f"{len(written)} paragraphs -> {out}/")
    return written


if __name__ == "__main__":
    main()
