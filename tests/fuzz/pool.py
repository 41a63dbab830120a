"""A few long-lived worker processes (worker.py), each case under a time limit; a worker that
dies (a signal, memory past its limit) or overruns is killed, the case recorded, and a fresh
worker started in its place. Workers are also recycled after a number of cases, so the
compiled-function caches of many mutated models never add up to the memory limit."""

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Worker:
    def __init__(self, run_folder, memory):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
                   TRANSMUTER_COMPILE_CACHE=os.path.join(run_folder, "jax-cache"),
                   OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        # a log of its own: a crash's verdict quotes its last lines (an abort's reason)
        fd, self.log_path = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=run_folder)
        self.log = os.fdopen(fd, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", run_folder, str(memory)], cwd=ROOT,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            start_new_session=True)
        self.buffer, self.case, self.phase, self.started, self.done = b"", None, None, 0.0, 0
        self.detail = ""  # a worker that dies before its first case (an import failing) has none
        self.ready = False

    def send(self, case):
        self.case, self.phase, self.started = case, "ours", time.monotonic()
        self.detail = ""
        self.proc.stdin.write((json.dumps(dataclasses.asdict(case)) + "\n").encode())
        self.proc.stdin.flush()

    def messages(self):
        """The complete lines read so far; None once the worker has closed its pipe."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and anything it started
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


def _death(worker, timed_out):
    """The verdict of a case whose worker died or overran."""
    try:
        code = None if timed_out else worker.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    verdict = _death_verdict(worker, timed_out, code)
    verdict["detail"] = worker.detail
    return verdict


def _death_verdict(worker, timed_out, code):
    if worker.phase == "ort":  # onnxruntime crashed or hung on the file: not our answer
        return {"status": "skip", "outcome": "onnxruntime " + ("timed out" if timed_out
                                                               else f"died ({code})")}
    if timed_out:
        return {"status": "fail", "outcome": "time-out", "message": "no answer in time"}
    name = signal.Signals(-code).name if code is not None and code < 0 else f"exit {code}"
    return {"status": "fail", "outcome": f"crash {name}",
            "message": "the worker died (a signal, or memory past the limit)"
                       + _last_words(worker.log_path)}


def _last_words(path, lines=3):
    """The last lines the worker wrote to stderr (an abort's check message), or nothing."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            tail = f.read().decode(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("; its last words: " + " | ".join(line.strip()[:300] for line in tail)) if tail else ""


def run_cases(cases, report, *, workers=2, timeout=120.0, memory=6 << 30, run_folder,
              recycle=300, deadline=None):
    """Run ``cases`` (an iterator of Case) on ``workers`` processes; ``report(case, verdict)``
    per case. Stops drawing new cases at ``deadline`` (time.monotonic())."""
    selector = selectors.DefaultSelector()
    pool = []

    def start():
        w = Worker(run_folder, memory)
        selector.register(w.proc.stdout, selectors.EVENT_READ, w)
        pool.append(w)

    def retire(w):
        selector.unregister(w.proc.stdout)
        pool.remove(w)
        w.kill()

    def feed(w):
        if deadline is not None and time.monotonic() > deadline:
            return
        case = next(cases, None)
        if case is not None:
            w.send(case)

    for _ in range(workers):
        start()
    try:
        while any(w.case is not None or not w.ready for w in pool):
            for key, _ in selector.select(timeout=1.0):
                w = key.data
                msgs = w.messages()
                if msgs is None:  # the worker died
                    case = w.case
                    verdict = _death(w, False)
                    retire(w)
                    if case is not None:
                        report(case, verdict)
                        start()
                    continue
                for msg in msgs:
                    if "ready" in msg:
                        w.ready = True
                        feed(w)
                    elif "phase" in msg:
                        w.phase = msg["phase"]
                        w.detail = msg.get("detail") or w.detail
                    else:
                        case, w.case = w.case, None
                        report(case, msg)
                        w.done += 1
                        # past half the cap, resident or mapped (RLIMIT_AS counts mapped
                        # space: a huge case leaves JAX's arenas mapped, and the next cases
                        # failed their allocations, 20261205:8478 after 8398)
                        half = (memory >> 20) // 2
                        if w.done >= recycle or max(msg.get("rss_mb", 0),
                                                    msg.get("vm_mb", 0)) > half:
                            retire(w)
                            if deadline is None or time.monotonic() < deadline:
                                start()
                        else:
                            feed(w)
            now = time.monotonic()
            for w in list(pool):
                if w.case is not None and now - w.started > timeout:
                    case = w.case
                    verdict = _death(w, True)
                    retire(w)
                    report(case, verdict)
                    start()
            # A worker that finished its last case stays idle once cases run out.
            if all(w.ready and w.case is None for w in pool):
                break
    finally:
        for w in list(pool):
            retire(w)
