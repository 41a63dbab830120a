"""First-call wall time and XLA compiles with compiling ahead on and off (engine/compile_ahead.py).

    python bench/compile_ahead.py [--runs N] [--workloads asr,chat,stream]

Each row is a fresh process with the persistent compile cache off (every shape compiles):
- ``asr``: the automatic-speech-recognition pipeline on the tests/fixtures Whisper, a 1 s clip of
  noise, 40 new tokens at most (bench/first_call.py's workload);
- ``chat``: text-generation on the tests/fixtures llama (a position_ids decoder on a fixed
  cache), a 75-word prompt (run in chunks of 64 tokens and less) and 32 new tokens;
- ``stream``: text-embedding on the tests/fixtures BERT over 400 sentences of 1 to 60 words
  (batch 8: length buckets met window by window).
Compiles are counted by thread from JAX's own event: the caller's, and the worker's.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"
WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()


def child(workload):
    import numpy as np
    from jax._src import monitoring

    import transmuter

    threads = []
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: threads.append(threading.current_thread().name)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    if workload == "asr":
        pipe = transmuter.pipeline("automatic-speech-recognition", str(ROOT / "whisper"),
                                   variant="fp32")
        clip = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
        call = lambda: pipe({"raw": clip, "sampling_rate": 16000},  # noqa: E731
                            max_new_tokens=40)
    elif workload == "chat":
        pipe = transmuter.pipeline("text-generation", str(ROOT / "llama"), variant="fp32")
        prompt = " ".join(WORDS * 5)  # 75 words: prompt chunks of 64 and more
        call = lambda: pipe(prompt, max_new_tokens=32, min_new_tokens=32)  # noqa: E731
    else:
        pipe = transmuter.pipeline("text-embedding", str(ROOT / "bert-sentence-transformers"),
                                   batch_size=8)
        texts = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (i * 11) % 60))
                 for i in range(400)]
        call = lambda: list(pipe(iter(texts)))  # noqa: E731
    before = len(threads)
    start = time.perf_counter()
    call()
    wall = time.perf_counter() - start
    mine = threads[before:]
    ahead = sum(1 for t in mine if t == "transmuter-compile-ahead")
    print(json.dumps({"first call": wall, "caller compiles": len(mine) - ahead,
                      "ahead compiles": ahead}))


def spawn(workload, ahead):
    env = dict(os.environ, TRANSMUTER_COMPILE_CACHE="0", TRANSMUTER_COMPILE_AHEAD=ahead)
    done = subprocess.run([sys.executable, __file__, "--child", workload], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{workload} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="processes per row")
    parser.add_argument("--workloads", default="asr,chat,stream")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    print(f"{args.runs} process(es) per row, {os.cpu_count()} CPU cores, compile cache off")
    print(f"{'workload':10}{'ahead':>6}{'first call s':>14}{'caller compiles':>17}"
          f"{'ahead compiles':>16}")
    for workload in args.workloads.split(","):
        for ahead in ("0", "1"):
            runs = [spawn(workload, ahead) for _ in range(args.runs)]
            wall = sorted(r["first call"] for r in runs)[len(runs) // 2]
            print(f"{workload:10}{'on' if ahead == '1' else 'off':>6}{wall:14.2f}"
                  f"{runs[0]['caller compiles']:17d}{runs[0]['ahead compiles']:16d}")


if __name__ == "__main__":
    main()
