"""A split text2text export (t5-split: the t5 fixture's weights as decoder_model +
decoder_with_past_model, tests/support/families_text_split.py) runs through the generation
package's split KV mode: transformers' generate ids recorded with the t5 fixture (greedy and beam
search, references/generate_beam.json) come out identical on JAX and MLX, and the pipeline
equals its transformers record (test_text2text.py runs every recorded text2text fixture, this
one too)."""

import os

import pytest

import transmuter
from transmuter.generation import GenerationConfig

from .test_text2text import FIXTURES, reference

_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("text2text-generation",
                                              os.path.join(FIXTURES, "t5-split"),
                                              backend=backend, variant="fp32")
    return _PIPES[backend]


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_split_t5_gives_transformers_ids(backend):
    p = pipe(backend)
    assert p.generator.layout.first_presents is not None  # the pair runs, no merged graph
    files = (p.generation_file, p.config)
    for case in reference("t5", "generate_beam.json")["cases"]:
        config = GenerationConfig.from_dicts(*files, **case["kwargs"])
        encoded, start = p.generator.encode_ids([case["prompt_ids"]]), [p.generator.start_ids(config)]
        if config.num_beams > 1:
            got = p.generator.beam_search(start, config, encoded)[0][0]
        else:
            got = [p.generator.generate(start, config, encoded)[0]]
        assert got == case["sequences"], case["kwargs"]


def test_split_t5_batch_equals_alone():
    call = reference("t5-split", "pipeline_text2text-generation.json")["calls"][0]
    p = pipe("mlx")
    assert p(call["inputs"], batch_size=2, **call["call_kwargs"]) == call["outputs"]
