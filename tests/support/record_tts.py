"""Text-to-speech references in full: transformers' text-to-speech pipeline on the vits and
speecht5 fixtures' PyTorch models, its waveforms stored whole (float32, .npz beside the json).

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_tts.py [vits speecht5]

Each model is rebuilt as families_vision_audio.py built it (the fixture's config.json, the same
seeds and perturbation) and checked against onnxruntime on the committed ONNX files before
anything is written: the VITS graph on every case's ids, SpeechT5's three graphs in a greedy loop
(the stop rule of generate_speech) against generate_speech. Writes, per fixture,
references/pipeline_text-to-speech.json and references/pipeline_text-to-speech.npz:

    {"task": "text-to-speech", "audio_file": "references/pipeline_text-to-speech.npz",
     "cases": [{"name": ..., "text": ..., "call_kwargs": {...}, "audio": "<npz key>",
                "sampling_rate": 16000, "via": "pipeline" | "generate_speech"}]}

A call_kwargs value "references/speaker_embeddings.npy" stands for that array (the pipeline was
given it as a [1, 16] tensor). noise_scale = noise_scale_duration = 0 in the VITS config, so its
outputs are deterministic.

SpeechT5's decoder prenet applies dropout even in eval, and its rate is 0 in the fixture. The
exported graph (optimum's SpeechT5ModelPatcher, as in Xenova/speecht5_tts) keeps a unit where
``rand > p``: all of them at p = 0. transformers' own ``_consistent_dropout`` keeps a unit where
``bernoulli(p)`` is 1: none of them at p = 0, so the prenet's layers are dropped whole, and its
waveforms differ from the graph's by ~1% of their scale (1.4e-4 on a 0.01 amplitude, measured;
``transformers_as_is_vs_onnxruntime`` in the json). The references are recorded with the dropout
off as the graph has it (``prenet_dropout_off``: the layers kept whole); onnxruntime then equals
torch within ~4e-9.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import families_vision_audio as fva  # noqa: E402  (sets the offline env, one torch thread)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

SPEAKER = "references/speaker_embeddings.npy"
# onnxruntime and the torch model run the same float32 graph in other op orders: 1e-4 is far
# above their measured gap (~1e-6) and far below what another model's weights would give.
SAME_MODEL = 1e-4

VITS_CASES = [  # (name, text)
    ("hello", "hello world"),
    ("cat", "the cat sat"),
    ("punctuation", "Hello, World! How are you?"),
    ("uppercase", "THE CAT SAT ON THE MAT"),
    ("not_in_vocabulary", "café au lait 42"),
    ("long", "the quick brown fox jumps over the lazy dog while the rain in spain stays mainly "
             "in the plain"),
]
# (name, text, forward_params besides speaker_embeddings). The tiny model's stop probabilities sum
# to ~0.82 per step, so threshold 0.5 stops at the first step; minlenratio and a threshold it
# never meets with maxlenratio make longer spectrograms (kept short: each decoder step of a new
# length compiles anew on JAX).
SPEECHT5_CASES = [
    ("hello", "hello world", {}),
    ("minlenratio", "hello world", {"minlenratio": 0.4}),
    ("maxlenratio", "hello world", {"threshold": 0.95, "maxlenratio": 0.7}),
    ("punctuation", "Hello, World!", {}),
    ("not_in_vocabulary", "café 42", {}),
    ("long", "the quick brown fox jumps over the lazy dog", {"threshold": 0.95,
                                                             "maxlenratio": 0.15}),
]


def rebuild_vits(fx):
    cfg = transformers.VitsConfig.from_pretrained(fx)
    fva.seed(0)
    model = fva.perturb(transformers.VitsModel(cfg).eval(), scale=0.02)  # as build_vits
    return model, transformers.VitsTokenizer.from_pretrained(fx)


def rebuild_speecht5(fx):
    cfg = transformers.SpeechT5Config.from_pretrained(fx)
    fva.seed(0)
    model = fva.perturb(transformers.SpeechT5ForTextToSpeech(cfg).eval())  # as build_speecht5
    fva.seed(1)
    vocoder = fva.perturb(transformers.SpeechT5HifiGan(
        transformers.SpeechT5HifiGanConfig.from_pretrained(fx / "vocoder")).eval())
    return model, vocoder, transformers.SpeechT5Tokenizer.from_pretrained(fx)


@contextlib.contextmanager
def prenet_dropout_off():
    """SpeechT5's prenet dropout at p = 0 as the exported graph computes it: no unit dropped."""
    prenet = transformers.models.speecht5.modeling_speecht5.SpeechT5SpeechDecoderPrenet
    original = prenet._consistent_dropout
    prenet._consistent_dropout = lambda self, x, p: x if p == 0 else original(self, x, p)
    try:
        yield
    finally:
        prenet._consistent_dropout = original


def gap_of(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")


def check(what, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise SystemExit(f"{what}: onnxruntime gives {got.shape}, torch {want.shape}")
    gap = gap_of(got, want)
    if gap > SAME_MODEL:
        raise SystemExit(f"{what}: onnxruntime and the rebuilt torch model differ by {gap}")
    return gap


def record_vits():
    fx = fva.FIXTURES / "vits"
    model, tok = rebuild_vits(fx)
    sess = fva.session(fx / "onnx/model.onnx")
    pipe = transformers.pipeline("text-to-speech", model=model, tokenizer=tok, device="cpu")
    cases, arrays, gaps = [], {}, []
    for name, text in VITS_CASES:
        out = pipe(text)
        ort = sess.run(["waveform"], fva.cast_feeds(sess, dict(tok(text, return_tensors="np"))))
        gaps.append(check(f"vits {name}", ort[0], out["audio"]))
        arrays[name] = out["audio"].astype(np.float32)
        cases.append({"name": name, "text": text, "call_kwargs": {}, "audio": name,
                      "sampling_rate": out["sampling_rate"], "via": "pipeline"})
    return fx, cases, arrays, ("pipeline('text-to-speech', model=VitsModel, tokenizer="
                               "VitsTokenizer)(text): audio float32 [1, samples]"), max(gaps)


def ort_speech(fx, ids, speaker, threshold=0.5, minlenratio=0.0, maxlenratio=20.0):
    """generate_speech's loop over the three committed graphs in onnxruntime."""
    enc, dec, post = (fva.session(fx / f"onnx/{n}.onnx") for n in
                      ("encoder_model", "decoder_model_merged", "decoder_postnet_and_vocoder"))
    eo = fva.run(enc, {"input_ids": ids})
    length = eo["encoder_outputs"].shape[1]
    maxlen, minlen = int(length * maxlenratio / 2), int(length * minlenratio / 2)
    feeds = {"output_sequence": np.zeros((1, 1, 16), np.float32), "speaker_embeddings": speaker,
             "encoder_hidden_states": eo["encoder_outputs"],
             "encoder_attention_mask": eo["encoder_attention_mask"],
             "use_cache_branch": np.array([False]), **fva.empty_past(dec, 1)}
    spectra, step = [], 0
    while True:
        step += 1
        out = fva.run(dec, feeds)
        spectra.append(out["spectrum"])
        for name, value in out.items():
            if name.startswith("present") and not (step > 1 and ".encoder." in name):
                feeds[name.replace("present", "past_key_values", 1)] = value
        feeds["output_sequence"], feeds["use_cache_branch"] = out["output_sequence_out"], \
            np.array([True])
        if step >= minlen and (step >= maxlen or out["prob"].sum() >= threshold):
            break
    return fva.run(post, {"spectrogram": np.concatenate(spectra)})["waveform"]


def record_speecht5():
    fx = fva.FIXTURES / "speecht5"
    model, vocoder, tok = rebuild_speecht5(fx)
    speaker = np.load(fx / SPEAKER)
    pipe = transformers.pipeline("text-to-speech", model=model, tokenizer=tok, vocoder=vocoder,
                                 device="cpu")
    cases, arrays, gaps, as_is = [], {}, [], []
    for name, text, options in SPEECHT5_CASES:
        forward = {"speaker_embeddings": torch.tensor(speaker), **options}
        ids = tok(text, return_tensors="np")["input_ids"]
        graph = ort_speech(fx, ids, speaker, **options)
        as_is.append(gap_of(graph, pipe(text, forward_params=forward)["audio"]))
        with prenet_dropout_off():
            out = pipe(text, forward_params=forward)
        gaps.append(check(f"speecht5 {name}", graph, out["audio"]))
        arrays[name] = out["audio"].astype(np.float32)
        cases.append({"name": name, "text": text, "via": "pipeline", "audio": name,
                      "call_kwargs": {"forward_params": {"speaker_embeddings": SPEAKER,
                                                         **options}},
                      "sampling_rate": out["sampling_rate"]})
    for name, text, options in SPEECHT5_CASES[:3]:  # the model's own entry point, same loop
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad(), prenet_dropout_off():
            speech = model.generate_speech(ids, torch.tensor(speaker), vocoder=vocoder, **options)
        key = f"generate_speech_{name}"
        arrays[key] = speech.numpy().astype(np.float32)
        cases.append({"name": key, "text": text, "via": "generate_speech", "audio": key,
                      "call_kwargs": {"speaker_embeddings": SPEAKER, **options},
                      "sampling_rate": vocoder.config.sampling_rate})
    how = ("pipeline('text-to-speech', model=SpeechT5ForTextToSpeech, tokenizer=SpeechT5Tokenizer,"
           " vocoder=SpeechT5HifiGan)(text, forward_params={...}): audio float32 [samples]; "
           "'generate_speech' cases: model.generate_speech(input_ids, speaker_embeddings, "
           "vocoder=vocoder, **options); both with prenet_dropout_off() (see record_tts.py)")
    extra = {"transformers_as_is_vs_onnxruntime": max(as_is)}
    return fx, cases, arrays, how, max(gaps), extra


def write(fx, cases, arrays, how, gap, extra=None):
    rel = "references/pipeline_text-to-speech.npz"
    fva.save_npz(fx / rel, arrays)
    fva.save_json(fx / "references" / "pipeline_text-to-speech.json", {
        "task": "text-to-speech", "how_made": how + f"; transformers {transformers.__version__}, "
        f"torch {torch.__version__}", "audio_file": rel,
        "onnxruntime_vs_torch_max_abs": gap, **(extra or {}), "cases": cases})
    print(f"{fx.name}: {len(cases)} cases, onnxruntime vs torch max |diff| {gap:.2e}")


RECORDERS = {"vits": record_vits, "speecht5": record_speecht5}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(RECORDERS):
        write(*RECORDERS[name]())
