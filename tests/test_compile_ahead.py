"""engine/compile_ahead.py: the shapes a call will certainly run next compile in a background
thread. With it on, the caller's thread compiles fewer times, every shape compiled ahead is later
used, and the outputs are exactly those with it off; off (the option, the env var) and on MLX it
does nothing; a compile that fails in the worker leaves the results as they were.

Compiles are counted per thread by JAX's own event (backend_compile_duration, sent from the
compiling thread). Both runs of a comparison compute the same shapes on the same backend, so
equal outputs are exact (the same executables of the same modules)."""

import json
import threading

import jax
import numpy as np
import pytest

import transmuter
from transmuter.engine import compile_ahead
from transmuter.generation import steppers
from transmuter.generation.config import GenerationConfig

from .fixtures import ROOT

_THREADS = []  # the thread of each XLA compile of a graph segment since the first count


def _compiles_by_thread():
    if not _THREADS:
        _THREADS.append(None)
        jax.monitoring.register_event_duration_secs_listener(_record)
    return len(_THREADS)


def _record(event, secs, fun_name="", **_):
    # the graph's segments (engine/compiled.py), not the cache helpers or eager ops, whose
    # process-wide caches the first run of a comparison fills
    if event == "/jax/core/compile/backend_compile_duration" and "segment" in fun_name:
        _THREADS.append(threading.current_thread().name)


def _caller_compiles(since):
    return sum(1 for name in _THREADS[since:] if name != "transmuter-compile-ahead")


def _whisper(backend="jax", ahead=None):
    from transmuter.generation.seq2seq import Seq2SeqGenerator

    folder = ROOT / "whisper" / "onnx"
    config = json.loads((ROOT / "whisper" / "config.json").read_text())
    options = dict(backend=backend, compile_cache=False, compile_ahead=ahead)
    encoder = transmuter.load(folder / "encoder_model.onnx", **options)
    decoder = transmuter.load(folder / "decoder_model_merged.onnx", **options)
    return Seq2SeqGenerator(encoder, decoder, config)


def _whisper_tokens(ahead, backend="jax"):
    """21 tokens of the whisper fixture by beam search (2 beams, as the Whisper pipeline's
    default 5) on buffers of 16 and 24 rows (the prompt's call, then steps through two
    buffers); (sequences, the decoder's compiled step, compiles on the caller's thread)."""
    gen = _whisper(backend, ahead)
    features = np.random.default_rng(1).standard_normal((1, 16, 100)).astype(np.float32) * 3
    since = _compiles_by_thread()
    config = GenerationConfig(max_new_tokens=21, min_new_tokens=21, eos_token_id=[316],
                              num_beams=2)
    out = gen.beam_search([[317, 318, 319, 320]], config,
                          gen.encode({"input_features": features}))
    return out, gen.decoder.fn, _caller_compiles(since)


@pytest.fixture
def small_buffers(monkeypatch):
    monkeypatch.setattr(steppers, "MIN_CAPACITY", 16)


def test_a_generation_across_buffers_compiles_its_steps_ahead(small_buffers):
    off, fn_off, caller_off = _whisper_tokens(False)
    on, fn_on, caller_on = _whisper_tokens(True)
    assert on == off and len(on[0][0][0]) == 21
    assert fn_off.ahead_info().started == 0 and fn_off.cache_info().misses == 2
    # the first step (16 rows) while the prompt runs, the 24-row one from 8 rows filled
    assert fn_on.ahead_info() == (2, 2, 0)  # started, used, failed: nothing compiled unused
    assert fn_on.cache_info().misses == 2  # a compile ahead is a compile: none twice
    assert caller_on == caller_off - 2


def test_mlx_compiles_nothing_ahead(small_buffers):
    pytest.importorskip("mlx.core")
    off, _, _ = _whisper_tokens(False, backend="mlx")
    on, fn, _ = _whisper_tokens(True, backend="mlx")
    assert on == off and fn.ahead_info().started == 0


# 66 tokens run as chunks of 64 and 2 (buckets.prompt_chunks), then steps of 1 token
PROMPT = [int(i) for i in np.random.default_rng(0).integers(3, 700, 66)]
CONFIG = GenerationConfig(max_new_tokens=4, min_new_tokens=4, eos_token_id=[2])


def _llama_tokens(ahead):
    """(tokens, the compiled decoder, compiles on the caller's thread)."""
    from transmuter.generation.loop import Generator

    model = transmuter.load(ROOT / "llama" / "onnx" / "model.onnx", compile_cache=False,
                            compile_ahead=ahead)
    gen = Generator(model, json.loads((ROOT / "llama" / "config.json").read_text()))
    since = _compiles_by_thread()
    return gen.generate([PROMPT], CONFIG), gen.fn, _caller_compiles(since)


@pytest.fixture(scope="module")
def llama_off():
    return _llama_tokens(False)


def test_a_chunked_prompt_compiles_its_next_chunk_and_step_ahead(llama_off):
    off, _, caller_off = llama_off
    on, fn, caller_on = _llama_tokens(True)
    assert on == off and len(on[0]) == 4
    assert fn.ahead_info() == (2, 2, 0)  # the 2-token chunk and the step
    assert caller_on == caller_off - 2


def test_a_failed_compile_in_the_worker_leaves_the_results(llama_off, monkeypatch):
    def fails(self):
        raise RuntimeError("no compile today")

    # jit's own calls compile through other paths: only compiles from a lowering fail
    monkeypatch.setattr(jax.stages.Lowered, "compile", fails)
    on, fn, _ = _llama_tokens(True)
    assert on == llama_off[0]
    assert fn.ahead_info() == (2, 0, 2)


def _bert_feed(length):
    return {"input_ids": np.ones((2, length), np.int64),
            "attention_mask": np.ones((2, length), np.int64),
            "token_type_ids": np.zeros((2, length), np.int64)}


def test_the_option_and_the_env_var_turn_it_off(monkeypatch):
    model = transmuter.load(ROOT / "bert-sentence-transformers" / "onnx" / "model.onnx",
                            compile_cache=False)
    feed = {k: v for k, v in _bert_feed(16).items() if k in {i.name for i in model.inputs}}
    assert transmuter.compile(model, compile_ahead=False).compile_ahead(feed) is False
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert transmuter.compile(model).compile_ahead(feed) is False
    monkeypatch.delenv(compile_ahead.ENV)  # the default follows the cores
    monkeypatch.setattr(compile_ahead, "cores", lambda: 2)
    assert transmuter.compile(model).compile_ahead(feed) is False
    monkeypatch.setattr(compile_ahead, "cores", lambda: 8)
    assert compile_ahead.enabled()
    monkeypatch.setenv(compile_ahead.ENV, "1")
    fn = transmuter.compile(model)
    assert fn.compile_ahead(feed) is True
    assert fn.compile_ahead(feed) is False  # requested already: once
    assert set(fn(feed)) == {o.name for o in model.outputs}
    assert fn.ahead_info() == (1, 1, 0)
    with pytest.raises(transmuter.InputError, match="compile_ahead must be"):
        transmuter.load(ROOT / "llama" / "onnx" / "model.onnx", compile_ahead="yes")


WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()


def _sentences(n):
    """``n`` sentences of 1 to 40 words: several length buckets in each read-ahead window."""
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + (i * 11) % 40))
            for i in range(n)]


def _stream(ahead):
    from transmuter.pipelines import shared

    # buckets given (the default ones): each pads to its own (the default buckets would pad
    # to the compiled 24 instead, buckets.pad_or_compile: one shape, nothing to compile ahead)
    pipe = transmuter.pipeline("text-embedding", ROOT / "bert-sentence-transformers",
                               batch_size=4, compile_ahead=ahead, compile_cache=False,
                               sequence_length=[16, 20, 24])
    since = _compiles_by_thread()
    out = list(pipe(iter(_sentences(80))))  # windows of 64 (16 batches), then the rest
    return np.array(out), shared.of(pipe.model)["compiled"], _caller_compiles(since)


def test_a_stream_compiles_its_next_length_buckets_ahead():
    off, fn_off, caller_off = _stream(False)
    on, fn, caller_on = _stream(True)
    np.testing.assert_array_equal(on, off)  # the same executables of the same modules
    started, used, failed = fn.ahead_info()
    assert started >= 2 and used == started and failed == 0  # nothing compiled unused
    assert fn.cache_info().misses == fn_off.cache_info().misses
    assert caller_on == caller_off - started


def test_a_call_inside_jit_does_not_take_the_executable_compiled_ahead():
    # jit's Compiled takes concrete arrays only: traced inputs compile the shape as usual
    model = transmuter.load(ROOT / "bert-sentence-transformers" / "onnx" / "model.onnx",
                            compile_cache=False, checks=False, compile_ahead=True)
    feed = {k: v for k, v in _bert_feed(16).items() if k in {i.name for i in model.inputs}}
    fn = transmuter.compile(model)
    assert fn.compile_ahead(feed)
    direct = fn(feed)
    with jax.enable_x64(True):
        traced = jax.jit(lambda f: fn(f))(feed)
    assert fn.ahead_info() == (1, 1, 0)
    for name in direct:  # XLA fuses the jitted whole differently: float32 sums, ~1e-7
        np.testing.assert_allclose(np.asarray(traced[name]), np.asarray(direct[name]),
                                   rtol=1e-5, atol=1e-6)
