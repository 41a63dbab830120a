"""The modality-free pipeline layer: every recorded reference is run by some test, models and
their compiled functions are freed with the pipeline, one padding policy, featurizers chosen by
the task."""

import gc
import itertools
import math
import weakref

import numpy as np
import pytest

import transmuter
from transmuter import buckets
from transmuter.pipelines import PipelineError, registry, shared

from . import (test_generation_pipeline, test_pipelines_audio, test_pipelines_text,
               test_pipelines_vision, test_text2text)
from .fixtures import ROOT, pipeline_references

# task -> the test module whose tests parametrize over every reference of that task
RUN_BY = {
    **{task: test_pipelines_text for task in test_pipelines_text.ENCODER_TASKS},
    **{task: test_pipelines_vision for task in test_pipelines_vision.VISION_TASKS},
    **{task: test_pipelines_audio for task in test_pipelines_audio.AUDIO_TASKS},
    "text-generation": test_generation_pipeline,
    "text2text-generation": test_text2text,
    "translation": "tests/test_translation_nllb.py",  # NLLB: the one translation fixture
    "zero-shot-entity-recognition": "tests/test_pipelines_gliner.py",
    "image-to-image": "tests/test_pipelines_image_to_image.py",
    "image-to-text": "tests/test_pipelines_image_to_text.py",
    "image-text-to-text": "tests/test_pipelines_image_text_to_text.py",
    "zero-shot-object-detection": "tests/test_pipelines_zero_shot_detection.py",
    "text-to-speech": "tests/test_pipelines_tts.py",  # VITS and SpeechT5 references
    # image-to-text on Florence-2: records with post_process_generation's answers, a format of
    # their own (pipeline_florence2.json)
    "florence2": "tests/test_pipelines_florence2.py",
}


@pytest.mark.parametrize("fixture,task", pipeline_references(),
                         ids=[f"{f}-{t}" for f, t in pipeline_references()])
def test_every_recorded_reference_is_checked(fixture, task):
    if registry.normalize(task) in registry.PLANNED:
        pytest.xfail(f"no {task} pipeline yet: {fixture}'s reference waits for it")
    assert task in RUN_BY, (f"{fixture}/references/pipeline_{task}.json is recorded, but no test "
                            f"runs {task} references: add the task to a test that discovers them")
    if task == "translation":
        assert fixture == "nllb", "test_translation_nllb.py runs only nllb's translation reference"
    if task == "zero-shot-entity-recognition":
        from . import test_pipelines_gliner
        assert fixture in test_pipelines_gliner.FIXTURES


def _freed(task, fixture, *inputs, **options):
    pipe = transmuter.pipeline(task, ROOT / fixture, **options)
    pipe(*inputs)
    refs = [weakref.ref(pipe.model), *(weakref.ref(v) for v in shared.of(pipe.model).values())]
    assert len(refs) > 1, "the call should have left a compiled function on the model"
    del pipe
    gc.collect()
    return [r() is None for r in refs]


def test_model_and_compiled_function_die_with_the_pipeline():
    assert all(_freed("text-classification", "bert-sequence-classification", "Hi there",
                      sequence_length=32))


def test_seq2seq_generator_dies_with_the_pipeline():
    assert all(_freed("text2text-generation", "t5", "translate: hello", max_new_tokens=2,
                      num_beams=1, variant="fp32"))


def test_one_padding_policy():
    assert [buckets.next_pow2(n) for n in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]
    assert buckets.pow2_chunks(100) == [64, 32, 4]
    # a prompt's chunks: powers of two, the last padded up where that costs less than more calls
    # (a call costs PROMPT_CALL_ROWS rows), so never more than cutting it into powers of two
    assert [buckets.prompt_chunks(n) for n in (1, 3, 37, 81, 129, 520, 1000)] == \
        [[1], [3], [48], [96], [128, 1], [512, 8], [1024]]
    cost = lambda plan: len(plan) * buckets.PROMPT_CALL_ROWS + sum(plan)  # noqa: E731
    for n in range(1, 3000):
        plan = buckets.prompt_chunks(n)
        assert plan[:-1] == buckets.pow2_chunks(sum(plan[:-1])) and sum(plan[:-1]) < n
        assert n <= sum(plan) <= 1.5 * n and cost(plan) <= cost(buckets.pow2_chunks(n))
    assert buckets.pow2(5, 8) == 8 and buckets.pow2(5, 6) == 6 and buckets.pow2(9, 4) == 9
    assert buckets.pow2(3, 512, least=32) == 32
    assert buckets.length(20, (32, 128)) == 32 and buckets.length(200, (32, 128)) == 200
    assert buckets.lengths([512, 32, 128], 256) == (32, 128, 256)
    assert buckets.multiple(33, 32) == 64 and buckets.multiple(32, 32) == 32
    with pytest.raises(PipelineError, match="sequence_length"):
        buckets.lengths([0], 512)
    # per_octave steps split (2^(k-1), 2^k] into equal parts: 4 steps over (16, 32] are 20..32
    assert [buckets.octave_length(n) for n in (16, 17, 21, 32, 33)] == [16, 20, 24, 32, 40]
    assert [buckets.octave_length(n) for n in (16000, 20000, 30000)] == [16384, 20480, 32768]
    assert buckets.octave_length(33, per_octave=1) == 64  # one step: the power of two
    assert buckets.octave_lengths(64) == (16, 20, 24, 28, 32, 40, 48, 56, 64)
    assert buckets.octave_lengths(100, per_octave=2) == (16, 24, 32, 48, 64, 96, 100)  # + cap
    assert buckets.octave_lengths(10) == (10,)  # a model shorter than the least bucket
    # vision patches: 8 steps per doubling (over (128, 256]: multiples of 16), whole merged tokens
    assert [buckets.patches(n, 4) for n in (6, 100, 132, 256, 3888)] == [8, 104, 144, 256, 4096]



def _partitions(n, cap):
    """Every split of n sorted rows into consecutive calls of at most cap rows."""
    if n == 0:
        yield []
        return
    for first in range(1, min(cap, n) + 1):
        for rest in _partitions(n - first, cap):
            yield [first] + rest


@pytest.mark.parametrize("seed", range(6))
def test_row_groups_cost_the_least_of_every_split(seed):
    # the reference is exhaustive search over every consecutive split of the sorted rows
    import random
    rng = random.Random(seed)
    sizes = sorted((rng.choice((16, 32, 64)) for _ in range(rng.randint(2, 12))), reverse=True)
    cap, call = rng.choice((4, 8)), rng.choice((0, 5, 40))

    def cost(groups):
        return sum(call + buckets.pow2(b - a, cap) * sizes[a] for a, b in groups)

    best = min(cost(list(zip(itertools.accumulate([0] + p[:-1]), itertools.accumulate(p))))
               for p in _partitions(len(sizes), cap))
    groups = buckets.row_groups(sizes, cap, call)
    assert cost(groups) == best
    assert [a for a, _ in groups[1:]] == [b for _, b in groups[:-1]]
    assert groups[0][0] == 0 and groups[-1][1] == len(sizes)
    assert all(b - a <= cap for a, b in groups)


def test_row_groups_keep_one_call_where_calls_cost_more_than_padding():
    # a tiny fixture's call cost (~8,000 tokens) exceeds any padding saved: batch_size chunks
    assert buckets.row_groups([64] * 17 + [16] * 23, 32, 8000) == [(0, 32), (32, 40)]
    assert buckets.row_groups([64] * 16 + [16] * 16, 32, 19) == [(0, 16), (16, 32)]
    assert buckets.row_groups([], 32, 19) == []


@pytest.mark.parametrize("per_octave", [1, 2, 4, 8])
def test_octave_padding_is_bounded_and_monotonic(per_octave):
    padded = [buckets.octave_length(n, per_octave) for n in range(1, 5000)]
    for n, b in enumerate(padded, start=1):
        assert n <= b <= (1 + 1 / per_octave) * n  # the bound its docstring promises
        assert buckets.octave_length(b, per_octave) == b  # a step pads to itself
    assert padded == sorted(padded)  # a longer row never pads shorter
    # the default buckets: every row from the least bucket to the cap within the same bound,
    # with per_octave buckets a doubling (and the cap)
    cap, least = 300, 16
    lengths = buckets.octave_lengths(cap, per_octave, least)
    assert lengths[0] == least and lengths[-1] == cap and lengths == tuple(sorted(set(lengths)))
    assert len(lengths) <= per_octave * math.log2(cap / least) + 2
    for n in range(least, cap + 1):
        assert n <= buckets.length(n, lengths) <= (1 + 1 / per_octave) * n


def test_featurizers_follow_the_task():
    with pytest.raises(PipelineError, match="takes no image_processor"):
        transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification",
                            image_processor={})


@pytest.mark.parametrize("option", [{"batch_size": 0}, {"batch_size": 1.5}, {"batch_size": "8"},
                                    {"cache_size": -1}, {"batch_size": True}])
def test_bad_sizes_are_clear_errors(option):
    name = next(iter(option))
    with pytest.raises(PipelineError, match=f"{name} must be a positive int"):
        transmuter.pipeline("text-classification", ROOT / "bert-sequence-classification",
                            **option)


def test_speech_recognition_models_die_with_the_pipeline():
    import numpy as np

    clip = {"raw": np.zeros(8000, np.float32), "sampling_rate": 16000}
    assert all(_freed("automatic-speech-recognition", "whisper", clip, variant="fp32",
                      generate_kwargs={"max_new_tokens": 2, "num_beams": 1}))
    assert all(_freed("automatic-speech-recognition", "wav2vec2", clip))


def test_on_error_return_gives_each_failed_input_its_error(tmp_path):
    """on_error="return": an input that cannot be prepared gets its error in its result's
    place (lists, streams and one input alike, images, audio and text alike); the others get
    what they get alone."""
    from transmuter.errors import InputError, TransmuterError

    broken = tmp_path / "broken.png"
    broken.write_bytes((ROOT / "vit/references/image_0.png").read_bytes()[:100])
    noise = tmp_path / "noise.wav"
    noise.write_bytes(b"RIFF0000WAVEnot really")
    cases = [("image-classification", "vit", str(ROOT / "vit/references/image_0.png"),
              [str(broken), 12]),
             ("audio-classification", "ast", str(ROOT / "speech/cat_16k.wav"),
              [str(noise), np.zeros(0, np.float32)]),
             ("text-classification", "bert-sequence-classification", "A fine day.", [7, None])]
    for task, fixture, good, bad in cases:
        pipe = transmuter.pipeline(task, ROOT / fixture)
        want = pipe([good])[0]  # a list's item (text-classification: a dict, alone a list)
        for inputs in ([good, *bad, good], iter([bad[0], good, bad[1]])):
            got = list(pipe(inputs, batch_size=2, on_error="return"))
            errors = [r for r in got if isinstance(r, Exception)]
            assert len(errors) == len(bad) and all(isinstance(e, TransmuterError) for e in errors)
            fine = [r for r in got if not isinstance(r, Exception)]
            assert len(fine) == len(got) - len(bad)
            for r in fine:  # 1e-5: a batch of 2 against 1 sums in another order (float32)
                test_pipelines_text.assert_close(r, want, 1e-5)
        if isinstance(bad[0], str):  # one input alone (a text is always one that prepares)
            assert isinstance(pipe(bad[0], on_error="return"), TransmuterError)
        with pytest.raises(TransmuterError):
            pipe([good, bad[0]])
    pipe = transmuter.pipeline("image-classification", ROOT / "vit")
    with pytest.raises(InputError, match="broken.png"):
        pipe(str(broken))
    with pytest.raises(PipelineError, match="on_error must be 'raise' or 'return'"):
        pipe([str(broken)], on_error="skip")
