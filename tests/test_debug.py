"""transmuter.debug.first_divergence and ``transmuter diff``: a wrong op is planted (its
implementation replaced by a mutated one for the test) and the search must name its node; with
the true ops the same graphs report no divergence. The reference is onnxruntime throughout."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from transmuter import cli, debug
from transmuter.debug import reference

from .fixtures import ROOT
from .planted import plant, replace_op

BACKENDS = ["jax", "mlx"]
RNG = np.random.default_rng(0)
F = T.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def tensor(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def innermost(report):
    """The divergence at the bottom of the nested reports (a body's, a fused member's)."""
    found = report.divergence
    while found is not None and found.inner is not None and found.inner.found:
        found = found.inner.divergence
    return found


def elementwise():
    return model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                  helper.make_node("Mul", ["a", "x"], ["m"], name="mul"),
                  helper.make_node("Tanh", ["m"], ["y"], name="tanh")],
                 [tensor("x", [2, 3])], [tensor("y", [2, 3])])


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise(backend, monkeypatch):
    proto, feed = elementwise(), {"x": RNG.standard_normal((2, 3)).astype(np.float32)}
    clean = debug.first_divergence(proto, feed, backend=backend)
    assert not clean.found and clean.compared == 3
    plant(monkeypatch, "Mul")
    report = debug.first_divergence(proto, feed, backend=backend)
    found = report.divergence
    assert (found.node, found.op) == ("mul", "Mul")
    assert [v.name for v in found.inputs] == ["a", "x"]
    assert found.inputs[0].agrees and found.inputs[1].status == "a graph input"
    assert found.outputs[0].agrees is False and "differs" in found.outputs[0].status
    assert found.path == ["x", "Mul 'mul'"]
    assert report.compared == 1  # the Add before it
    text = str(report)
    assert "first divergence: Mul node 'mul'" in text and "path from the input" in text


def loop_with_reduce():
    """A Loop of 3 iterations whose body adds each row's ReduceSum to its carried value."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["v_in", "axes"], ["r"], name="reduce", keepdims=1),
         helper.make_node("Mul", ["r", "scale"], ["rs"], name="scale_r"),
         helper.make_node("Add", ["v_in", "rs"], ["v_out"], name="add_r"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body", [tensor("i", [], T.INT64), tensor("cond_in", [], T.BOOL), tensor("v_in", [2, 3])],
        [tensor("cond_out", [], T.BOOL), tensor("v_out", [2, 3])], [axes])
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "scale")
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    return model([helper.make_node("Neg", ["x"], ["start"], name="neg"),
                  helper.make_node("Loop", ["trips", "yes", "start"], ["v"], name="loop",
                                   body=body),
                  helper.make_node("Tanh", ["v"], ["y"], name="tanh")],
                 [tensor("x", [2, 3])], [tensor("y", [2, 3])], [scale, trips, yes], opset=17)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduce_inside_a_loop_body(backend, monkeypatch):
    proto, feed = loop_with_reduce(), {"x": RNG.standard_normal((2, 3)).astype(np.float32)}
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "ReduceSum")
    report = debug.first_divergence(proto, feed, backend=backend)
    assert (report.divergence.node, report.divergence.op) == ("loop", "Loop")
    assert "iterations were searched one by one" in report.divergence.note
    body = report.divergence.inner
    assert body.where.startswith("iteration 0 of the body of Loop node 'loop'")
    assert (innermost(report).node, innermost(report).op) == ("reduce", "ReduceSum")
    assert "first divergence: ReduceSum node 'reduce'" in str(report)


def if_model():
    """y = Tanh(If(sum(x) > 0, Sin(x) * 2, Cos(x)))"""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    then = helper.make_graph([helper.make_node("Sin", ["x"], ["s"], name="sin"),
                              helper.make_node("Mul", ["s", "two"], ["t"], name="double")],
                             "then", [], [tensor("t", [2, 3])], [two])
    other = helper.make_graph([helper.make_node("Cos", ["x"], ["e"], name="cos")], "else", [],
                              [tensor("e", [2, 3])])
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    return model([helper.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"),
                  helper.make_node("If", ["positive"], ["chosen"], name="branch",
                                   then_branch=then, else_branch=other),
                  helper.make_node("Tanh", ["chosen"], ["y"], name="tanh")],
                 [tensor("x", [2, 3])], [tensor("y", [2, 3])], [zero])


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_branch(backend, monkeypatch):
    proto = if_model()
    feed = {"x": np.abs(RNG.standard_normal((2, 3))).astype(np.float32)}  # the then branch
    plant(monkeypatch, "Sin")
    report = debug.first_divergence(proto, feed, backend=backend)
    assert report.divergence.node == "branch"
    assert "then_branch" in report.divergence.inner.where
    assert (innermost(report).node, innermost(report).op) == ("sin", "Sin")
    # the else branch runs no Sin: nothing differs
    assert not debug.first_divergence(proto, {"x": -feed["x"]}, backend=backend).found


def attention_model():
    """Add -> com.microsoft MultiHeadAttention -> Tanh."""
    b, s, n, h = 2, 5, 2, 4
    bias = numpy_helper.from_array(RNG.standard_normal(n * h).astype(np.float32), "bias")
    proto = model([helper.make_node("Add", ["q", "bias"], ["query"], name="q_bias"),
                   helper.make_node("MultiHeadAttention", ["query", "k", "v"], ["att"],
                                    name="attention", domain="com.microsoft", num_heads=n),
                   helper.make_node("Tanh", ["att"], ["y"], name="tanh")],
                  [tensor("q", [b, s, n * h]), tensor("k", [b, s, n * h]),
                   tensor("v", [b, s, n * h])], [tensor("y", [b, s, n * h])], [bias],
                  domains=["com.microsoft"])
    feed = {k: RNG.standard_normal((b, s, n * h)).astype(np.float32) for k in "qkv"}
    return proto, feed


@pytest.mark.parametrize("backend", BACKENDS)
def test_contrib_attention(backend, monkeypatch):
    proto, feed = attention_model()
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "MultiHeadAttention", "com.microsoft", change=lambda y: y * 1.01)
    found = debug.first_divergence(proto, feed, backend=backend).divergence
    assert (found.node, found.op) == ("attention", "com.microsoft::MultiHeadAttention")
    assert [v.agrees for v in found.inputs] == [True, None, None]  # query computed; k, v given
    assert found.attributes == {"num_heads": 2}
    assert found.path == ["k", "MultiHeadAttention 'attention'"]  # the shortest: k is an input


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_member_of_a_fused_attention_chain(backend, monkeypatch):
    """MatMul(q, Transpose(k)) -> Div -> Softmax -> MatMul(., v) runs as one fused node
    (engine/passes/fusion.py); the planted Softmax is found among its members."""
    shape = [1, 2, 4, 8]
    sqrt = numpy_helper.from_array(np.array(np.sqrt(8), np.float32), "sqrt_d")
    proto = model([helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 1, 3, 2]),
                   helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
                   helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"], name="scale"),
                   helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
                   helper.make_node("MatMul", ["probs", "v"], ["y"], name="pv")],
                  [tensor(n, shape) for n in "qkv"], [tensor("y", shape)], [sqrt])
    feed = {n: RNG.standard_normal(shape).astype(np.float32) for n in "qkv"}
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "Softmax")
    report = debug.first_divergence(proto, feed, backend=backend)
    assert "fused chain" in report.divergence.note
    assert (innermost(report).node, innermost(report).op) == ("softmax", "Softmax")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequences(backend, monkeypatch):
    proto = model([helper.make_node("SplitToSequence", ["x"], ["parts"], name="split", axis=0),
                   helper.make_node("SequenceAt", ["parts", "one"], ["second"], name="at"),
                   helper.make_node("Relu", ["second"], ["y"], name="relu")],
                  [tensor("x", [3, 2])], [tensor("y", [2])],
                  [numpy_helper.from_array(np.array(1, np.int64), "one")])
    feed = {"x": RNG.standard_normal((3, 2)).astype(np.float32)}
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "SplitToSequence", change=lambda parts: parts[::-1])
    found = debug.first_divergence(proto, feed, backend=backend).divergence
    assert found.node == "split" and "item 0 of the sequence" in found.outputs[0].status


def int8_model():
    """x -> DynamicQuantizeLinear -> MatMulInteger(int8 weights) -> scaled to float -> Relu."""
    w = RNG.integers(-64, 64, (8, 4)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int8(0), "w_zero"),
             numpy_helper.from_array(np.array(0.02, np.float32), "w_scale")]
    return model([helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="q"),
                  helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zero"], ["acc"],
                                   name="matmul"),
                  helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=F),
                  helper.make_node("Mul", ["xs", "w_scale"], ["scale"], name="scale"),
                  helper.make_node("Mul", ["accf", "scale"], ["z"], name="dequantize"),
                  helper.make_node("Relu", ["z"], ["y"], name="relu")],
                 [tensor("x", [3, 8])], [tensor("y", [3, 4])], inits)


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_compares_against_the_files_own_noise(backend, monkeypatch):
    proto, feed = int8_model(), {"x": RNG.standard_normal((3, 8)).astype(np.float32)}
    clean = debug.first_divergence(proto, feed, backend=backend)
    assert clean.noise and not clean.found  # DynamicQuantizeLinear: noise on by default
    plant(monkeypatch, "MatMulInteger", change=lambda y: y * 2)
    found = debug.first_divergence(proto, feed, backend=backend).divergence
    assert (found.node, found.op) == ("matmul", "MatMulInteger")


@pytest.mark.parametrize("backend", BACKENDS)
def test_external_data_and_streaming(backend, monkeypatch, tmp_path):
    """A file whose weights live in external data, walked one value per onnxruntime run
    (``window=1``), onnxruntime reading it as a graph past protobuf's 2 GiB (from a temporary
    folder with external data): the same node is found."""
    monkeypatch.setattr(reference, "_PROTOBUF_LIMIT", 0)
    w = numpy_helper.from_array(RNG.standard_normal((6, 6)).astype(np.float32), "w")
    proto = model([helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
                   helper.make_node("Sigmoid", ["h"], ["s"], name="sigmoid"),
                   helper.make_node("MatMul", ["s", "w"], ["y"], name="matmul2")],
                  [tensor("x", [2, 6])], [tensor("y", [2, 6])], [w])
    path = tmp_path / "model.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="model.onnx_data",
              size_threshold=0)
    feed = {"x": RNG.standard_normal((2, 6)).astype(np.float32)}
    assert not debug.first_divergence(str(path), feed, backend=backend, window=1).found
    plant(monkeypatch, "Sigmoid")
    found = debug.first_divergence(str(path), feed, backend=backend, window=1).divergence
    assert found.node == "sigmoid"
    assert found.inputs[0].agrees


def test_an_eager_walk_holds_only_live_values():
    """run(on_node=) drops each value after its last reader: a chain of 20 nodes never holds
    more than the input, the one value being read and the one just made."""
    import transmuter
    nodes = [helper.make_node("Neg", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(20)]
    m = transmuter.load(model(nodes, [tensor("v0", [4])], [tensor("v20", [4])]))
    held = []
    out = transmuter.run(m, {"v0": np.ones(4, np.float32)},
                         on_node=lambda node, env: held.append(len(env)))
    assert max(held) <= 3 and len(held) == 20
    np.testing.assert_array_equal(np.asarray(out["v20"]), np.ones(4))


def test_a_failing_op_is_named(monkeypatch):
    def fails(xp, *args, **kwargs):
        raise RuntimeError("planted failure")
    replace_op(monkeypatch, "Mul", lambda fn: fails)
    found = debug.first_divergence(elementwise(), {"x": np.ones((2, 3), np.float32)}).divergence
    assert found.node == "mul" and "Transmuter fails here" in found.note
    assert "planted failure" in found.note and "onnxruntime fails" not in found.note


def test_inputs_that_fail_both_say_so():
    """A Reshape to a size the input does not have: onnxruntime fails there too."""
    proto = model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                  [tensor("x", [None]), tensor("shape", [1], T.INT64)], [tensor("y", None)])
    found = debug.first_divergence(proto, {"x": np.ones(4, np.float32),
                                           "shape": np.array([5])}).divergence
    assert found.node == "reshape" and "Transmuter fails here" in found.note
    assert "onnxruntime fails on these inputs too" in found.note


def test_cli_diff(monkeypatch, tmp_path, capsys):
    path, inputs = tmp_path / "model.onnx", tmp_path / "inputs.npz"
    onnx.save(elementwise(), path)
    np.savez(inputs, x=RNG.standard_normal((2, 3)).astype(np.float32))
    assert cli.main(["diff", str(path), "--inputs", str(inputs)]) == 0
    assert "no divergence: 3 values agree" in capsys.readouterr().out
    plant(monkeypatch, "Tanh")
    assert cli.main(["diff", str(path), "--inputs", str(inputs)]) == 1
    assert "first divergence: Tanh node 'tanh'" in capsys.readouterr().out
    assert cli.main(["diff", str(path)]) == 2
    assert "--inputs" in capsys.readouterr().err


def test_an_op_onnxruntime_lacks_is_said_and_the_rest_compared(monkeypatch):
    """onnxruntime 1.32 has no ImageDecoder kernel: it and the Cast reading it are left out, and
    the other branch is still searched."""
    import io

    from PIL import Image
    png = io.BytesIO()
    Image.fromarray(RNG.integers(0, 255, (4, 4, 3), dtype=np.uint8)).save(png, format="PNG")
    proto = model([helper.make_node("ImageDecoder", ["png"], ["pixels"], name="decode"),
                   helper.make_node("Cast", ["pixels"], ["image"], name="cast", to=F),
                   helper.make_node("Neg", ["z"], ["y"], name="neg")],
                  [tensor("png", [None], T.UINT8), tensor("z", [3])],
                  [tensor("image", [4, 4, 3]), tensor("y", [3])], opset=20)
    feed = {"png": np.frombuffer(png.getvalue(), np.uint8), "z": np.ones(3, np.float32)}
    clean = debug.first_divergence(proto, feed)
    assert not clean.found and clean.compared == 1 and clean.missing == [("ImageDecoder", "decode")]
    assert "onnxruntime has no kernel for ImageDecoder 'decode'" in str(clean)
    plant(monkeypatch, "Neg")
    assert debug.first_divergence(proto, feed).divergence.node == "neg"


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_body(backend, monkeypatch):
    """A Scan over 4 rows whose body adds each row to its state and emits Sin of the sum; the
    planted Sin is found in the first iteration."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "row"], ["s_out"], name="sum"),
                              helper.make_node("Sin", ["s_out"], ["emit"], name="sin")],
                             "body", [tensor("s_in", [2]), tensor("row", [2])],
                             [tensor("s_out", [2]), tensor("emit", [2])])
    proto = model([helper.make_node("Scan", ["s", "xs"], ["final", "emitted"], name="scan",
                                    body=body, num_scan_inputs=1)],
                  [tensor("s", [2]), tensor("xs", [4, 2])],
                  [tensor("final", [2]), tensor("emitted", [4, 2])])
    feed = {"s": np.zeros(2, np.float32), "xs": RNG.standard_normal((4, 2)).astype(np.float32)}
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "Sin")
    report = debug.first_divergence(proto, feed, backend=backend)
    assert report.divergence.node == "scan"
    assert report.divergence.inner.where.startswith("iteration 0 of the body")
    assert innermost(report).node == "sin"


def test_cli_diff_with_the_tasks_preprocessing(monkeypatch, capsys):
    """--task --example: the inputs are those the text-classification pipeline gives its model
    (input_ids, attention_mask, token_type_ids of the example); a planted Erf (BERT's GELU) is
    found in the first layer's feed-forward."""
    folder = str(ROOT / "bert-sequence-classification")
    args = ["diff", folder, "--task", "text-classification", "--example", "I love this movie"]
    assert cli.main(args) == 0
    assert "no divergence" in capsys.readouterr().out
    plant(monkeypatch, "Erf")
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert "first divergence: Erf node '/bert/encoder/layer.0/" in out
    assert "path from the input: input_ids -> " in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_later_iteration_and_an_if_inside_a_loop_body(backend, monkeypatch):
    """The body takes Sin of its value from the third iteration on (an If on the iteration
    number): iterations 0 and 1 agree, each fed onnxruntime's values of the one before, and the
    search names the Sin inside the If inside iteration 2."""
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    then = helper.make_graph([helper.make_node("Sin", ["v_in"], ["s"], name="sin")], "then", [],
                             [tensor("s", [3])])
    other = helper.make_graph([helper.make_node("Identity", ["v_in"], ["same"], name="same")],
                              "else", [], [tensor("same", [3])])
    body = helper.make_graph(
        [helper.make_node("Greater", ["i", "one"], ["late"], name="late"),
         helper.make_node("If", ["late"], ["chosen"], name="maybe_sin", then_branch=then,
                          else_branch=other),
         helper.make_node("Add", ["chosen", "v_in"], ["v_out"], name="grow"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body", [tensor("i", [], T.INT64), tensor("cond_in", [], T.BOOL), tensor("v_in", [3])],
        [tensor("cond_out", [], T.BOOL), tensor("v_out", [3])], [one])
    proto = model([helper.make_node("Loop", ["trips", "", "x"], ["v"], name="loop", body=body)],
                  [tensor("x", [3])], [tensor("v", [3])],
                  [numpy_helper.from_array(np.array(4, np.int64), "trips")])
    feed = {"x": np.array([0.1, 0.2, 0.3], np.float32)}
    assert not debug.first_divergence(proto, feed, backend=backend).found
    plant(monkeypatch, "Sin")
    report = debug.first_divergence(proto, feed, backend=backend)
    assert report.divergence.inner.where.startswith("iteration 2 of the body")
    assert report.divergence.inner.divergence.node == "maybe_sin"
    assert innermost(report).node == "sin"
