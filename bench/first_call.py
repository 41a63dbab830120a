"""First-call times in fresh processes, cold vs with JAX's persistent compilation cache.

    python bench/first_call.py [--model PATH] [--generation FIXTURE] [--asr FIXTURE] [--runs N]
                               [--workloads encoder,generation,asr] [--profile]

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
hit counts too: JAX reads the executable back in their place). No peer: nothing else compiles
an ONNX graph per process."""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

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
    from jax._src import monitoring

    times = {"import": time.perf_counter() - start}
    spent, hits, compiles = dict.fromkeys(EVENTS.values(), 0.0), [], []

    def listen(event, secs, **_):
        if event in EVENTS:
            spent[EVENTS[event]] += secs
            if EVENTS[event] == "compile":
                compiles.append(secs)

    monitoring.register_event_duration_secs_listener(listen)
    monitoring.register_event_listener(
        lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
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


def spawn(args, workload, folder, profile=False):
    env = dict(os.environ, TRANSMUTER_COMPILE_CACHE=folder)
    command = [sys.executable, __file__, "--child", workload, "--model", args.model,
               "--generation", args.generation, "--asr", args.asr] + \
        (["--profile"] if profile else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{workload} process failed:\n{done.stderr[-3000:]}")
    if profile:
        print(done.stderr, file=sys.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(workload, rows):
    keys = ["import", "load", "first call", "trace", "lower", "compile", "other"]
    print(f"\n{workload}: seconds (median of runs); first call = trace + lower + compile + other")
    print(f"  {'':8}" + "".join(f"{k:>11}" for k in keys) + f"{'hits':>6}{'compiles':>9}")
    for label, runs in rows:
        med = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in keys}
        print(f"  {label:8}" + "".join(f"{med[k]:11.3f}" for k in keys)
              + f"{runs[0]['cache hits']:6d}{runs[0]['compiles']:9d}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="all-MiniLM-L6-v2 .onnx file")
    parser.add_argument("--generation", default="llama-gqa", help="a tests/fixtures decoder")
    parser.add_argument("--asr", default="whisper", help="a tests/fixtures Whisper or a folder")
    parser.add_argument("--runs", type=int, default=3, help="processes per row")
    parser.add_argument("--workloads", default="encoder,generation")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
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
