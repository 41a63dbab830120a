"""External-data layouts: a fixture graph saved with its weights in ``weights.bin`` beside it,
then broken. Files outside the model's folder hold exactly the right bytes, so a load that
succeeds where it must refuse has read them: that is how a read outside the folder shows."""

import os
import shutil

import onnx

DATA = "weights.bin"
# Layouts whose only right answer is our own error (onnxruntime and onnx's checker refuse them;
# they must not load, whatever the bytes there).
MUST_REFUSE = {"missing-file", "absolute-outside", "dotdot-outside", "symlink-outside",
               "symlink-dir-outside", "hardlink-outside", "fifo", "dev-zero", "nul-in-location",
               "location-is-folder", "from-bytes", "from-proto"}


def _save(proto, folder):
    """model.onnx + weights.bin in ``folder``; the tensors as they were written (no data)."""
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=DATA, size_threshold=256)
    return path, onnx.load(path, load_external_data=False)


def _entries(tensor):
    return {e.key: e for e in tensor.external_data}


def _external(model):
    return [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def _set(model, rng, key, value_of):
    t = rng.choice(_external(model))
    entries = _entries(t)
    old = entries[key].value if key in entries else None
    new = value_of(old, t)
    if key in entries:
        entries[key].value = new
    else:
        t.external_data.add(key=key, value=new)
    return f"tensor {t.name!r} {key} {old!r} -> {new!r}"


def _relocate(model, location):
    for t in _external(model):
        _entries(t)["location"].value = location


def build(rng, kind, proto, root):
    """(source to load, path onnxruntime loads or None, detail) of layout ``kind`` under
    ``root``: ``root/model`` is the model's folder, ``root/outside`` lies beside it."""
    folder, outside = os.path.join(root, "model"), os.path.join(root, "outside")
    os.makedirs(folder)
    os.makedirs(outside)
    path, model = _save(proto, folder)
    data = os.path.join(folder, DATA)
    shutil.copy(data, os.path.join(outside, DATA))  # the right bytes, in the wrong place
    size = os.path.getsize(data)
    detail = kind
    if kind == "wrong-offset":
        delta = rng.choice([1, 4, -4, size, 2**40, -(2**40)])
        detail = _set(model, rng, "offset", lambda old, t: str(int(old or 0) + delta))
    elif kind == "wrong-length":
        detail = _set(model, rng, "length", lambda old, t: str(rng.choice(
            [0, 1, int(old or 4) - 4, int(old or 0) + 4, size + 1, 2**62, -1])))
    elif kind == "missing-file":
        os.remove(data)
    elif kind == "absolute-outside":
        _relocate(model, os.path.join(outside, DATA))
    elif kind == "dotdot-outside":
        _relocate(model, rng.choice(["../outside/", "./../outside/", "sub/../../outside/"]) + DATA)
    elif kind == "symlink-outside":
        os.remove(data)
        target = rng.choice([os.path.join(outside, DATA), "/etc/passwd", "/proc/self/environ"])
        os.symlink(target, data)
        detail = f"{DATA} -> {target}"
    elif kind == "symlink-dir-outside":
        os.symlink(outside, os.path.join(folder, "data"))
        _relocate(model, "data/" + DATA)
    elif kind == "hardlink-outside":
        os.remove(data)
        os.link(os.path.join(outside, DATA), data)
    elif kind == "fifo":
        os.remove(data)
        os.mkfifo(data)
    elif kind == "dev-zero":
        os.remove(data)
        os.symlink(rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"]), data)
    elif kind == "truncated-file":
        with open(data, "r+b") as f:
            f.truncate(rng.randrange(size))
    elif kind == "nul-in-location":
        _relocate(model, DATA + "\0../outside/" + DATA)
    elif kind == "location-is-folder":
        os.makedirs(os.path.join(folder, "sub"))
        _relocate(model, rng.choice([".", "sub", ""]))
    if kind in ("from-bytes", "from-proto"):
        # No folder to resolve against: the working directory (the worker's is ``outside``,
        # which holds weights.bin) must not become one.
        os.chdir(outside)
        return (model.SerializeToString() if kind == "from-bytes" else model), None, kind
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path, (None if kind in MUST_REFUSE else path), detail
