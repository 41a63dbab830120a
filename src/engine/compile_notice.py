"""Saying that a call is compiling: a compile still running after SLOW_COMPILE_SECS is announced
(a log line at INFO, or whatever the caller's ``reporting`` asks), so a first call that takes
seconds tells why instead of standing still. A shape compiled before, in this process or read
back from the persistent cache, finishes sooner and says nothing.

    with compile_notice.reporting(lambda label: bar.set_postfix_str(f"compiling {label}")):
        fn(feed)                                  # CompiledFunction._build announces its shapes
"""

import contextlib
import contextvars
import logging
import threading

SLOW_COMPILE_SECS = 1.0
LOG = logging.getLogger("transmuter.compile")
_REPORTER = contextvars.ContextVar("transmuter_compile_reporter", default=None)


def _log(label):
    LOG.info("compiling %s (each new shape compiles once; later calls of it are fast)", label)


@contextlib.contextmanager
def reporting(reporter):
    """Within the block, ``reporter(label)`` announces a slow compile of this thread's calls (in
    a timer's thread: it must be quick and thread-safe)."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


@contextlib.contextmanager
def compiling(label):
    """Around one compile: announces ``label`` if it is still compiling after
    SLOW_COMPILE_SECS."""
    timer = threading.Timer(SLOW_COMPILE_SECS, _REPORTER.get() or _log, args=(label,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # an announcement under way ends before the call returns


def shape_label(shapes):
    """"32×128" for the first of ``shapes`` (the call's first input), "?" for none."""
    for shape in shapes:
        return "×".join(str(d) for d in shape) or "scalar"
    return "?"
