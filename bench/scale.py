"""Inputs/s of a Ray Data text-embedding job with 1 and 2 actors against the single-process
pipeline, on the same sentences (bench/text.py's mixed lengths), on this machine.

    pip install -e ".[ray]"
    python bench/scale.py [--n 2000] [--batch-size 32] [--actors 1,2] [--model FOLDER]

The model is the real all-MiniLM-L6-v2 of ``bash tests/support/setup_real_models.sh``
($TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2) when present, else the tiny fixture
tests/fixtures/bert-sentence-transformers (then the figures say little: a job of the tiny model
is mostly Ray's overhead).

Single process: the best of ``--repeat`` passes after a first pass that compiles every padded
shape. Ray: a local cluster with this machine's CPUs; per actor count, one untimed job fills
the persistent compile cache (a folder of its own, shared by the actors), then each timed job
counts everything a user waits for: actors starting (Python, JAX, loading the model), reading the
compiled shapes back, embedding, collecting the rows on the driver. Each actor's XLA uses every
core, so on a 2-core machine two actors share the cores rather than add any. An actor's pipeline
sorts the rows of each call by length before batching them, as the single process sorts its list:
``--ray-batch-size`` (rows per call) far above ``--batch-size`` keeps the padding as low (with 32
rows per call, each model batch pads to the longest of 32 mixed sentences: 1000 sentences ran at
0.23x the single process with 1 actor). The embeddings of
each job are checked against the single-process ones (max abs difference printed).
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text import default_folder, sentences  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "bert-sentence-transformers"


def model_folder(given):
    if given:
        return pathlib.Path(given).resolve()
    real = default_folder()
    return real if (real / "onnx" / "model.onnx").exists() else FIXTURE


def single_process(folder, texts, batch_size, repeat):
    """(embeddings, best seconds, first-pass seconds)."""
    import transmuter

    pipe = transmuter.pipeline("text-embedding", folder, batch_size=batch_size)
    start = time.perf_counter()
    pipe(texts)
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = np.stack(pipe(texts))
        best = min(best, time.perf_counter() - start)
    return out, best, first


def ray_job(folder, texts, batch_size, rows_per_call, actors):
    """(embeddings in input order, seconds) of one Ray Data job."""
    import ray
    import ray.data

    from transmuter.integrations.ray import TransmuterPredictor

    start = time.perf_counter()
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    ds = ds.map_batches(TransmuterPredictor, batch_size=rows_per_call,
                        compute=ray.data.ActorPoolStrategy(size=actors),
                        fn_constructor_kwargs=dict(task="text-embedding", model=str(folder),
                                                   batch_size=batch_size))
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    seconds = time.perf_counter() - start
    return np.stack([r["embedding"] for r in rows]), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="number of sentences")
    parser.add_argument("--batch-size", type=int, default=32, help="rows per model batch")
    parser.add_argument("--ray-batch-size", type=int, default=1024,
                        help="rows per call of an actor (map_batches' batch_size)")
    parser.add_argument("--actors", default="1,2", help="actor counts, e.g. 1,2")
    parser.add_argument("--repeat", type=int, default=2, help="timed passes / jobs (best counts)")
    parser.add_argument("--model", help="Hub-shaped folder (default: real MiniLM, else fixture)")
    args = parser.parse_args()
    folder = model_folder(args.model)
    texts = sentences(args.n)
    cores = os.cpu_count()
    print(f"{args.n} sentences, batch size {args.batch_size} (Ray: {args.ray_batch_size} rows per "
          f"call), model {folder}, {cores} cores, "
          f"load average {os.getloadavg()[0]:.2f}")

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import ray

    cache = tempfile.mkdtemp(prefix="transmuter-scale-cache-")
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"TRANSMUTER_COMPILE_CACHE": cache}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:  # Ray first: its processes are forked before JAX starts threads here
        want, best, first = single_process(folder, texts, args.batch_size, args.repeat)
        single = args.n / best
        print(f"{'single process':<16} {single:8.1f} inputs/s  (first pass {first:.1f} s, "
              f"timed {best:.1f} s)")
        for actors in (int(a) for a in args.actors.split(",")):
            _, warm = ray_job(folder, texts, args.batch_size, args.ray_batch_size, actors)
            times = []
            for _ in range(args.repeat):
                got, seconds = ray_job(folder, texts, args.batch_size, args.ray_batch_size, actors)
                times.append(seconds)
            rate = args.n / min(times)
            print(f"{f'ray, {actors} actor(s)':<16} {rate:8.1f} inputs/s  (first job {warm:.1f} s,"
                  f" timed {min(times):.1f} s; max |diff| vs single process "
                  f"{np.abs(got - want).max():.1e})  ray / single process: {rate / single:.2f}x")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
