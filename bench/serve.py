"""Dynamic batching (pipeline.serve()): throughput and latency of many concurrent callers, one
input each, against the same requests called one at a time, with every result checked.

    python bench/serve.py [--workloads embedding,classification,minilm,generation]
                          [--clients 1,8,64]
                          [--requests 50] [--batch-size 32] [--max-batch-size N]
                          [--batch-timeout-ms 5] [--sequence-length 16,32,64]
                          [--backend jax|mlx] [--asyncio]
                          [--decoder llama-gqa] [--chat-requests 32] [--rows 8]
                          [--static-batch 8] [--spread-ms 1000]

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

``--workloads generation`` (continuous batching, pipelines/text/continuous.py): --chat-requests
(32) chat requests of mixed lengths (1 to 12 words of content, 8 to 48 new tokens, greedy) on a
decoder fixture (--decoder, default llama-gqa), run one at a time, as static batches of
--static-batch (8: ``pipe(list, batch_size=8)`` in arrival order, each batch decoding to its
longest budget, rows cut to their own), and through ``pipe.serve(max_batch_size=--rows)`` with
every request sent at once and with arrivals spread at random over --spread-ms. Printed per
row: generated tokens/s, the ratio to one at a time and to static batching, p50 / p99 request
latency (ms, from its arrival), and lost / crossed / failed (a result is crossed unless its
token ids equal the request run alone). Every shape is compiled by an untimed first pass.
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
    from transmuter.pipelines import shared
    return shared.of(pipe.model)["compiled"].cache_info().misses


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
    from transmuter.pipelines import shared

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
    compiled = shared.of(pipe.model)["compiled"].cache_info().misses
    if compiled != shapes:  # a compile inside a timed run would dominate its figures
        print(f"  note: {compiled - shapes} shape(s) compiled during the timed runs")


def chat_requests(n, seed=0):
    """``n`` (messages, options): 1..12 words of content, 8..48 new tokens, greedy."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(t.split()[:int(rng.integers(1, 13))]) for t in sentences(n, seed)]
    return [([{"role": "user", "content": t}],
             dict(max_new_tokens=int(rng.integers(8, 49)), do_sample=False, return_tensors=True))
            for t in texts]


def new_ids(pipe, x, result):
    """The generated ids of a return_tensors result (the prompt's cut off)."""
    prompt = next(iter(pipe.preprocess(x)))["ids"]
    return result[0]["generated_token_ids"][len(prompt):]


def as_ids(pipe, x, result):
    """New token ids from a result (a pipeline record list, or ids already), errors kept."""
    if isinstance(result, BaseException) or all(isinstance(t, int) for t in result):
        return result
    return new_ids(pipe, x, result)


def static_batches(pipe, cases, size):
    """Batches of ``size`` in arrival order, each to its longest budget; each row cut to its
    own budget (what a static batcher hands back)."""
    out = []
    for at in range(0, len(cases), size):
        group = cases[at:at + size]
        budget = max(o["max_new_tokens"] for _, o in group)
        results = pipe([x for x, _ in group], batch_size=size,
                       **dict(group[0][1], max_new_tokens=budget))
        out += [new_ids(pipe, x, r)[:o["max_new_tokens"]] for (x, o), r in zip(group, results)]
    return out


def continuous(server, cases, spread_s, seed=1):
    """Each request in its own thread at a random time within ``spread_s``; (results by
    index, seconds from the first arrival to the last answer, latencies from arrival)."""
    at = np.sort(np.random.default_rng(seed).uniform(0, spread_s, len(cases)))
    results, latencies, lock = {}, [], threading.Lock()
    start = time.perf_counter()

    def client(i):
        time.sleep(max(at[i] - (time.perf_counter() - start), 0))
        t0 = time.perf_counter()
        try:
            out = server(cases[i][0], **cases[i][1])
        except Exception as error:  # noqa: BLE001 -- counted as failed
            out = error
        with lock:
            latencies.append(time.perf_counter() - t0)
            results[i] = out

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start, latencies


def bench_generation(args):
    import transmuter

    folder = FIXTURES / args.decoder
    pipe = transmuter.pipeline("text-generation", folder, variant="fp32", backend=args.backend)
    cases = chat_requests(args.chat_requests)
    runs = [("one at a time", lambda: [pipe(x, **o) for x, o in cases]),
            (f"static batch {args.static_batch}",
             lambda: static_batches(pipe, cases, args.static_batch))]
    # every row's buffer as long as the longest request needs (its prompt padded to a power of
    # two, then its budget): one step shape, compiled before timing
    longest = max(2 ** (len(next(iter(pipe.preprocess(x)))["ids"]) - 1).bit_length() +
                  o["max_new_tokens"] for x, o in cases)
    for spread in (0, args.spread_ms / 1000):
        label = f"{args.rows} rows, " + (f"over {args.spread_ms:g} ms" if spread else "at once")

        def serve(spread=spread):
            with pipe.serve(max_batch_size=args.rows, cache_length=longest) as server:
                return continuous(server, cases, spread)
        runs.append((label, serve))
    print(f"generation: {args.decoder} ({pipe.generator.layout.mode} cache), "
          f"{len(cases)} chat requests, {args.backend}")
    print(f"  {'run':<22} {'tokens/s':>9} {'vs 1':>7} {'vs static':>9} {'p50 ms':>9} "
          f"{'p99 ms':>9}   lost/crossed/failed")
    want, rates = None, []
    for label, run in runs:
        for _ in range(3 if "rows" in label else 1):  # untimed: compiles this run's shapes
            run()  # (a server's prefill groups differ between runs: thrice)
        misses = pipe.generator.fn.cache_info().misses
        start = time.perf_counter()
        out = run()
        seconds, latencies = time.perf_counter() - start, None
        compiled = pipe.generator.fn.cache_info().misses - misses
        if isinstance(out, tuple):  # a server's: (results by index, seconds, latencies)
            out, seconds, latencies = out
        out = out if isinstance(out, dict) else dict(enumerate(out))
        got = {i: as_ids(pipe, cases[i][0], r) for i, r in out.items()}
        want = want or got  # one at a time is the reference
        counts = (sum(i not in got for i in range(len(cases))),
                  sum(not isinstance(g, BaseException) and g != want[i] for i, g in got.items()),
                  sum(isinstance(g, BaseException) for g in got.values()))
        tokens = sum(len(g) for g in want.values())
        rates.append(tokens / seconds)
        p50, p99 = ("-", "-") if latencies is None else \
            (f"{np.percentile(latencies, q) * 1000:.0f}" for q in (50, 99))
        static = f"{rates[-1] / rates[1]:.2f}x" if len(rates) > 1 else "-"
        print(f"  {label:<22} {rates[-1]:9.1f} {rates[-1] / rates[0]:6.2f}x {static:>9} "
              f"{p50:>9} {p99:>9}   {'/'.join(map(str, counts))}"
              + (f"  ({compiled} shape(s) compiled while timed)" if compiled else ""))


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
    parser.add_argument("--decoder", default="llama-gqa", help="generation: a fixture decoder")
    parser.add_argument("--chat-requests", type=int, default=32)
    parser.add_argument("--rows", type=int, default=8, help="generation: rows decoded together")
    parser.add_argument("--static-batch", type=int, default=8)
    parser.add_argument("--spread-ms", type=float, default=1000,
                        help="generation: arrivals at random within this many ms")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    args.sequence_length = [int(n) for n in args.sequence_length.split(",")]
    for name in args.workloads.split(","):
        bench_generation(args) if name == "generation" else bench(name, args)


if __name__ == "__main__":
    main()
