"""Whisper's temperature fallback, no-speech skip and condition_on_prev_tokens: transformers'
pipeline on the whisper fixture's rebuilt torch model (record_audio_pipelines.rebuild_whisper,
checked against the committed ONNX first), over speech/long.flac (65 s: 65 of the fixture's 1 s
windows), one call per case.

Each case records the pipeline's outputs and, per call of ``WhisperGenerationMixin._need_fallback``
(one per window and temperature), what it decided and from what: the temperature, the window's ids
(eos kept, as it gets them), the compression ratio, the mean log-probability
(``_retrieve_avg_logprobs`` on the call's scores; the beam score with beams), the no-speech
probability (``WhisperNoSpeechDetection.no_speech_prob``) and (needs_fallback, should_skip).
Sampled passes (temperature > 0) draw from torch's generator, which Transmuter does not
reproduce: a case with one is marked ``sampled`` and only its decisions up to the first sampled
pass are deterministic.

Writes tests/fixtures/whisper/references/whisper_fallback.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_fallback.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import transformers  # noqa: E402

EN = rap.EN
CASES = [
    ("condition_on_prev_tokens", {**EN, "condition_on_prev_tokens": True, "temperature": 0.0}),
    ("condition_on_prev_tokens_beams", {**EN, "num_beams": 2, "condition_on_prev_tokens": True,
                                        "temperature": 0.0}),
    ("beams_logprob_threshold", {**EN, "num_beams": 2, "temperature": 0.0, "logprob_threshold": -1.0,
                                 "no_speech_threshold": 0.000395}),
    ("no_speech_skip", {**EN, "temperature": 0.0, "logprob_threshold": 0.0,
                        "no_speech_threshold": 0.000395}),
    ("thresholds_not_reached", {**EN, "temperature": (0.0, 0.2), "compression_ratio_threshold": 10.0,
                                "logprob_threshold": -100.0}),
    ("fallback_to_greedy_again", {**EN, "temperature": (0.0, 0.0), "logprob_threshold": -1.0,
                                  "condition_on_prev_tokens": True}),
    ("fallback_sampled", {**EN, "temperature": (0.0, 0.2, 0.4), "compression_ratio_threshold": 1.35,
                          "logprob_threshold": -1.0}),
]
NOTES = [
    "no_speech_threshold 0.000395 sits between the tiny model's no-speech probabilities (0.000394 and "
    "0.000396, relative gap ~2e-3), so some windows are skipped and some kept",
    "fallback_to_greedy_again: every window's mean log-probability is under -1, so each falls back, to a "
    "second greedy pass (temperature 0.0 again): the fallback path, deterministic",
    "beams_logprob_threshold: with beams the mean log-probability is the best beam's sequences_scores",
    "fallback_sampled: the first window falls back to sampling at 0.2 (torch's random draws): only the first "
    "decision (temperature 0.0) is deterministic",
]


class FallbackSpy:
    def __init__(self, model):
        from transformers.generation.logits_process import WhisperNoSpeechDetection

        self.calls = []
        need = model._need_fallback

        def spy(seq, outs, index, processors, config, vocab_size, temperature):
            result = need(seq, outs, index, processors, config, vocab_size, temperature)
            entry = {"temperature": temperature, "ids": seq.tolist(),
                     "compression_ratio": model._retrieve_compression_ratio(seq, vocab_size),
                     "needs_fallback": result[0], "should_skip": result[1]}
            if config.logprob_threshold is not None:
                if hasattr(outs[0], "sequences_scores"):
                    entry["logprob"] = float(outs[index]["sequences_scores"])
                else:
                    entry["logprob"] = float(model._retrieve_avg_logprobs(outs[index]["scores"], seq,
                                                                          temperature))
            detector = next((p for p in processors if isinstance(p, WhisperNoSpeechDetection)), None)
            if detector is not None:
                entry["no_speech_prob"] = float(detector.no_speech_prob[index])
            self.calls.append(entry)
            return result

        model._need_fallback = spy

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def main() -> int:
    transformers.logging.set_verbosity_error()
    model = rap.rebuild_whisper()
    rap.check_configs("whisper", model)
    check = rap.check_whisper_onnx(rap.FIXTURES / "whisper", model)
    p = rap.pipeline_for("whisper", "automatic-speech-recognition", model)
    spy = FallbackSpy(model)
    cases = []
    for name, generate_kwargs in CASES:
        call_kwargs = {"generate_kwargs": generate_kwargs, "return_timestamps": True}
        out = p({"raw": rap.load_audio(rap.LONG), "sampling_rate": rap.SR}, **call_kwargs)
        decisions = spy.take()
        sampled = any(d["temperature"] for d in decisions)
        cases.append({"name": name, "audio": rap.LONG, "call_kwargs": call_kwargs, "sampled": sampled,
                      "outputs": rap.jsonable(out), "decisions": decisions})
        print(f"  {name}: {len(decisions)} decisions, sampled={sampled}: {json.dumps(rap.jsonable(out))[:120]}")
    path = rap.FIXTURES / "whisper" / "references" / "whisper_fallback.json"
    head = json.dumps({"call": "pipeline(task)({'raw': long.flac, 'sampling_rate': 16000}, **call_kwargs)",
                       "notes": NOTES, "torch_vs_onnx_max_abs_diff": check}, indent=1)[:-2]
    body = ",\n  ".join(json.dumps(rap.jsonable(c), separators=(",", ":")) for c in cases)
    path.write_text(f'{head},\n "cases": [\n  {body}\n ]\n}}\n')
    json.loads(path.read_text())
    print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
