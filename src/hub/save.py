"""Writing a model back to ONNX with new weights: ``save`` (one file) and ``save_pretrained`` (a
folder a pipeline loads). The graph is the source's own (engine/io/weights.py keeps it, without the
weights' bytes); each weight is written in its source type, from the params given or the
model's own arrays, so untouched weights come back byte for byte."""

import os
import posixpath
import re
import shutil

import numpy as np
import onnx

from ..errors import InputError
from ..engine.io.weights import EXTERNAL, FIELDS, KEPT, RAW, SPARSE, VIEW, source_bytes
from .repo import LocalRepo
from .weight_files import read_module_weights, write_safetensors

# protobuf cannot serialize a message of 2 GiB or more; leave room for the graph itself.
PROTO_LIMIT = (2 << 30) - (64 << 20)
EXTERNAL_MIN = 1024  # onnx's size_threshold: smaller tensors stay inline
ALIGN = 4096  # offsets of tensors moved out (onnx aligns to pages for memory mapping)
# Files save_pretrained does not copy: ONNX graphs and their data (another graph of the repo
# is not this one), framework weights (stale once the ONNX weights have trained), hidden files.
_SKIP = re.compile(r"(\.onnx(_data(_\d+)?|\.data(_\d+)?)?|\.(safetensors|bin|pt|pth|h5|msgpack|"
                   r"ckpt|gguf|tflite|ot|mlmodel))$")


def save(model, path, params=None):
    """Write ``model`` as the ONNX file ``path`` with ``params`` (a dict by initializer name:
    the trained ``model.trainable_params``, or all; default: the loaded weights) in place of
    its weights. The graph, opsets, metadata and every weight not given are the source's own,
    byte for byte; each weight keeps its source type (a float16 weight computed in float32 is
    cast back). When the source kept weights in external data files, they are written beside
    ``path`` as ``<name>_data`` (``_data_1``, ... for more files) at the source's offsets; a
    file that would pass protobuf's 2 GiB puts its weights in ``<name>_data`` too. Returns
    ``path``."""
    path = os.fspath(path)
    given = dict(params or {})
    full = model.full_params(params)  # refuses names that are no parameter of the model
    table = model.weights
    proto = onnx.ModelProto()
    proto.CopyFrom(table.skeleton)
    base = os.path.basename(path)
    renamed = {loc: f"{base}_data" + (f"_{i}" if i else "")
               for i, loc in enumerate(table.locations)}
    placed = {}  # new location -> [(offset, bytes)]
    inline = 0
    pending = []
    for tensor in proto.graph.initializer:
        entry = table.entries[tensor.name]
        if entry.storage in (RAW, EXTERNAL):
            data = source_bytes(entry, _value(model, full, given, entry))
            if entry.storage == EXTERNAL:
                location, offset, _ = entry.external
                _set_external(tensor, renamed[location], offset, len(data))
                placed.setdefault(renamed[location], []).append((offset, data))
            else:
                pending.append((tensor, data))
                inline += len(data)
        elif entry.storage == FIELDS and entry.stored in given:
            _set_fields(tensor, entry, _value(model, full, given, entry))
    _refuse_sparse(table, given)
    if inline > PROTO_LIMIT:  # too big for one protobuf: the large ones go to a data file
        offset, name = 0, f"{base}_data" + (f"_{len(renamed)}" if renamed else "")
        for tensor, data in pending:
            if len(data) >= EXTERNAL_MIN:
                offset = -(-offset // ALIGN) * ALIGN
                _set_external(tensor, name, offset, len(data))
                placed.setdefault(name, []).append((offset, data))
                offset += len(data)
            else:
                tensor.raw_data = data
    else:
        for tensor, data in pending:
            tensor.raw_data = data
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    for location, chunks in placed.items():
        _write(os.path.join(folder, location), chunks)
    _write(path, [(0, proto.SerializeToString())])
    return path


def save_pretrained(model, folder, params=None):
    """Write ``model`` with ``params`` (as ``save``) into ``folder`` at the path its repo had
    (``onnx/model.onnx``), and copy the repo's other files beside it (config, tokenizer,
    processor, generation config: what ``transmuter.pipeline(task, folder)`` reads), so that
    pipeline and onnxruntime both load the result. Not copied: the repo's other ONNX graphs
    and the model's framework weights (``*.safetensors``, ``*.bin``), but those of the
    sentence-transformers modules after it (``2_Dense/model.safetensors``: the pipeline runs
    them). ``params`` may hold the weights of those Dense modules too, by
    ``"2_Dense/linear.weight"`` (``training.params``): each such module's weights are written
    as its folder's ``model.safetensors`` (in their source dtypes) in place of its old file.
    Returns the ONNX file's path."""
    repo, file = _origin(model)
    folder = os.path.abspath(os.fspath(folder))
    paths = _module_paths(repo)
    modules = {p.split("/")[0] for p in paths}
    params, heads = _split_modules(params, paths)
    for rel in repo.files():
        name = posixpath.basename(rel)
        if posixpath.dirname(rel) in heads and name in ("model.safetensors", "pytorch_model.bin"):
            continue  # written below, trained
        skip = _SKIP.search(name) and not (rel.split("/")[0] in modules
                                           and not name.endswith((".onnx", ".onnx_data")))
        if skip or name.startswith(".") or any(
                part.startswith(".") for part in rel.split("/")[:-1]):
            continue
        source, target = repo.file(rel), os.path.join(folder, *rel.split("/"))
        if os.path.exists(target) and os.path.samefile(source, target):
            continue  # saving into the repo's own folder
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(source, target)  # follows the Hub cache's symlinks to the bytes
    for path, tensors in heads.items():
        _write_module(repo, os.path.join(folder, *path.split("/")), path, tensors)
    return save(model, os.path.join(folder, *file.split("/")), params)


def _module_paths(repo):
    """The paths of modules.json's sentence-transformers modules (not the model's own, "")."""
    try:
        modules = repo.json("modules.json", []) or []
    except Exception:  # noqa: BLE001 - a broken modules.json is the pipeline's to report
        return set()
    return {str(m.get("path")).strip("/") for m in modules
            if isinstance(m, dict) and m.get("path")}


def _split_modules(params, paths):
    """(the model's params, {module path: {tensor: array}}) of ``params``: a key
    '<module path>/<tensor>' is a module's weight."""
    model, heads = {}, {}
    for key, value in (params or {}).items():
        path, _, tensor = key.rpartition("/")
        if path in paths:
            heads.setdefault(path, {})[tensor] = value
        else:
            model[key] = value
    return (model if params is not None else None), heads


def _write_module(repo, folder, path, given):
    """``folder/model.safetensors``: the module's weights with ``given`` in their place."""
    own = read_module_weights(repo, path, f"{repo.label}: {path or '.'} (Dense)")
    for tensor, value in given.items():
        if tensor not in own:
            raise InputError(f"params[{path + '/' + tensor!r}]: the module {path} has no weight "
                             f"{tensor!r}; it has {sorted(own)}")
        value = np.asarray(value)
        if value.shape != own[tensor].shape or not np.issubdtype(value.dtype, np.floating):
            raise InputError(f"params[{path + '/' + tensor!r}] is {value.dtype} "
                             f"{list(value.shape)}; the weight is floats of shape "
                             f"{list(own[tensor].shape)}")
        own[tensor] = value.astype(own[tensor].dtype)
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), own)


def _value(model, full, given, entry):
    """The host array to write for ``entry``: a given param (checked) or the model's own."""
    name = entry.stored
    own = full[name] if name in full else model.constants[name]
    if name not in given:
        return model.backend.to_host(own)
    if entry.transform in (KEPT, VIEW):
        raise InputError(f"params[{name!r}]: this weight was rewritten at load for the op that "
                         "reads it (a packed quantized weight), so new values cannot be written "
                         "back into it; fine-tune the fp32 export")
    value = model.backend.to_host(given[name])
    if tuple(np.shape(value)) != tuple(np.shape(own)):
        raise InputError(f"params[{name!r}] has shape {list(np.shape(value))}, but the weight "
                         f"is {list(np.shape(own))}: give an array of the weight's shape")
    if not np.issubdtype(np.asarray(value).dtype, np.floating):
        raise InputError(f"params[{name!r}] has dtype {np.asarray(value).dtype}: give floats "
                         f"(they are written back as {entry.dtype.name})")
    return value


def _set_external(tensor, location, offset, length):
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)


def _set_fields(tensor, entry, value):
    """A weight the source stored in typed fields (float_data, ...), written there again."""
    made = onnx.helper.make_tensor(entry.name, entry.data_type, entry.dims,
                                   np.asarray(value).astype(entry.dtype).ravel(), raw=False)
    for field in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
        tensor.ClearField(field)
        getattr(tensor, field).extend(getattr(made, field))


def _refuse_sparse(table, given):
    for entry in table.entries.values():
        if entry.storage == SPARSE and entry.stored in given:
            raise InputError(f"params[{entry.stored!r}]: a sparse initializer cannot be written "
                             "back with new values (it would not stay sparse)")


def _write(path, chunks):
    """Write ``chunks`` ((offset, bytes)) to ``path`` through a temporary file, so that a failed
    save leaves any earlier file as it was."""
    temporary = f"{path}.tmp{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            for offset, data in sorted(chunks, key=lambda c: c[0]):
                f.seek(offset)
                f.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _origin(model):
    """(repo, the ONNX file's path in it) of the model; InputError without one."""
    repo, file = model.origin or (None, None)
    if repo is not None:
        return repo, file
    if file is not None:
        folder = os.path.dirname(os.path.abspath(file))
        base = os.path.basename(file)
        up = os.path.dirname(folder)
        if os.path.basename(folder) == "onnx" and os.path.isfile(os.path.join(up, "config.json")):
            return LocalRepo(up), f"onnx/{base}"
        if os.path.isfile(os.path.join(folder, "config.json")):
            return LocalRepo(folder), base
    where = f"from {file!r}" if file else "from bytes or an onnx.ModelProto"
    raise InputError(f"save_pretrained: the model was loaded {where}, with no repo (no "
                     "config.json beside it or above its onnx/ folder) whose files could be "
                     "copied: load it from its repo folder or Hub id, or write the ONNX file alone "
                     "with transmuter.save(model, path)")
