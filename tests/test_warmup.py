"""``pipe.warmup`` and ``transmuter warmup``: the shapes a workload will meet are compiled
before it comes, so its calls compile nothing (counted by the pipeline's compiled function)."""

import pytest

import transmuter
from transmuter import cli
from transmuter.errors import PipelineError
from transmuter.pipelines import shared

from .fixtures import ROOT

TEXTS = ["hi", "a longer sentence with several more words in it, and then a few more"]


def compiles(pipe):
    return shared.of(pipe.model)["compiled"].cache_info().misses


def test_text_warmup_compiles_every_row_count_and_length_bucket_a_call_meets():
    pipe = transmuter.pipeline("text-embedding", ROOT / "bert-sentence-transformers",
                               batch_size=4)
    done = pipe.warmup(TEXTS, progress=False)
    # rows 4, 2, 1 x the buckets from the shortest example's (16) to the longest's (24)
    assert done[:3] == ["4x24", "2x24", "1x24"] and done[-1] == "1x16" and len(done) == 9
    before = compiles(pipe)
    for n in (1, 2, 3, 4):
        pipe([TEXTS[1]] * n)
        pipe([TEXTS[0]] * n)
        pipe(TEXTS[:1] * (n - 1) + TEXTS[1:])
    assert compiles(pipe) == before
    assert pipe.warmup(max_length=20, batch_sizes=[4], progress=False) == ["4x20", "4x16"]


def test_warmup_of_other_tasks_runs_the_examples_at_each_row_count():
    from PIL import Image

    pipe = transmuter.pipeline("image-classification", ROOT / "vit", batch_size=2)
    image = Image.open(ROOT / "vit" / "references" / "image_0.png")
    assert pipe.warmup([image], progress=False) == ["2 x example 0", "1 x example 0"]
    before = compiles(pipe)
    pipe(image)
    pipe([image, image])
    assert compiles(pipe) == before
    with pytest.raises(PipelineError, match="needs example inputs"):
        pipe.warmup()
    with pytest.raises(PipelineError, match="batch_sizes"):
        pipe.warmup([image], batch_sizes=[0])


def test_cli_warmup(capsys):
    model = str(ROOT / "bert-sequence-classification")
    assert cli.main(["warmup", "text-classification", model, "a short text", "-b", "2",
                     "--batch-sizes", "2", "--max-length", "24", "-q"]) == 0
    assert "compiled 3 shapes of text-classification" in capsys.readouterr().err
    assert cli.main(["warmup", "text-classification", model, "--batch-sizes", "x", "-q"]) == 2
    assert "--batch-sizes takes ints" in capsys.readouterr().err
