"""A call that compiles says so (engine/compile_notice.py, pipelines/compile_progress.py): a
compile still running after SLOW_COMPILE_SECS is announced with its shape and count, and the
first call of a pipeline that compiled says once that later calls of those shapes are fast."""

import logging

import transmuter
from transmuter.engine import compile_notice

from .fixtures import ROOT

TEXTS = ["hi", "a longer sentence with several more words in it, and then a few more"]


def test_compiles_are_announced_and_the_first_call_says_later_ones_are_fast(monkeypatch,
                                                                             caplog):
    monkeypatch.setattr(compile_notice, "SLOW_COMPILE_SECS", 0.0)  # every compile is "slow"
    pipe = transmuter.pipeline("text-embedding", ROOT / "bert-sentence-transformers",
                               batch_size=4, compile_cache=False)
    with caplog.at_level(logging.INFO, logger="transmuter"):
        pipe(TEXTS * 2)  # one call of 4 rows x 24 tokens (a tiny model's calls never split)
        first = [r.getMessage() for r in caplog.records]
        caplog.clear()
        pipe(TEXTS * 2)  # the same shapes: nothing compiles, nothing is said
        assert not caplog.records
        pipe([TEXTS[0]])  # a new shape: announced, but the first call's note is not repeated
        again = [r.getMessage() for r in caplog.records]
    compiling = [m for m in first if "compiling" in m]
    assert compiling and all("shapes)" in m for m in compiling)
    assert "text-embedding: compiling 4×24 (1 of ~" in compiling[0]
    assert sum("later calls of those shapes are fast" in m for m in first) == 1
    assert any("compiling 1×16" in m for m in again)
    assert not any("later calls" in m for m in again)


def test_a_compile_is_logged_where_no_pipeline_reports_it(monkeypatch, caplog):
    monkeypatch.setattr(compile_notice, "SLOW_COMPILE_SECS", 0.0)
    model = transmuter.load(ROOT / "bert" / "onnx" / "model.onnx", compile_cache=False)
    ids = [[1, 2, 3]]
    with caplog.at_level(logging.INFO, logger="transmuter.compile"):
        model(input_ids=ids, attention_mask=[[1, 1, 1]], token_type_ids=[[0, 0, 0]])
    assert "compiling 1×3 (each new shape compiles once" in caplog.text
