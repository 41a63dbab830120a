"""Whisper's ``prompt_ids`` / ``prompt_condition_type``: transformers' pipeline on the whisper
fixture's rebuilt torch model (record_audio_pipelines.rebuild_whisper, checked against the
committed ONNX first), with ``generate_kwargs={"prompt_ids": tokenizer.get_prompt_ids(text)}``.

transformers 4.57's ``WhisperGenerationMixin`` puts the prompt (``<|startofprev|>`` and the
text's tokens) before each window's start tokens and strips it from the output; in sequential
long-form decoding ``prompt_condition_type`` says where it goes: ``first-segment`` (the default)
makes it the first "previous text" of a conditioned row (``condition_on_prev_tokens``), or
precedes every window when no row conditions; ``all-segments`` (needs
``condition_on_prev_tokens=True``) precedes the previous text of every window.

Cases: short form (greedy, timestamps, beams, detected language, a batch, chunked), long form
over cat (1.7 s), fox (3.3 s) and the first 10 s of long.flac (1 s windows) with and without
conditioning, both condition types, and the refusals. Each case records the outputs, what
generate returned (token_ids, as record_audio_pipelines' WhisperSpy) and, per window, the
decoder input ids generate was given (``decoder_inputs``: prompt, previous text and start
tokens, from ``_prepare_decoder_input_ids``).

Word timestamps with a prompt run on whisper-timestamped's model (the same weights, eager
attention; ``"fixture": "whisper-timestamped"`` in their cases).

Writes tests/fixtures/whisper/references/whisper_prompt_ids.json.

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_prompt_ids.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_audio_pipelines as rap  # noqa: E402  (sets the offline environment first)
import shutil  # noqa: E402

import families_vision_audio as fva  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

EN = rap.EN
SHORT = [rap.CAT_1S, rap.FOX_1S]
LONGFORM = [rap.CAT, rap.FOX]
TEXTS = {"short": "the cat and the fox", "long": "a quick brown fox jumps over the lazy dog and the cat",
         "counting": "one two three four five"}  # long.flac's first 10 s take 2 windows with it
NOTES = [
    "prompt_ids: tokenizer.get_prompt_ids(prompt_text) (<|startofprev|> then ' ' + text, no special tokens), "
    "passed to the pipeline as a torch tensor in generate_kwargs; recorded here as a list",
    "decoder_inputs: per window (_prepare_decoder_input_ids call) of the case's pipeline calls in order, each "
    "row's decoder input ids: what generate was fed before its first new token",
    "token_ids / generate_calls: what model.generate returned inside the pipeline call (the prompt stripped)",
    "max_target_positions is 64: prompt, previous text (at most 64 // 2 - 1 = 31 tokens), start tokens and "
    "max_new_tokens (10) must fit in it",
]


def cases_to_run():
    short, long = TEXTS["short"], TEXTS["long"]
    ts = {"return_timestamps": True}
    cond = {"condition_on_prev_tokens": True, "temperature": 0.0}
    return [
        ("short_greedy", SHORT, short, {"generate_kwargs": EN}, {}),
        ("short_timestamps", SHORT, short, {"generate_kwargs": EN, **ts}, {}),
        ("short_num_beams_2", SHORT, short, {"generate_kwargs": {**EN, "num_beams": 2}}, {}),
        ("short_detect_language", SHORT, short, {"generate_kwargs": rap.GREEDY}, {}),
        ("short_long_prompt", SHORT, long, {"generate_kwargs": EN}, {}),
        ("short_batch", SHORT, short, {"generate_kwargs": EN}, {"batch_size": 2}),
        ("chunked", [rap.FOX], short, {"generate_kwargs": EN, "chunk_length_s": 1.0}, {}),
        ("longform", LONGFORM, short, {"generate_kwargs": EN, **ts}, {}),
        ("longform_all_segments_without_condition_is_an_error", LONGFORM, short,
         {"generate_kwargs": {**EN, "prompt_condition_type": "all-segments"}, **ts}, {}),
        ("longform_condition_first_segment", LONGFORM + [rap.LONG_10S], long,
         {"generate_kwargs": {**EN, **cond}, **ts}, {}),
        ("longform_condition_first_segment_beams", LONGFORM, short,
         {"generate_kwargs": {**EN, **cond, "num_beams": 2}, **ts}, {}),
        ("longform_condition_all_segments", LONGFORM + [rap.LONG_10S], TEXTS["counting"],
         {"generate_kwargs": {**EN, **cond, "prompt_condition_type": "all-segments"}, **ts}, {}),
        ("unknown_condition_type_is_an_error", SHORT[:1], short,
         {"generate_kwargs": {**EN, "prompt_condition_type": "every-segment"}}, {}),
        ("prompt_too_long_is_an_error", SHORT[:1], " ".join([long] * 4), {"generate_kwargs": EN}, {}),
    ]


class InputSpy:
    """Records the decoder input ids of every window (_prepare_decoder_input_ids' result)."""

    def __init__(self, model):
        self.model, self.calls = model, []
        prepare = type(model)._prepare_decoder_input_ids

        def spy(*args, **kwargs):
            ids, rest = prepare(*args, **kwargs)
            self.calls.append(ids.tolist())
            return ids, rest

        model._prepare_decoder_input_ids = spy

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def prepare_cases(model, prompts: dict) -> list[dict]:
    """transformers' own ``_prepare_decoder_input_ids`` (a static method) on made-up kept segments of
    one row: the previous-text cut (64 // 2 - 1 = 31 tokens) and where the prompt goes, for both
    condition types, conditioned or not, after 0 to 3 segments (the long-form cases above seldom keep
    more than a few tokens a window)."""
    cls, gen = type(model), copy.deepcopy(model.generation_config)
    begin = gen.no_timestamps_token_id + 1
    init = torch.tensor([[gen.decoder_start_token_id, 318, 418]])
    segments = [[begin, 5, 6, 7, begin + 20, begin + 20],  # ends on two timestamps
                [begin, 8, 9, begin + 10],
                [begin] + list(range(20, 50)) + [begin + 40]]
    out = []
    for text, prompt in prompts.items():
        for condition_type in ("first-segment", "all-segments"):
            gen.prompt_condition_type = condition_type
            for n in range(len(segments) + 1):
                for condition in (True, False):
                    current = cls._prepare_segments(prompt, 1, gen)
                    current[0] += [{"tokens": torch.tensor(s)} for s in segments[:n]]
                    ids, _ = cls._prepare_decoder_input_ids(
                        cur_bsz=1, init_tokens=init, current_segments=current, batch_idx_map=[0],
                        do_condition_on_prev_tokens=[condition], prompt_ids=prompt, generation_config=gen,
                        config=model.config, device="cpu", suppress_tokens=None, timestamp_begin=begin,
                        kwargs={})
                    out.append({"prompt_text": text, "prompt_ids": prompt.tolist(), "condition_type": condition_type,
                                "init_tokens": init[0].tolist(), "segments": segments[:n], "condition": condition,
                                "decoder_input_ids": ids[0].tolist()})
    return out


def word_cases_to_run():
    """On whisper-timestamped's model (eager attention: generate's cross-attentions): word
    timestamps with a prompt, whose tokens count in generate's num_input_ids."""
    word = {"return_timestamps": "word"}
    return [
        ("word_timestamps", SHORT, TEXTS["short"], {"generate_kwargs": EN, **word}, {}),
        ("word_timestamps_longform_condition_first_segment", LONGFORM, TEXTS["long"],
         {"generate_kwargs": {**EN, "condition_on_prev_tokens": True, "temperature": 0.0}, **word}, {}),
    ]


def record(model, fixture, todo) -> list[dict]:
    p = rap.pipeline_for(fixture, "automatic-speech-recognition", model)
    p.tokenizer.pad_token_id = model.config.eos_token_id  # for the batch case (record_audio_pipelines)
    spy, inputs = rap.WhisperSpy(model, p.tokenizer), InputSpy(model)
    cases = []
    for name, audio, text, call_kwargs, extra in todo:
        prompt = p.tokenizer.get_prompt_ids(text, return_tensors="pt")
        kwargs = dict(call_kwargs, generate_kwargs=dict(call_kwargs["generate_kwargs"], prompt_ids=prompt))
        case = rap.run_case(p, name, audio, kwargs, hooks=spy, **extra)
        case.update(fixture=fixture, prompt_text=text, decoder_inputs=inputs.take())
        cases.append(case)
    spy.close()
    del model._prepare_decoder_input_ids
    return cases


def main() -> int:
    transformers.logging.set_verbosity_error()
    model = rap.rebuild_whisper()
    rap.check_configs("whisper", model)
    check = rap.check_whisper_onnx(rap.FIXTURES / "whisper", model)
    cases = record(model, "whisper", cases_to_run())
    p = rap.pipeline_for("whisper", "automatic-speech-recognition", model)
    tmp = fva.tmpdir()
    try:
        eager, _, _ = fva._whisper(tmp, attn="eager")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    eager.eval()
    check_eager = rap.check_whisper_onnx(rap.FIXTURES / "whisper", eager)
    cases += record(eager, "whisper-timestamped", word_cases_to_run())
    prepared = prepare_cases(model, {t: p.tokenizer.get_prompt_ids(t, return_tensors="pt") for t in TEXTS.values()})
    for c in cases:
        c["generate_kwargs"] = c["call_kwargs"].get("generate_kwargs")
    path = rap.FIXTURES / "whisper" / "references" / "whisper_prompt_ids.json"
    head = json.dumps({"task": "automatic-speech-recognition", "notes": NOTES,
                       "setup": "pipe.tokenizer.pad_token_id = model.config.eos_token_id",
                       "torch_vs_onnx_max_abs_diff": check, "eager_torch_vs_onnx_max_abs_diff": check_eager,
                       "prepare_call": "WhisperForConditionalGeneration._prepare_decoder_input_ids(...) on "
                                       "made-up segments (prepare_cases)"}, indent=1)[:-2]
    lines = lambda items: ",\n  ".join(json.dumps(rap.jsonable(c), separators=(",", ":")) for c in items)  # noqa: E731
    path.write_text(f'{head},\n "prepared": [\n  {lines(prepared)}\n ],\n "cases": [\n  {lines(cases)}\n ]\n}}\n')
    json.loads(path.read_text())
    print(f"wrote {path} ({path.stat().st_size / 1e3:.1f} kB)")
    return 0


if __name__ == "__main__":
    torch.manual_seed(0)
    sys.exit(main())
