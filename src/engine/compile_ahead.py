"""Compiling ahead: a shape the caller will certainly run next (a generation's decode step while
its prompt runs, its next KV-cache bucket, the next batch of a stream's read-ahead window)
compiles in a background thread while the current call runs, so a long generation or a stream
stops pausing at each new shape (CompiledFunction.compile_ahead; the callers that know what comes
next are generation/steppers.py and pipelines/base.py).

Tracing (``jax.jit(...).lower``) stays on the caller's thread: it is Python, holds the GIL, and
the runner that traces is not thread-safe. Only XLA's ``compile()``, which releases the GIL, runs
in the worker: one daemon thread per process, started at the first request, stopped at
interpreter exit (requests still waiting are dropped, a compile under way finishes first). At
most MAX_AHEAD requests wait or run at once; one past that is not made (its shape compiles on
the caller's thread when it comes). A compile that fails in the worker is dropped (a DEBUG log)
and the caller compiles that shape as it would have. A request the caller reaches before the
worker has started it is compiled by the caller itself, from the same lowering.

On by default where the process has MIN_CORES cores or more (below, it has no core to gain);
``compile_ahead=True`` / ``TRANSMUTER_COMPILE_AHEAD=1`` turns it on anywhere, and
``compile_ahead=False`` on ``load``, ``compile`` or ``pipeline`` or ``TRANSMUTER_COMPILE_AHEAD=0``
(read at each request) turns it off. MLX compiles at the first call
(``mx.compile`` has no separate lowering): nothing is compiled ahead there.

What it gains is a second core's work: tracing and XLA's CPU compile are single-threaded (a BERT
fixture shape: 1.0 s of CPU in 1.2-1.6 s of wall time). bench/compile_ahead.py on 2 cores shared
with other jobs (load 3.3-4.5): the calling thread compiled 15 of 16 shapes (Whisper fixture, 5
beams), 6 of 8 (llama fixture chat), 2 of 4 (a BERT stream), yet first calls moved within the
noise (4.79 -> 6.68 s, 4.90 -> 3.20 s, 4.76 -> 4.66 s): with no core free, the two compiles ran
side by side at half speed. docs/compile-cache.md has the table."""

import atexit
import contextlib
import logging
import os
import queue
import threading

from ..errors import InputError

ENV = "TRANSMUTER_COMPILE_AHEAD"
OFF = ("0", "off", "false", "no", "none", "")
# Requests waiting or compiling at once: the next shape and the one after it. More would take
# the CPU from the caller's own work (2 cores: the caller and one compile) for shapes far off.
MAX_AHEAD = 2
LOG = logging.getLogger("transmuter.compile")


def check_option(value):
    """Refuse a ``compile_ahead=`` that is not None or a bool."""
    if value is None or isinstance(value, bool):
        return value
    raise InputError(f"compile_ahead must be None (TRANSMUTER_COMPILE_AHEAD, else on with 4 cores "
                     f"or more), True or "
                     f"False, got {value!r}")


# Below this many cores the default is off: compiling ahead gains only a free core's work, and on
# 2 busy cores it made Whisper's first call slower (4.8 -> 6.7 s; see the module's note).
MIN_CORES = 4


def cores():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def enabled(option=None):
    """Whether ``option`` (``compile_ahead=``) asks for compiling ahead; None reads
    TRANSMUTER_COMPILE_AHEAD, and without it compiles ahead on machines of MIN_CORES cores or
    more."""
    if option is not None:
        return bool(option)
    setting = os.environ.get(ENV)
    if setting is None:
        return (cores() or 1) >= MIN_CORES
    return setting.strip().lower() not in OFF


class Job:
    """One lowered shape, compiled by the worker (or by its caller, if reached first)."""

    def __init__(self, lowered, scopes, label):
        self.lowered, self.scopes, self.label = lowered, scopes, label
        self.result = None  # the executable; None until compiled, or after a failure
        self._state = "queued"  # -> "running" -> "done"
        self._lock = threading.Lock()
        self._done = threading.Event()

    def _claim(self):
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "running"
            return True

    def run(self):
        """Compile, if nobody has started to; a failure is logged and leaves ``result`` None."""
        if not self._claim():
            return
        try:
            with contextlib.ExitStack() as stack:
                for scope in self.scopes():
                    stack.enter_context(scope)
                self.result = self.lowered.compile()
        except Exception as e:  # the caller compiles the shape itself
            LOG.debug("compiling %s ahead failed (%s: %s); the call compiles it", self.label,
                      type(e).__name__, e)
        finally:
            self.lowered = None
            with self._lock:
                self._state = "done"
            self._done.set()

    def drop(self):
        """Never compiled (the worker stopped): the caller compiles the shape itself."""
        if self._claim():
            self.lowered = None
            self._state = "done"
            self._done.set()

    def take(self):
        """The executable: compiled here now if the worker has not started it, else waited
        for; None if its compile failed."""
        self.run()  # a no-op when the worker has it
        self._done.wait()
        return self.result

    @property
    def started(self):
        return self._state != "queued"


class _Worker:
    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(MAX_AHEAD)
        self._thread = None
        self._lock = threading.Lock()
        self._stopped = False

    def reserve(self):
        """A place for one request (released when its job ends); False when MAX_AHEAD wait or
        run, or at exit."""
        with self._lock:
            return not self._stopped and self._slots.acquire(blocking=False)

    def release(self):
        """Give back a place reserved for a request never submitted."""
        self._slots.release()

    def submit(self, job):
        """Queue ``job`` in a place reserved for it."""
        with self._lock:
            if self._stopped:
                job.drop()
                self._slots.release()
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="transmuter-compile-ahead")
                self._thread.start()
                atexit.register(self.stop)  # after JAX's own: runs before them
            self._queue.put(job)

    def _loop(self):
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job.drop() if self._stopped else job.run()
            finally:
                self._slots.release()

    def stop(self):
        """Drop what waits, let a compile under way finish, end the thread."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()


WORKER = _Worker()
