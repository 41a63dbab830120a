"""Reading an ONNX file with its external data, also behind huggingface_hub's cache symlinks."""

import os
import posixpath

from .errors import HubError
from .variants import _join

def read_onnx(path):
    """``onnx.load`` that reads external data itself, following symlinks: huggingface_hub's
    snapshots link each file to its blob, and onnx refuses external data behind a symlink or a
    hard link. Locations must stay inside the model's folder."""
    model = _load_graph(path)
    folder = os.path.dirname(os.path.abspath(path))
    for tensor, location, info in _external_tensors(model):
        if location.startswith(("../", "/")) or location in ("..", "."):
            raise HubError(f"{path}: tensor {tensor.name!r} points outside the model's folder "
                           f"({info.get('location')!r})")
        try:
            with open(os.path.join(folder, *location.split("/")), "rb") as f:
                f.seek(int(info.get("offset", 0)))
                tensor.raw_data = f.read(int(info["length"]) if "length" in info else -1)
        except OSError as e:
            raise HubError(f"{path}: cannot read external data of {tensor.name!r}: {e}") from e
        tensor.data_location = tensor.DEFAULT
        del tensor.external_data[:]
    return model


def _referenced_files(local_path, folder) -> list[str]:
    """Repo paths of the external-data files an ONNX file references."""
    try:
        model = _load_graph(local_path)
    except HubError:
        return []  # let the model loader report it
    return sorted({posixpath.normpath(_join(folder, location))
                   for _, location, _ in _external_tensors(model)})


def _load_graph(path):
    import onnx
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as e:
        raise HubError(f"Cannot read ONNX model {path!r}: {e}") from e


def _external_tensors(model):
    """(tensor, normalized location, external_data dict) of each tensor stored outside."""
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == tensor.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            yield tensor, posixpath.normpath(info.get("location", "").replace(os.sep, "/")), info


def _all_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_tensors(g)
