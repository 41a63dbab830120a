"""Whisper's decoder prompt (language, task, timestamps tokens) equals transformers'
``_retrieve_init_tokens`` on the real generation configs of openai/whisper-base,
onnx-community/whisper-base and Xenova/whisper-tiny.en (references/prompts.json, recorded by
tests/support/record_whisper_prompts.py with language detection stubbed to one language)."""

import json

import numpy as np
import pytest

from transmuter.generation import GenerationConfig
from transmuter.generation.seq2seq import Encoded
from transmuter.pipelines import PipelineError
from transmuter.pipelines.audio.whisper.pipeline import Head

from .fixtures import ROOT

HUB = ROOT.parents[2] / "shared" / "hub-files"
RECORDED = json.loads((ROOT / "whisper" / "references" / "prompts.json").read_text())
CASES = [(repo, i) for repo, cases in RECORDED["repos"].items() for i in range(len(cases))]


def head(repo):
    """A Whisper head over the repo's files, without a model (only the prompt is built)."""
    folder = HUB / repo
    h = Head.__new__(Head)
    h.file = json.loads((folder / "generation_config.json").read_text())
    h.config = json.loads((folder / "config.json").read_text())
    h.lang_to_id = h.file.get("lang_to_id") or {}
    h.task_to_id = h.file.get("task_to_id") or {}
    h.no_timestamps = h.file.get("no_timestamps_token_id")
    detected = h.lang_to_id.get(RECORDED["detected"])
    h._detect = lambda encoded, start: [detected] * len(encoded.states)
    return h


@pytest.mark.skipif(not HUB.is_dir(), reason="needs ../shared/hub-files")
@pytest.mark.parametrize("repo,index", CASES, ids=[f"{r}-{i}" for r, i in CASES])
def test_prompt_equals_transformers(repo, index):
    case = RECORDED["repos"][repo][index]
    h = head(repo)
    config = GenerationConfig.from_dicts(h.file, h.config)
    encoded = Encoded(np.zeros((1, 1, 1), np.float32), None, np.zeros(1, np.int64))
    if "error" in case:  # transformers refuses: an unknown language, or a task for an .en model
        with pytest.raises(PipelineError):
            h._prompts(encoded, config, h._language_id(case["language"]),
                       h._task_id(case["task"]), case["timestamps"])
        return
    got = h._prompts(encoded, config, h._language_id(case["language"]),
                     h._task_id(case["task"]), case["timestamps"])
    assert got == [case["prompt"]]
