"""Whisper speech recognition, real-time factor end to end: Transmuter vs an onnxruntime loop over
the same files vs transformers on PyTorch, on Whisper-tiny- and -base-sized models of
bench/_asr_models.py (random weights, the real tokenizer and processor files).

    python bench/asr.py [--models whisper-tiny,whisper-base] [--batch 1,4] [--tokens 64]
                        [--repeat 2] [--base-repeat 1] [--backend jax|mlx] [--no-torch]
                        [--beams 1] [--profile] [--jax-cache DIR]

A pass at batch B transcribes B recordings of 60 s (slices of tests/fixtures/speech/long.flac,
given as ``{"raw": samples, "sampling_rate": 16000}``) with ``chunk_length_s=30`` (the default
stride of 5 s: 3 windows a recording, so batch 1 runs 3 windows one by one and batch 4 runs 12 in
batches of 4), timed whole: features, encoder, decoding, merging the windows' texts. RTF =
seconds of compute / seconds of audio (lower is faster); the ratios are speed ratios (peer's RTF /
Transmuter's: above 1 means Transmuter is faster).

Every system decodes greedily (num_beams=1), language en, task transcribe, no timestamps, and
exactly --tokens tokens per window: a random model would stop anywhere, so eos is held off
(``min_new_tokens = max_new_tokens``) and every system runs the same number of decoder steps.
``--beams 5`` measures the pipelines' default instead (transformers' ASR pipeline and ours both
default to ``num_beams=5``): Transmuter against transformers only, the onnxruntime loop being
greedy.

- Transmuter: ``transmuter.pipeline("automatic-speech-recognition", folder, variant="fp32")``,
  called with ``batch_size=B, chunk_length_s=30, generate_kwargs={language, task, num_beams,
  max_new_tokens, min_new_tokens}``, on --backend. Its first pass compiles (printed apart):
  the merged decoder's growing KV cache is a new shape every step, so a first pass compiles
  --tokens decoder steps per batch row count; JAX's persistent compilation cache (--jax-cache,
  default $TRANSMUTER_BENCH_CACHE/asr/jax-cache) keeps them for the next run, whose first pass
  then only loads them (the header says how many entries it found).
- onnxruntime: onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx, default
  SessionOptions, in a plain loop: Transmuter's WhisperFeatureExtractor on transformers' chunk
  windows, the encoder over B windows, the merged decoder from the prompt (``use_cache_branch``
  False, empty past) then one token a step with the past (the cross-attention KV of the first
  step kept), greedy with the generation config's suppress_tokens / begin_suppress_tokens and eos
  masked; the windows' tokens merged by Transmuter's ``decode_asr`` (transformers'
  ``_decode_asr``).
- transformers: ``transformers.pipeline("automatic-speech-recognition",
  model=WhisperForConditionalGeneration.from_pretrained(folder))`` with the same call, torch's
  default threads, in the export environment ($TRANSMUTER_EXPORT_PYTHON) as a subprocess that
  stays up for the whole model and times a pass when asked (so its passes alternate with the
  others').

The peers warm up on one window, Transmuter on a whole pass; then --repeat timed passes each
(--base-repeat for whisper-base and larger), alternating, the best counts. The texts of the last
pass are compared ("same" columns: recordings whose text equals Transmuter's; random weights give
near ties, and float sums in another order may flip one and change the rest of that window).

--profile adds, per model and batch, where one more Transmuter pass spends its time (features,
encoder, decoder first step and cache steps, the host's share of a step, processors, merging)
against the onnxruntime loop's encoder and decoder-step times, and the compiles of each pass.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import onnxruntime as ort

import transmuter
from _asr_models import (CACHE, EXPORT_PYTHON, RATE, SECONDS, SPEECH, model_folder, offsets,
                         recordings)
from transmuter import hub
from transmuter.pipelines.audio.whisper.text import decode_asr
from transmuter.preprocess.audio.features import FeatureExtractor
from transmuter.preprocess.text.tokenizer import Tokenizer

CHUNK_S = 30
STRIDE_S = CHUNK_S / 6  # the pipelines' default stride_length_s
TASK = "automatic-speech-recognition"


def generate_kwargs(tokens, beams=1):
    return {"language": "en", "task": "transcribe", "num_beams": beams, "do_sample": False,
            "max_new_tokens": tokens, "min_new_tokens": tokens}


TORCH = textwrap.dedent("""
    import json, sys, time
    out, sys.stdout = sys.stdout, sys.stderr  # only our JSON lines on the pipe
    import soundfile, torch, transformers
    folder, audio, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    transformers.logging.set_verbosity_error()
    samples = soundfile.read(audio, dtype="float32", always_2d=False)[0]
    model = transformers.WhisperForConditionalGeneration.from_pretrained(folder).eval()
    pipe = transformers.pipeline("automatic-speech-recognition", model=model, tokenizer=folder,
                                 feature_extractor=folder, device="cpu")
    print(json.dumps({"threads": torch.get_num_threads()}), file=out, flush=True)
    for line in sys.stdin:
        batch, starts, length = json.loads(line)
        inputs = [{"raw": samples[a:a + length].copy(), "sampling_rate": spec["rate"]}
                  for a in starts]
        start = time.perf_counter()
        with torch.inference_mode():
            res = pipe(inputs, batch_size=batch, chunk_length_s=spec["chunk"],
                       generate_kwargs=spec["generate"])
        seconds = time.perf_counter() - start
        print(json.dumps({"seconds": seconds, "texts": [r["text"] for r in res]}), file=out,
              flush=True)
""")


def windows(samples):
    """transformers' chunk_iter: (window, (samples, left stride, right stride)) of a recording."""
    length, stride = int(round(CHUNK_S * RATE)), int(round(STRIDE_S * RATE))
    out = []
    for start in range(0, len(samples), length - 2 * stride):
        window = samples[start:start + length]
        last = start + length >= len(samples)
        strides = (len(window), 0 if start == 0 else stride, 0 if last else stride)
        if len(window) > strides[1]:
            out.append((window, strides))
        if last:
            break
    return out


class OrtPeer:
    """The exported encoder and merged decoder on onnxruntime in a plain greedy loop."""

    def __init__(self, folder, tokens):
        self.encoder = ort.InferenceSession(str(folder / "onnx" / "encoder_model.onnx"),
                                            providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(folder / "onnx" / "decoder_model_merged.onnx"),
                                            providers=["CPUExecutionProvider"])
        self.features = FeatureExtractor.from_config(
            json.loads((folder / "preprocessor_config.json").read_text()))
        self.tokenizer = Tokenizer.from_repo(hub.resolve(folder))
        gen = json.loads((folder / "generation_config.json").read_text())
        self.prompt = np.array([gen["decoder_start_token_id"], gen["lang_to_id"]["<|en|>"],
                                gen["task_to_id"]["transcribe"], gen["no_timestamps_token_id"]],
                               np.int64)
        eos = gen["eos_token_id"]
        # min_new_tokens = max_new_tokens: eos is masked at every step
        self.suppress = np.array(sorted(set(gen["suppress_tokens"]) | {eos}), np.int64)
        self.begin = np.array(gen["begin_suppress_tokens"], np.int64)
        self.tokens = tokens
        self.past = [i for i in self.decoder.get_inputs() if i.name.startswith("past_key_values")]
        self.outputs = [o.name for o in self.decoder.get_outputs()]
        self.times = {"features": 0.0, "encoder": 0.0, "first step": 0.0, "cache steps": 0.0,
                      "windows": 0, "cache calls": 0}

    def __call__(self, recordings, batch):
        """Each recording's text, its windows decoded ``batch`` rows at a time."""
        items = [(r, w, strides) for r, samples in enumerate(recordings)
                 for w, strides in windows(samples)]
        tokens = []
        for i in range(0, len(items), batch):
            part = items[i:i + batch]
            start = time.perf_counter()
            features = np.stack([self.features(w)["input_features"] for _, w, _ in part])
            self.times["features"] += time.perf_counter() - start
            tokens += list(self.generate(features.astype(np.float32)))
        outputs = [[] for _ in recordings]
        for (r, _, strides), ids in zip(items, tokens):
            outputs[r].append({"tokens": ids[None], "stride": tuple(s / RATE for s in strides)})
        return [decode_asr(self.tokenizer, out, time_precision=CHUNK_S / 1500)[0]
                for out in outputs]

    def generate(self, features):
        rows = len(features)
        start = time.perf_counter()
        states = self.encoder.run(None, {"input_features": features})[0]
        self.times["encoder"] += time.perf_counter() - start
        feed = {"input_ids": np.tile(self.prompt, (rows, 1)), "encoder_hidden_states": states,
                "use_cache_branch": np.array([False])}
        for i in self.past:  # [batch, heads, 0, head size]
            feed[i.name] = np.zeros((rows, i.shape[1], 0, i.shape[3]), np.float32)
        out = np.zeros((rows, self.tokens), np.int64)
        for step in range(self.tokens):
            start = time.perf_counter()
            result = dict(zip(self.outputs, self.decoder.run(self.outputs, feed)))
            self.times["cache steps" if step else "first step"] += time.perf_counter() - start
            scores = result["logits"][:, -1].astype(np.float32)
            scores[:, self.suppress] = -np.inf
            if step == 0:
                scores[:, self.begin] = -np.inf
            out[:, step] = scores.argmax(-1)
            feed["input_ids"] = out[:, step:step + 1]
            feed["use_cache_branch"] = np.array([True])
            for i in self.past:  # the cross-attention KV is the first step's
                if step == 0 or ".decoder." in i.name:
                    feed[i.name] = result[i.name.replace("past_key_values", "present")]
        self.times["windows"] += rows
        self.times["cache calls"] += self.tokens - 1
        return out


class TorchPeer:
    """transformers' pipeline in the export environment; ``peer(batch, starts)`` times a pass."""

    def __init__(self, folder, tokens, beams):
        self.log = tempfile.TemporaryFile("w+")
        spec = {"rate": RATE, "chunk": CHUNK_S,
                "generate": generate_kwargs(tokens, beams)}
        self.proc = subprocess.Popen(
            [EXPORT_PYTHON, "-c", TORCH, str(folder), str(SPEECH), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise SystemExit("the transformers peer stopped:\n" + self.log.read()[-3000:])
        return json.loads(line)

    def __call__(self, batch, starts, length=SECONDS * RATE):
        """(texts, seconds) of one pass there over ``length`` samples from each of ``starts``."""
        self.proc.stdin.write(json.dumps([batch, starts, length]) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        return out["texts"], out["seconds"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def stopwatch(fn):
    def run():
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start
    return run


def inputs(audio):
    return [{"raw": a.copy(), "sampling_rate": RATE} for a in audio]


def bench_model(name, args):
    folder = model_folder(name)
    repeat = args.repeat if name == "whisper-tiny" else args.base_repeat
    start = time.perf_counter()
    pipe = transmuter.pipeline(TASK, folder, backend=args.backend, variant="fp32")
    load = time.perf_counter() - start
    ort_peer = OrtPeer(folder, args.tokens) if args.beams == 1 else None  # a greedy loop
    torch_peer = None if args.no_torch else TorchPeer(folder, args.tokens, args.beams)
    kw = {"chunk_length_s": CHUNK_S, "generate_kwargs": generate_kwargs(args.tokens, args.beams)}
    try:
        for batch in args.batches:
            audio = recordings(batch)
            ours = stopwatch(lambda: [r["text"] for r in pipe(inputs(audio), batch_size=batch,
                                                              **kw)])
            peers = {"transmuter": ours}
            if ort_peer:
                peers["ort"] = stopwatch(lambda: ort_peer(audio, batch))
            if torch_peer:
                peers["torch"] = lambda: torch_peer(batch, offsets(batch))
            counts = compiles(pipe)
            first = ours()[1]  # compiles every shape the timed passes meet
            counts = {k: v - counts[k] for k, v in compiles(pipe).items()}
            if ort_peer:
                ort_peer([audio[0][:CHUNK_S * RATE]], 1)  # warm-up: one window
            if torch_peer:
                torch_peer(1, [0], CHUNK_S * RATE)
            texts, best, profile = timed(peers, repeat, pipe, ort_peer, args.profile)
            report(name, batch, len(audio) * SECONDS, best, first, load, texts)
            if args.profile:
                print_profile(profile, counts, compiles(pipe), ort_peer and ort_peer.times)
    finally:
        if torch_peer:
            torch_peer.close()


def timed(peers, repeat, pipe, ort_peer, profile):
    """``repeat`` passes of each peer, alternating; (last texts, best seconds, and with
    ``profile`` a Profiler of one more Transmuter pass, untimed here)."""
    best, texts = dict.fromkeys(peers, float("inf")), {}
    for _ in range(repeat):
        for name, fn in peers.items():
            if name == "ort":  # its step times: the last pass's
                ort_peer.times = dict.fromkeys(ort_peer.times, 0)
            texts[name], seconds = fn()
            best[name] = min(best[name], seconds)
    if not profile:
        return texts, best, None
    with Profiler(pipe) as prof:
        prof.total = peers["transmuter"]()[1]
    return texts, best, prof


def report(name, batch, audio_s, best, first, load, texts):
    rtf = {k: s / audio_s for k, s in best.items()}
    ours = texts["transmuter"]
    ort_rtf = f"{rtf['ort']:>8.4f}" if "ort" in rtf else f"{'-':>8}"
    vs_ort = f"{rtf['ort'] / rtf['transmuter']:>6.2f}x" if "ort" in rtf else f"{'-':>7}"
    same_ort = sum(a == b for a, b in zip(ours, texts["ort"])) if "ort" in texts else "-"
    torch_rtf = f"{rtf['torch']:>8.4f}" if "torch" in rtf else f"{'':>8}"
    vs_torch = f"{rtf['torch'] / rtf['transmuter']:>7.2f}x" if "torch" in rtf else f"{'':>8}"
    same_torch = sum(a == b for a, b in zip(ours, texts["torch"])) if "torch" in texts else "-"
    print(f"{name:<14} {batch:>5} {audio_s:>6} {rtf['transmuter']:>10.4f} {ort_rtf} "
          f"{torch_rtf} {vs_ort} {vs_torch} "
          f"{f'{same_ort}/{len(ours)}':>8} {f'{same_torch}/{len(ours)}':>10} {first:>8.1f} "
          f"{load:>6.1f} {os.getloadavg()[0]:>7.2f}", flush=True)


# --- profile of Transmuter's pass (bench-side wrappers; src/ is untouched) ---------------------

def compiles(pipe):
    """Compiles so far (cache misses) of the encoder, the decoder's first and cache steps."""
    gen = pipe.head.generator
    first = gen.decoder.first_fn
    out = {"encoder": gen.encoder_fn.cache_info().misses,
           "decoder steps": gen.decoder.fn.cache_info().misses}
    if first is not gen.decoder.fn:
        out["decoder first"] = first.cache_info().misses
    return out


class Profiler:
    """Wraps, for one pass, the head's features / encoder / processors / postprocess and the
    growing cache's graph calls (blocked until ready, so a step's device time is its own)."""

    def __init__(self, pipe):
        self.pipe, self.t, self.n, self.undo = pipe, {}, {}, []

    def _wrap(self, owner, attr, key, block=False, key_of=None):
        fn = getattr(owner, attr)
        backend = self.pipe.model.backend

        def timed(*a, **k):
            start = time.perf_counter()
            out = fn(*a, **k)
            if block:
                backend.block(out)
            name = key_of(*a, **k) if key_of else key
            self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - start
            self.n[name] = self.n.get(name, 0) + 1
            return out

        had = attr in vars(owner)
        setattr(owner, attr, timed)
        self.undo.append((owner, attr, fn if had else None))
        return timed

    def __enter__(self):
        from transmuter.generation import loop, steppers

        head, gen = self.pipe.head, self.pipe.head.generator
        self._wrap(head, "features", "features")
        self._wrap(gen, "encode", "encoder")
        self._wrap(head, "postprocess", "postprocess (decode_asr)")
        self._wrap(gen.decoder, "generate", "generate (decoder loop, all)")
        self._wrap(gen.decoder, "beam_search", "generate (decoder loop, all)")
        for cache in (steppers.GrowingCache, steppers.FixedCache):  # Whisper's: fixed, bucketed
            self._wrap(cache, "start", "decoder first step (host + graph)")
            self._wrap(cache, "step", "decoder cache step (host + graph)")
        self._wrap(steppers.Stepper, "_call", None, block=True, key_of=lambda stepper, fn,
                   feed, caches, *a, **k: "  graph call, " + ("first step" if feed["input_ids"].shape[1] > 1
                                                     else "cache step"))
        self._wrap_builder(loop, "build_processors")  # generate's own processors
        self._wrap_builder(head, "_processors")  # Whisper's
        return self

    def _wrap_builder(self, owner, attr):
        """``owner.attr`` returns processors: each one it returns is timed."""
        build = getattr(owner, attr)
        self.undo.append((owner, attr, build if attr in vars(owner) else None))
        setattr(owner, attr, lambda *a, **k: [self._proc(p) for p in build(*a, **k)])

    def _proc(self, proc):
        def timed(xp, state, scores):
            start = time.perf_counter()
            out = proc(xp, state, scores)
            key = f"  processor {type(proc).__name__}"
            self.t[key] = self.t.get(key, 0.0) + time.perf_counter() - start
            self.n[key] = self.n.get(key, 0) + 1
            return out
        return timed

    def __exit__(self, *exc):
        for owner, attr, fn in reversed(self.undo):
            if fn is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, fn)


def print_profile(prof, before, after, ort_times):
    t = prof.t
    print(f"    Transmuter, one more pass, profiled ({prof.total:.2f} s; the profiler's blocking "
          "and wrappers add a little):")
    for key in sorted(t, key=lambda k: -t[k]):
        calls = prof.n[key]
        print(f"      {key:<44} {t[key] * 1e3:>9.1f} ms  {calls:>5} calls  "
              f"{t[key] / calls * 1e3:>8.2f} ms/call")
    step, first = "decoder cache step (host + graph)", "decoder first step (host + graph)"
    host = t.get(step, 0) - t.get("  graph call, cache step", 0)
    loop = t.get("generate (decoder loop, all)", 0) - t.get(step, 0) - t.get(first, 0)
    print(f"      a cache step outside its graph call: {host / prof.n.get(step, 1) * 1e3:.2f} ms;"
          f" the loop outside the steps (processors, argmax, bookkeeping): {loop * 1e3:.1f} ms "
          f"({loop / prof.n.get(step, 1) * 1e3:.2f} ms/step)")
    print(f"      compiles: in the first pass {before}; all so far {after}")
    if ort_times is None:
        return
    w, s = max(ort_times["windows"], 1), max(ort_times["cache calls"], 1)
    print(f"    onnxruntime, last pass: features {ort_times['features'] * 1e3:.1f} ms, encoder "
          f"{ort_times['encoder'] * 1e3:.1f} ms ({ort_times['encoder'] / w * 1e3:.1f} ms/window), "
          f"first step {ort_times['first step'] * 1e3:.1f} ms, cache steps "
          f"{ort_times['cache steps'] * 1e3:.1f} ms ({ort_times['cache steps'] / s * 1e3:.2f} "
          "ms/step)", flush=True)


def jax_cache(args):
    """Point JAX's persistent compilation cache at ``--jax-cache`` (the growing KV cache compiles
    a decoder shape per step: a later run loads them); a line saying what it holds."""
    if args.backend != "jax" or not args.jax_cache:
        return "no persistent compilation cache"
    import jax

    folder = pathlib.Path(args.jax_cache)
    entries = len(list(folder.glob("*"))) if folder.exists() else 0
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    return (f"JAX compilation cache {folder} ({entries} entries before this run: the first "
            "pass loads what it finds there)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="whisper-tiny,whisper-base")
    parser.add_argument("--batch", default="1,4")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per window")
    parser.add_argument("--repeat", type=int, default=2, help="timed passes, whisper-tiny")
    parser.add_argument("--base-repeat", type=int, default=1,
                        help="timed passes, whisper-base and larger")
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--beams", type=int, default=1,
                        help="num_beams (5: the pipelines' default; no onnxruntime peer then)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--jax-cache", default=str(CACHE / "jax-cache"),
                        help="JAX's persistent compilation cache ('' for none)")
    args = parser.parse_args()
    cache = jax_cache(args)
    args.batches = [int(b) for b in args.batch.split(",")]
    print(f"{SECONDS} s recordings from {SPEECH.name}, chunk_length_s={CHUNK_S} (stride "
          f"{STRIDE_S:g} s), {'greedy' if args.beams == 1 else f'{args.beams} beams'}, "
          f"{args.tokens} tokens per window; random weights; "
          f"{os.cpu_count()} cores; backend {args.backend}; best of {args.repeat} "
          f"(whisper-base+: {args.base_repeat}); load average {os.getloadavg()[0]:.2f}; "
          f"{cache}", flush=True)
    print("RTF: compute s / audio s; vs: how many times faster Transmuter is; same: recordings "
          "whose text equals Transmuter's; 1st pass: Transmuter's untimed first pass (s); open: "
          "transmuter.pipeline() (s); loadavg: the 1-minute load average after the row",
          flush=True)
    print(f"{'model':<14} {'batch':>5} {'audio':>6} {'transmuter':>10} {'ort':>8} {'torch':>8} "
          f"{'vs ort':>7} {'vs torch':>8} {'same ort':>8} {'same torch':>10} {'1st pass':>8} "
          f"{'open':>6} {'loadavg':>7}", flush=True)
    for name in args.models.split(","):
        bench_model(name, args)


if __name__ == "__main__":
    sys.exit(main())
