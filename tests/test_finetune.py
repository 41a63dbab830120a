"""Fine-tuning: trainable parameters, gradients (PyTorch autograd references recorded by
tests/support/record_finetune.py on the fixtures' own weights), optax steps, and write-back
(transmuter.save / save_pretrained) checked against the source file and onnxruntime."""

import re
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter
from tests.fixtures import ROOT as FIXTURES

jax = pytest.importorskip("jax")
jnp = jax.numpy

BERT = FIXTURES / "bert-sequence-classification"
# The references are float64 PyTorch gradients; our graph runs in float32. The worst element of
# any tensor measured 3e-6 of that tensor's largest gradient (torch's own float32 run: 1.7e-6).
# The floor, 1e-3 of the model's largest gradient, covers gradients that are zero in exact math
# (attention key biases: softmax ignores a shift), where float32 leaves noise of ~1e-9.
GRAD_RTOL = 1e-5
# onnxruntime and our run of the same float32 graph: different summation orders.
ORT_ATOL = 1e-5
# Finite differences of the float64 break graph: its loss is ~5, and rounding it costs
# ~2e-16 * 5 / eps(1e-6) = 1e-9 in each difference quotient.
FD_ATOL = 2e-9


def _feed(fixture, reference):
    z = np.load(FIXTURES / fixture / "references" / reference)
    return {k.split("/")[-1]: z[k] for k in z.files if k.startswith("0/in/")}


def _refs(fixture):
    return np.load(FIXTURES / fixture / "references" / "finetune_grads.npz")


def cls_loss(logits, labels):
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels])


def lm_loss(logits, ids, mask):
    """The causal LM loss over the shifted ids, padding masked out (as the recorder's)."""
    log_probs = jax.nn.log_softmax(logits[:, :-1])
    picked = jnp.take_along_axis(log_probs, ids[:, 1:, None], axis=-1)[..., 0]
    weight = mask[:, 1:].astype(log_probs.dtype)
    return -(picked * weight).sum() / weight.sum()


def _loss_fn(fixture, refs, feed, forward):
    if "labels" in refs.files:
        return lambda p: cls_loss(forward(p)["logits"], refs["labels"])
    return lambda p: lm_loss(forward(p)["logits"], feed["input_ids"], feed["attention_mask"])


def assert_grads_match(grads, refs, alias=None):
    """Each recorded initializer's gradient within GRAD_RTOL of its own largest value, with the
    floor described at GRAD_RTOL."""
    names = [k[len("grad/"):] for k in refs.files if k.startswith("grad/")]
    top = max(np.abs(refs[f"grad/{n}"]).max() for n in names)
    got_names = {(alias or {}).get(n, n): n for n in grads}
    assert set(got_names) == set(names)
    for name in names:
        want, got = refs[f"grad/{name}"], np.asarray(grads[got_names[name]])
        bound = GRAD_RTOL * max(np.abs(want).max(), 1e-3 * top)
        err = np.abs(got - want).max()
        assert err <= bound, f"{name}: max error {err:.3g} > {bound:.3g}"


CASES = [("bert-sequence-classification", "onnx/model.onnx", "model.npz"),
         ("vit", "onnx/model.onnx", "model.npz"),
         ("gpt2", "onnx/decoder_model.onnx", "decoder_model.npz")]


@pytest.mark.parametrize("fixture,file,reference", CASES, ids=[c[0] for c in CASES])
def test_gradients_equal_pytorch(fixture, file, reference):
    model = transmuter.load(FIXTURES / fixture / file, trainable=True)
    refs, feed = _refs(fixture), _feed(fixture, reference)
    loss = _loss_fn(fixture, refs, feed, lambda p: model.apply(p, **feed))
    value, grads = jax.value_and_grad(loss)(model.trainable_params)
    np.testing.assert_allclose(float(value), float(refs["loss"]), rtol=1e-6)  # float32 sum
    assert_grads_match(grads, refs)


def test_compiled_function_grads_under_jit_merged_decoder():
    """The merged GPT-2 decoder (If on use_cache_branch, fixed by static_inputs), through a
    compiled function's params= and under jax.jit; its initializers are renamed copies."""
    fixture = "gpt2"
    model = transmuter.load(FIXTURES / fixture / "onnx/decoder_model_merged.onnx", trainable=True)
    refs, feed = _refs(fixture), _feed(fixture, "decoder_model_merged.npz")
    static = {"use_cache_branch": feed.pop("use_cache_branch")}
    fn = transmuter.compile(model, feed, static_inputs=static)
    loss = _loss_fn(fixture, refs, feed, lambda p: fn(feed, params=p))
    value, grads = jax.jit(jax.value_and_grad(loss))(model.trainable_params)
    np.testing.assert_allclose(float(value), float(refs["loss"]), rtol=1e-6)
    alias = {k[len("alias/"):]: str(refs[k]) for k in refs.files if k.startswith("alias/")}
    assert_grads_match(grads, refs, {n: alias[n] for n in grads})


def test_mlx_value_and_grad():
    mx = pytest.importorskip("mlx.core")
    fixture = "bert-sequence-classification"
    model = transmuter.load(BERT, trainable=True, backend="mlx")
    refs, feed = _refs(fixture), _feed(fixture, "model.npz")
    labels = mx.array(refs["labels"])

    def loss(p):
        logits = model.apply(p, **feed)["logits"]
        log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return -mx.mean(log_probs[mx.arange(len(refs["labels"])), labels])

    value, grads = mx.value_and_grad(loss)(model.trainable_params)
    np.testing.assert_allclose(value.item(), float(refs["loss"]), rtol=1e-6)
    assert_grads_match({k: np.array(v) for k, v in grads.items()}, refs)


# --- a graph break ----------------------------------------------------------------------------

def _break_model():
    """y = sum(tanh(x @ w + b) reshaped to [k, -1] squared * c): the Reshape target is computed
    from the input k on the device, so it is read on the host: a graph break between two
    compiled segments. Float64 throughout, for a finite-difference check."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((6, 6)), "b": rng.standard_normal(6),
               "c": rng.standard_normal((3, 4)), "minus_one": np.array([-1], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h0"]),
             helper.make_node("Tanh", ["h0"], ["h"]),
             helper.make_node("Add", ["k", "k"], ["k2"]),  # computed on the device: no fold
             helper.make_node("Sub", ["k2", "k"], ["k1"]),
             helper.make_node("Concat", ["k1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Mul", ["r", "r"], ["r2"]),
             helper.make_node("Mul", ["r2", "c"], ["rc"]),
             helper.make_node("ReduceSum", ["rc"], ["y"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 6]),
                     helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_float64_grads_through_a_break_equal_finite_differences():
    model = transmuter.load(_break_model(), trainable=True)
    assert set(model.trainable) == {"w", "b", "c"}  # float64 weights train; the shape does not
    feed = {"x": np.random.default_rng(1).standard_normal((2, 6)), "k": np.array([3])}
    fn = transmuter.compile(model, feed)
    assert fn.cache_info().currsize == 2  # two segments: the Reshape target broke the graph
    params = model.trainable_params

    def loss(p):
        return fn(feed, params=p)["y"]

    with pytest.raises(transmuter.InputError, match="enable_x64"):
        jax.grad(loss)(params)  # its backward pass would run in float32
    with jax.enable_x64(True):
        grads = jax.grad(loss)(params)
    numeric = _finite_differences(loss, params)
    for name in params:
        np.testing.assert_allclose(np.asarray(grads[name]), numeric[name], rtol=1e-8,
                                   atol=FD_ATOL)
    with jax.enable_x64(True), pytest.raises(transmuter.StaticInputError, match="jax.jit"):
        jax.jit(jax.grad(loss))(params)  # under jit the break's value is a tracer


def test_mlx_float64_grads_through_a_break_equal_finite_differences():
    mx = pytest.importorskip("mlx.core")
    model = transmuter.load(_break_model(), trainable=True, backend="mlx")
    feed = {"x": np.random.default_rng(1).standard_normal((2, 6)), "k": np.array([3])}
    fn = transmuter.compile(model, feed)
    assert fn.cache_info().currsize == 2

    def loss(p):
        return fn(feed, params=p)["y"]

    params = model.trainable_params
    grads = mx.grad(loss)(params)
    numeric = _finite_differences(lambda p: np.array(loss(p)), params)
    for name in params:
        assert grads[name].dtype == mx.float64
        np.testing.assert_allclose(np.array(grads[name]), numeric[name], rtol=1e-8,
                                   atol=FD_ATOL)


def _finite_differences(loss, params):
    """Central differences of ``loss`` for each element of each param (float64)."""
    eps = 1e-6  # error ~eps^2 from the series, ~1e-16/eps from rounding
    numeric = {}
    for name, value in params.items():
        value = np.array(value)
        numeric[name] = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            up, down = value.copy(), value.copy()
            up[i] += eps
            down[i] -= eps
            numeric[name][i] = (float(loss({**params, name: up})) -
                                float(loss({**params, name: down}))) / (2 * eps)
    return numeric


# --- which weights train ----------------------------------------------------------------------

def test_trainable_selection():
    full = transmuter.load(BERT, trainable=True)
    assert len(full.trainable_params) == 21  # every float initializer, small biases too
    chosen = ["classifier.weight", "classifier.bias"]
    model = transmuter.load(BERT, trainable=chosen)
    assert sorted(model.trainable_params) == sorted(chosen)
    model = transmuter.load(BERT, trainable=lambda name: name.startswith("classifier."))
    assert sorted(model.trainable_params) == sorted(chosen)
    with pytest.raises(transmuter.ModelLoadError, match="did you mean 'classifier.bias'"):
        transmuter.load(BERT, trainable=["classifier.bais"])
    with pytest.raises(transmuter.ModelLoadError, match="a list of initializer names"):
        transmuter.load(BERT, trainable="classifier.bias")
    with pytest.raises(transmuter.InputError, match="no parameter of this model"):
        model.apply({"nope": np.zeros(3, np.float32)}, **_feed(BERT.name, "model.npz"))


@pytest.mark.parametrize("file,kind", [("model_quantized.onnx", "quantized"),
                                       ("model_q4.onnx", "quantized"),
                                       ("model_fp16.onnx", "half")])
def test_quantized_and_half_exports_are_refused(file, kind):
    path = FIXTURES / "bert" / "onnx" / file
    with pytest.raises(transmuter.ModelLoadError, match=f"{kind} weights.*fp32 export"):
        transmuter.load(path, trainable=True)
    if kind == "half":  # upcast to float32 at load, still half in the file
        with pytest.raises(transmuter.ModelLoadError, match="half weights"):
            transmuter.load(path, trainable=True, compute_type="f32")
    proto = onnx.load(str(path), load_external_data=False)
    odd = next(t.name for t in proto.graph.initializer if np.prod(t.dims) > 64
               and t.data_type not in (TensorProto.FLOAT, TensorProto.INT64))
    with pytest.raises(transmuter.ModelLoadError, match="cannot train.*fp32 export"):
        transmuter.load(path, trainable=[odd])


def test_static_float_weight_is_not_trainable():
    """Resize's scales are float but read on the host: no gradient reaches them."""
    scales = np.array([1, 1, 2, 2], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scales, "scales")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert not transmuter.load(proto, trainable=True).trainable
    with pytest.raises(transmuter.ModelLoadError, match="static value"):
        transmuter.load(proto, trainable=["scales"])


# --- training and write-back ------------------------------------------------------------------

def _train(model, feed, labels, steps=5):
    optax = pytest.importorskip("optax")
    optimizer = optax.adam(1e-2)
    params = model.trainable_params
    state = optimizer.init(params)

    @jax.jit
    def step(params, state):
        value, grads = jax.value_and_grad(
            lambda p: cls_loss(model.apply(p, **feed)["logits"], labels))(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    losses = []
    for _ in range(steps):
        params, state, value = step(params, state)
        losses.append(float(value))
    return params, losses


def _ort(path, feed):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _initializers(path):
    proto = onnx.load(str(path))
    return proto, {t.name: t for t in proto.graph.initializer}


def _graph_without_weights(proto):
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t in copy.graph.initializer:
        t.ClearField("raw_data")
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]
    return copy.SerializeToString()


def test_optax_steps_then_save(tmp_path):
    model = transmuter.load(BERT, trainable=["classifier.weight", "classifier.bias",
                                             "onnx::MatMul_333"])
    feed, labels = _feed(BERT.name, "model.npz"), _refs(BERT.name)["labels"]
    params, losses = _train(model, feed, labels)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses  # each Adam step lowers it
    out = transmuter.save(model, tmp_path / "model.onnx", params=params)
    source, before = _initializers(BERT / "onnx/model.onnx")
    saved, after = _initializers(out)
    assert _graph_without_weights(saved) == _graph_without_weights(source)
    for name, tensor in before.items():
        if name in params:
            np.testing.assert_array_equal(numpy_helper.to_array(after[name]),
                                          np.asarray(params[name]))
        else:  # frozen: the very bytes of the source
            assert after[name].raw_data == tensor.raw_data, name
    want = np.asarray(model.apply(params, **feed)["logits"])
    np.testing.assert_allclose(_ort(out, feed)["logits"], want, atol=ORT_ATOL, rtol=0)
    assert np.abs(want - model(**feed)["logits"]).max() > 1e-3  # the weights did change


@pytest.mark.parametrize("fixture,file,options", [
    ("bert-sequence-classification", "onnx/model.onnx", {}),
    ("gpt2", "onnx/decoder_model_merged.onnx", {}),
    ("vit", "onnx/model_fp16.onnx", {"compute_type": "f32"}),  # upcast at load, cast back
    ("bert", "onnx/model_q4.onnx", {}),  # MatMulNBits words (a view) and unpacked zero points
], ids=["bert", "gpt2-merged", "vit-fp16-upcast", "bert-q4"])
def test_unchanged_save_is_byte_identical(tmp_path, fixture, file, options):
    model = transmuter.load(FIXTURES / fixture / file, **options)
    out = transmuter.save(model, tmp_path / "model.onnx")
    source = onnx.load(str(FIXTURES / fixture / file))
    saved = onnx.load(str(out))
    assert saved.SerializeToString() == source.SerializeToString()


def test_external_data_keeps_its_layout(tmp_path):
    source_dir = tmp_path / "src"
    source_dir.mkdir()
    proto = onnx.load(str(BERT / "onnx/model.onnx"))
    onnx.save(proto, str(source_dir / "model.onnx"), save_as_external_data=True,
              location="model.onnx_data", size_threshold=1024)
    model = transmuter.load(source_dir / "model.onnx", trainable=True)
    params = {"onnx::MatMul_333": model.params["onnx::MatMul_333"] * 1.5}  # in the data file
    out = transmuter.save(model, tmp_path / "tuned.onnx", params=params)
    saved = onnx.load(str(out), load_external_data=False)
    src = onnx.load(str(source_dir / "model.onnx"), load_external_data=False)
    for a, b in zip(src.graph.initializer, saved.graph.initializer):
        ea, eb = ({e.key: e.value for e in t.external_data} for t in (a, b))
        assert (a.data_location, ea.get("offset"), ea.get("length")) == \
               (b.data_location, eb.get("offset"), eb.get("length")), a.name
        if ea:
            assert eb["location"] == "tuned.onnx_data"
    data_src = (source_dir / "model.onnx_data").read_bytes()
    data_out = (tmp_path / "tuned.onnx_data").read_bytes()
    assert len(data_out) == len(data_src) and data_out != data_src
    feed = _feed(BERT.name, "model.npz")
    want = np.asarray(model.apply(params, **feed)["logits"])
    np.testing.assert_allclose(_ort(out, feed)["logits"], want, atol=ORT_ATOL, rtol=0)
    unchanged = transmuter.save(model, tmp_path / "same" / "model.onnx")  # the source's name
    assert (tmp_path / "same" / "model.onnx_data").read_bytes() == data_src
    assert open(unchanged, "rb").read() == (source_dir / "model.onnx").read_bytes()


def test_past_the_protobuf_limit_weights_go_to_a_data_file(tmp_path, monkeypatch):
    """A file past protobuf's 2 GiB, scaled down: the limit lowered to 100 kB."""
    monkeypatch.setattr(sys.modules["transmuter.hub.save"], "PROTO_LIMIT", 100_000)
    model = transmuter.load(BERT / "onnx" / "model.onnx", trainable=True)
    params = {"onnx::MatMul_333": model.params["onnx::MatMul_333"] * 1.5}
    out = transmuter.save(model, tmp_path / "model.onnx", params=params)
    saved = onnx.load(str(out), load_external_data=False)
    moved = {t.name for t in saved.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert "bert.embeddings.word_embeddings.weight" in moved
    assert "classifier.bias" not in moved  # under 1 kB: stays inline
    assert (tmp_path / "model.onnx_data").exists()
    feed = _feed(BERT.name, "model.npz")
    want = np.asarray(model.apply(params, **feed)["logits"])
    np.testing.assert_allclose(_ort(out, feed)["logits"], want, atol=ORT_ATOL, rtol=0)


def test_save_pretrained_loads_in_pipeline_and_onnxruntime(tmp_path):
    model = transmuter.load(BERT, trainable=True)
    feed, labels = _feed(BERT.name, "model.npz"), _refs(BERT.name)["labels"]
    params, _ = _train(model, feed, labels, steps=3)
    out = transmuter.save_pretrained(model, tmp_path / "tuned", params=params)
    assert out == str(tmp_path / "tuned" / "onnx" / "model.onnx")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        assert (tmp_path / "tuned" / name).read_bytes() == (BERT / name).read_bytes()
    assert not (tmp_path / "tuned" / "onnx" / "model_quantized.onnx").exists()
    logits = _ort(out, feed)["logits"]
    np.testing.assert_allclose(logits, np.asarray(model.apply(params, **feed)["logits"]),
                               atol=ORT_ATOL, rtol=0)
    classify = transmuter.pipeline("text-classification", tmp_path / "tuned")
    # references/model.npz holds "Hello world!" and a longer text, padded to one length: the
    # pipeline runs them at its own padding, which moves float32 logits by ~1e-6.
    got = classify(["Hello world!", "My name is Sarah and I live in London."], top_k=None)
    config = model.origin[0].config()
    for row, result in zip(logits, got):
        probs = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        scores = {r["label"]: r["score"] for r in result}
        want = {config["id2label"][str(i)]: p for i, p in enumerate(probs)}
        assert scores == pytest.approx(want, abs=1e-4)


def test_save_pretrained_needs_a_repo(tmp_path):
    model = transmuter.load(BERT / "onnx" / "model.onnx")  # a path: its repo is found above onnx/
    out = transmuter.save_pretrained(model, tmp_path / "a")
    assert (tmp_path / "a" / "config.json").exists() and out.endswith("onnx/model.onnx")
    model = transmuter.load((BERT / "onnx" / "model.onnx").read_bytes())
    with pytest.raises(transmuter.InputError, match="transmuter.save"):
        transmuter.save_pretrained(model, tmp_path / "b")


# --- transmuter.training: batches, losses and a step against PyTorch's own training -----------

def recorded_step(pipe, ref, prefix="adamw", **options):
    """training.step with the optax AdamW of a recorded curve's ``<prefix>/<option>`` values."""
    import optax
    from transmuter import training

    opt = {k.split("/")[1]: ref[k] for k in ref.files if k.startswith(prefix + "/")}
    return training.step(pipe, optax.adamw(float(opt["lr"]), *map(float, opt["betas"]),
                                           eps=float(opt["eps"]),
                                           weight_decay=float(opt["weight_decay"])), **options)


def train(step, params, data, steps):
    """``steps`` updates over ``data`` (epochs repeated): the trained params and each loss."""
    state, losses = step.init(params), []
    while len(losses) < steps:
        for batch in data:
            params, state, value = step(params, state, batch)
            losses.append(float(value))
    return params, losses[:steps]


def test_adamw_loss_curve_equals_pytorch():
    """30 AdamW steps through training.batches / training.step against torch.optim.AdamW on the
    same weights, data and hyper-parameters (tests/support/record_finetune.py curve)."""
    pytest.importorskip("optax")
    from transmuter import training

    ref = np.load(BERT / "references" / "finetune_curve.npz")
    pipe = transmuter.pipeline("text-classification", BERT,
                               trainable=[str(n) for n in ref["trained"]])
    data = training.batches(pipe, [str(t) for t in ref["texts"]], ref["labels"].tolist(),
                            batch_size=int(ref["batch"]))
    for i, batch in enumerate(data):  # the same tokens as transformers' tokenizer made
        want = ref[f"ids/{i}"]
        got = batch.inputs[0]["input_ids"][:len(want), :want.shape[1]]
        np.testing.assert_array_equal(got, want)
        assert batch.weights.sum() == len(want)
    step = recorded_step(pipe, ref)
    params = pipe.model.trainable_params
    params, losses = train(step, params, data, len(ref["loss"]))
    # float32 on both sides, different summation orders: the first loss differs by 1.1e-7
    # relative, the worst of the 30 by 4.7e-7 (measured); 1e-4 is the bound, which a
    # wrong AdamW detail (weight decay, bias correction, eps placement) or a missed padding
    # row passes by far (attention dropout left on in the recording: 1e-3).
    np.testing.assert_allclose(losses[:len(ref["loss"])], ref["loss"], rtol=1e-4)


def test_bf16_mixed_precision_curve_equals_pytorch_autocast(tmp_path):
    """compute_type="bf16": the 30 AdamW steps of the curve above with bfloat16 compute and
    float32 weights, against the same steps under torch.autocast("cpu", torch.bfloat16)
    (tests/support/record_finetune.py curve); every matrix product of the compiled step is a
    bfloat16 one; the trained weights stay float32 and save as the original's dtypes."""
    pytest.importorskip("optax")
    from transmuter import training

    ref = np.load(BERT / "references" / "finetune_curve_bf16.npz")
    pipe = transmuter.pipeline("text-classification", BERT, compute_type="bf16",
                               trainable=[str(n) for n in ref["trained"]])
    data = training.batches(pipe, [str(t) for t in ref["texts"]], ref["labels"].tolist(),
                            batch_size=int(ref["batch"]))
    step = recorded_step(pipe, ref)
    params = pipe.model.trainable_params
    assert {v.dtype for v in params.values()} == {np.dtype(np.float32)}
    batch = next(iter(data))
    hlo = step._run.lower(params, step.init(params), batch).as_text()
    dots = re.findall(r"stablehlo\.dot_general.*->\s*tensor<[0-9x]*(\w+)>", hlo)
    assert dots and set(dots) == {"bf16"}, sorted(set(dots))
    params, losses = train(step, params, data, len(ref["loss"]))
    # Two bfloat16 policies (autocast: matmuls in bfloat16, most elementwise ops in float32;
    # ours: everything but the normalizations' statistics in bfloat16), 8 mantissa bits each:
    # measured 3.7e-4 relative at worst over the 30 steps (autocast vs float32: 1.6e-4).
    # A weight kept in bfloat16 (Adam's 1e-3 steps rounding away) drifts by > 1e-2.
    np.testing.assert_allclose(losses[:len(ref["loss"])], ref["loss"], rtol=2e-3)
    assert {np.asarray(v).dtype for v in params.values()} == {np.dtype(np.float32)}
    transmuter.save_pretrained(pipe.model, tmp_path / "tuned", params=params)
    original = onnx.load(str(BERT / "onnx" / "model.onnx"))
    saved = onnx.load(str(tmp_path / "tuned" / "onnx" / "model.onnx"))
    assert [(t.name, t.data_type) for t in saved.graph.initializer] == \
        [(t.name, t.data_type) for t in original.graph.initializer]
    assert [n.op_type for n in saved.graph.node] == [n.op_type for n in original.graph.node]


def test_bf16_inference_equals_onnxruntime_within_bfloat16():
    """compute_type="bf16" for inference: the fixtures' outputs against onnxruntime's float32
    references at bfloat16's precision."""
    for name, bound in (("bert-sequence-classification", 0.02), ("vit", 0.03)):
        ref = np.load(FIXTURES / name / "references" / "model.npz")
        inputs = {k.split("/")[-1]: ref[k] for k in ref.files if k.startswith("0/in/")}
        model = transmuter.load(FIXTURES / name / "onnx" / "model.onnx", compute_type="bf16")
        got = np.asarray(transmuter.compile(model, inputs)(inputs)["logits"])
        want = ref["0/out/logits"]
        assert got.dtype == np.float32  # the declared output type, cast back
        # 8 mantissa bits (3.9e-3 per rounding) through two layers: measured 0.45 % (BERT) and
        # 1.0 % (ViT) of the largest logit; a graph left in float32 gives 1e-6
        error = np.abs(got - want).max() / np.abs(want).max()
        assert 1e-4 < error < bound, (name, error)


@pytest.mark.parametrize("kind", ["multiple-negatives-ranking", "cosine-similarity"])
def test_embedding_loss_curves_equal_sentence_transformers(kind):
    """sentence-transformers' MultipleNegativesRankingLoss / CosineSimilarityLoss, trained with
    AdamW on the same pairs (tests/support/record_finetune.py curve)."""
    pytest.importorskip("optax")
    from transmuter import training

    fixture = FIXTURES / "bert-sentence-transformers"
    ref = np.load(fixture / "references" / "finetune_embedding_curves.npz")
    # one padded length (the fixture's max_seq_length): one compiled step for every batch
    pipe = transmuter.pipeline("text-embedding", fixture, sequence_length=24,
                               trainable=[str(n) for n in ref["trained"]])
    pairs = [tuple(map(str, p)) for p in ref["pairs"]]
    labels = ref["scores"].tolist() if kind == "cosine-similarity" else None
    data = training.batches(pipe, pairs, labels, batch_size=int(ref["batch"]))
    step = recorded_step(pipe, ref, "adam", loss=kind)
    want = ref[f"loss/{kind}"]
    params = pipe.model.trainable_params
    params, losses = train(step, params, data, len(want))
    # float32 both sides, different summation orders, 8 Adam steps: measured worst 4.8e-6
    # (MNRL, whose loss falls from 1.1 to 8e-3) and 1.3e-6 (cosine, a squared error of ~1e-2),
    # 1.2e-4 of those small values: hence the absolute floor of 1e-5. A wrong scale (20), a
    # padding row taken as a negative or a missed normalization moves the curve by > 1e-2.
    np.testing.assert_allclose(losses[:len(want)], want, rtol=1e-4, atol=1e-5)


def test_token_classification_curve_equals_transformers():
    """12 AdamW steps of the NER fixture on pre-split words with word labels, against
    BertForTokenClassification's own loss after transformers' label alignment
    (tests/support/record_finetune.py curve)."""
    pytest.importorskip("optax")
    from transmuter import training

    fixture = FIXTURES / "bert-token-classification"
    ref = np.load(fixture / "references" / "finetune_token_curve.npz")
    pipe = transmuter.pipeline("token-classification", fixture,
                               trainable=[str(n) for n in ref["trained"]])
    count = len([k for k in ref.files if k.startswith("words/")])
    words = [ref[f"words/{i}"].tolist() for i in range(count)]
    tags = [ref[f"tags/{i}"].tolist() for i in range(count)]
    data = training.batches(pipe, words, tags, batch_size=int(ref["batch"]))
    for i, batch in enumerate(data):  # the tokens, and each word's label on its first token
        want_ids, want_labels = ref[f"ids/{i}"], ref[f"labels/{i}"]
        rows, length = want_ids.shape
        np.testing.assert_array_equal(batch.inputs[0]["input_ids"][:rows, :length], want_ids)
        np.testing.assert_array_equal(batch.labels[:rows, :length], want_labels)
        assert (batch.labels[:, length:] == training.IGNORE).all()
        assert (batch.labels[rows:] == training.IGNORE).all()
    step = recorded_step(pipe, ref)
    params = pipe.model.trainable_params
    params, losses = train(step, params, data, len(ref["loss"]))
    # float32 both sides, different summation orders: measured worst 2.5e-6 relative over the
    # 12 steps; a label put on every sub-token, padding counted in the mean or a special token
    # labelled changes which tokens count, which moves a step's loss by far more than 1e-4.
    np.testing.assert_allclose(losses[:len(ref["loss"])], ref["loss"], rtol=1e-4)


def test_token_classification_training_refusals():
    from transmuter import training

    pipe = transmuter.pipeline("token-classification", FIXTURES / "bert-token-classification",
                               trainable=True)
    with pytest.raises(transmuter.InputError, match="pre-split words"):
        training.batches(pipe, ["My name is Clara"], [["O", "O", "O", "B-PER"]])
    with pytest.raises(transmuter.InputError, match="4 words and 3 labels"):
        training.batches(pipe, [["My", "name", "is", "Clara"]], [["O", "O", "B-PER"]])
    with pytest.raises(transmuter.InputError, match="not the model's"):
        training.batches(pipe, [["Clara"]], [["B-PERSON"]])
    with pytest.raises(transmuter.InputError, match="1 examples and 2 label lists"):
        training.batches(pipe, [["Clara"]], [["B-PER"], ["O"]])
    with pytest.raises(transmuter.InputError, match="cross-entropy over the labelled tokens"):
        training.loss(pipe, "mse")


def test_training_ranking_pairs_and_refusals():
    """A cross-encoder trains on (query, document) pairs with CrossEncoder's default
    (binary cross-entropy over its one logit); wrong inputs get errors naming what to give."""
    optax = pytest.importorskip("optax")
    from transmuter import training

    fixture = FIXTURES / "bert-cross-encoder"
    rank = transmuter.pipeline("text-ranking", fixture, trainable=True, sequence_length=16)
    pairs = [("where is paris", "Paris is in France."), ("where is paris", "Cats sleep.")]
    data = training.batches(rank, pairs, [1.0, 0.0], batch_size=2)
    batch = next(iter(data))
    step = training.step(rank, optax.sgd(1e-2))  # a small plain step: the loss must fall
    params, state, first = step(rank.model.trainable_params, step.init(
        rank.model.trainable_params), batch)
    # the loss of the untrained model, from the pipeline's own scores (sigmoid of the logit)
    scores = [r[0]["score"] for r in rank([{"query": q, "documents": [d]} for q, d in pairs])]
    want = -np.mean([np.log(scores[0]), np.log(1 - scores[1])])
    assert float(first) == pytest.approx(want, rel=1e-5)  # float32 logits through log-sigmoid
    _, _, second = step(params, state, batch)
    assert float(second) < float(first)
    with pytest.raises(transmuter.InputError, match=r"\(query, document\) pairs"):
        training.batches(rank, ["just a query"], [1.0])

    classify = transmuter.pipeline("text-classification", BERT, trainable=True)
    with pytest.raises(transmuter.InputError, match="not the model's"):
        training.batches(classify, ["a", "b"], ["positive", "sunny"])
    with pytest.raises(transmuter.InputError, match="3 classes"):
        training.batches(classify, ["a"], [3])
    with pytest.raises(transmuter.InputError, match="2 examples and 1 labels"):
        training.batches(classify, ["a", "b"], [0])
    with pytest.raises(transmuter.InputError, match="give labels="):
        training.batches(classify, ["a"])
    with pytest.raises(transmuter.InputError, match="does not fit"):
        training.loss(classify, "multiple-negatives-ranking")
    with pytest.raises(transmuter.InputError, match="Unknown loss"):
        training.loss(classify, "hinge")
    frozen = transmuter.pipeline("text-classification", BERT)
    with pytest.raises(transmuter.InputError, match="trainable=True"):
        training.step(frozen, optax.sgd(1e-2))


def test_save_pretrained_keeps_sentence_transformers_module_weights(tmp_path):
    """Dense modules' weights (2_Dense/model.safetensors, 3_Dense/pytorch_model.bin) are the
    pipeline's to run: copied, so the saved folder embeds as the source does."""
    source = FIXTURES / "bert-st-dense"
    model = transmuter.load(source)
    transmuter.save_pretrained(model, tmp_path / "saved")
    for sub in ("2_Dense", "3_Dense"):
        for f in (source / sub).iterdir():
            assert (tmp_path / "saved" / sub / f.name).read_bytes() == f.read_bytes()
    texts = ["Hello world!", "The cat sat on the mat."]
    got = transmuter.pipeline("text-embedding", tmp_path / "saved")(texts)
    want = transmuter.pipeline("text-embedding", source)(texts)
    np.testing.assert_array_equal(np.array(got), np.array(want))  # the same weights and graph


def test_dense_modules_train_as_sentence_transformers_trains_them(tmp_path):
    """MNRL through the Dense modules after pooling (training.params holds their weights),
    against sentence-transformers training the same modules on the same pairs
    (tests/support/record_finetune.py dense); save_pretrained writes them back and the saved
    folder embeds as the trained SentenceTransformer encodes."""
    pytest.importorskip("optax")
    from transmuter import training

    fixture = FIXTURES / "bert-st-dense"
    ref = np.load(fixture / "references" / "finetune_dense_curve.npz")
    pipe = transmuter.pipeline("text-embedding", fixture, sequence_length=32,
                               trainable=[str(n) for n in ref["trained"]])
    params = training.params(pipe)
    dense = {k[len("dense/"):] for k in ref.files if k.startswith("dense/")}
    assert set(params) == set(pipe.model.trainable_params) | dense
    data = training.batches(pipe, [tuple(map(str, p)) for p in ref["pairs"]],
                            batch_size=int(ref["batch"]))
    params, losses = train(recorded_step(pipe, ref, "adam"), params, data, len(ref["loss"]))
    # float32 both sides, 8 Adam steps, as test_embedding_loss_curves_equal_sentence_transformers
    # (the loss falls from 1.2 to 8e-4: the absolute floor); measured 3.7e-6. The Dense modules
    # left frozen move the curve by 8.6e-2.
    np.testing.assert_allclose(losses, ref["loss"], rtol=1e-4, atol=1e-5)
    for name in dense:  # training moved each by ~8e-3; measured 2e-7 from PyTorch's
        np.testing.assert_allclose(np.asarray(params[name]), ref[f"dense/{name}"], atol=1e-5)
    transmuter.save_pretrained(pipe.model, tmp_path / "tuned", params=params)
    assert not (tmp_path / "tuned" / "3_Dense" / "pytorch_model.bin").exists()  # stale: replaced
    got = transmuter.pipeline("text-embedding", tmp_path / "tuned")([str(t) for t in ref["texts"]])
    # unit vectors of 16 entries, trained 8 steps on both sides: measured 4.8e-6
    np.testing.assert_allclose(np.array(got), ref["embeddings"], atol=1e-4)
    frozen = transmuter.pipeline("text-embedding", fixture, trainable=True)
    with pytest.raises(transmuter.InputError, match="2_Dense has no weight 'linear.scale'"):
        transmuter.save_pretrained(frozen.model, tmp_path / "bad",
                                   params={"2_Dense/linear.scale": np.zeros(3, np.float32)})


def _example(name):
    import importlib.util
    path = FIXTURES.parent.parent / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # two short trainings, each compiling its step: ~1 min
@pytest.mark.parametrize("name,fixture,task", [
    ("finetune_embeddings", "bert-sentence-transformers", "text-embedding"),
    ("finetune_cross_encoder", "bert-cross-encoder", "text-ranking")])
def test_finetune_examples_save_what_onnxruntime_runs(tmp_path, capsys, name, fixture, task):
    """examples/finetune_*.py end to end on a fixture; the saved file's outputs are
    onnxruntime's, and differ from the source's (the weights trained)."""
    pytest.importorskip("optax")
    module = _example(name)
    module.main([str(FIXTURES / fixture), "--out", str(tmp_path / "tuned"), "--epochs", "2",
                 "--batch-size", "4", "--learning-rate", "1e-3"])
    assert "epoch 2: loss" in capsys.readouterr().out
    saved = tmp_path / "tuned" / "onnx" / "model.onnx"
    feed = _feed(fixture, "model.npz")
    got = transmuter.load(saved)(**feed)
    ort_out = _ort(saved, feed)
    before = _ort(FIXTURES / fixture / "onnx" / "model.onnx", feed)
    for key, want in ort_out.items():
        np.testing.assert_allclose(np.asarray(got[key]), want, atol=ORT_ATOL, rtol=0)
    key = next(iter(ort_out))
    assert np.abs(ort_out[key] - before[key]).max() > 1e-4  # the weights did move


def test_lora_trains_adapters_only_and_saves_the_merged_weights(tmp_path):
    """LoRA on every MatMul / Gemm weight of the BERT classifier: the adapted model starts as the
    original (B = 0), only the adapters move, and the merged file onnxruntime runs gives the
    adapted model's outputs."""
    optax = pytest.importorskip("optax")
    from transmuter import training

    pipe = transmuter.pipeline("text-classification", BERT, sequence_length=16)
    adapters = training.lora(pipe, rank=4, alpha=8)
    matmuls = {n.inputs[1] for n in pipe.model.graph.nodes if n.op_type in ("MatMul", "Gemm")}
    assert set(adapters.names) == {n for n in matmuls if n in pipe.model.params}
    data = training.batches(pipe, ["Hello world!", "bad", "good day", "the cat sat"],
                            ["positive", "negative", "neutral", "positive"], batch_size=4)
    step = training.step(pipe, optax.adam(1e-2), lora=adapters)
    params = adapters.init(seed=0)
    before = {k: np.asarray(v) for k, v in pipe.model.params.items()}
    feed = _feed(BERT.name, "model.npz")
    np.testing.assert_array_equal(  # B = 0: the merged weights are the loaded ones
        np.asarray(pipe.model.apply(adapters.merge(params), **feed)["logits"]),
        np.asarray(pipe.model(**feed)["logits"]))
    state, losses = step.init(params), []
    for _ in range(5):
        params, state, value = step(params, state, next(iter(data)))
        losses.append(float(value))
    assert losses[-1] < losses[0]
    for name, value in pipe.model.params.items():  # the model's own weights did not move
        np.testing.assert_array_equal(np.asarray(value), before[name])
    merged = adapters.merge(params)
    out = transmuter.save(pipe.model, tmp_path / "model.onnx", params=merged)
    want = np.asarray(pipe.model.apply(merged, **feed)["logits"])
    np.testing.assert_allclose(_ort(out, feed)["logits"], want, atol=ORT_ATOL, rtol=0)
    assert np.abs(want - np.asarray(pipe.model(**feed)["logits"])).max() > 1e-3
    with pytest.raises(transmuter.InputError, match="not float32 MatMul/Gemm weights"):
        training.lora(pipe, targets=["classifier.bias"])
    from transmuter.training.lora import adapters as lora_adapters
    with pytest.raises(transmuter.InputError, match="fp32 export"):
        lora_adapters(transmuter.load(FIXTURES / "bert" / "onnx" / "model_q4.onnx"))
