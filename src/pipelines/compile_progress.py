"""What a pipeline says while its calls compile (engine/compile_notice.py announces a compile
still running after a second): the progress bar's postfix, or a log line at INFO, "compiling
32×128 (3 of ~8 shapes)", and once per pipeline, after the first call that compiled, that later
calls of those shapes are fast (and where the next process finds them)."""

import logging

from ..backends.compile_cache import active_folder

LOG = logging.getLogger("transmuter.pipelines")


class CompileProgress:
    """The announcements of one read-ahead window: ``expected`` new shapes (None: unknown)."""

    def __init__(self, pipe, expected=None):
        self.pipe, self.expected, self.count = pipe, expected, 0

    def __call__(self, label):
        """A compile of ``label`` is still running (called from a timer's thread)."""
        self.count += 1
        of = f" ({self.count} of ~{max(self.expected, self.count)} shapes)" \
            if self.expected else ""
        text = f"compiling {label}{of}"
        bar = getattr(self.pipe, "_bar", None)
        if bar is not None:
            bar.set_postfix_str(text)
        LOG.info("%s: %s", self.pipe.task, text)

    def done(self):
        """After the window: the postfix cleared; the first window that compiled says, once,
        that this is a first call's cost."""
        if not self.count:
            return
        bar = getattr(self.pipe, "_bar", None)
        if bar is not None:
            bar.set_postfix_str("")
        if getattr(self.pipe, "_said_fast", False):
            return
        self.pipe._said_fast = True
        folder = active_folder()
        text = (f"{self.pipe.task}: the first call compiled its shapes; later calls of those "
                "shapes are fast" + (f", and a new process reads them back from {folder}"
                                     if folder else "")
                + " (pipe.warmup compiles a workload's shapes ahead: docs/compile-cache.md)")
        if bar is not None:
            bar.write(f"transmuter: {text}")
        LOG.info(text)
