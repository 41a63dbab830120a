"""Word timestamps over Whisper's sequential long-form decoding: transformers' pipeline
(``return_timestamps="word"``, no chunk_length_s) on the whisper-timestamped fixture's torch model
(the whisper fixture's weights, eager attention: families_audio_timestamped.py), checked against
the committed ONNX first, over recordings past the fixture's 1 s window (speech/long.flac: 65 s,
and its first 20 s), greedy, with and without condition_on_prev_tokens.

Each case records the outputs and what generate returned per window (WhisperSpy: the ids and the
token timestamps the pipeline hands _decode_asr: per segment, the DTW times of its tokens plus the
window's offset seek * 0.01 s, with num_frames = the recording's frames - seek).

Writes tests/fixtures/whisper-timestamped/references/longform_words.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_longform_words.py
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import transformers  # noqa: E402

import families_vision_audio as fva  # noqa: E402

NAME = "whisper-timestamped"
WORD = {"generate_kwargs": rap.EN, "return_timestamps": "word"}
CASES = [
    ("longform_words", [rap.LONG], WORD),
    ("longform_words_20s", [rap.clip(rap.LONG, 0, 20 * rap.SR)], WORD),
    ("longform_words_condition_on_prev_tokens", [rap.LONG],
     {**WORD, "generate_kwargs": {**rap.EN, "condition_on_prev_tokens": True, "temperature": 0.0}}),
]


def main() -> int:
    transformers.logging.set_verbosity_error()
    tmp = fva.tmpdir()
    try:
        model, _, _ = fva._whisper(tmp, attn="eager")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model.eval()
    rap.check_configs(NAME, model)
    check = rap.check_whisper_onnx(rap.FIXTURES / "whisper", model)
    p = rap.pipeline_for(NAME, "automatic-speech-recognition", model)
    spy = rap.WhisperSpy(model, p.tokenizer)
    cases = [rap.run_case(p, name, audio, kwargs, hooks=spy) for name, audio, kwargs in CASES]
    spy.close()
    path = rap.FIXTURES / NAME / "references" / "longform_words.json"
    head = json.dumps({"call": "pipeline(task)({'raw': clip, 'sampling_rate': 16000}, **call_kwargs)",
                       "torch_vs_onnx_max_abs_diff": check}, indent=1)[:-2]
    body = ",\n  ".join(json.dumps(rap.jsonable(c), separators=(",", ":")) for c in cases)
    path.write_text(f'{head},\n "cases": [\n  {body}\n ]\n}}\n')
    json.loads(path.read_text())
    print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
