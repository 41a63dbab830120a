"""The ``transmuter`` command line.

    transmuter run TASK MODEL [TEXT ...] [--input FILE|DIR] [--output out.jsonl] [--batch-size N]

Streams texts through ``transmuter.pipeline(TASK, MODEL)`` with a progress bar and writes one JSON
line per input: ``{"input": ..., "output": ...}`` (plus ``"file"`` for inputs read from files).
Inputs: the TEXT arguments; a FILE holds one input per line (a .jsonl file one JSON value per
line, e.g. {"question": ..., "context": ...}); a DIR gives one input per text file (*.txt, *.md),
its whole content. Without TEXT or --input, lines are read from standard input.

Image tasks take image paths instead (arguments, lines of a FILE, or every image under a DIR);
images and large arrays in the results (masks, depth maps) are written as PNG / .npy files into
a folder beside the output (``out.jsonl`` -> ``out_files/``), and the JSON line names them.

text-to-image reads prompts (arguments, or one a line of a FILE) and writes each image as a PNG
file there (``--options '{"num_inference_steps": 4, "seed": 0}'`` for the pipeline's options).

Audio results (text-to-speech: ``{"audio", "sampling_rate"}``) are written as WAV files there;
``--output hello.wav`` writes the audio of its one input to that file instead of JSON lines.

An input that cannot be read or prepared (a corrupt image, a file that is not audio) stops the
run with its error (exit status 2); ``--on-error skip`` writes its line with ``"error"`` instead
of ``"output"`` and goes on, and the run ends with exit status 1 when any input failed.

    transmuter diff MODEL [--inputs file.npz | --task TASK --example TEXT] [--rtol R] [--atol A]

Runs the ONNX graph (a file, a folder or a Hub id with --variant / --file) in Transmuter and in
onnxruntime on the same inputs and prints the first node whose outputs differ: its op,
attributes, inputs, the size of the difference and the path from the input (docs/debugging.md).
Inputs come from an .npz file (one array per graph input) or from a task's own preprocessing of
an example (a text, an image path, an audio path). Exit status 1 when a node differs, 0 when
none does.

    transmuter coverage {select,record,run,matrix} [--dir coverage] [--offline] ...

The coverage matrix (docs/coverage.md): select the most downloaded ONNX repos per task from the
Hub's model list, record onnxruntime's outputs on each task's fixed input, run each case through
Transmuter compiled, and print the Markdown matrix and the list of tested models.

    transmuter warmup TASK MODEL [EXAMPLE ...] [--input FILE|DIR] [--batch-sizes 1,8,32]
                      [--max-length N]

Compiles the shapes a workload will meet into the persistent compilation cache
(docs/compile-cache.md), so that the next process (a service, a Docker image's) compiles
nothing: text tasks every row count up to --batch-size times every length bucket up to
--max-length (or the longest EXAMPLE's), other tasks their EXAMPLEs (paths of images or clips)
at each row count (``pipe.warmup``).
"""

import argparse
import json
import pathlib
import sys

TEXT_SUFFIXES = (".txt", ".md", ".text")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".aiff", ".aif")


class UsageError(Exception):
    """A command line that cannot run: one line on standard error, exit status 2."""


def main(argv=None):
    args = _parser().parse_args(argv)
    commands = {"run": _run, "warmup": _warmup, "diff": _diff, "coverage": _coverage}
    if args.command not in commands:
        _parser().print_help()
        return 2
    from .errors import TransmuterError
    try:
        return commands[args.command](args)
    except (TransmuterError, UsageError, OSError) as e:
        # one line, no traceback: the messages name what is wrong and where
        print(f"transmuter: {e}", file=sys.stderr)
        return 2


def _run(args):
    from .errors import TransmuterError
    from .pipelines import pipeline
    options = _options(args.options)
    if args.variant:
        options["variant"] = args.variant
    options = {"batch_size": args.batch_size, **options}  # --options may set it too
    pipe = pipeline(args.task, args.model, backend=args.backend, **options)
    # a folder holds the task's media files, given to the pipeline by path
    media = IMAGE_SUFFIXES if "image_processor" in pipe.featurizers else \
        AUDIO_SUFFIXES if "feature_extractor" in pipe.featurizers else None
    if args.output and args.output.lower().endswith(".wav"):
        return _write_wav(pipe, _inputs(args, media), args.output)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    files = _Files(pathlib.Path(args.output).with_suffix("") if args.output else
                   pathlib.Path("transmuter_output"))
    on_error = "return" if args.on_error == "skip" else "raise"
    failed = total = 0
    try:
        meta, texts = _split(_inputs(args, media))
        # results first: computing one reads its input, which queues that input's metadata
        results = pipe(texts, progress=not args.quiet, on_error=on_error)
        for total, (result, info) in enumerate(zip(results, meta), 1):
            if isinstance(result, TransmuterError):
                failed += 1
                line = {**info, "error": f"{type(result).__name__}: {result}"}
            else:
                line = {**info, "output": _jsonable(result, files, f"{total - 1:06d}")}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
    if failed:
        print(f"transmuter: {failed} of {total} inputs failed (their lines hold \"error\")",
              file=sys.stderr)
        return 1
    return 0


def _warmup(args):
    from .backends.compile_cache import active_folder
    from .pipelines import pipeline
    options = _options(args.options)
    if args.variant:
        options["variant"] = args.variant
    options = {"batch_size": args.batch_size, **options}
    pipe = pipeline(args.task, args.model, backend=args.backend, **options)
    media = IMAGE_SUFFIXES if "image_processor" in pipe.featurizers else \
        AUDIO_SUFFIXES if "feature_extractor" in pipe.featurizers else None
    examples = [value for _, value in _inputs(args, media)] if args.text or args.input else []
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else None
    except ValueError:
        raise UsageError(f"--batch-sizes takes ints separated by commas, got "
                         f"{args.batch_sizes!r}") from None
    done = pipe.warmup(examples, batch_sizes=sizes, max_length=args.max_length,
                       progress=not args.quiet)
    folder = active_folder() if args.backend == "jax" else None
    print(f"transmuter: compiled {len(done)} shapes of {args.task} "
          + (f"into {folder}" if folder else "(no persistent cache: they last this process)"),
          file=sys.stderr)
    return 0


def _diff(args):
    from .debug import first_divergence
    from .hub.load import load
    if (args.inputs is None) == (args.task is None):
        raise UsageError("diff takes --inputs FILE.npz, or --task TASK with --example INPUT")
    if args.task is not None and args.example is None:
        raise UsageError(f"--task {args.task} needs --example: a text, or an image or audio path")
    if args.inputs is not None:
        model = load(args.model, args.file, backend=args.backend, variant=args.variant) \
            if args.file else args.model
        feed = _npz(args.inputs)
    else:
        from .pipelines import pipeline
        pipe = pipeline(args.task, args.model, backend=args.backend, variant=args.variant)
        model, feed = pipe.model, pipe.model_feed(args.example)
    report = first_divergence(model, feed, rtol=args.rtol, atol=args.atol, backend=args.backend,
                              variant=args.variant)
    print(report)
    return 1 if report.found else 0


def _coverage(args):
    from . import coverage
    if args.step == "select":
        if args.offline:
            raise UsageError("select lists models on the Hub; offline, copy the cases.json made "
                             "where the Hub is reachable into --dir")
        tasks = args.tasks.split(",") if args.tasks else coverage.TASKS
        found = coverage.select(tasks, args.per_task)
        path = coverage.cases.write(args.dir, "cases.json", found)
        print(f"{len(found)} repos, {sum(len(g['variants']) for g in found)} cases: {path}")
    elif args.step == "record":
        coverage.record(args.dir, offline=args.offline)
    elif args.step == "run":
        results = coverage.check(args.dir, backend=args.backend, offline=args.offline)
        return 0 if all(r["status"] == "pass" for r in results) else 1
    else:
        text = coverage.matrix(args.dir)
        if args.output:
            pathlib.Path(args.output).write_text(text)
        print(text, end="")
    return 0


def _npz(path):
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError) as e:
        raise UsageError(f"--inputs {path}: not an .npz file of arrays ({e})") from None


def _write_wav(pipe, records, path):
    """--output NAME.wav: the audio of the one input, as a float32 WAV file."""
    import itertools
    inputs = [value for _, value in itertools.islice(records, 2)]
    if len(inputs) != 1:
        raise UsageError(f"--output {path} holds the audio of one input, got "
                         f"{'none' if not inputs else 'several'}; for several write "
                         "--output out.jsonl (their audio goes to WAV files beside it)")
    result = pipe(inputs[0])
    if not _is_audio(result):
        raise UsageError(f"--output {path}: {pipe.task} gives no audio; write --output out.jsonl")
    _save_wav(path, result)
    return 0


def _is_audio(value):
    return isinstance(value, dict) and set(value) == {"audio", "sampling_rate"}


def _save_wav(path, result):
    import numpy as np
    import soundfile
    audio = np.asarray(result["audio"], np.float32)
    # [samples] is mono; [channels, samples] (VITS' [1, samples]) is written frames-first
    soundfile.write(path, audio.T if audio.ndim == 2 else audio, int(result["sampling_rate"]),
                    subtype="FLOAT")


def _parser():
    parser = argparse.ArgumentParser(prog="transmuter", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="stream inputs through a task pipeline, one JSON line each")
    run.add_argument("task", help="e.g. text-embedding, text-classification, ner, fill-mask")
    run.add_argument("model", help="a Hub id (org/name) or a local folder")
    run.add_argument("text", nargs="*", help="texts to process")
    run.add_argument("--input", "-i", help="a file (one input per line) or a folder of text files")
    run.add_argument("--output", "-o", help="write JSON lines here (default: standard output)")
    run.add_argument("--batch-size", "-b", type=int, default=8)
    run.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    run.add_argument("--variant", help="ONNX variant: fp32, fp16, q8, q4, ...")
    run.add_argument("--options", help='task options as JSON, e.g. \'{"top_k": 3}\'')
    run.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    run.add_argument("--on-error", choices=["stop", "skip"], default="stop",
                     help="an input that cannot be read: stop the run (default), or write its "
                          "error as its line and go on (exit status 1 at the end)")
    warm = sub.add_parser("warmup", help="compile a workload's shapes into the persistent "
                                         "compilation cache")
    warm.add_argument("task", help="e.g. text-embedding, image-classification")
    warm.add_argument("model", help="a Hub id (org/name) or a local folder")
    warm.add_argument("text", nargs="*", help="example inputs (texts, image or audio paths)")
    warm.add_argument("--input", "-i", help="a file of examples (one a line) or a folder")
    warm.add_argument("--batch-size", "-b", type=int, default=8)
    warm.add_argument("--batch-sizes", help="row counts to compile, e.g. 1,8,32 (default: each "
                                            "power of two up to --batch-size)")
    warm.add_argument("--max-length", type=int, help="text: the longest length bucket")
    warm.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    warm.add_argument("--variant", help="ONNX variant: fp32, fp16, q8, q4, ...")
    warm.add_argument("--options", help='task options as JSON, e.g. \'{"max_new_tokens": 64}\'')
    warm.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    diff = sub.add_parser("diff", help="the first node whose values differ from onnxruntime's")
    diff.add_argument("model", help="an .onnx file, a Hub id (org/name) or a local folder")
    diff.add_argument("--inputs", help="an .npz file: one array per graph input, by name")
    diff.add_argument("--task", help="make the inputs with this task's preprocessing")
    diff.add_argument("--example", help="the input to preprocess: a text, an image or audio path")
    diff.add_argument("--file", help="the ONNX file inside the repo (e.g. onnx/decoder.onnx)")
    diff.add_argument("--variant", help="ONNX variant of a repo: fp32, fp16, q8, q4, ...")
    diff.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    diff.add_argument("--rtol", type=float, default=1e-4)
    diff.add_argument("--atol", type=float, default=1e-4)
    cover = sub.add_parser("coverage", help="which Hub models run: select, record, run, matrix")
    cover.add_argument("step", choices=["select", "record", "run", "matrix"])
    cover.add_argument("--dir", default="coverage", help="the folder every step reads and writes")
    cover.add_argument("--tasks", help="select: comma-separated tasks (default: every task "
                                       "with one model feed per input)")
    cover.add_argument("--per-task", type=int, default=5, help="select: repos per task")
    cover.add_argument("--offline", action="store_true",
                       help="record, run: read huggingface_hub's cache only (filled elsewhere)")
    cover.add_argument("--backend", default="jax", choices=["jax", "mlx"], help="run: backend")
    cover.add_argument("--output", "-o", help="matrix: also write the Markdown here")
    return parser


def _options(text):
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--options is not JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--options must be a JSON object such as '{{\"top_k\": 3}}', got "
                         f"{text!r}")
    for flag in ("backend", "variant"):  # each has its own flag, which would be given twice
        if flag in value:
            raise UsageError(f"--options sets {flag!r}: give it as --{flag} {value[flag]}")
    return value


def _read_text(path):
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _inputs(args, media=None):
    """(metadata, input) pairs, lazily: files are read one at a time (image and audio files,
    those with a ``media`` suffix, by the pipeline, which is given their paths)."""
    for text in args.text:
        yield {"input": text}, text
    if args.input:
        path = pathlib.Path(args.input)
        if path.is_dir():
            suffixes = media or TEXT_SUFFIXES
            for f in sorted(p for p in path.rglob("*") if p.suffix.lower() in suffixes):
                yield {"file": str(f)}, str(f) if media else _read_text(f)
        elif path.is_file():
            with path.open(encoding="utf-8") as stream:
                yield from _lines(stream, path.suffix == ".jsonl", str(path))
        else:
            raise UsageError(f"--input {args.input!r} is neither a file nor a folder")
    elif not args.text:
        yield from _lines(sys.stdin, False, "standard input")


def _lines(stream, is_json, where):
    number = 0
    try:
        for number, line in enumerate(stream, 1):
            line = line.rstrip("\n")
            if line.strip():
                value = json.loads(line) if is_json else line
                yield {"input": value}, value
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{where} line {number} is not JSON ({e})") from None


def _split(records):
    """Two lazy views of one stream: metadata for the writer, inputs for the pipeline (the
    pipeline reads ahead up to ``lookahead_batches`` batches; the queue holds their metadata
    until their results come)."""
    import collections
    queue = collections.deque()
    iterator = iter(records)

    def texts():
        for info, value in iterator:
            queue.append(info)
            yield value

    def meta():
        while True:
            yield queue.popleft()

    return meta(), texts()


class _Files:
    """Where images and large arrays of the results go: ``folder``, made on first use."""

    def __init__(self, folder):
        self.folder = pathlib.Path(str(folder) + "_files")

    def save(self, value, name):
        self.folder.mkdir(parents=True, exist_ok=True)
        if _is_audio(value):
            path = self.folder / f"{name}.wav"
            _save_wav(path, value)
            return {"file": str(path), "sampling_rate": int(value["sampling_rate"])}
        if hasattr(value, "getbands"):  # a PIL image: a mask, a depth map
            path = self.folder / f"{name}.png"
            value.save(path)
        else:
            import numpy as np
            path = self.folder / f"{name}.npy"
            np.save(path, value)
        return {"file": str(path)}


def _jsonable(value, files, name):
    # audio, images, maps: files
    if _is_audio(value) or hasattr(value, "getbands") or getattr(value, "ndim", 0) >= 2:
        return files.save(value, name)
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v, files, f"{name}_{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, files, f"{name}_{i}") for i, v in enumerate(value)]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
