"""Resident memory while pipelines are created and dropped in a loop (issue 14): models, their
compiled functions and generators must be freed with the pipeline, so memory stays flat.

    python bench/pipeline_memory.py [--count 50] [--task text-classification --fixture ...]

Prints the resident set size after the first pipeline and after the loop, and their ratio."""

import argparse
import gc
import pathlib

import transmuter

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CASES = {
    "text-classification": ("bert-sequence-classification", "I love it", {}),
    "text-generation": ("gpt2", "Hello", {"max_new_tokens": 4}),
    "image-classification": ("vit", str(ROOT / "vit/references/image_0.png"), {}),
}


def rss_mib():
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * 4096 / 2**20


def cycle(task):
    fixture, item, options = CASES[task]
    pipe = transmuter.pipeline(task, ROOT / fixture)
    pipe(item, **options)
    del pipe
    gc.collect()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=50)
    args = parser.parse_args()
    for task in CASES:
        cycle(task)  # the first: imports, one-time JAX state
        first = rss_mib()
        for _ in range(args.count - 1):
            cycle(task)
        last = rss_mib()
        print(f"{task:22s} after 1: {first:7.1f} MiB   after {args.count}: {last:7.1f} MiB   "
              f"ratio {last / first:.3f}")


if __name__ == "__main__":
    main()
