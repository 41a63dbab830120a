"""A fresh process's first Whisper transcription (issue #44's warm-cache first call): it compiles
the graphs' shapes and the cache helpers, and nothing per array it moves or zeroes; a language
detection that takes one token leaves its cache unbuffered."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import transmuter

from .fixtures import ROOT

# The child: the pipeline's defaults (language detection, 5 beams), every XLA compile's name
# (jax_log_compiles' "Compiling jit(name) ...") printed as JSON.
CHILD = textwrap.dedent("""
    import json, logging, sys
    import jax
    import numpy as np
    import transmuter

    names = []

    class Names(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Compiling "):
                names.append(message.split()[1])

    jax.config.update("jax_log_compiles", True)
    logging.getLogger("jax").addHandler(Names())
    logging.getLogger("jax").propagate = False
    pipe = transmuter.pipeline("automatic-speech-recognition", sys.argv[1])
    clip = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
    pipe({"raw": clip, "sampling_rate": 16000}, max_new_tokens=8, min_new_tokens=8)
    print(json.dumps(names))
""")


def test_a_first_transcription_compiles_shapes_and_helpers_only():
    """10 compiles: the compiler-option probe, the encoder, the decoder's detection, prompt and
    step shapes, and the cache helpers (place, take for the beams' rows and cross states and a
    step's reorder, write). Before: 17, the 7 more eager (jnp.asarray's identity per shape,
    jnp.zeros' broadcast and cast, a second probe, a buffer for the one-token detection), none
    of them kept by the persistent cache: ~0.5 s of whisper-tiny's warm-cache first call."""
    env = dict(os.environ, TRANSMUTER_COMPILE_CACHE="0")
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "whisper")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    names = json.loads(done.stdout.strip().splitlines()[-1])
    eager = [n for n in names if n in ("jit(stage)", "jit(broadcast_in_dim)",
                                       "jit(convert_element_type)")]
    assert not eager, names
    assert names.count("jit(segment)") == 4, names  # encoder; detection, prompt, step
    assert len(names) <= 10, names


def test_a_one_token_generation_keeps_its_cache_unbuffered():
    """Language detection (one new token, no step after the prompt) leaves the prompt's presents
    as they are: no zero buffer, no `place` compile for that prompt length; a step that comes
    after all the same finds them moved into a buffer."""
    from transmuter.generation.seq2seq import Seq2SeqGenerator

    folder = ROOT / "whisper" / "onnx"
    config = json.loads((ROOT / "whisper" / "config.json").read_text())
    encoder = transmuter.load(folder / "encoder_model.onnx", compile_cache=False)
    decoder = transmuter.load(folder / "decoder_model_merged.onnx", compile_cache=False)
    gen = Seq2SeqGenerator(encoder, decoder, config)
    assert gen.decoder.buffered
    features = np.random.default_rng(1).standard_normal((1, 16, 100)).astype(np.float32)
    extra = gen._extra(gen.encode({"input_features": features}))
    with decoder.backend.scope():
        one = gen.decoder.stepper([[317]], 1, extra)
        one.start()
        assert one._length(0) == 1  # the presents themselves: one row
        two = gen.decoder.stepper([[317]], 2, extra)
        two.start()
        assert two._length(0) == 64  # a buffer, as before
        one.step(np.array([318]))  # past its budget, yet it runs: moved into a buffer
        assert one._length(0) == 64

