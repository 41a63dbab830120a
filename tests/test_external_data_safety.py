"""External data never reads outside the model's folder (or its Hub cache blobs), never a
symlink's or hard link's foreign target, never a device, FIFO or directory, and never against
the working directory (bytes and ModelProto sources, sparse tensors in attributes)."""

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter
from transmuter import hub
from transmuter.errors import HubError, ModelLoadError
from transmuter.engine.graph import tensor_to_numpy

W = np.arange(64, dtype=np.float32)
DECOY = np.full(64, -1.0, np.float32)  # what a wrong file holds


# --- building models whose tensors point at files -------------------------------------------

def external(tensor, location, offset=None, length=None):
    """``tensor`` with its bytes moved out to ``location`` (the bytes are returned)."""
    data = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": offset, "length": length}
    for key, value in entries.items():
        if value is not None:
            tensor.external_data.add(key=key, value=str(value))
    return data


def add_model(initializer, size=64):
    """Y = X + W, W being ``initializer``."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", initializer.data_type, [size])],
        [helper.make_tensor_value_info("Y", initializer.data_type, [size])], [initializer])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(model, folder, name="model.onnx"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(model.SerializeToString())  # onnx.save would touch the external files
    return path


def model_at(folder, location, **where):
    """model.onnx in ``folder`` whose W (64 floats) lives at ``location``; returns its path."""
    w = numpy_helper.from_array(W, "W")
    external(w, location, **where)
    return save(add_model(w), folder)


def result(model):
    return np.asarray(model(X=np.zeros(64, np.float32))["Y"])


def loaded_w(path):
    return numpy_helper.to_array(hub.read_onnx(path).graph.initializer[0])


# --- what keeps working ----------------------------------------------------------------------

def test_plain_external_data_loads(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    (folder / "weights.bin").write_bytes(W.tobytes())
    np.testing.assert_array_equal(loaded_w(path), W)
    np.testing.assert_array_equal(result(transmuter.load(str(path))), W)


def test_offset_and_length_within_one_file(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin", offset=64, length=256)
    (folder / "weights.bin").write_bytes(DECOY.tobytes()[:64] + W.tobytes() + b"\0" * 32)
    np.testing.assert_array_equal(loaded_w(path), W)


def test_symlink_inside_the_folder_loads(tmp_path):
    """A link whose target stays in the model's folder reads nothing foreign."""
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    (folder / "real.bin").write_bytes(W.tobytes())
    os.symlink("real.bin", folder / "weights.bin")
    np.testing.assert_array_equal(loaded_w(path), W)


def test_hub_cache_snapshot_links_to_its_blobs(tmp_path):
    """huggingface_hub's layout: snapshots/<commit>/onnx/x -> ../../../blobs/<sha>."""
    storage = tmp_path / "hub" / "models--org--name"
    onnx_dir = storage / "snapshots" / ("a" * 40) / "onnx"
    path = model_at(onnx_dir, "model.onnx_data")
    (storage / "blobs").mkdir(parents=True)
    (storage / "blobs" / "sha256blob").write_bytes(W.tobytes())
    os.symlink("../../../blobs/sha256blob", onnx_dir / "model.onnx_data")
    np.testing.assert_array_equal(loaded_w(path), W)
    np.testing.assert_array_equal(result(transmuter.load(str(path))), W)


def test_hub_cache_link_to_another_repos_blob_is_refused(tmp_path):
    cache = tmp_path / "hub"
    onnx_dir = cache / "models--org--name" / "snapshots" / ("a" * 40) / "onnx"
    path = model_at(onnx_dir, "model.onnx_data")
    (cache / "models--org--other" / "blobs").mkdir(parents=True)
    (cache / "models--org--other" / "blobs" / "sha").write_bytes(DECOY.tobytes())
    os.symlink(cache / "models--org--other" / "blobs" / "sha", onnx_dir / "model.onnx_data")
    with pytest.raises(HubError, match=r"'W'.*'model.onnx_data'.*outside"):
        hub.read_onnx(path)


@pytest.mark.parametrize("dtype, values, nbytes", [
    pytest.param(TensorProto.INT4, [1, -2, 3, -4, 5], 3, id="int4"),  # two a byte, one padded
    pytest.param(TensorProto.UINT4, [1, 2, 3, 4, 5, 6], 3, id="uint4"),
    pytest.param(TensorProto.UINT2, [1, 2, 3, 0, 1], 2, id="uint2"),  # four a byte
    pytest.param(TensorProto.FLOAT16, [1.0, 2.0, 3.0], 6, id="float16"),
])
def test_packed_and_narrow_types_need_their_own_size(tmp_path, dtype, values, nbytes):
    folder = tmp_path / "m"
    tensor = helper.make_tensor("T", dtype, [len(values)], values)
    tensor = numpy_helper.from_array(numpy_helper.to_array(tensor), "T")  # raw_data form
    data = external(tensor, "t.bin")
    assert len(data) == nbytes
    folder.mkdir()
    (folder / "t.bin").write_bytes(data)
    path = save(add_model(tensor, len(values)), folder)
    loaded = numpy_helper.to_array(hub.read_onnx(path).graph.initializer[0])
    np.testing.assert_array_equal(loaded.astype(np.float64), np.asarray(values, np.float64))
    (folder / "t.bin").write_bytes(data + b"\0")  # one byte too many
    with pytest.raises(HubError, match=rf"'T'.*{nbytes + 1} bytes.*needs {nbytes}"):
        hub.read_onnx(path)


# --- links and special files -----------------------------------------------------------------

def outside_file(tmp_path, data=DECOY.tobytes()):
    target = tmp_path / "elsewhere" / "secret.bin"
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
    return target


@pytest.mark.parametrize("target", ["file", "/etc/passwd", "/dev/urandom", "/dev/zero"])
def test_symlink_to_outside_is_refused(tmp_path, target):
    folder = tmp_path / "m"
    # A length keeps the unfixed code from reading /dev/zero until memory runs out.
    path = model_at(folder, "weights.bin", length=256)
    if target == "file":
        target = outside_file(tmp_path)
    elif not os.path.exists(target):
        pytest.skip(f"{target} is absent")
    os.symlink(target, folder / "weights.bin")
    with pytest.raises(HubError) as info:
        hub.read_onnx(path)
    message = str(info.value)
    assert "'W'" in message and "'weights.bin'" in message and "outside" in message
    assert "Copy the data file" in message  # what to do
    with pytest.raises(ModelLoadError, match="outside"):
        transmuter.load(str(path))


def test_symlink_to_outside_directory_is_refused(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", folder / "weights.bin")
    with pytest.raises(HubError, match=r"'W'.*'weights.bin'.*outside"):
        hub.read_onnx(path)


def test_path_through_a_symlinked_directory_is_refused(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "sub/secret.bin")
    target = outside_file(tmp_path)
    os.symlink(target.parent, folder / "sub")
    with pytest.raises(HubError, match=r"'W'.*'sub/secret.bin'.*outside"):
        hub.read_onnx(path)


def test_hard_link_is_refused(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    os.link(outside_file(tmp_path), folder / "weights.bin")
    with pytest.raises(HubError, match=r"'W'.*'weights.bin'.*hard link.*Copy the data file"):
        hub.read_onnx(path)


def test_directory_is_refused(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    (folder / "weights.bin").mkdir()
    with pytest.raises(HubError, match=r"'W'.*'weights.bin'.*not a regular file"):
        hub.read_onnx(path)


def test_fifo_is_refused_without_blocking(tmp_path):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin")
    fifo = folder / "weights.bin"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            hub.read_onnx(path)
            outcome.append(None)
        except Exception as e:  # noqa: BLE001 (reported below)
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked opening the FIFO: give it a writer so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("read_onnx blocked on a FIFO")
    assert isinstance(outcome[0], HubError), outcome
    assert "not a regular file" in str(outcome[0])


# --- offsets, lengths, sizes -----------------------------------------------------------------

@pytest.mark.parametrize("where, expected", [
    ({"offset": 300}, r"offset 300 .*file of 256 bytes"),
    ({"offset": 128, "length": 256}, r"offset 128 \+ length 256.*file of 256 bytes"),
    ({"offset": -4}, r"offset.*-4.*non-negative"),
    ({"length": "lots"}, r"length.*'lots'"),
])
def test_offset_and_length_must_lie_within_the_file(tmp_path, where, expected):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin", **where)
    (folder / "weights.bin").write_bytes(W.tobytes())
    with pytest.raises(HubError, match=rf"'W'.*{expected}"):
        hub.read_onnx(path)


@pytest.mark.parametrize("where, stored", [({"length": 128}, 256), ({}, 260)])
def test_wrong_byte_count_names_the_tensor(tmp_path, where, stored):
    folder = tmp_path / "m"
    path = model_at(folder, "weights.bin", **where)
    (folder / "weights.bin").write_bytes(b"\0" * stored)
    got = where.get("length", stored)
    with pytest.raises(HubError, match=rf"'W'.*{got} bytes.*float32\[64\] needs 256"):
        hub.read_onnx(path)


# --- sparse tensors in attributes ------------------------------------------------------------

def sparse_constant_model(location="sparse.bin"):
    """Y = X + a Constant whose sparse_value's values live in ``location``; (model, bytes)."""
    values = numpy_helper.from_array(W[:4].copy(), "sv")
    indices = numpy_helper.from_array(np.array([0, 5, 9, 63], np.int64), "si")
    data = external(values, location)
    sparse = helper.make_sparse_tensor(values, indices, [64])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["C"], sparse_value=sparse),
         helper.make_node("Add", ["X", "C"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), data


def test_sparse_attribute_reads_from_the_models_folder(tmp_path, monkeypatch):
    folder = tmp_path / "m"
    model, data = sparse_constant_model()
    path = save(model, folder)
    (folder / "sparse.bin").write_bytes(data)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "sparse.bin").write_bytes(DECOY[:4].tobytes())  # the working directory's file
    monkeypatch.chdir(cwd)
    expected = np.zeros(64, np.float32)
    expected[[0, 5, 9, 63]] = W[:4]
    np.testing.assert_array_equal(result(transmuter.load(str(path))), expected)


def test_sparse_attribute_symlink_is_refused(tmp_path):
    folder = tmp_path / "m"
    model, data = sparse_constant_model()
    path = save(model, folder)
    os.symlink(outside_file(tmp_path, data), folder / "sparse.bin")
    with pytest.raises(HubError, match=r"'sv'.*'sparse.bin'.*outside"):
        hub.read_onnx(path)


# --- sources without a folder ----------------------------------------------------------------

def subgraph_model():
    """An If whose then-branch holds an external initializer."""
    w = numpy_helper.from_array(W, "W")
    external(w, "weights.bin")
    branch = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["B"])], "then", [],
        [helper.make_tensor_value_info("B", TensorProto.FLOAT, [64])], [w])
    other = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["B2"])], "else", [],
        [helper.make_tensor_value_info("B2", TensorProto.FLOAT, [64])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["Y"], then_branch=branch, else_branch=other)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("X", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def initializer_model():
    w = numpy_helper.from_array(W, "W")
    external(w, "weights.bin")
    return add_model(w)


def sparse_model():
    return sparse_constant_model("weights.bin")[0]


@pytest.mark.parametrize("build", [initializer_model, subgraph_model, sparse_model])
@pytest.mark.parametrize("as_bytes", [True, False])
def test_bytes_and_proto_never_read_the_working_directory(tmp_path, monkeypatch, build,
                                                          as_bytes):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(DECOY.tobytes())
    model = build()
    source = model.SerializeToString() if as_bytes else model
    with pytest.raises(ModelLoadError) as info:
        transmuter.load(source)
    message = str(info.value)
    assert "'weights.bin'" in message and "its .onnx path" in message
    assert "onnx.load_external_data_for_model" in message
    assert "'W'" in message or "'sv'" in message


def test_proto_with_its_external_data_loaded_works(tmp_path):
    model = initializer_model()
    (tmp_path / "weights.bin").write_bytes(W.tobytes())
    onnx.load_external_data_for_model(model, str(tmp_path))
    np.testing.assert_array_equal(result(transmuter.load(model)), W)


def test_tensor_to_numpy_never_reads_external_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(W.tobytes())
    w = numpy_helper.from_array(W, "W")
    external(w, "weights.bin")
    with pytest.raises(ModelLoadError, match=r"'W'.*'weights.bin'"):
        tensor_to_numpy(w)
