"""Invalid models are refused at load, as onnx.checker and ONNX Runtime refuse them: each case is
one ONNX Runtime refuses too (asserted here, so a case ORT would run is not ours to refuse), and
the error names what is wrong."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import transmuter
from transmuter.errors import ModelLoadError

from .fixtures import ROOT
from .test_engine import info, make_model

X, Y = info("x", T.FLOAT, [2]), info("y", T.FLOAT, [2])


def add(output=None, y=Y, opset=18, initializers=()):
    return make_model([helper.make_node("Add", ["x", "y"], ["z"])], [X, y],
                      [output or info("z", T.FLOAT, [2])], initializers, opset=opset)


def no_opset_import():
    model = add()
    del model.opset_import[:]
    return model


def negative_dims():
    model = make_model([helper.make_node("Add", ["x", "w"], ["z"])], [X],
                       [info("z", T.FLOAT, [2])])
    weight = numpy_helper.from_array(np.ones(2, np.float32), "w")
    weight.dims[:] = [-2]
    model.graph.initializer.append(weight)
    return model


def node_in_unlisted_domain():
    return make_model([helper.make_node("FastGelu", ["x"], ["z"], domain="com.microsoft")], [X],
                      [info("z", T.FLOAT, [2])])


def one_node(op_type, inputs, **attrs):
    """One ``op_type`` node over float x, int64 i and bool c (whichever it reads)."""
    given = {"x": info("x", T.FLOAT, [2]), "i": info("i", T.INT64, [1]),
             "c": info("c", T.BOOL, [2])}
    return make_model([helper.make_node(op_type, inputs, ["z"], **attrs)],
                      [given[n] for n in inputs], [info("z", T.FLOAT, None)])


def skip_norm(epsilon):
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["z"],
                            domain="com.microsoft", epsilon=epsilon)
    model = make_model([node], [info("x", T.FLOAT, [1, 2, 4]), info("s", T.FLOAT, [1, 2, 4])],
                       [info("z", T.FLOAT, [1, 2, 4])], {"g": np.ones(4, np.float32)})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def contrib_opset(version):
    model = skip_norm(1e-5)
    model.opset_import[-1].version = version
    return model


def in_if_branch(*nodes):
    """``nodes`` (reading x, writing t) as the then-branch of an If on a constant condition."""
    branch = helper.make_graph(list(nodes), "then", [], [info("t", T.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [info("e", T.FLOAT, None)])
    return make_model([helper.make_node("If", ["c"], ["z"], then_branch=branch,
                                        else_branch=other)],
                      [X], [info("z", T.FLOAT, None)], {"c": np.array(True)})


def unsorted_branch():
    """A then-branch whose first node reads what its second makes (fuzz 20261202:7813: a node
    of gpt2's branch reading 'present.0.key', made later in the branch): ONNX Runtime sorts the
    main graph, not a subgraph ("Nodes in a graph must be topologically sorted")."""
    branch = helper.make_graph([helper.make_node("Relu", ["u"], ["t"]),
                                helper.make_node("Neg", ["x"], ["u"])], "then", [],
                               [info("t", T.FLOAT, None)])
    model = in_if_branch(helper.make_node("Relu", ["x"], ["t"]))
    next(a for a in model.graph.node[0].attribute if a.name == "then_branch").g.CopyFrom(branch)
    return model


def unsorted_sqrt_of_int64():
    """Sqrt reading an int64 made by a node after it: onnx's inference, in file order, sees no
    type yet; ONNX Runtime sorts the nodes and refuses the type (fuzz 20261202:406)."""
    return make_model([helper.make_node("Sqrt", ["j"], ["z"]),
                       helper.make_node("Identity", ["i"], ["j"])],
                      [info("i", T.INT64, [1])], [info("z", T.INT64, [1])])


def typed(where, change):
    """z = Relu(Relu(x)) with ``change`` made to the TypeProto of its input, its output or a
    value_info entry named ``where`` (t is the inner Relu's output; fuzz 20261203:2410, :9393, :5323: flipped bytes in the
    llama q4 file's types)."""
    model = make_model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"],
                                                                                 ["z"])],
                       [X], [info("z", T.FLOAT, [2])])
    value = {"input": model.graph.input, "output": model.graph.output}.get(where)
    if value is None:
        model.graph.value_info.append(info(where, T.FLOAT, [2]))
        value = model.graph.value_info
    change(value[0].type)
    return model


def invalid_utf8_domain():
    """A flipped byte in a node's domain (fuzz 20261202:1376): protobuf hands it back as bytes."""
    model = one_node("Relu", ["x"])
    model.graph.node[0].domain = "ai.onnx.xy"
    data = model.SerializeToString().replace(b"ai.onnx.xy", b"ai.onnx.\xff\xfe")
    return onnx.ModelProto.FromString(data)


def nbits(b_dtype=np.uint8, y=T.FLOAT, **attrs):
    """A MatMulNBits node (K=64, N=16, 4 bits, blocks of 32) over float a [2, 64]."""
    node = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft",
                            **{"K": 64, "N": 16, "bits": 4, "block_size": 32, **attrs})
    model = make_model([node], [info("a", T.FLOAT, [2, 64])], [info("y", y, [2, 16])],
                       {"b": np.zeros((16, 2, 16), b_dtype), "s": np.ones(32, np.float32)})
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


CASES = {
    "initializer shadowing a node output": (
        lambda: add(initializers={"z": np.ones(2, np.float32)}), "writes 'z'.*assigned once"),
    "duplicate node outputs": (
        lambda: make_model([helper.make_node("Add", ["x", "y"], ["z"]),
                            helper.make_node("Sub", ["x", "y"], ["z"])], [X, Y],
                           [info("z", T.FLOAT, [2])]), "'Sub'.*writes 'z'"),
    "an output nothing produces": (
        lambda: add(output=info("w", T.FLOAT, [2])), "Output 'w'.*produced by no node"),
    "a node reading an undefined name": (
        lambda: make_model([helper.make_node("Relu", ["nowhere"], ["z"])], [X],
                           [info("z", T.FLOAT, [2])]), "reads 'nowhere'"),
    "declared output type ignored": (
        lambda: add(output=info("z", T.INT64, [2])), "'z' is declared int64, but its node gives "
        "float32"),
    "Add of mismatched types": (
        lambda: add(y=info("y", T.INT64, [2])), "types or shapes do not agree.*inconsistent type"),
    "a Loop body of the wrong arity": (
        lambda: make_model([helper.make_node("Loop", ["M", "", "x"], ["z"], body=helper.make_graph(
            [helper.make_node("Identity", ["c"], ["c_out"])], "body",
            [info("i", T.INT64, []), info("c", T.BOOL, [])], [info("c_out", T.BOOL, [])]))],
            [X], [info("z", T.FLOAT, [2])], {"M": np.array(3, np.int64)}),
        "body takes 2 inputs and gives 1 outputs, where the node needs 3 and 2"),
    "opset 0": (lambda: add(opset=0), "opset 0 of domain 'ai.onnx'"),
    "opset 99": (lambda: add(opset=99), "opset 99 .*not defined"),
    "opset 10**6": (lambda: add(opset=10**6), "opset 1000000"),
    "no opset_import": (no_opset_import, "no opset_import"),
    "negative initializer dims": (negative_dims, r"'w'.*negative dimension: \[-2\]"),
    # issue 14 (fuzz 20261201:384, :3492, :7483): attribute types against the op's schema
    "an attribute of the wrong type (Gather axis as ints)": (
        lambda: one_node("Gather", ["x", "i"], axis=[0]),
        "'Gather' \\(Gather\\): attribute 'axis' is INTS, where Gather takes INT"),
    "Cast to a string": (
        lambda: one_node("Cast", ["x"], to="seven"), "attribute 'to' is STRING.*takes INT"),
    "Transpose perm a float": (
        lambda: one_node("Transpose", ["x"], perm=1.5), "attribute 'perm' is FLOAT.*INTS"),
    # input counts against the schema (a mutation dropped one)
    "an attribute its opset does not define": (  # fuzz 1412:1508: opset 18 -> 13
        lambda: make_model([helper.make_node("Reshape", ["x", "s"], ["z"], allowzero=0)], [X],
                           [info("z", T.FLOAT, [2])], {"s": np.array([2], np.int64)}, opset=13),
        "has attribute 'allowzero', which Reshape of opset 13 does not define"),
    "Where with two inputs": (
        lambda: one_node("Where", ["c", "x"]), "has 2 inputs, where Where.*takes 3"),
    "Equal with one input": (
        lambda: one_node("Equal", ["x"]), "has 1 inputs, where Equal.*takes 2"),
    "a required input left empty": (
        lambda: make_model([helper.make_node("Where", ["", "x", "x"], ["z"])], [X],
                           [info("z", T.FLOAT, [2])]),
        r"leaves input 0 \('condition'\) empty, which Where requires"),
    "com.microsoft opset 99": (
        lambda: contrib_opset(99), "opset 99 of domain 'com.microsoft'.*ONNX Runtime knows 1"),
    "SkipSimplifiedLayerNormalization epsilon < 0": (
        lambda: skip_norm(-1.0), "'epsilon' is -1.0, where SkipSimplifiedLayerNormalization "
        "takes a finite value >= 0"),
    # issue 14 (fuzz 20261202:406, :464, :75, :1717, :1376): inference errors past type
    # conflicts, in If branches too, in the nodes' sorted order; corrupt strings
    "a type the op's schema refuses (nodes out of order)": (
        unsorted_sqrt_of_int64, "Sqrt.*has unsupported type: tensor\\(int64\\)"),
    "MatMul dimensions that do not fit": (
        lambda: make_model([helper.make_node("MatMul", ["a", "b"], ["z"])],
                           [info("a", T.FLOAT, [2, 3]), info("b", T.FLOAT, [4, 5])],
                           [info("z", T.FLOAT, None)]), "Incompatible dimensions"),
    "a Concat axis past the rank in an If branch": (
        lambda: in_if_branch(helper.make_node("Concat", ["x", "x"], ["t"], axis=2**31 - 1)),
        "Concat.*axis must be in \\[-rank, rank-1\\]"),
    "float Gather indices in an If branch": (
        lambda: in_if_branch(helper.make_node("Gather", ["x", "x"], ["t"])),
        "Gather.*indices typestr: Tind, has unsupported type: tensor\\(float\\)"),
    "a node domain of invalid UTF-8": (invalid_utf8_domain, "domain is not valid UTF-8"),
    # contrib nodes against ONNX Runtime's schemas (ops/contrib/schemas.py; fuzz 1412:1905,
    # 20261202:494, :305)
    "a contrib attribute of the wrong type": (
        lambda: nbits(accuracy_level="4"),
        "attribute 'accuracy_level' is STRING, where MatMulNBits takes INT"),
    "an attribute the contrib op does not define": (
        lambda: nbits(not_an_attribute=1),
        "'not_an_attribute', which ONNX Runtime's MatMulNBits does not define"),
    "a contrib input of a type its schema refuses": (
        lambda: nbits(b_dtype=np.int8), r"input 1 \('B'\) 'b' is int8, where MatMulNBits "
        "takes uint8"),
    "a contrib output declared of another type": (
        lambda: nbits(y=T.INT8), r"'y' is declared int8, but its node gives float32"),
    "SimplifiedLayerNormalization's stash_type as ints": (  # fuzz 20261202:6140
        lambda: make_model([helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["z"],
                                             stash_type=[1, 2])],
                           [X], [info("z", T.FLOAT, [2])], {"g": np.ones(2, np.float32)}),
        r"attribute 'stash_type' is INTS, where SimplifiedLayerNormalization takes INT"),
    "a value_info of element type 0": (  # fuzz 20261203:2410
        lambda: typed("t", lambda t: setattr(t.tensor_type, "elem_type", 0)),
        r"value_info of 't' declares element type 0, which names no ONNX data type"),
    "a value_info whose element type is missing": (  # fuzz 20261203:9393
        lambda: typed("t", lambda t: t.tensor_type.ClearField("elem_type")),
        r"value_info of 't' declares element type 0"),
    "a value_info of a sequence of element type 99": (
        lambda: typed("t", lambda t: t.sequence_type.elem_type.tensor_type.SetInParent()
                      or setattr(t.sequence_type.elem_type.tensor_type, "elem_type", 99)),
        r"value_info of 't' declares element type 99"),
    "a graph input with no type": (  # fuzz 20261203:5323: attention_mask's type {}
        lambda: typed("input", lambda t: t.Clear()), r"Graph input 'x' has no type"),
    "a graph input of element type 0": (
        lambda: typed("input", lambda t: t.tensor_type.ClearField("elem_type")),
        r"Graph input 'x' declares element type 0"),
    "a graph output of element type 0": (
        lambda: typed("output", lambda t: t.tensor_type.ClearField("elem_type")),
        r"Graph output 'z' declares element type 0"),
    "SimplifiedLayerNormalization's scale retyped to int32": (  # fuzz 20261203:7891
        lambda: make_model([helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["z"])],
                           [X], [info("z", T.FLOAT, [2])], {"g": np.ones(2, np.int32)}),
        r"\(SimplifiedLayerNormalization\): input 1 \('scale'\) 'g' is int32, where "
        "SimplifiedLayerNormalization takes bfloat16, double, float, float16"),
    "an If branch out of topological order": (
        unsorted_branch, r"'Relu' \(Relu\) reads 'u' before the node of graph 'then' that makes"),
    "an If branch writing an outer graph's input": (  # fuzz: gpt2's branch writing input_ids
        lambda: in_if_branch(helper.make_node("Relu", ["x"], ["x"])),
        "'Relu' \\(Relu\\) writes 'x', which graph 'then' or a graph around it"),
    "two nodes of one name": (  # fuzz 20261207:6499: a flipped byte made vit's names equal
        lambda: make_model([helper.make_node("Relu", ["x"], ["t"], name="n"),
                            helper.make_node("Relu", ["t"], ["z"], name="n")],
                           [X], [info("z", T.FLOAT, [2])]),
        "Two nodes of graph 'g' are named 'n'"),
    "two nodes of one name in an If branch": (
        lambda: in_if_branch(helper.make_node("Relu", ["x"], ["s"], name="n"),
                             helper.make_node("Relu", ["s"], ["t"], name="n")),
        "Two nodes of graph 'then' are named 'n'"),
}


@pytest.mark.parametrize("case", CASES)
def test_onnxruntime_refuses_the_case(case):
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(CASES[case][0]().SerializeToString())


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("case", CASES)
def test_refused_at_load_with_the_reason(case, backend):
    make, reason = CASES[case]
    with pytest.raises(ModelLoadError, match=reason):
        transmuter.load(make(), backend=backend)
    with pytest.raises(ModelLoadError, match=reason):  # bytes take the same path
        transmuter.load(make().SerializeToString(), backend=backend)


def test_lenient_where_onnxruntime_is_shapes_declared_against_inference():
    """onnxruntime-genai's builder declares rank-0 shapes on rank-1 Constants: onnx's strict
    inference refuses the file, ONNX Runtime runs it, so do we (only type conflicts refuse)."""
    path = ROOT / "llama-gqa/onnx/model.onnx"
    with pytest.raises(onnx.shape_inference.InferenceError, match="differ in rank"):
        onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True)
    ort.InferenceSession(str(path))
    transmuter.load(str(path))


def test_lenient_where_onnxruntime_is_a_contrib_node_without_its_import():
    """ONNX Runtime runs a com.microsoft node whose domain opset_import does not list (as
    version 1): so do we."""
    model = node_in_unlisted_domain()
    feed = {"x": np.array([-1, 2], np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    got = transmuter.run(transmuter.load(model), feed)["z"]
    np.testing.assert_allclose(got, want, atol=1e-6)  # FastGelu's tanh approximation, f32


@pytest.mark.parametrize("model", [
    lambda: typed("unused", lambda t: t.tensor_type.ClearField("elem_type")),
    lambda: typed("t", lambda t: t.Clear()), lambda: typed("output", lambda t: t.Clear())],
    ids=["value_info of no node's value", "value_info with no type", "output with no type"])
def test_lenient_where_onnxruntime_is_declared_types_it_ignores(model):
    """ONNX Runtime ignores a value_info entry that names no node's value or has no type, and
    takes a graph output declared with no type: so do we (engine/checks/declared_types.py)."""
    feed = {"x": np.array([-1, 2], np.float32)}
    want = ort.InferenceSession(model().SerializeToString()).run(None, feed)[0]
    np.testing.assert_array_equal(transmuter.run(transmuter.load(model()), feed)["z"], want)


def test_a_valid_model_still_loads_and_runs():
    feed = {"x": np.array([1, 2], np.float32), "y": np.array([3, 4], np.float32)}
    np.testing.assert_array_equal(transmuter.run(transmuter.load(add()), feed)["z"], [4, 6])


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_layer_norm_axis_past_the_rank_is_refused(backend):
    # issue 14 (fuzz 77:192): axis 7 of a rank-3 input normalized over no axis, garbage out;
    # onnxruntime refuses it at load. The rank is known when the node runs: an OpError there.
    from transmuter.errors import OpError
    model = make_model([helper.make_node("LayerNormalization", ["x", "g"], ["z"], axis=7)],
                       [info("x", T.FLOAT, [1, 2, 4])], [info("z", T.FLOAT, [1, 2, 4])],
                       {"g": np.ones(4, np.float32)})
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString())
    m = transmuter.load(model, backend=backend)
    with pytest.raises(OpError, match=r"axis 7 is out of range for an input of rank 3"):
        transmuter.run(m, {"x": np.ones((1, 2, 4), np.float32)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_conv_bias_of_another_shape_is_refused(backend):
    # issue 14 (fuzz initializer-dims: a vit patch Conv's bias [32] -> [32, 1]): broadcast over
    # the output into garbage; onnxruntime refuses it. Refused when the node runs (an OpError).
    from transmuter.errors import OpError
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["z"])],
                       [info("x", T.FLOAT, [1, 2, 4, 4])], [info("z", T.FLOAT, None)],
                       {"w": np.ones((3, 2, 1, 1), np.float32), "b": np.ones((3, 1), np.float32)})
    feed = {"x": np.ones((1, 2, 4, 4), np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString()).run(None, feed)
    with pytest.raises(OpError, match=r"bias of shape \[3, 1\] must be \[3\]"):
        transmuter.run(transmuter.load(model, backend=backend), feed)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("gamma,match", [
    (np.ones((1, 1, 4), np.float32), r"gamma of shape \[1, 1, 4\] must be \[4\]"),
    (np.ones(3, np.float32), r"gamma of shape \[3\] must be \[4\]")])
def test_a_skip_norm_gamma_of_another_shape_is_refused(backend, gamma, match):
    # issue 14 (fuzz duplicate-node-input on llama-gqa: a 3-d gamma broadcast into [1, 1, 2, 4]);
    # onnxruntime's skip_layer_norm_helper refuses it. Refused when the node runs.
    from transmuter.errors import OpError
    model = skip_norm(1e-5)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(gamma, "g"))
    feed = {"x": np.ones((1, 2, 4), np.float32), "s": np.ones((1, 2, 4), np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString()).run(None, feed)
    with pytest.raises(OpError, match=match):
        transmuter.run(transmuter.load(model, backend=backend), feed)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("ends,starts,match", [
    (np.array(2, np.int64), [0], r"ends must be a 1-D array, got shape \[\]"),
    (np.array([[2]], np.int64), [0], r"ends must be a 1-D array, got shape \[1, 1\]")])
def test_slice_inputs_not_one_d_are_refused(backend, ends, starts, match):
    # issue 14 (fuzz 20261201:6604, two flipped bytes in gpt2's merged decoder: a Constant's
    # dims [1] -> [], a 0-d Slice ends in the If branch, sliced as [n]); onnxruntime refuses it
    # when the node runs ("Ends must be a 1-D array"): an OpError there, in a branch too.
    from transmuter.errors import OpError
    model = make_model([helper.make_node("Slice", ["x", "s", "e"], ["z"])],
                       [info("x", T.FLOAT, [4])], [info("z", T.FLOAT, None)],
                       {"s": np.array(starts, np.int64), "e": ends})
    feed = {"x": np.arange(4, dtype=np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString()).run(None, feed)
    with pytest.raises(OpError, match=match):
        transmuter.run(transmuter.load(model, backend=backend), feed)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_slice_starts_and_ends_of_other_lengths_are_refused_at_load(backend):
    # where both lengths are known (weights' shapes), onnxruntime refuses the file at load
    # ("Incorrect or missing input value for starts and ends"); so does onnx's inference
    model = make_model([helper.make_node("Slice", ["x", "s", "e"], ["z"])],
                       [info("x", T.FLOAT, [4])], [info("z", T.FLOAT, None)],
                       {"s": np.array([0], np.int64), "e": np.array([2, 3], np.int64)})
    with pytest.raises(Exception, match="starts and ends"):
        ort.InferenceSession(model.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"Node 'Slice' \(Slice\): .*starts and ends"):
        transmuter.load(model, backend=backend)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("zero_points", ["b", "zp"])
def test_matmul_nbits_zero_points_of_another_shape_are_refused(backend, zero_points):
    # issue 14 (fuzz 20261202:9053: B duplicated into the zero-points slot, read as 32 zero
    # points a row); onnxruntime's PrePack refuses any shape but [N * bytes] or [N, bytes].
    # Its own initializer is refused at load; a weight also read as B, when the node runs.
    from transmuter.errors import OpError
    model = nbits()
    model.graph.node[0].input.append(zero_points)
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((16, 2), np.uint8), "zp"))
    feed = {"a": np.ones((2, 64), np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString()).run(None, feed)
    match = r"zero_points of shape \[16, (2, 16|2)\] must be \[16\] or \[16, 1\]"
    if zero_points == "zp":
        with pytest.raises(ModelLoadError, match=match):
            transmuter.load(model, backend=backend)
    else:
        with pytest.raises(OpError, match=match):
            transmuter.run(transmuter.load(model, backend=backend), feed)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_cast_to_type_0_in_a_branch_is_refused_at_load(backend):
    # issue 14 (fuzz 20261202:3508: Cast to = 0, UNDEFINED, in gpt2's If branch, run into an
    # answer). onnxruntime refuses it when the branch runs (here: the branch taken; in the fuzz
    # case at load, where its inference met the Cast's output); onnx's inference refuses it in
    # a main graph. No type is named 0: refused at load, in any branch.
    model = in_if_branch(helper.make_node("Cast", ["x"], ["t"], to=0))
    feed = {"x": np.ones(2, np.float32)}
    with pytest.raises(Exception):  # noqa: B017 - any refusal: ORT's messages are its own
        ort.InferenceSession(model.SerializeToString()).run(None, feed)
    with pytest.raises(ModelLoadError, match=r"'Cast' \(Cast\): attribute 'to' is 0, where "
                                             "Cast takes a TensorProto data type"):
        transmuter.load(model, backend=backend)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_squeeze_axes_named_empty_is_refused_at_load(backend):
    # issue 14 (fuzz 20261203:4733: Squeeze's axes input dropped to '' in gpt2's If branch):
    # the spec reads '' as omitted (squeeze every axis of size 1), but onnxruntime's kernel
    # refuses it when the node runs ("Axes input is null"); Squeeze(x) with no second input
    # it runs, and so do we.
    # (in a branch on a constant condition, onnxruntime inlines the branch and drops the '')
    main = make_model([helper.make_node("Squeeze", ["x", ""], ["z"])], [X],
                      [info("z", T.FLOAT, None)])
    feed = {"x": np.ones(2, np.float32)}
    with pytest.raises(Exception, match="Axes input is null"):
        ort.InferenceSession(main.SerializeToString()).run(None, feed)
    for model in (main, in_if_branch(helper.make_node("Squeeze", ["x", ""], ["t"]))):
        with pytest.raises(ModelLoadError, match=r"'Squeeze' \(Squeeze\) names its optional "
                                                 r"input 1 \('axes'\) as '', which ONNX "
                                                 "Runtime refuses"):
            transmuter.load(model, backend=backend)
    fine = in_if_branch(helper.make_node("Squeeze", ["x"], ["t"]))
    want = ort.InferenceSession(fine.SerializeToString()).run(None, feed)[0]
    np.testing.assert_array_equal(transmuter.run(transmuter.load(fine, backend=backend),
                                                 feed)["z"], want)


def _branches_reshaping_to(rows):
    """An If whose branches make the same value names (as optimum's merged decoders do), each
    reshaping ``x`` [2, 32] by a shape computed from Shape -> Gather -> Concat, to [2, -1, 16]
    and [2, -1, 8], and multiplying it by a weight of ``rows`` (then) and 8 (else) rows."""
    def branch(width, weight):
        def const(name, value):
            return helper.make_node("Constant", [], [name],
                                    value=numpy_helper.from_array(np.array(value, np.int64)))
        nodes = [helper.make_node("Shape", ["x"], ["shape"]), const("first", [0]),
                 helper.make_node("Gather", ["shape", "first"], ["n"]),
                 const("rest", [-1, width]),
                 helper.make_node("Concat", ["n", "rest"], ["target"], axis=0),
                 helper.make_node("Reshape", ["x", "target"], ["r"]),
                 helper.make_node("MatMul", ["r", weight], ["y"])]
        return helper.make_graph(nodes, f"to{width}", [], [info("y", T.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["out"], then_branch=branch(16, "w16"),
                            else_branch=branch(8, "w8"))
    return make_model([node], [info("c", T.BOOL, []), info("x", T.FLOAT, [2, 32])],
                      [info("out", T.FLOAT, None)],
                      {"w16": np.ones((rows, 3), np.float32), "w8": np.ones((8, 3), np.float32)})


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_matmul_dims_known_only_from_computed_shapes_are_checked_at_load(backend):
    # issue 14 (fuzz 20261203:7872: gpt2's merged decoder, a Mul's input renamed to a [128]
    # bias, so the branch's attention MatMul multiplies [.., 16] by [128, ..]). The 16 is known
    # only from a shape the graph computes (Shape -> Gather -> Concat -> Reshape): onnxruntime
    # propagates those values and refuses the file at load. onnx's data propagation does too,
    # once each branch's names are its own (it keeps one table for every graph).
    bad = _branches_reshaping_to(128)
    with pytest.raises(Exception, match="Incompatible dimensions for matrix multiplication"):
        ort.InferenceSession(bad.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"Node 'MatMul' \(MatMul\): Incompatible "
                                             "dimensions for matrix multiplication"):
        transmuter.load(bad, backend=backend)
    good = _branches_reshaping_to(16)
    model = transmuter.load(good, backend=backend)
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    for c in (True, False):
        feed = {"c": np.array(c), "x": x}
        want = ort.InferenceSession(good.SerializeToString()).run(None, feed)[0]
        # float32 sums of 16 or 8 products of N(0, 1) values and ones: a few ulps apart
        np.testing.assert_allclose(transmuter.run(model, feed)["out"], want, rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_metadata_and_graph_name_of_invalid_utf8_load_and_save_as_they_came(backend, tmp_path):
    """A flipped byte in producer_name (fuzz 20261206:5911) or the graph's name: nothing looks
    them up and ONNX Runtime runs the file, so it loads, runs the same, and saves those bytes."""
    model = one_node("Relu", ["x"])
    model.producer_name, model.graph.name = "PRODUCER", "GRAPHNAME"
    data = model.SerializeToString().replace(b"PRODUCER", b"\xddRODUCER") \
        .replace(b"GRAPHNAME", b"\xfeRAPHNAME")
    feed = {"x": np.array([-1, 2], np.float32)}
    want = ort.InferenceSession(data).run(None, feed)[0]
    loaded = transmuter.load(data, backend=backend)
    np.testing.assert_array_equal(np.asarray(transmuter.run(loaded, feed)["z"]), want)
    transmuter.save(loaded, tmp_path / "saved.onnx")
    saved = (tmp_path / "saved.onnx").read_bytes()
    assert b"\xddRODUCER" in saved and b"\xfeRAPHNAME" in saved


def test_lenient_where_onnxruntime_is_constants_sharing_a_name():
    """ONNX Runtime makes Constant nodes initializers before it checks node names, so the merged
    decoders' branches that repeat 'Constant_720' load: so must they here."""
    def constant(out):
        return helper.make_node("Constant", [], [out], name="k",
                                value=numpy_helper.from_array(np.ones(2, np.float32)))
    model = make_model([constant("a"), constant("b"), helper.make_node("Add", ["a", "b"], ["z"])],
                       [], [info("z", T.FLOAT, [2])])
    want = ort.InferenceSession(model.SerializeToString()).run(None, {})[0]
    np.testing.assert_array_equal(transmuter.run(transmuter.load(model), {})["z"], want)
