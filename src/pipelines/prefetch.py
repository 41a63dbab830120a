"""Preprocessing ahead of the model, in background threads, as a PyTorch DataLoader's workers do:
while a batch runs, the next inputs' files are read, decoded, resized and featurized (Pillow,
soundfile and NumPy release the GIL there). Results keep input order, and an input's error is
raised at its turn, after the results of the inputs before it, as it would be without threads."""

import collections
import concurrent.futures
import itertools
import os


def workers():
    """Preprocessing threads: one per two cores (the model's own threads take the rest), 1 to 4."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))


def ordered(fn, items, ahead):
    """``fn(item)`` for each of ``items``, in order, computed by ``workers()`` threads at most
    ``ahead`` items before the one being returned. The items are read here, in the caller's
    thread; closing the generator cancels what has not started. One item alone is computed here:
    there is nothing to overlap, and a thread costs ~0.15 ms a call."""
    items = iter(items)
    head = list(itertools.islice(items, 2))
    if len(head) < 2:
        yield from map(fn, head)
        return
    pool = concurrent.futures.ThreadPoolExecutor(workers(), "transmuter-preprocess")
    pending = collections.deque()
    try:
        for item in itertools.chain(head, items):
            pending.append(pool.submit(fn, item))
            if len(pending) > ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
