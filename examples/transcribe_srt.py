"""Transcribe every recording of a folder into SubRip subtitles (.srt) beside each file.

    python examples/transcribe_srt.py recordings/
    python examples/transcribe_srt.py Xenova/whisper-base recordings/ --batch-size 8 --num-beams 1

Recordings stream through one speech-recognition pipeline (a generator over the folder, with a
progress bar); each is cut into 30 s windows (--chunk-length) that share batches, and Whisper's
segment timestamps (return_timestamps=True) become the subtitles: recording.wav gets
recording.srt, one numbered cue per segment. A segment Whisper leaves open (no end timestamp)
ends where the recording ends. A file that cannot be decoded is reported and skipped.
"""

import argparse
import pathlib

import transmuter

SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".aiff", ".aif"}


def recordings(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*") if p.suffix.lower() in SUFFIXES)


def duration(path):
    """The recording's length in seconds (soundfile; other formats through the library)."""
    import soundfile

    try:
        return soundfile.info(str(path)).duration
    except RuntimeError:  # a format soundfile cannot read (M4A, WebM, ...): decode it
        from transmuter.preprocess.audio.load import load_audio

        return len(load_audio(str(path), 16000)) / 16000


def timestamp(seconds):
    """SubRip's HH:MM:SS,mmm."""
    ms = int(round(max(seconds, 0.0) * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d},{ms:03d}"


def subrip(chunks, end_of_recording):
    """The .srt text of the pipeline's chunks [{"timestamp": (start, end), "text"}, ...]; a
    segment with no words makes no cue (an empty cue would end the file for some players)."""
    cues = []
    for i, chunk in enumerate((c for c in chunks if c["text"].strip()), 1):
        start, end = chunk["timestamp"]
        end = end_of_recording() if end is None else end
        cues.append(f"{i}\n{timestamp(start)} --> {timestamp(end)}\n{chunk['text'].strip()}\n")
    return "\n".join(cues)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", default="Xenova/whisper-tiny.en")
    parser.add_argument("folder")
    parser.add_argument("--batch-size", type=int, default=4, help="windows run together")
    parser.add_argument("--chunk-length", type=float, default=30.0,
                        help="window length in seconds (Whisper's is 30)")
    parser.add_argument("--num-beams", type=int, default=None,
                        help="beam width (default: the pipeline's 5; 1 is greedy and faster)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="tokens per window at most (default: the model's max_length)")
    args = parser.parse_args(argv)

    files = recordings(args.folder)
    asr = transmuter.pipeline("automatic-speech-recognition", args.model)
    generate = {k: v for k, v in (("num_beams", args.num_beams),
                                  ("max_new_tokens", args.max_new_tokens)) if v is not None}
    results = asr((str(f) for f in files), return_timestamps=True, chunk_length_s=args.chunk_length,
                  batch_size=args.batch_size, progress=True, generate_kwargs=generate,
                  on_error="return")  # a file that cannot be decoded gets its error
    skipped = 0
    for file, result in zip(files, results):
        if isinstance(result, Exception):
            print(f"skipped: {result}")
            skipped += 1
            continue
        srt = subrip(result.get("chunks") or [], lambda f=file: duration(f))
        file.with_suffix(".srt").write_text(srt, encoding="utf-8")
    print(f"{len(files) - skipped} recordings transcribed -> .srt beside each"
          + (f" ({skipped} skipped)" if skipped else ""))


if __name__ == "__main__":
    main()
