"""Whisper's decoder prompts (transformers' ``_retrieve_init_tokens``) for the real generation
configs of openai/whisper-base, onnx-community/whisper-base and Xenova/whisper-tiny.en (read from
../shared/hub-files), for every language / task / timestamps combination the pipeline takes.
Language detection is stubbed to one fixed language (the model is random), so a test stubs ours
the same way. Writes tests/fixtures/whisper/references/prompts.json.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_prompts.py
"""

import copy
import json
import pathlib

import torch
from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

ROOT = pathlib.Path(__file__).resolve().parents[2]
HUB = ROOT.parent / "shared" / "hub-files"
REPOS = ["openai/whisper-base", "onnx-community/whisper-base", "Xenova/whisper-tiny.en"]
LANGUAGES = [None, "en", "fr", "french", "<|de|>", "klingon"]
TASKS = [None, "transcribe", "translate"]
DETECTED = "<|es|>"


def model_for(folder):
    config = WhisperConfig.from_pretrained(folder)
    tiny = dict(d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8)
    model = WhisperForConditionalGeneration(WhisperConfig(**{**config.to_dict(), **tiny}))
    model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def init_tokens(model, language, task, timestamps):
    gen = copy.deepcopy(model.generation_config)
    model._set_language_and_task(language=language, task=task, is_multilingual=None,
                                 generation_config=gen)
    model._set_return_timestamps(return_timestamps=timestamps, is_shortform=True,
                                 generation_config=gen)
    lang_to_id = getattr(gen, "lang_to_id", None) or {}
    model.detect_language = lambda **_: torch.tensor([lang_to_id.get(DETECTED, 0)])
    tokens = model._retrieve_init_tokens(torch.zeros(1, 80, 3000), batch_size=1,
                                         generation_config=gen, config=model.config,
                                         num_segment_frames=3000, kwargs={})
    return tokens[0].tolist()


def main():
    out = {"detected": DETECTED, "repos": {}}
    for repo in REPOS:
        model = model_for(HUB / repo)
        cases = []
        for language in LANGUAGES:
            for task in TASKS:
                for timestamps in (False, True):
                    case = {"language": language, "task": task, "timestamps": timestamps}
                    try:
                        case["prompt"] = init_tokens(model, language, task, timestamps)
                    except ValueError as e:
                        case["error"] = str(e)[:200]
                    cases.append(case)
        out["repos"][repo] = cases
    path = ROOT / "tests" / "fixtures" / "whisper" / "references" / "prompts.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path, sum(len(c) for c in out["repos"].values()), "cases")


if __name__ == "__main__":
    main()
