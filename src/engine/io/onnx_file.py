"""Reading an ONNX file with its external data, also behind huggingface_hub's cache symlinks.

onnx.load refuses external data behind any symlink or hard link, and huggingface_hub's snapshots
are made of symlinks (``snapshots/<commit>/onnx/model.onnx_data -> ../../../blobs/<sha>``). So we
read external data ourselves, with onnx's rules (onnx/external_data_helper.py and the C++
``_open_external_data``: inside the model's folder, regular files only, no hard links, offset and
length within the file). Symbolic links are followed, then the real path must still lie inside
the model's folder, or, from a Hub cache snapshot, in the blobs of the same repo.
"""

import math
import os
import posixpath
import stat

from ...errors import HubError, ModelLoadError

# onnx.helper.make_tensor: these types pack several values per byte.
_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2,
                "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}
# O_NONBLOCK: opening a FIFO must not wait for a writer. O_NOFOLLOW: the path was resolved
# already, so a link appearing there since is an attack. The getattr defaults keep Windows working.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_FIX = ("Copy the data file itself (not a link) into the model's folder, or re-save the model "
        "with onnx.save(model, path, save_as_external_data=True).")


def read_onnx(path, external=None):
    """``onnx.load`` that reads external data itself, safely: locations must resolve to regular
    files inside the model's folder (or, in huggingface_hub's cache, the repo's blobs).
    ``external``, a dict, receives name -> (location, offset, length) of each tensor read so
    (the weight table's record of where to write it back)."""
    model = load_graph(path)
    roots = _allowed_roots(os.path.dirname(os.path.abspath(path)))
    for tensor, location, info in _external_tensors(model):
        where = _Where(path, tensor.name, info.get("location", ""))
        if _escapes(location):
            raise HubError(f"{where}: points outside the model's folder. Keep external data "
                           "files next to the .onnx file and name them relatively.")
        target = _resolve(where, roots, location)
        data = _read(where, target, info)
        _check_size(where, tensor, len(data))
        if external is not None:
            external[tensor.name] = (location, _non_negative(where, info, "offset", 0), len(data))
        tensor.raw_data = data
        tensor.data_location = tensor.DEFAULT
        del tensor.external_data[:]
    return model


def refuse_external_data(model, source):
    """ModelLoadError if a tensor of ``model`` (given as ``source``: bytes or a ModelProto) still
    stores its data in a file: without the .onnx path there is no folder to resolve it against,
    and the working directory is no such folder."""
    first = next(_external_tensors(model), None)
    if first is not None:
        tensor, _, info = first
        raise ModelLoadError(
            f"Tensor {tensor.name!r} of the model given as {source} stores its data in an "
            f"external file ({info.get('location', '')!r}), and this source has no folder to "
            "find it in. Load the model from its .onnx path instead, or call "
            "onnx.load_external_data_for_model(proto, folder) first.")


class _Where:
    """The tensor being read, as error messages name it."""

    def __init__(self, path, name, location):
        self.path, self.name, self.location = path, name, location

    def __str__(self):
        return f"{self.path}: external data of tensor {self.name!r} at {self.location!r}"


def _escapes(location) -> bool:
    """Whether a normalized location leaves the model's folder (onnx refuses the same)."""
    return (location in ("", ".", "..") or location.startswith(("../", "/")) or "\0" in location
            or os.path.isabs(location) or bool(os.path.splitdrive(location)[0]))


def _allowed_roots(folder) -> list[str]:
    """Real folders external data may live in: the model's folder and, in huggingface_hub's cache,
    its repo's blobs."""
    real = os.path.realpath(folder)
    blobs = _cache_blobs(real)
    return [real] + ([blobs] if blobs else [])


def _cache_blobs(folder):
    """``<x>/models--org--name/blobs`` when ``folder`` lies in ``<x>/models--org--name/
    snapshots/<commit>/``: huggingface_hub links each snapshot file to a blob of its own repo."""
    parts = folder.split(os.sep)
    for i in range(len(parts) - 2, 0, -1):  # the innermost snapshot, with a commit after it
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return os.path.realpath(os.sep.join(parts[:i] + ["blobs"]))
    return None


def _inside(path, root) -> bool:
    return os.path.commonpath([path, root]) == root


def _resolve(where, roots, location) -> str:
    """The real path of ``location``, once symlinks are followed; HubError if that leaves the
    allowed roots (a link to /etc/passwd, a linked folder pointing elsewhere)."""
    target = os.path.realpath(os.path.join(roots[0], *location.split("/")))
    if not any(_inside(target, root) for root in roots):
        raise HubError(f"{where}: resolves to {target}, outside the model's folder {roots[0]} "
                       f"(a symbolic link leads there). {_FIX}")
    return target


def _read(where, target, info) -> bytes:
    """The bytes at ``info``'s offset and length in ``target``, a regular file checked on the
    open descriptor itself, so that nothing can be swapped in between the check and the read."""
    try:
        fd = os.open(target, _OPEN_FLAGS)
    except OSError as e:
        raise HubError(f"{where}: cannot open {target} ({e.strerror}). The data file must be "
                       "a plain file next to the .onnx file: download or copy it there.") from e
    try:
        size = _check_regular(where, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        offset, length = _range(where, info, size)
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:  # the file shrank while we read it
        raise HubError(f"{where}: read {len(data)} of {length} bytes; the file changed while "
                       "it was read. Load the model again.")
    return data


def _check_regular(where, st) -> int:
    """The size of a regular file with one name; HubError for a directory, a device
    (/dev/zero never ends), a FIFO (would block) or a hard link (another file's bytes)."""
    if not stat.S_ISREG(st.st_mode):
        raise HubError(f"{where}: is not a regular file (it is a {_kind(st.st_mode)}). "
                       "External data must be a plain file in the model's folder.")
    if st.st_nlink > 1:
        raise HubError(f"{where}: is a hard link ({st.st_nlink} names for one file), which may "
                       f"be any file on the disk. {_FIX}")
    return st.st_size


def _kind(mode) -> str:
    kinds = {stat.S_ISDIR: "directory", stat.S_ISFIFO: "FIFO", stat.S_ISCHR: "character device",
             stat.S_ISBLK: "block device", stat.S_ISSOCK: "socket"}
    return next((name for test, name in kinds.items() if test(mode)), "special file")


def _range(where, info, size) -> tuple[int, int]:
    """(offset, length) from the external_data entries, both within a file of ``size`` bytes."""
    offset = _non_negative(where, info, "offset", 0)
    length = _non_negative(where, info, "length", None)
    if offset > size:
        raise HubError(f"{where}: offset {offset} lies past the end of its file of {size} bytes. "
                       "The data file does not match the model: re-download or re-export it.")
    if length is None:
        return offset, size - offset
    if offset + length > size:
        raise HubError(f"{where}: offset {offset} + length {length} = {offset + length} lies "
                       f"past the end of its file of {size} bytes. The data file does not match "
                       "the model: re-download or re-export it.")
    return offset, length


def _non_negative(where, info, key, default):
    value = info.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise HubError(f"{where}: its {key} {value!r} is not a non-negative integer. The model "
                       "file is damaged: re-download or re-export it.")
    return number


def _check_size(where, tensor, nbytes):
    """HubError naming the tensor when its data is not the size its dims and type need (numpy
    would fail later, deep inside a reshape, without saying which tensor)."""
    need = _tensor_nbytes(tensor)
    if need is not None and nbytes != need:
        import onnx
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).name
        dims = ", ".join(str(d) for d in tensor.dims)
        raise HubError(f"{where}: holds {nbytes} bytes, but {dtype}[{dims}] needs {need}. The "
                       "data file does not match the model: re-download or re-export it.")


def _tensor_nbytes(tensor):
    """Bytes the raw data of ``tensor`` takes (onnx.helper.make_tensor's rule, sub-byte types
    packed: ceil(count * bits / 8)); None for strings and unknown types."""
    import onnx
    T = onnx.TensorProto
    if tensor.data_type == T.STRING:
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None  # the graph parser reports the unknown type
    packed = {getattr(T, name): bits for name, bits in _PACKED_BITS.items() if hasattr(T, name)}
    bits = packed.get(tensor.data_type, itemsize * 8)
    return -(-math.prod(tensor.dims) * bits // 8)


def referenced_files(local_path, folder) -> list[str]:
    """Repo paths of the external-data files an ONNX file references. Locations that leave the
    model's folder are skipped: read_onnx refuses them with its own message."""
    try:
        model = load_graph(local_path)
    except HubError:
        return []  # let the model loader report it
    return sorted({posixpath.normpath(join_path(folder, location))
                   for _, location, _ in _external_tensors(model) if not _escapes(location)})


def load_graph(path):
    import onnx
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as e:
        raise HubError(f"Cannot read ONNX model {path!r}: {e}") from e


def _external_tensors(model):
    """(tensor, normalized location, external_data dict) of each tensor stored outside."""
    for tensor in _model_tensors(model):
        if tensor.data_location == tensor.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            # Backslashes too: a Windows-made "..\\x" must not pass as a file name.
            location = info.get("location", "").replace("\\", "/")
            yield tensor, posixpath.normpath(location) if location else "", info


def _model_tensors(model):
    """Every tensor of the model: its graph, its functions, its training graphs (as onnx's
    external_data_helper scans them, plus sparse tensors)."""
    yield from _all_tensors(model.graph)
    for function in model.functions:
        yield from _all_tensors(function)
    for training in model.training_info:
        yield from _all_tensors(training.initialization)
        yield from _all_tensors(training.algorithm)


def _all_tensors(graph):
    """Tensors of a GraphProto (or FunctionProto: nodes only), subgraphs included."""
    yield from getattr(graph, "initializer", ())
    for sparse in getattr(graph, "sparse_initializer", ()):
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            yield from _attribute_tensors(attr)


def _attribute_tensors(attr):
    if attr.HasField("t"):
        yield attr.t
    yield from attr.tensors
    # A Constant's sparse_value: missed here, its data would be read against the working directory.
    sparse = ([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []) + list(
        attr.sparse_tensors)
    for s in sparse:
        yield from (s.values, s.indices)
    for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
        yield from _all_tensors(g)


def join_path(folder, name):
    """``name`` inside a repo's ``folder`` (posix; the root is "")."""
    return f"{folder}/{name}" if folder else name
