"""Out-of-range indices are refused, as ONNX Runtime refuses them (issue 14, "silently wrong"):
the caller's inputs before each call (input_ids past the vocabulary gave NaN or garbage, 2^62
wrapped to a valid row, MLX read past its buffer), static indices when their node runs, a
tokenizer larger than the embedding table at pipeline load. ONNX Runtime on the same file is the
reference: it refuses each bad case and gives the outputs in-range edge values must equal."""

import numpy as np
import onnxruntime as ort
import pytest
import tokenizers
from onnx import TensorProto, helper, numpy_helper

import transmuter
from transmuter.errors import InputError, OpError
from transmuter.pipelines.base import PipelineError
from tests import fixtures
from tests.test_engine import info, make_model

BACKENDS = ["jax", "mlx"]
BERT = fixtures.ROOT / "bert"
BERT_ONNX = str(BERT / "onnx" / "model.onnx")
VOCAB, TYPES = 600, 2  # the fixture's config.json: vocab_size, type_vocab_size
INT64_MIN = int(np.iinfo(np.int64).min)
# fp32 graph against onnxruntime: summation order only (tests/test_models.py's bar)
ATOL = 1e-4

# (input, bad value, the table's size) of each case the issue found silently wrong
BAD = [("input_ids", VOCAB, VOCAB), ("input_ids", 10**6, VOCAB),
       ("input_ids", -VOCAB - 1, VOCAB), ("token_type_ids", 5, TYPES),
       ("input_ids", INT64_MIN, VOCAB), ("input_ids", 2**62, VOCAB)]


def bert_feed(name=None, value=None, at=(0, 3)):
    ids = np.array([[2, 45, 17, 88, 9, 3], [2, 71, 5, 3, 0, 0]], np.int64)
    feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64),
            "token_type_ids": np.zeros_like(ids)}
    if name is not None:
        feed[name] = feed[name].copy()
        feed[name][at] = value
    return feed


def session(model):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def reference(model, feed):
    s = session(model)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def refused_by_onnxruntime(model, feed):
    with pytest.raises(Exception, match=r"(?i)out of bounds|out of range|invalid"):
        reference(model, feed)


@pytest.fixture(scope="module")
def bert():
    cache = {}

    def get(backend, **options):
        key = (backend, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = transmuter.load(BERT_ONNX, backend=backend, **options)
        return cache[key]

    return get


def _range_message(name, value, size):
    return (rf"Input '{name}' holds {value} at \[0, 3\].*{size} entries.*"
            rf"\[{-size}, {size - 1}\]")


@pytest.mark.parametrize("case", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_onnxruntime_refuses_each_case(case):
    name, value, _ = case
    refused_by_onnxruntime(BERT_ONNX, bert_feed(name, value))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_model_call_refuses_out_of_range_ids(case, backend, bert):
    name, value, size = case
    model = bert(backend)
    feed = bert_feed(name, value)
    message = _range_message(name, value, size)
    with pytest.raises(InputError, match=message):
        model(**feed)
    with pytest.raises(InputError, match=message):
        transmuter.run(model, feed)
    fn = transmuter.compile(model, bert_feed())
    with pytest.raises(InputError, match=message):
        fn(feed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_message_names_the_node_and_the_table(backend, bert):
    with pytest.raises(InputError) as info:
        bert(backend)(**bert_feed("input_ids", VOCAB))
    text = str(info.value)
    assert "/embeddings/word_embeddings/Gather" in text
    assert "embeddings.word_embeddings.weight" in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_values_in_range_equal_onnxruntime(backend, bert):
    """-size and size - 1 are valid (ONNX counts negative indices from the end)."""
    model = bert(backend)
    feed = bert_feed()
    feed["input_ids"][0, 1:3] = [-VOCAB, VOCAB - 1]
    feed["input_ids"][1, 1] = -1
    feed["token_type_ids"][0, 1:3] = [-TYPES, TYPES - 1]
    want = reference(BERT_ONNX, feed)
    for got in (model(**feed), transmuter.run(model, feed)):
        for key, value in want.items():
            np.testing.assert_allclose(np.asarray(got[key]), value, rtol=0, atol=ATOL,
                                       err_msg=key)


def test_checks_false_skips_the_check(bert):
    """JAX only: past the table MLX reads outside its buffer (the crash the check prevents)."""
    feed = bert_feed("input_ids", VOCAB)
    unchecked = bert("jax", checks=False)
    assert unchecked.checks is False
    assert np.asarray(unchecked(**feed)["last_hidden_state"]).shape == (2, 6, 32)
    transmuter.run(unchecked, feed)
    checked = bert("jax")
    transmuter.run(checked, feed, checks=False)
    transmuter.compile(checked, bert_feed(), checks=False)(feed)
    with pytest.raises(InputError):
        transmuter.compile(unchecked, bert_feed(), checks=True)(feed)


# --- graphs built with onnx.helper -----------------------------------------------------------

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def constant_index_model(op, index, **attrs):
    """``op`` over an input x [3, 4] with ``index`` from a Constant node: the index is known
    only when the node runs, the data only inside the compiled function."""
    index = np.asarray(index, np.int64)
    updates = [] if op != "ScatterND" else ["updates"]
    nodes = [helper.make_node("Constant", [], ["idx"], value=numpy_helper.from_array(index)),
             helper.make_node(op, ["x", "idx", *updates], ["y"], name="picky", **attrs)]
    inits = {}
    if op == "ScatterND":
        inits["updates"] = np.ones(index.shape[:-1] + X.shape[index.shape[-1]:], np.float32)
    return make_model(nodes, [info("x", TensorProto.FLOAT, [3, 4])],
                      [info("y", TensorProto.FLOAT, None)], inits)


CONSTANT = [("Gather", [0, 3], {}, "3", 3), ("Gather", [-5], {"axis": 1}, "-5", 4),
            ("GatherElements", [[0, 1, 2, 9]], {}, "9", 3),
            ("GatherND", [[1, 0], [2, 4]], {}, "4", 4), ("ScatterND", [[3]], {}, "3", 3)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CONSTANT, ids=[c[0] + c[3] for c in CONSTANT])
def test_constant_out_of_range_index_names_the_node(case, backend):
    op, index, attrs, value, size = case
    proto = constant_index_model(op, index, **attrs)
    refused_by_onnxruntime(proto, {"x": X})
    model = transmuter.load(proto, backend=backend)
    message = rf"{op} node 'picky' has index {value} .*of size {size}.*\[{-size}, {size - 1}\]"
    with pytest.raises(OpError, match=message):
        transmuter.compile(model, {"x": X})
    with pytest.raises(OpError, match=message):
        transmuter.run(model, {"x": X})


@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_in_range_negative_indices_equal_onnxruntime(backend):
    for op, index, attrs in [("Gather", [-3, 2], {}), ("Gather", [-4], {"axis": 1}),
                             ("GatherElements", [[-3, 1, 2, -1]], {}),
                             ("GatherND", [[-3, -4], [2, 3]], {}), ("ScatterND", [[-1]], {})]:
        proto = constant_index_model(op, index, **attrs)
        model = transmuter.load(proto, backend=backend)
        want = reference(proto, {"x": X})["y"]
        np.testing.assert_array_equal(np.asarray(model(x=X)["y"]), want, err_msg=op)  # copies


def index_input_model(op, index_shape, table_shape=(5, 2), chain=(), **attrs):
    """``op`` of a table initializer by an int32 input ``ids`` that reaches it through ``chain``
    (ops that keep its values: Cast to int64 first)."""
    nodes, name = [helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64)], "ids64"
    inits = {"table": np.arange(np.prod(table_shape), dtype=np.float32).reshape(table_shape)}
    for i, (kind, extra) in enumerate(chain):
        args = [name]
        if kind in ("Reshape", "Unsqueeze"):
            inits[f"arg{i}"] = np.asarray(extra, np.int64)
            args.append(f"arg{i}")
        nodes.append(helper.make_node(kind, args, [f"c{i}"]))
        name = f"c{i}"
    inputs = ["table", name]
    if op == "ScatterND":
        k = index_shape[-1]
        inits["updates"] = np.ones(index_shape[:-1] + table_shape[k:], np.float32)
        inputs.append("updates")
    nodes.append(helper.make_node(op, inputs, ["y"], name="lookup", **attrs))
    return make_model(nodes, [info("ids", TensorProto.INT32, list(index_shape))],
                      [info("y", TensorProto.FLOAT, None)], inits)


INPUT = [("Gather", (2, 3), (), {}, [[0, 4, 1], [2, 5, 0]], (1, 1), 5, 5),
         ("Gather", (2, 3), (("Reshape", [6]), ("Unsqueeze", [0])), {}, [[0, 4, 1], [-6, 0, 0]],
          (1, 0), -6, 5),
         ("Gather", (2, 3), (("Identity", None), ("Flatten", None)), {"axis": 1},
          [[0, 1, 1], [0, 2, 0]], (1, 1), 2, 2),
         ("GatherElements", (1, 2), (), {}, [[0, 7]], (0, 1), 7, 5),
         ("GatherND", (2, 2), (), {}, [[4, 1], [0, 2]], (1, 1), 2, 2),
         ("ScatterND", (2, 1), (), {}, [[1], [-9]], (1, 0), -9, 5)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", INPUT, ids=[f"{c[0]}-{len(c[2])}" for c in INPUT])
def test_index_inputs_of_each_op_are_checked(case, backend):
    op, shape, chain, attrs, ids, at, value, size = case
    proto = index_input_model(op, shape, chain=chain, **attrs)
    ids = np.asarray(ids, np.int32)
    refused_by_onnxruntime(proto, {"ids": ids})
    model = transmuter.load(proto, backend=backend)
    with pytest.raises(InputError, match=rf"Input 'ids' holds {value} at \[{at[0]}, {at[1]}\]"
                                         rf".*{op} node 'lookup'.*\[{-size}, {size - 1}\]"):
        model(ids=ids)
    good = np.where(ids == value, 0, ids).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(model(ids=good)["y"]),  # copies: exact
                                  reference(proto, {"ids": good})["y"])


def branch(name, table):
    return helper.make_graph([helper.make_node("Gather", [table, "ids"], [f"{name}_y"],
                                               name=f"{name}_gather")],
                             name, [], [info(f"{name}_y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_indices_read_inside_if_branches_and_tied_tables_are_checked(backend):
    """A merged decoder gathers input_ids inside its If's branches (read by name from the outer
    graph); a tied embedding gathers from the Transpose of the lm_head weight [hidden, vocab]."""
    lm_head = np.arange(10, dtype=np.float32).reshape(2, 5)  # 5 rows once transposed
    proto = make_model(
        [helper.make_node("Transpose", ["lm_head"], ["tied"], perm=[1, 0]),
         helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", "tied"),
                          else_branch=branch("else", "tied"))],
        [info("ids", TensorProto.INT64, [1, 3]), info("cond", TensorProto.BOOL, [])],
        [info("y", TensorProto.FLOAT, None)], {"lm_head": lm_head})
    model = transmuter.load(proto, backend=backend)
    for cond in (True, False):
        feed = {"ids": np.array([[0, 4, -5]], np.int64), "cond": np.array(cond)}
        np.testing.assert_array_equal(np.asarray(model(**feed)["y"]),  # copies: exact
                                      reference(proto, feed)["y"])
        feed["ids"] = np.array([[0, 5, 1]], np.int64)
        refused_by_onnxruntime(proto, feed)
        with pytest.raises(InputError, match=r"'ids' holds 5 at \[0, 1\].*'tied'.*\[-5, 4\]"):
            model(**feed)


def test_data_given_by_the_caller_sets_the_range():
    """GatherElements of one input by another: the range is the data input's axis at the call."""
    proto = make_model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
                       [info("x", TensorProto.FLOAT, ["n", "m"]),
                        info("i", TensorProto.INT64, ["n", "k"])],
                       [info("y", TensorProto.FLOAT, None)])
    model = transmuter.load(proto)
    index = np.array([[0, 3]], np.int64)
    np.testing.assert_array_equal(np.asarray(model(x=X[:1], i=index)["y"]), [[0, 3]])
    refused_by_onnxruntime(proto, {"x": X[:1, :3], "i": index})
    with pytest.raises(InputError, match=r"'i' holds 3 at \[0, 1\].*\[-3, 2\]"):
        model(x=X[:1, :3], i=index)


# --- pipelines -------------------------------------------------------------------------------

def bert_tokenizer(extra=()):
    tok = tokenizers.Tokenizer.from_file(str(BERT / "tokenizer.json"))
    tok.add_tokens(list(extra))
    return tok


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tokenizer_past_the_embedding_table_is_refused_at_load(backend):
    tok = bert_tokenizer(["zebraword", "yakword"])  # ids 600, 601: the table has 600 rows
    with pytest.raises(PipelineError, match=r"ids up to 601.*embeddings\.word_embeddings\.weight"
                                            r".*600 rows"):
        transmuter.pipeline("feature-extraction", str(BERT), tokenizer=tok, backend=backend)
    transmuter.pipeline("feature-extraction", str(BERT), tokenizer=bert_tokenizer(),
                        backend=backend)  # the model's own: accepted
    transmuter.pipeline("feature-extraction", str(BERT), tokenizer=tok, backend=backend,
                        checks=False)  # refused only when checks are on


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipeline_call_refuses_ids_past_the_table(backend):
    """Tokens added to the tokenizer after load (the embeddings not resized) reach the call."""
    pipe = transmuter.pipeline("feature-extraction", str(BERT), backend=backend)
    plain = pipe("a zebra")
    pipe.tokenizer.backend.add_tokens(["zebraword"])  # id 600
    with pytest.raises(InputError, match=r"'input_ids' holds 600 at \[0, \d+\].*\[-600, 599\]"):
        pipe("a zebraword")
    assert np.allclose(pipe("a zebra"), plain)  # the pipeline still works on good input


@pytest.mark.parametrize("checks", [True, False])
def test_side_models_take_the_pipelines_checks(checks):
    """An encoder-decoder's encoder and a split zero-shot model's text half are loaded by the
    pipeline, beside the model it was asked for: they follow its checks= and backend."""
    t5 = transmuter.pipeline("text2text-generation", fixtures.ROOT / "t5", variant="fp32", checks=checks,
                             backend="mlx")
    t5("translate: hi", max_new_tokens=1, num_beams=1)  # the generator loads the encoder
    encoder = t5.generator.encoder
    assert (encoder.checks, encoder.backend.name) == (checks, "mlx")
    clip = transmuter.pipeline("zero-shot-image-classification", fixtures.ROOT / "clip-split",
                               logit_scale=100.0, checks=checks)
    assert clip.text_model.checks is checks
