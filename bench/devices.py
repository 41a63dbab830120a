"""One pipeline over several devices of one host: inputs/s with 1 device vs all of them.

    python bench/devices.py [--model FOLDER] [--task text-embedding] [--n 512]
                            [--batch-size 64] [--repeat 3] [--counts 1,2,4] [--cpu-devices 4]

The same pipeline is made once per device count k (``devices=jax.devices()[:k]``; k = 1 is the
usual one-device path) and embeds (classifies) the same --n inputs at the same --batch-size, which
is per call: each of the k devices gets batch_size / k rows. The 1-device pipeline is the peer:
the table gives inputs/s per k, the ratio to 1 device, and the largest difference from 1 device's
outputs (the same kernels on fewer rows: ~0). Each pipeline makes one untimed pass first (it
compiles every padded shape the timed passes meet); then --repeat timed passes, the best counts.

Inputs: bench/text.py's seeded sentences (text tasks), or --images paths cycled (image tasks).
Model: the real all-MiniLM-L6-v2 export (``bash tests/support/setup_real_models.sh``) by default;
any folder with --model (e.g. tests/fixtures/vit with --task image-classification --images
tests/fixtures/vit/references/image_0.png).

On a CPU, ``--cpu-devices N`` sets ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before
JAX starts: N "devices" that share the same cores, so the figures show the overhead of splitting
only (no speedup can come of it); on a machine with several GPUs (or TPU cores) the same command
without it splits over them. The script prints the devices it sees.
"""

import argparse
import os
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="folder (default: the real all-MiniLM-L6-v2)")
    p.add_argument("--task", default="text-embedding")
    p.add_argument("--n", type=int, default=512, help="inputs per pass")
    p.add_argument("--batch-size", type=int, default=64, help="rows per call, over all devices")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--counts", default=None, help="device counts, e.g. 1,2,4 (default: 1 and all)")
    p.add_argument("--images", default=None, help="comma-separated image paths (image tasks)")
    p.add_argument("--cpu-devices", type=int, default=None,
                   help="force this many host CPU devices (XLA_FLAGS), for a CPU-only machine")
    return p.parse_args()


def inputs(args):
    if args.images:
        paths = args.images.split(",")
        return [paths[i % len(paths)] for i in range(args.n)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from text import sentences

    return sentences(args.n)


def timed(pipe, items, repeat):
    """(outputs of the untimed first pass, its seconds, best seconds of ``repeat`` passes)."""
    start = time.perf_counter()
    first = pipe(items)
    warm = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        pipe(items)
        best = min(best, time.perf_counter() - start)
    return first, warm, best


def difference(a, b):
    """The largest absolute difference between two results (nested lists, dicts, arrays)."""
    import numpy as np

    if isinstance(a, dict):
        return max((difference(a[k], b[k]) for k in a if not isinstance(a[k], str)), default=0.0)
    if isinstance(a, (list, tuple)) and a and not isinstance(a[0], (int, float)):
        return max(difference(x, y) for x, y in zip(a, b))
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def main():
    args = parse()
    if args.cpu_devices:  # before JAX starts: it reads XLA_FLAGS once
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.cpu_devices}")
    import jax

    import transmuter

    devices = jax.devices()
    print(f"devices: {len(devices)} x {devices[0].platform} ({devices[0].device_kind}): "
          f"{', '.join(map(str, devices))}")
    if len(devices) == 1:
        print("only one device: nothing to split (give --cpu-devices N on a CPU)")
    counts = ([int(c) for c in args.counts.split(",")] if args.counts
              else sorted({1, len(devices)}))
    folder = args.model
    if folder is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from text import default_folder

        folder = default_folder()
    items = inputs(args)
    print(f"{args.task} on {folder}: {len(items)} inputs, batch_size {args.batch_size} per call, "
          f"best of {args.repeat}")
    print(f"{'devices':>8} {'inputs/s':>10} {'vs 1':>6} {'first pass s':>13} {'max |diff|':>11}")
    base = base_rate = None
    for k in counts:
        pipe = transmuter.pipeline(args.task, folder, batch_size=args.batch_size,
                                   devices=devices[:k])
        out, warm, best = timed(pipe, items, args.repeat)
        rate = len(items) / best
        if base is None:
            base, base_rate = out, rate
        print(f"{k:>8} {rate:>10.1f} {rate / base_rate:>6.2f} {warm:>13.2f} "
              f"{difference(out, base):>11.2e}")


if __name__ == "__main__":
    main()
