"""text2text-generation, summarization, translation against transformers, for the encoder-decoder
fixtures (T5, BART, Marian): the encoder once, the merged decoder with a growing cache.

References: pipeline_text2text-generation.json (transformers' pipeline, whose default is beam search
with 4 beams) and generate_beam.json (transformers' ``generate``: greedy and 3 beams with
length_penalty / early_stopping / eos variants; tests/support/record_generation.py). Token ids are
compared exactly: greedy and beam choices are argmax/top-k decisions, and our logits match
onnxruntime's to ~1e-5 on these graphs, far from the recorded sequences' score gaps.

Each step of a growing cache is a new shape that compiles once; the tests share shapes (one
pipeline per fixture, sources padded to 32, beams 3 and 4 padded to 4 rows) to keep that cheap.
"""

import json
import os

import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.generation import GenerationConfig

from .fixtures import pipeline_references

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SEQ2SEQ = ["t5", "bart", "marian"]
_PIPES = {}


def pipe(name, task="text2text-generation"):
    if name == "marian":  # MarianTokenizer reads source.spm with sentencepiece
        pytest.importorskip("sentencepiece", reason="Marian's tokenizer needs sentencepiece")
    key = (name, task)
    if key not in _PIPES:
        base = _PIPES.get((name, "text2text-generation"))
        if base is None:
            base = transmuter.pipeline("text2text-generation", os.path.join(FIXTURES, name),
                                       variant="fp32")
            _PIPES[(name, "text2text-generation")] = base
        # other tasks over the same decoder share its generator (and its compiled steps)
        _PIPES[key] = base if task == "text2text-generation" else transmuter.pipeline(
            task, base.model, tokenizer=base.tokenizer, config=os.path.join(FIXTURES, name))
    return _PIPES[key]


def reference(name, file):
    with open(os.path.join(FIXTURES, name, "references", file)) as f:
        return json.load(f)


# nllb's references need src_lang / tgt_lang: test_translation_nllb.py runs them
@pytest.mark.parametrize("name", [f for f, _ in pipeline_references({"text2text-generation"})
                                  if f != "nllb"])
def test_pipeline_equals_transformers_pipeline(name):
    call = reference(name, "pipeline_text2text-generation.json")["calls"][0]
    assert pipe(name)(call["inputs"], batch_size=1, **call["call_kwargs"]) == call["outputs"]


def test_batched_equals_alone():
    # the recorded outputs are of each input alone; both inputs in one batch give the same
    call = reference("t5", "pipeline_text2text-generation.json")["calls"][0]
    assert pipe("t5")(call["inputs"], batch_size=2, **call["call_kwargs"]) == call["outputs"]


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_greedy_and_beams_equal_transformers_generate(name):
    p = pipe(name)
    files = (p.generation_file, p.config)
    for case in reference(name, "generate_beam.json")["cases"]:
        assert p.tokenizer.encode(case["prompt"]).ids == case["prompt_ids"]
        config = GenerationConfig.from_dicts(*files, **case["kwargs"])
        encoded, start = p.generator.encode_ids([case["prompt_ids"]]), [p.generator.start_ids(config)]
        if config.num_beams > 1:
            got = p.generator.beam_search(start, config, encoded)[0][0]
        else:
            got = [p.generator.generate(start, config, encoded)[0]]
        assert got == case["sequences"], case["kwargs"]


def test_task_names_and_output_keys():
    call = reference("t5", "pipeline_text2text-generation.json")["calls"][0]
    text, kwargs = call["inputs"][0], call["call_kwargs"]
    expected = call["outputs"][0][0]["generated_text"]
    assert pipe("t5", "summarization")(text, **kwargs) == [{"summary_text": expected}]
    assert pipe("t5", "translation_en_to_de")(text, **kwargs) == [{"translation_text": expected}]
    beams = pipe("t5")(text, num_return_sequences=2, return_tensors=True, **kwargs)
    assert len(beams) == 2 and all(b["generated_token_ids"][0] == 0 for b in beams)  # start
    # token counts by hand: 22 source tokens padded to 32, 8 new tokens, no eos (the reference)
    summary = pipe("t5")(text, token_summary=True, **kwargs)[0]["token_summary"]
    assert summary == {"input": 22, "output": 8, "padding": 10}
    with pytest.raises(Exception, match="takes no option"):
        pipe("t5")(text, frobnicate=1)
    with pytest.raises(Exception, match="src_lang"):
        pipe("t5", "translation")(text, src_lang="eng_Latn", tgt_lang="fra_Latn")
    with pytest.raises(InputError, match="empty"):
        pipe("t5")(" ")
    with pytest.raises(Exception, match="truncation=True"):
        pipe("bart")("word " * 200)  # BART's 128 learned positions


def test_marian_tokenizer_equals_transformers():
    ref = reference("marian", "tokenizer_marian.json")
    tok = pipe("marian").tokenizer
    assert [tok.encode(t).ids for t in ref["texts"]] == ref["ids"]
    assert tok.decode(ref["decode_ids"]) == ref["decoded"]
    assert tok.decode(ref["decode_ids"], skip_special_tokens=True) == ref["decoded_skip"]


def test_encoder_takes_the_pipeline_variant():
    # variant="quantized" must load encoder_model_quantized.onnx with the quantized decoder,
    # not the fp32 encoder (loading only: no generation, nothing compiles)
    p = transmuter.pipeline("text2text-generation", os.path.join(FIXTURES, "t5"),
                            variant="quantized")
    for graph in (p.model.graph, p.generator.encoder.graph):
        assert any(n.op_type == "DynamicQuantizeLinear" for n in graph.nodes)
