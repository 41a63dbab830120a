"""engine/passes/past_mask.py: a merged decoder without a mask on a padded past buffer gives
onnxruntime's outputs on the unpadded past, for every merged-decoder fixture the rewrite applies
to; the others keep their growing cache and say why at DEBUG."""

import json
import logging

import numpy as np
import onnxruntime as ort
import pytest

import transmuter
from transmuter.engine.passes.past_mask import PAST_LENGTH
from transmuter.generation.cache import CacheLayout, on_buffer

from .fixtures import ROOT

EXTRA = ("encoder_hidden_states", "encoder_attention_mask")
# (fixture, decoder file): the merged decoders (and split pairs' with-past graphs) whose cache
# grows, and whether the rewrite applies
APPLIES = [("whisper", "decoder_model_merged.onnx"),
           ("whisper", "decoder_model_merged_quantized.onnx"),
           ("whisper", "decoder_model_merged_fp16.onnx"),
           ("whisper-opset14", "decoder_model_merged.onnx"),
           ("whisper-timestamped", "decoder_model_merged.onnx"),
           ("whisper-split", "decoder_with_past_model.onnx"),
           ("bart", "decoder_model_merged.onnx"),
           ("marian", "decoder_model_merged.onnx"),
           ("trocr", "decoder_model_merged.onnx"),
           ("vision-encoder-decoder", "decoder_model_merged.onnx"),
           ("florence2", "decoder_model_merged.onnx")]  # its pasts wrapped in 1-input Concats
# positions from relative buckets (T5), rotary angles (Moonshine), a mask's running count
# added to the past's length (NLLB's M2M100 positions)
KEEPS_GROWING = [("t5", "decoder_model_merged.onnx"),
                 ("t5-split", "decoder_with_past_model.onnx"),
                 ("moonshine", "decoder_model_merged.onnx"),
                 ("nllb", "decoder_model_merged.onnx")]


def _load(fixture, name):
    model = transmuter.load(ROOT / fixture / "onnx" / name)
    split = name.startswith("decoder_with_past")
    layout = CacheLayout.from_model(model, extra_inputs=EXTRA, split=split)
    config = json.loads((ROOT / fixture / "config.json").read_text())
    return model, layout, config.get("decoder") or config.get("text_config") or config


def _feed(model, layout, config, rows, past, width, rng):
    """Inputs of one step with ``past`` valid rows: random pasts, states and tokens."""
    infos = {v.name: v for v in model.inputs}
    hidden_size = config.get("d_model") or config.get("hidden_size")
    feed = {"input_ids": rng.integers(0, 20, (rows, width)).astype(np.int64)}
    if "input_ids" not in infos:  # Florence-2's decoder takes embeddings
        feed = {"inputs_embeds": rng.standard_normal((rows, width, hidden_size))}
    cross = 7
    if "encoder_hidden_states" in infos:
        info = infos["encoder_hidden_states"]
        hidden = info.shape[2] if isinstance(info.shape[2], int) else hidden_size
        feed["encoder_hidden_states"] = rng.standard_normal((rows, cross, hidden))
    if "encoder_attention_mask" in infos:
        feed["encoder_attention_mask"] = np.ones((rows, cross), np.int64)
    if "use_cache_branch" in infos:
        feed["use_cache_branch"] = np.array([True])
    for name, zeros in layout.empty(rows, past, config, cross_length=cross).items():
        feed[name] = rng.standard_normal(zeros.shape)
    return {k: v.astype(infos[k].dtype) if k in infos else v for k, v in feed.items()}


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture, name", APPLIES, ids=[f"{f}/{n}" for f, n in APPLIES])
def test_a_padded_past_gives_onnxruntime_outputs_on_the_unpadded_one(fixture, name, backend):
    if backend == "mlx" and name != "decoder_model_merged.onnx":
        pytest.skip("one file per fixture on MLX: the rewrite is the same graph change")
    model, layout, config = _load(fixture, name)
    buffered = on_buffer(model, layout)
    assert buffered is not model and PAST_LENGTH in {v.name for v in buffered.inputs}
    session = ort.InferenceSession(str(ROOT / fixture / "onnx" / name),
                                   providers=["CPUExecutionProvider"])
    if backend == "mlx":
        buffered = on_buffer(transmuter.load(ROOT / fixture / "onnx" / name, backend="mlx"),
                             layout)
    fn = transmuter.compile(buffered, cache_size=4)
    rng = np.random.default_rng(0)
    half = "fp16" in name
    for past, capacity, width in [(5, 8, 1), (3, 16, 2), (1, 4, 3)]:
        feed = _feed(model, layout, config, 2, past, width, rng)
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        padded = dict(feed)
        for info, _ in layout.pairs:  # the valid rows first, then garbage the mask must hide
            extra = 1e3 * rng.standard_normal(feed[info.name].shape[:2] +
                                              (capacity - past,) + feed[info.name].shape[3:])
            padded[info.name] = np.concatenate([feed[info.name], extra.astype(info.dtype)], 2)
        padded[PAST_LENGTH] = np.array(past, np.int64)
        got = fn(padded)
        # XLA's and onnxruntime's float32 sums run in another order: ~1e-6 on these tiny
        # models; half graphs round each op to 1e-3 relative on both sides
        tol = 2e-2 if half else 1e-4
        np.testing.assert_allclose(np.asarray(got["logits"], np.float32),
                                   expected["logits"].astype(np.float32), rtol=tol, atol=tol)
        for _, present in layout.pairs:  # the step's new rows, after the buffer
            np.testing.assert_allclose(
                np.asarray(got[present], np.float32)[:, :, capacity:],
                expected[present].astype(np.float32)[:, :, past:], rtol=tol, atol=tol)


@pytest.mark.parametrize("fixture, name", KEEPS_GROWING,
                         ids=[f"{f}/{n}" for f, n in KEEPS_GROWING])
def test_a_graph_it_cannot_mask_keeps_its_growing_cache_and_says_why(fixture, name, caplog):
    model, layout, _ = _load(fixture, name)
    with caplog.at_level(logging.DEBUG, logger="transmuter.generation.cache"):
        assert on_buffer(model, layout) is model
    assert "grows a row a step" in caplog.text and "cannot run on a masked buffer" in caplog.text


_COMPILES = []  # XLA compiles of this process (backend compiles: each jit's first call)


def _count_compiles():
    import jax.monitoring

    if not _COMPILES:
        _COMPILES.append(0)
        jax.monitoring.register_event_duration_secs_listener(
            lambda event, secs, **_: _COMPILES.append(secs)
            if event == "/jax/core/compile/backend_compile_duration" else None)
    return len(_COMPILES)


def _whisper(backend="jax"):
    from transmuter.generation.seq2seq import Seq2SeqGenerator

    folder = ROOT / "whisper" / "onnx"
    config = json.loads((ROOT / "whisper" / "config.json").read_text())
    encoder = transmuter.load(folder / "encoder_model.onnx", backend=backend, compile_cache=False)
    decoder = transmuter.load(folder / "decoder_model_merged.onnx", backend=backend,
                              compile_cache=False)
    features = np.random.default_rng(1).standard_normal((1, 16, 100)).astype(np.float32) * 3
    return Seq2SeqGenerator(encoder, decoder, config), {"input_features": features}


def _onnxruntime_steps(features, prompt, steps):
    """onnxruntime's greedy decode of the whisper fixture on its growing past: the logits of
    the prompt's last token and of each step's token."""
    folder = ROOT / "whisper" / "onnx"
    options = dict(providers=["CPUExecutionProvider"])
    encoder = ort.InferenceSession(str(folder / "encoder_model.onnx"), **options)
    decoder = ort.InferenceSession(str(folder / "decoder_model_merged.onnx"), **options)
    states = encoder.run(None, features)[0]
    names = [o.name for o in decoder.get_outputs()]
    pasts = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
             for i in decoder.get_inputs() if i.name.startswith("past_key_values.")}
    ids, first, out = np.array([prompt], np.int64), True, []
    for _ in range(steps + 1):
        got = dict(zip(names, decoder.run(None, {"input_ids": ids, "encoder_hidden_states": states,
                                                 "use_cache_branch": np.array([not first]),
                                                 **pasts})))
        for name in pasts:
            present = got[name.replace("past_key_values.", "present.")]
            if first or ".decoder." in name:  # cross-attention pasts: the first call's
                pasts[name] = present
        first = False
        out.append(got["logits"][0, -1])
        ids = np.array([[int(np.argmax(out[-1]))]], np.int64)
    return out


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_whisper_decodes_as_onnxruntime_on_a_growing_bucketed_buffer(backend, monkeypatch):
    """40 greedy steps, each step's logits against onnxruntime's on the unpadded past; small
    buffers (16, 24, 32, 48 rows) so the decode moves through several of them."""
    from transmuter.generation import steppers

    monkeypatch.setattr(steppers, "MIN_CAPACITY", 16)
    gen, features = _whisper(backend)
    assert gen.decoder.buffered
    prompt = [317, 318, 319, 320]
    expected = _onnxruntime_steps(features, prompt, 40)
    stepper = gen.decoder.stepper([prompt], 40, gen._extra(gen.encode(features)))
    logits, capacities = stepper.start(), set()
    for step in range(41):
        # XLA's float32 sums in another order than onnxruntime's: ~1e-6 on this tiny model
        np.testing.assert_allclose(logits[0], expected[step], rtol=1e-4, atol=1e-4,
                                   err_msg=f"step {step}")
        if step < 40:
            logits = stepper.step(np.array([int(np.argmax(expected[step]))]))
            capacities.add(stepper._length(0))
    assert capacities == {16, 24, 32, 48}


def test_whisper_40_tokens_compile_a_handful_of_shapes():
    """A 40-token decode compiles the encoder, the prompt, one step shape and the buffer's
    write helpers: 8 XLA compiles, where the growing cache compiled a step per token (41)."""
    from transmuter.generation.config import GenerationConfig

    gen, features = _whisper()
    before = _count_compiles()
    config = GenerationConfig(max_new_tokens=40, min_new_tokens=40, eos_token_id=[316])
    out = gen.generate([[317, 318, 319, 320]], config, gen.encode(features))
    assert len(out[0]) == 40
    assert gen.decoder.fn.cache_info().misses == 1  # every step: one buffer of 64 rows
    assert _count_compiles() - before <= 10


def _sliced_positions_decoder(path):
    """A one-layer decoder as older exports wrote positions: ``embed_positions.weight[past :
    past + S]`` (a Slice of the table by the past's length), and a causal mask from Ranges."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    d, vocab, table = 8, 11, 32
    weights = {"tok": rng.standard_normal((vocab, d)), "pos": rng.standard_normal((table, d)),
               "wq": rng.standard_normal((d, d)), "wk": rng.standard_normal((d, d)),
               "wv": rng.standard_normal((d, d)), "wo": rng.standard_normal((d, vocab)),
               "two": np.array([2]), "one": np.array([1]), "zero": np.array(0),
               "axis0": np.array([0]), "axis1": np.array([1]), "neg": np.array(-1e9),
               "nil": np.array(0.0), "scale": np.array(d ** -0.5)}
    inits = [numpy_helper.from_array(v.astype(np.float32) if v.dtype == np.float64 else v, k)
             for k, v in weights.items()]
    n = helper.make_node
    nodes = [
        n("Gather", ["tok", "input_ids"], ["emb"]),
        n("Shape", ["past_key_values.0.key"], ["pshape"]),
        n("Gather", ["pshape", "two"], ["p1"]), n("Squeeze", ["p1"], ["p"]),
        n("Shape", ["input_ids"], ["ishape"]),
        n("Gather", ["ishape", "one"], ["s1"]), n("Squeeze", ["s1"], ["s"]),
        n("Add", ["p", "s"], ["ps"]),
        n("Unsqueeze", ["p", "axis0"], ["starts"]), n("Unsqueeze", ["ps", "axis0"], ["ends"]),
        n("Slice", ["pos", "starts", "ends", "axis0"], ["positions"]),
        n("Add", ["emb", "positions"], ["h"]),
        *[n("MatMul", ["h", f"w{x}"], [f"{x}0"]) for x in "qkv"],
        *[n("Unsqueeze", [f"{x}0", "axis1"], [x]) for x in "qkv"],
        n("Concat", ["past_key_values.0.key", "k"], ["present.0.key"], axis=2),
        n("Concat", ["past_key_values.0.value", "v"], ["present.0.value"], axis=2),
        n("Transpose", ["present.0.key"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["raw"]), n("Mul", ["raw", "scale"], ["scores0"]),
        n("Range", ["zero", "ps", "one_scalar"], ["keys"]),
        n("Range", ["p", "ps", "one_scalar"], ["queries"]),
        n("Unsqueeze", ["keys", "axis0"], ["keys2"]), n("Unsqueeze", ["queries", "axis1"],
                                                        ["queries2"]),
        n("LessOrEqual", ["keys2", "queries2"], ["allowed"]),
        n("Where", ["allowed", "nil", "neg"], ["mask"]),
        n("Add", ["scores0", "mask"], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "present.0.value"], ["att"]),
        n("Squeeze", ["att", "axis1"], ["att3"]),
        n("MatMul", ["att3", "wo"], ["logits"]),
    ]
    inits.append(numpy_helper.from_array(np.array(1, np.int64), "one_scalar"))
    past = ["batch", 1, "past", d]
    graph = helper.make_graph(
        nodes, "decoder", [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                         ["batch", "seq"]),
                           helper.make_tensor_value_info("past_key_values.0.key",
                                                         TensorProto.FLOAT, past),
                           helper.make_tensor_value_info("past_key_values.0.value",
                                                         TensorProto.FLOAT, past)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, None)], inits)
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_positions_sliced_from_a_table_count_from_the_valid_rows(tmp_path):
    path = tmp_path / "decoder.onnx"
    _sliced_positions_decoder(path)
    model = transmuter.load(path)
    layout = CacheLayout.from_model(model)
    buffered = on_buffer(model, layout)
    assert buffered is not model
    assert any(n.op_type == "PastSlice" for n in buffered.graph.nodes)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fn = transmuter.compile(buffered)
    rng = np.random.default_rng(0)
    for past, capacity, width in [(5, 8, 1), (3, 16, 2)]:
        feed = {"input_ids": rng.integers(0, 11, (2, width)),
                **{f"past_key_values.0.{x}": rng.standard_normal((2, 1, past, 8))
                   .astype(np.float32) for x in ("key", "value")}}
        expected = session.run(["logits"], feed)[0]
        padded = {k: np.concatenate([v, 1e3 * np.ones((2, 1, capacity - past, 8), np.float32)],
                                    2) if k.startswith("past") else v for k, v in feed.items()}
        got = fn({**padded, PAST_LENGTH: np.array(past, np.int64)})
        # float32 sums in another order than onnxruntime's: ~1e-6 on 8-wide products
        np.testing.assert_allclose(np.asarray(got["logits"]), expected, rtol=1e-4, atol=1e-4)
