"""Whether a fresh Hub download is the file the server meant: huggingface_hub checks a
download's size, never its hash, so wrong bytes of the right length would stay cached under the
ETag's name and fail every later load. Asked with TRANSMUTER_VERIFY_DOWNLOADS=1 (hub/repo.py)."""

import hashlib
import json
import os
import re

from ..errors import HubError
from ..engine.io.onnx_file import load_graph

_HASHES = {40: "git sha1", 64: "sha256"}  # ETags: of regular files, of LFS files


def corruption(local, path, etag, scan_limit):
    """Why the file at ``local`` is not ``path`` as served with ``etag``, or None. An ETag that is
    a hash is checked; another (some mirrors') leaves parsing what has a format to parse (.onnx
    files up to ``scan_limit`` bytes)."""
    digest = _digest(local, etag)
    if digest is not None:
        return None if digest == etag else (f"their {_HASHES[len(etag)]} is {digest}, the "
                                            f"server's ETag {etag}")
    try:
        if path.endswith(".json"):
            with open(local, encoding="utf-8") as f:
                json.load(f)
        elif path.endswith(".onnx") and os.path.getsize(local) <= scan_limit:
            load_graph(local)
    except (ValueError, RecursionError, HubError) as e:
        return f"they do not parse as {path.rsplit('.', 1)[-1].upper()} ({e.__cause__ or e})"
    return None


def _digest(local, etag):
    """The hash of the file at ``local`` of the kind ``etag`` is (None: no hash we know)."""
    if not etag or len(etag) not in _HASHES or not re.fullmatch(r"[0-9a-f]+", etag):
        return None
    digest = hashlib.sha256() if len(etag) == 64 else hashlib.sha1(
        b"blob %d\0" % os.path.getsize(local))
    with open(local, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
