"""Split decoders (decoder_model + decoder_with_past_model: generation/cache.py ``from_split``)
on the whisper-split fixture, the whisper fixture's weights exported without the merge
(tests/support/families_audio_whisper_split.py).

Its transformers pipeline cases run in test_pipelines_audio.py like every fixture's; here the
split pair's token ids are compared with the merged decoder's (fixture whisper, same weights) on
the same features and prompts: identical, greedy and beam search, JAX and MLX (the two exports'
logits differ by float32 noise, ~1e-6, far from any argmax tie of these inputs). Then the file
choice (merged when present, else the pair) and the errors of an incomplete pair.
"""

import shutil

import numpy as np
import pytest

import transmuter
from transmuter.generation import GenerationConfig
from transmuter.pipelines.base import PipelineError

from .fixtures import ROOT
from .test_pipelines_audio import clip

TASK = "automatic-speech-recognition"
_PIPES = {}


def pipe(fixture, backend="jax", folder=None):
    key = (fixture, backend, folder)
    if key not in _PIPES:
        _PIPES[key] = transmuter.pipeline(TASK, folder or ROOT / fixture, backend=backend,
                                          variant="fp32")
    return _PIPES[key]


def prompt(p):
    names = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    return [int(p.tokenizer.token_to_id(n)) for n in names]


def token_ids(p, clips, beams=1, new=6):
    """The decoder's new ids for the clips' first windows, no logits processors (raw argmax or
    beam scores: the strongest check of the logits)."""
    head = p.head
    encoded = head._encode([head.features(c)["input_features"] for c in clips])
    config = GenerationConfig(max_new_tokens=new, num_beams=beams, eos_token_id=[316],
                              pad_token_id=316, decoder_start_token_id=317)
    prompts = [prompt(p)] * len(clips)
    if beams > 1:
        return [s[0] for s in head.generator.beam_search(prompts, config, encoded)[0]]
    return [list(map(int, ids)) for ids in head.generator.generate(prompts, config, encoded)]


CLIPS = [{"path": "speech/cat_16k.wav", "start": 0, "stop": 16000},
         {"path": "speech/fox_16k.wav", "start": 0, "stop": 16000},
         {"path": "speech/long.flac", "start": 32000, "stop": 48000}]


# JAX compiles every step's shape of a growing cache (both exports, both searches: ~1 min on 2
# cores); MLX runs the same ids in a second. The JAX beam twin is a slow test (conftest.py).
@pytest.mark.parametrize("backend,beams", [("jax", 1), ("jax", 2), ("mlx", 1), ("mlx", 2)])
def test_split_pair_gives_the_merged_decoders_ids(backend, beams):
    clips = [clip(c) for c in CLIPS]
    split, merged = pipe("whisper-split", backend), pipe("whisper", backend)
    layout = split.head.generator.layout
    assert layout.mode == "grow" and layout.first_presents is not None
    assert len(layout.pairs) == len(layout.cross_pairs) == 4  # 2 layers, key and value
    assert merged.head.generator.layout.first_presents is None
    got, want = token_ids(split, clips, beams), token_ids(merged, clips, beams)
    assert got == want
    assert all(len(ids) > 2 for ids in got)  # long enough to run the with-past graph


def _folder(tmp_path, drop=(), add=()):
    """A copy of the whisper-split fixture without ``drop``, with ``add`` (whisper's files)."""
    folder = tmp_path / "repo"
    shutil.copytree(ROOT / "whisper-split", folder,
                    ignore=lambda d, names: [n for n in names if n in drop])
    for name in add:
        shutil.copy(ROOT / "whisper" / "onnx" / name, folder / "onnx" / name)
    return folder


def test_merged_decoder_is_chosen_when_present(tmp_path):
    folder = _folder(tmp_path, add=["decoder_model_merged.onnx"])
    assert transmuter.hub.resolve(folder).decoder_component() == "decoder_model_merged"
    assert transmuter.hub.resolve(ROOT / "whisper-split").decoder_component() == "decoder_model"
    p = pipe("whisper", folder=folder)
    assert p.head.generator.layout.first_presents is None  # the merged graph runs


def test_a_decoder_without_its_with_past_pair_is_refused(tmp_path):
    folder = _folder(tmp_path, drop=["decoder_with_past_model.onnx"])
    with pytest.raises(transmuter.errors.HubError, match="decoder_model_merged"):
        transmuter.pipeline(TASK, folder)
    model = transmuter.load(folder / "onnx" / "decoder_model.onnx")
    with pytest.raises(PipelineError, match="decoder_with_past_model"):
        transmuter.pipeline(TASK, model, config=folder)


def test_the_with_past_graph_alone_is_not_a_first_step():
    from transmuter.generation.cache import CacheLayout
    from transmuter.errors import InputError

    past = transmuter.load(ROOT / "whisper-split" / "onnx" / "decoder_with_past_model.onnx")
    with pytest.raises(InputError, match="decoder without past"):
        CacheLayout.from_split(past, past, ("encoder_hidden_states",))


def test_split_batch_equals_one_by_one():
    p = pipe("whisper-split", "mlx")  # MLX: the same code on the host, a second (JAX compiles)
    clips = [clip(c) for c in CLIPS]
    alone = [token_ids(p, [c]) for c in clips]
    assert token_ids(p, clips) == [a[0] for a in alone]
    assert np.all([len(a[0]) for a in alone])
