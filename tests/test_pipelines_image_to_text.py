"""image-to-text (pipelines/vision/image_to_text.py) against transformers' ImageToTextPipeline on
the PyTorch models (references/pipeline_image-to-text.json, tests/support/record_image_to_text.py):
the vision-encoder-decoder (ViT + GPT-2) and trocr (DeiT + TrOCR) fixtures, every recorded case on
JAX and MLX (and the vision-encoder-decoder-split fixture, the same weights as optimum's unmerged
decoder pair, against the merged fixture's record). Texts must be identical, and so must the token ids generate returned (the random
models' texts are full of undecodable bytes, so ids are the sharper check). Also: the generation
settings transformers resolved, a batch equals one by one, the encoder runs once per image, a
seed repeats a sampled text, and bad inputs are clear errors."""

import numpy as np
import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference, pipeline_references
from .support import image_cases

TASK = "image-to-text"
FIXTURES = [f for f, _ in pipeline_references({TASK})]
_PIPES = {}


def pipe(fixture, backend="jax"):
    key = (fixture, backend)
    if key not in _PIPES:
        _PIPES[key] = transmuter.pipeline(TASK, ROOT / fixture, backend=backend)
    return _PIPES[key]


def image(fixture, spec):
    if "path" in spec:
        return str(ROOT / fixture / spec["path"])
    return image_cases.make(spec["skimage"])


def run(p, fixture, case):
    """(outputs, token ids per pipeline result) of one recorded case, called as it was recorded."""
    seen, post = [], p.postprocess

    def spy(outputs, **params):
        seen.append([list(map(int, ids)) for ids in outputs[0]["output_ids"]])
        return post(outputs, **params)

    p.postprocess = spy
    try:
        images = [image(fixture, s) for s in case["images"]]
        if case["batch_size"] is None:
            outs = [p(x, **case["call_kwargs"]) for x in images]
        else:
            outs = p(images, batch_size=case["batch_size"], **case["call_kwargs"])
    finally:
        del p.postprocess
    return outs, seen


def trimmed(ids, pad):
    """Sequences without the padding generate appends to rows that stopped before the batch's
    longest (transformers pads a batch, or beams of one image, to one length)."""
    out = list(ids)
    while len(out) > 1 and out[-1] == pad:
        out.pop()
    return out


@pytest.mark.parametrize("backend", ["jax", "mlx"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_matches_recorded_pipeline(fixture, backend):
    ref = pipeline_reference(fixture, TASK)
    pad = ref["generation_config"]["pad_token_id"]
    p = pipe(fixture, backend)
    for case in ref["cases"]:
        outs, ids = run(p, fixture, case)
        assert outs == case["outputs"], case["name"]
        want = [[trimmed(s, pad) for s in call] for call in case["token_ids"]]
        assert [[trimmed(s, pad) for s in call] for call in ids] == want, case["name"]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_a_split_decoder_matches_the_merged_record(backend):
    """vision-encoder-decoder-split holds the same weights with optimum's unmerged pair
    (decoder_model + decoder_with_past_model; families_image_to_text_split.py checked its logits
    equal the merged decoder's): transformers' record of the merged fixture is its reference."""
    ref = pipeline_reference("vision-encoder-decoder", TASK)
    pad = ref["generation_config"]["pad_token_id"]
    p = transmuter.pipeline(TASK, ROOT / "vision-encoder-decoder-split", backend=backend)
    assert not any(v.name.startswith("past_key_values") for v in p.model.inputs)  # the pair
    for case in ref["cases"]:
        outs, ids = run(p, "vision-encoder-decoder", case)
        assert outs == case["outputs"], case["name"]
        want = [[trimmed(s, pad) for s in call] for call in case["token_ids"]]
        assert [[trimmed(s, pad) for s in call] for call in ids] == want, case["name"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_generation_settings_are_transformers(fixture):
    """vision-encoder-decoder's generation_config max_length (16) beats the pipeline's 256 new
    tokens; trocr has no max_length, so 256 applies."""
    want = pipeline_reference(fixture, TASK)["generation_config"]
    config = pipe(fixture)._sanitize_parameters()[1]["config"]
    got = {k: getattr(config, k) for k in want}
    got["eos_token_id"] = got["eos_token_id"][0] if len(got["eos_token_id"]) == 1 else \
        got["eos_token_id"]
    assert got == want


@pytest.mark.parametrize("fixture", FIXTURES)
def test_batch_equals_one_by_one(fixture):
    """Rows of a batch keep their own lengths and stops (greedy: five images in batches of 4 and
    1; beams: two images' beams in one batch). Lengths as the recorded cases', so their
    compiled steps serve."""
    p = pipe(fixture)
    images = [image(fixture, {"skimage": n}) for n in ("astronaut", "text_L", "coffee",
                                                       "camera_L", "chelsea")]
    for kwargs, size, some in (({"max_new_tokens": 5}, 4, images),
                               ({"max_new_tokens": 3, "num_beams": 3}, 2, images[:2])):
        one = [p(x, **kwargs) for x in some]
        assert p(some, batch_size=size, **kwargs) == one, kwargs
        assert list(p(iter(some), batch_size=size, **kwargs)) == one, kwargs


def test_the_encoder_runs_once_per_image():
    p = pipe("trocr")
    rows, encode = [], p.generator.encode
    p.generator.encode = lambda feed, mask=None: (rows.append(len(feed["pixel_values"])),
                                                  encode(feed, mask))[1]
    try:
        out = p([image("trocr", {"skimage": n}) for n in ("astronaut", "coffee", "chelsea",
                                                          "camera_L")],
                batch_size=4, max_new_tokens=3, num_beams=3, num_return_sequences=2)
    finally:
        del p.generator.encode
    assert rows == [4]  # one batch of four images, not one row per beam
    assert [len(r) for r in out] == [2] * 4


def test_a_seed_repeats_a_sampled_text():
    p = pipe("trocr")
    x = image("trocr", {"skimage": "astronaut"})
    kwargs = {"do_sample": True, "temperature": 2.0, "max_new_tokens": 8}
    first = p(x, seed=7, **kwargs)
    assert p(x, seed=7, **kwargs) == first
    texts = {p(x, seed=s, **kwargs)[0]["generated_text"] for s in range(6)}
    assert len(texts) > 1, "sampling with other seeds should give other texts"
    assert len(p(x, seed=7, num_return_sequences=3, **kwargs)) == 3


@pytest.mark.parametrize("bad,match", [(b"not an image", "bytes"), ("no/such/file.png", "file"),
                                       (12, "int")])
def test_bad_images_are_clear_errors(bad, match):
    with pytest.raises((InputError, PipelineError), match=match):
        pipe("vision-encoder-decoder")(bad)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_beam": 2}, "num_beam"),
    ({"generate_kwargs": {"num_beam": 2}}, "num_beam"),
    ({"generate_kwargs": "num_beams=2"}, "generate_kwargs must be a dict"),
    ({"max_new_tokens": 4, "generate_kwargs": {"max_new_tokens": 5}}, "both"),
    ({"num_beams": 2, "generate_kwargs": {"num_beams": 3}}, "both"),
    ({"prompt": "a photo of"}, "prompt"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"num_return_sequences": 2}, "num_return_sequences"),
])
def test_bad_options_are_clear_errors(kwargs, match):
    x = image("vision-encoder-decoder", {"path": "references/image_0.png"})
    with pytest.raises((InputError, PipelineError), match=match):
        pipe("vision-encoder-decoder")(x, **kwargs)


def test_a_model_of_another_kind_is_refused():
    with pytest.raises(PipelineError, match="vision-encoder-decoder"):
        transmuter.pipeline(TASK, ROOT / "t5", image_processor=ROOT / "trocr")


def test_references_can_fail():
    """Guards the references themselves: texts differ between images and cases, and some
    generations stop on </s> before their limit (else a wrong stop rule would pass)."""
    for fixture in FIXTURES:
        cases = pipeline_reference(fixture, TASK)["cases"]
        texts = [r["generated_text"] for c in cases for out in c["outputs"] for r in out]
        assert len(set(texts)) > len(cases) and all(isinstance(t, str) for t in texts)
    trocr = {c["name"]: c for c in pipeline_reference("trocr", TASK)["cases"]}
    lengths = [len(ids[0]) - 1 for ids in trocr["defaults"]["token_ids"]]
    assert max(lengths) > 20 and min(lengths) < 20  # past the global max_length 20, and a stop
    assert np.all(np.asarray(lengths) < 256)
