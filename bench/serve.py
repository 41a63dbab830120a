"""Dynamic batching (pipeline.serve()): throughput and latency of many concurrent callers, one
input each, against the same requests called one at a time, with every result checked.

    python bench/serve.py [--workloads embedding,classification,minilm] [--clients 1,8,64]
                          [--requests 50] [--batch-size 32] [--max-batch-size N]
                          [--batch-timeout-ms 5] [--sequence-length 16,32,64]
                          [--backend jax|mlx] [--asyncio]

Workloads: the text-embedding and text-classification fixtures (tests/fixtures/
bert-sentence-transformers, bert-sequence-classification: tiny BERTs, so per-call overhead
dominates) and the real all-MiniLM-L6-v2 (the fp32 export of ``bash
tests/support/setup_real_models.sh``, as bench/text.py; skipped when missing). The requests are
short search-style sentences (bench/text.py's generator, 3 to 30 words), padded to
--sequence-length.

For each workload: every padded shape is compiled first (untimed); then "one at a time" calls
``pipe(x)`` on the ``max(clients) x requests`` requests in one thread (its results are the
reference); then for each C in --clients, C client threads each send --requests requests in turn
(``server(x)``, closed loop) to one ``pipe.serve(max_batch_size=..., batch_timeout_ms=...)``
(--max-batch-size, default --batch-size: a server batch larger than the pipeline's batch size is
sorted by length and split into graph calls of --batch-size rows, which pads less).
``--asyncio`` adds a row where max(clients) asyncio tasks do the same with ``await
server.acall(x)``. Printed per row: requests/s, the ratio to one at a time, p50 / p99 latency
(ms, per request), the mean batch the server formed, and lost / crossed / failed results: a result
is crossed unless it equals the one-at-a-time result for its input (embeddings within 1e-5: a
batch pads other rows beside it, another XLA shape; labels equal and scores within 1e-5).
The issue's target: >= 4x one at a time at 64 clients.
"""

import argparse
import asyncio
import concurrent.futures
import pathlib
import sys
import threading
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from text import default_folder, sentences  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures"
WORKLOADS = {  # name -> (task, folder)
    "embedding": ("text-embedding", FIXTURES / "bert-sentence-transformers"),
    "classification": ("text-classification", FIXTURES / "bert-sequence-classification"),
    "minilm": ("text-embedding", default_folder()),
}
TOL = 1e-5  # served vs alone: the same graph at another padded shape (see the docstring)


def requests(n, seed=0):
    """``n`` short sentences (3..30 words), distinct, so a crossed result shows."""
    texts = [" ".join(s.split()[:30]) for s in sentences(n, seed)]
    return [f"{t} {i}" for i, t in enumerate(texts)]


def warm(pipe, texts, lengths):
    """Compile every padded shape the runs can meet: each row count at each length (rows of
    texts that pad to that length)."""
    tokens = [len(pipe.tokenizer.encode(t, max_length=pipe.sequence_lengths[-1]).ids)
              for t in texts]
    for low, length in zip([0] + lengths, lengths):
        fits = [t for t, n in zip(texts, tokens) if low < n <= length]
        rows = 1
        while fits and rows <= pipe.batch_size:
            pipe((fits * rows)[:rows], batch_size=rows)
            rows *= 2
    return pipe.model.shared["compiled"].cache_info().misses


def same(got, want):
    if isinstance(want, np.ndarray):
        return isinstance(got, np.ndarray) and got.shape == want.shape and \
            float(np.abs(got - want).max()) <= TOL
    flat = lambda r: r if isinstance(r, list) else [r]  # noqa: E731
    return all(g["label"] == w["label"] and abs(g["score"] - w["score"]) <= TOL
               for g, w in zip(flat(got), flat(want))) and len(flat(got)) == len(flat(want))


def one_at_a_time(pipe, texts):
    latencies, results = [], []
    start = time.perf_counter()
    for t in texts:
        t0 = time.perf_counter()
        results.append(pipe(t))
        latencies.append(time.perf_counter() - t0)
    return results, time.perf_counter() - start, latencies


def threaded(server, texts, clients, per_client):
    """C threads, each sending its share in turn; (results by index, seconds, latencies)."""
    results, latencies, lock = {}, [], threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(k):
        barrier.wait()
        for j in range(per_client):
            i = k * per_client + j
            t0 = time.perf_counter()
            try:
                out = server(texts[i])
            except Exception as error:  # noqa: BLE001 -- counted as failed
                out = error
            with lock:
                latencies.append(time.perf_counter() - t0)
                results[i] = out

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        jobs = [pool.submit(client, k) for k in range(clients)]
        barrier.wait()
        start = time.perf_counter()
        for job in jobs:
            job.result()
        seconds = time.perf_counter() - start
    return results, seconds, latencies


def asyncio_clients(server, texts, clients, per_client):
    async def client(k, results, latencies):
        for j in range(per_client):
            i = k * per_client + j
            t0 = time.perf_counter()
            try:
                results[i] = await server.acall(texts[i])
            except Exception as error:  # noqa: BLE001 -- counted as failed
                results[i] = error
            latencies.append(time.perf_counter() - t0)

    async def run():
        results, latencies = {}, []
        start = time.perf_counter()
        await asyncio.gather(*(client(k, results, latencies) for k in range(clients)))
        return results, time.perf_counter() - start, latencies

    return asyncio.run(run())


def check(results, want, n):
    lost = sum(i not in results for i in range(n))
    failed = sum(isinstance(r, BaseException) for r in results.values())
    crossed = sum(not isinstance(r, BaseException) and not same(r, want[i])
                  for i, r in results.items())
    return lost, crossed, failed


def row(name, n, seconds, latencies, base_rate, batch="", counts=(0, 0, 0)):
    rate = n / seconds
    p50, p99 = (np.percentile(latencies, q) * 1000 for q in (50, 99))
    print(f"  {name:<16} {rate:9.1f} {rate / base_rate:7.2f}x {p50:9.2f} {p99:9.2f} {batch:>7}"
          f"   {'/'.join(map(str, counts))}")
    return rate


def bench(name, args):
    import transmuter

    task, folder = WORKLOADS[name]
    if not (folder / "onnx" / "model.onnx").exists():
        print(f"{name}: {folder} has no onnx/model.onnx (bash tests/support/setup_real_models.sh)")
        return
    pipe = transmuter.pipeline(task, folder, backend=args.backend, batch_size=args.batch_size,
                               sequence_length=args.sequence_length)
    most = max(args.clients)
    texts = requests(most * args.requests)
    start = time.perf_counter()
    shapes = warm(pipe, texts, args.sequence_length)
    print(f"{name}: {task}, {folder.name}, {len(texts)} requests, batch size {args.batch_size}, "
          f"max batch {args.max_batch_size or args.batch_size}, timeout {args.batch_timeout_ms} "
          f"ms, lengths {args.sequence_length} ({shapes} shapes compiled in "
          f"{time.perf_counter() - start:.1f} s)")
    print(f"  {'clients':<16} {'req/s':>9} {'ratio':>8} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'batch':>7}   lost/crossed/failed")
    want, seconds, latencies = one_at_a_time(pipe, texts)
    base = len(texts) / seconds
    row("one at a time", len(texts), seconds, latencies, base)
    runs = [(f"{c} threads", threaded, c) for c in args.clients]
    runs += [(f"{most} asyncio", asyncio_clients, most)] if args.asyncio else []
    for label, run, clients in runs:
        n = clients * args.requests
        with pipe.serve(args.max_batch_size, args.batch_timeout_ms) as server:
            results, seconds, latencies = run(server, texts, clients, args.requests)
        stats = server.stats
        counts = check(results, want, n)
        row(label, n, seconds, latencies, base, f"{stats['requests'] / stats['batches']:.1f}",
            counts)
    compiled = pipe.model.shared["compiled"].cache_info().misses
    if compiled != shapes:  # a compile inside a timed run would dominate its figures
        print(f"  note: {compiled - shapes} shape(s) compiled during the timed runs")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="embedding,classification,minilm")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--requests", type=int, default=50, help="per client")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-batch-size", type=int, default=None)
    parser.add_argument("--batch-timeout-ms", type=float, default=5)
    parser.add_argument("--sequence-length", default="16,32,64")
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--asyncio", action="store_true")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    args.sequence_length = [int(n) for n in args.sequence_length.split(",")]
    for name in args.workloads.split(","):
        bench(name, args)


if __name__ == "__main__":
    main()
