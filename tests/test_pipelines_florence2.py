"""Florence-2 in image-to-text (pipelines/vision/florence2/pipeline.py, florence2_parse.py) against
transformers 4.57.6 on the PyTorch model (tests/fixtures/florence2/references/
pipeline_florence2.json, tests/support/record_florence2.py): Florence2Processor's prompt ids per
task token (also with the real Florence-2-base tokenizer of ../shared/hub-files, skipped when
absent), ``generate``'s ids and text (greedy and the repo's beam 3), and
``post_process_generation``'s answer, on JAX and MLX; the parser alone on hand-written
generations for every answer type; a batch equals one by one; bad options are clear errors.

Tolerances: none. Ids and texts must be identical; post_process_generation's coordinates are
integers in transformers 4.57 (bin centres truncated), so answers must be equal too (the issue's
1e-3 px is met exactly). The recorder also checked that onnxruntime over the same four graphs
gives PyTorch's argmax tokens (it stops otherwise)."""

import json

import numpy as np
import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.pipelines import PipelineError
from transmuter.pipelines.vision.florence2 import parse as florence2_parse
from transmuter.pipelines.vision.florence2.pipeline import prompt_ids

from .fixtures import ROOT, steps

pytest.importorskip("skimage", reason="the test images are scikit-image's samples (test extra)")

FIXTURE = ROOT / "florence2"
RECORD = json.loads((FIXTURE / "references/pipeline_florence2.json").read_text())
PARSE_CONFIG = json.loads((FIXTURE / "processor_config.json").read_text())["post_processor_config"]
REAL = ROOT.parents[2] / "shared/hub-files/onnx-community/Florence-2-base"
_PIPES = {}


def pipe(backend="mlx"):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("image-to-text", FIXTURE, backend=backend)
    return _PIPES[backend]


def photo(name):
    import PIL.Image
    import skimage.data

    return PIL.Image.fromarray(getattr(skimage.data, name)()).convert("RGB")


def answer(record):
    return {k: v for k, v in record.items() if k != "generated_text"}


@pytest.mark.parametrize("case", RECORD["parse"], ids=lambda c: f"{c['task']}-{c['image_size']}")
def test_parser_matches_post_process_generation(case):
    got = florence2_parse.post_process_generation(case["text"], case["task"],
                                                  tuple(case["image_size"]), PARSE_CONFIG)
    assert got == case["parsed"]


def test_default_parse_config_is_the_converters():
    """A repo without post_processor_config (onnx-community's) bans the converter's phrases."""
    for case in RECORD["parse"]:
        got = florence2_parse.post_process_generation(case["text"], case["task"],
                                                      tuple(case["image_size"]))
        assert got == case["parsed"]


@pytest.fixture(scope="module")
def real_tokenizer():
    from transmuter.preprocess.text.tokenizer import Tokenizer

    if not (REAL / "tokenizer.json").exists():
        pytest.skip(f"{REAL} is absent (the real Florence-2-base tokenizer files)")
    return Tokenizer.from_repo(str(REAL))


def test_real_tokenizer_prompts_are_florence2_processors(real_tokenizer):
    for case in RECORD["real_tokenizer"]["prompts"]:
        assert prompt_ids(real_tokenizer, case["task"], case["text"]) == case["ids"], case


def test_real_tokenizer_decodes_as_transformers(real_tokenizer):
    for case in RECORD["real_tokenizer"]["decode"]:
        assert real_tokenizer.decode(case["ids"], skip_special_tokens=False) == case["text"]


def test_prompts_are_florence2_processors():
    p = pipe()
    for case in RECORD["generate"]:
        pre, _, _ = p._sanitize_parameters(task=case["task"], text=case["text"])
        assert pre["prompt_ids"] == case["prompt_ids"], case["task"]
        assert prompt_ids(p.tokenizer, case["task"], case["text"]) == case["prompt_ids"]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_generate_matches_transformers(backend):
    p, n = pipe(backend), RECORD["max_new_tokens"]
    for case in RECORD["generate"]:
        image = photo(case["image"])
        for mode, run in case["runs"].items():
            out = p(image, task=case["task"], text=case["text"], max_new_tokens=n,
                    **run["options"])
            what = f"{case['image']} {case['task']} {mode}"
            assert len(out) == 1, what
            assert out[0]["generated_text"] == run["text"], what
            assert answer(out[0]) == run["parsed"], what


def test_encoder_states_are_the_graphs_on_transformers_inputs():
    """The pipeline's vision encoder -> embed_tokens -> encoder_model route gives the encoder
    states onnxruntime gave on Florence2Processor's inputs (references/encoder_model.npz:
    astronaut with <OD>, chelsea with grounding of "a cat"), on every valid position; 1e-4 as
    test_models' fp32 graphs (summation order only)."""
    (given, want), = steps("florence2", "references/encoder_model.npz")
    p = pipe()
    for b, (name, task, text) in enumerate([("astronaut", "<OD>", None),
                                            ("chelsea", "<CAPTION_TO_PHRASE_GROUNDING>", "a cat")]):
        pre, _, _ = p._sanitize_parameters(task=task, text=text)
        chunk, = p.preprocess(photo(name), **pre)
        encoded = p._encode([chunk])
        n = int(given["attention_mask"][b].sum())
        assert int(encoded.mask[0].sum()) == n
        np.testing.assert_allclose(encoded.states[0, :n], want["last_hidden_state"][b, :n],
                                   rtol=0, atol=1e-4)


def test_batch_equals_one_by_one():
    p = pipe()
    images = [photo(n) for n in ("astronaut", "chelsea", "coffee")]
    for kwargs in ({"task": "<OD>", "num_beams": 1}, {"task": "<OCR_WITH_REGION>"}):
        alone = [p(x, max_new_tokens=8, **kwargs) for x in images]
        assert p(images, batch_size=2, max_new_tokens=8, **kwargs) == alone


def test_references_can_fail():
    """The records must tell cases apart: for each task the images give different texts, some
    generations stop on </s> before the limit and others run to it, beam differs from greedy,
    answers hold boxes, and the parser cases cover every answer type."""
    for task in {c["task"] for c in RECORD["generate"]}:
        runs = [r for c in RECORD["generate"] if c["task"] == task for r in c["runs"].values()]
        assert len({r["text"] for r in runs}) > 1, task
    greedy = {}
    for c in RECORD["generate"]:
        greedy.setdefault(c["task"], set()).add(c["runs"]["greedy"]["text"])
    assert max(len(t) for t in greedy.values()) > 1  # (the image route: the encoder-states test)
    lengths = {len(r["ids"]) - 1 for c in RECORD["generate"] for r in c["runs"].values()}
    assert max(lengths) == RECORD["max_new_tokens"] and min(lengths) < RECORD["max_new_tokens"]
    assert any(c["runs"]["greedy"]["ids"] != c["runs"]["beam"]["ids"] for c in RECORD["generate"])
    od = [c["runs"]["greedy"]["parsed"]["<OD>"] for c in RECORD["generate"] if c["task"] == "<OD>"]
    assert any(a["bboxes"] for a in od)
    kinds = {florence2_parse.ANSWER_TYPES.get(c["task"], "pure_text") for c in RECORD["parse"]}
    assert kinds == set(florence2_parse.ANSWER_TYPES.values())


@pytest.mark.parametrize("kwargs,match", [
    ({"task": "<OD>", "text": "a cat"}, "takes no text"),
    ({"task": "<CAPTION_TO_PHRASE_GROUNDING>"}, "needs text"),
    ({"prompt": "<OD>"}, "task="),
    ({"task": 3}, "strings"),
    ({"task": "<OD>", "num_beam": 2}, "num_beam"),
    ({"task": "<CAPTION_TO_PHRASE_GROUNDING>", "text": "a cat " * 40}, "encoder's 64 positions"),
    ({"task": "<OD>"}, "context"),  # the default 256 new tokens past the tiny decoder's 64
])
def test_bad_options_are_clear_errors(kwargs, match):
    with pytest.raises((InputError, PipelineError), match=match):
        pipe()(photo("astronaut"), **kwargs)
