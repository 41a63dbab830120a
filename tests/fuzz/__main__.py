"""``python -m tests.fuzz --seed S (--count N | --seconds T)``, or ``--replay SEED:INDEX``.
Prints the counts per class and backend, each failure with its replay id, and the known ones;
exits 1 when a case failed that no known entry covers."""

import argparse
import collections
import itertools
import signal
import sys
import tempfile
import time

from . import known
from .cases import make_case, parse_id
from .pool import run_cases


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, help="cases to run (default: until --seconds)")
    p.add_argument("--seconds", type=float, help="stop drawing new cases after this long")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--replay", action="append", default=[], metavar="SEED:INDEX")
    p.add_argument("--classes", nargs="*", help="only these classes (cases.CLASS_WEIGHTS)")
    p.add_argument("--backends", nargs="*", help="only these backends (jax, mlx)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take")
    p.add_argument("--memory-gb", type=float, default=6.0, help="address space of a worker")
    p.add_argument("--quiet", action="store_true", help="no line per failure while running")
    args = p.parse_args(argv)
    if not args.replay and args.count is None and args.seconds is None:
        p.error("give --count, --seconds or --replay")
    return args


class Tally:
    """Counts per (class, backend) and the failures, known or not."""

    def __init__(self, quiet, verbose):
        self.counts = collections.defaultdict(collections.Counter)
        self.failures, self.known = [], collections.defaultdict(list)
        self.seconds = collections.Counter()
        self.graphs = collections.defaultdict(collections.Counter)  # fixture/graph -> backends
        self.quiet, self.verbose = quiet, verbose

    def __call__(self, case, verdict):
        status = verdict["status"]
        line = (f"{case.id} {case.label()} | {verdict.get('detail', '')} | {verdict['outcome']}"
                f"{' | ' + verdict['message'] if verdict.get('message') else ''}"
                f"{' @ ' + verdict['where'] if verdict.get('where') else ''}")
        if status == "fail":
            pattern = known.match(known.key_of(case, verdict))
            if pattern is not None:
                status = "known"
                self.known[pattern].append(case.id)
            else:
                self.failures.append(f"{line}\n      key: {known.key_of(case, verdict)}")
                if not self.quiet:
                    print("FAIL", line, flush=True)
        self.counts[(case.cls, case.backend)][status] += 1
        self.graphs[f"{case.fixture}/{case.graph}"][case.backend] += 1
        self.seconds[(case.cls, case.backend)] += verdict.get("seconds", 0.0)
        done = sum(sum(c.values()) for c in self.counts.values())
        if not self.verbose and done % 500 == 0:
            total = sum(self.counts.values(), collections.Counter())
            print(f"... {done} cases: {dict(total)}", file=sys.stderr, flush=True)
        if self.verbose:
            print(status.upper(), line)
            if verdict.get("traceback"):
                print(verdict["traceback"])

    def summary(self, seconds):
        total = collections.Counter()
        print(f"\n{'class':<12}{'backend':<8}{'cases':>7}{'pass':>7}{'fail':>6}{'known':>7}"
              f"{'skip':>6}{'s/case':>8}")
        for (cls, backend), c in sorted(self.counts.items()):
            total.update(c)
            print(f"{cls:<12}{backend:<8}{sum(c.values()):>7}{c['pass']:>7}{c['fail']:>6}"
                  f"{c['known']:>7}{c['skip']:>6}"
                  f"{self.seconds[(cls, backend)] / max(1, sum(c.values())):>8.2f}")
        print(f"{'total':<20}{sum(total.values()):>7}{total['pass']:>7}{total['fail']:>6}"
              f"{total['known']:>7}{total['skip']:>6}   ({seconds:.0f} s)")
        print(f"\n{len(self.graphs)} fixture graphs (or pipelines):")
        for graph, c in sorted(self.graphs.items()):
            print(f"  {graph:<44}" + "".join(f"{b} {n:>5}  " for b, n in sorted(c.items())))
        if self.known:
            print("\nknown failures (tests/fuzz/known.py):")
            for pattern, ids in self.known.items():
                print(f"  {len(ids):>5} x {pattern}: {known.KNOWN[pattern]} (e.g. {ids[0]})")
        unseen = [p for p in known.KNOWN if p not in self.known]
        if unseen:
            print(f"\nknown entries no case of this run met ({len(unseen)}; fixed, or not drawn):")
            for pattern in unseen:
                print(f"  {pattern}")
        if self.failures:
            print(f"\n{len(self.failures)} failing case(s) (replay: python -m tests.fuzz "
                  "--replay SEED:INDEX):")
            for line in self.failures:
                print("  " + line)
        return not self.failures


def main(argv=None):
    args = _args(argv)
    if args.replay:
        cases = iter([make_case(*parse_id(r)) for r in args.replay])
    else:
        indices = itertools.count(args.start) if args.count is None else \
            range(args.start, args.start + args.count)
        cases = (make_case(args.seed, i, args.classes, args.backends) for i in indices)
    tally = Tally(args.quiet, verbose=bool(args.replay))
    begin = time.monotonic()
    deadline = begin + args.seconds if args.seconds else None
    # SIGTERM (and Ctrl-C) end a long run early with its summary so far.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="transmuter-fuzz-") as folder:
        try:
            run_cases(cases, tally, workers=1 if args.replay else args.workers,
                      timeout=args.timeout, memory=int(args.memory_gb * (1 << 30)),
                      run_folder=folder, deadline=deadline)
        except KeyboardInterrupt:
            print("interrupted: the summary of the cases run so far", file=sys.stderr)
    return 0 if tally.summary(time.monotonic() - begin) else 1


if __name__ == "__main__":
    sys.exit(main())
