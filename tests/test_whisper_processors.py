"""Whisper's logits processors (generation/whisper_processors.py, and processors.py's
SuppressTokens / SuppressTokensAtBegin as Whisper uses them) against transformers', recorded by
tests/support/record_whisper_processors.py: random scores over the whisper fixture's vocabulary
(1924 = <|notimestamps|> + 1 + 1501 timestamps), batches of rows with their own histories and
lengths, under several begin_index / max_initial_timestamp_index / mass-rule / dtype settings.

The processors only replace scores with -inf, so an output is the input with transformers' -inf
mask: -inf must sit exactly where transformers puts it, other scores equal to 1e-6 (they are the
input's own values; 1e-6 is the brief's float32 bound). The mass rule compares float32
log-softmax values, which NumPy and torch round differently; the recorder keeps its two sides
1e-3 apart, so the rounding cannot flip a decision.
"""

import json
import pathlib

import numpy as np
import pytest

from transmuter.backends.numpy import XP as HOST
from transmuter.errors import InputError
from transmuter.generation import processors as P
from transmuter.generation.whisper_processors import WhisperTimestamps, whisper_processors

REFERENCE = pathlib.Path(__file__).resolve().parent / "fixtures" / "whisper" / "references" / \
    "whisper_processors.npz"
DATA = np.load(REFERENCE)
GENERATION = json.loads((REFERENCE.parents[1] / "generation_config.json").read_text())
SETS = sorted({int(k.split("/")[0]) for k in DATA.files if "/" in k})
PROCESSORS = ["timestamps", "suppress", "at_begin", "chain"]  # the recorded masks' order


def recorded(n):
    meta = json.loads(str(DATA[f"{n}/meta"]))
    ids, lengths = DATA[f"{n}/ids"], DATA[f"{n}/lengths"]
    state = P.State(ids, lengths, np.full_like(lengths, meta["begin_index"]),
                    np.full_like(lengths, 448))
    scores = (DATA[f"{n}/scores_x4"].astype(np.float32) / 4).astype(meta["dtype"])
    masks = np.unpackbits(DATA[f"{n}/masks"], axis=-1, count=meta["vocab"]).astype(bool)
    return meta, state, scores, masks


def processors(meta):
    config = dict(GENERATION, max_initial_timestamp_index=meta["max_initial_timestamp_index"],
                  _detect_timestamp_from_logprob=meta["detect_timestamp_from_logprob"])
    timestamps = WhisperTimestamps.from_config(config)
    begin, suppress, chained = whisper_processors(config, return_timestamps=True)
    return {"timestamps": [timestamps], "suppress": [suppress], "at_begin": [begin],
            "chain": [begin, suppress, chained]}


def apply(xp, procs, state, scores):
    for proc in procs:
        scores = proc(xp, state, scores)
    return scores


def expect(got, scores, mask):
    assert got.dtype == scores.dtype and got.shape == scores.shape
    np.testing.assert_array_equal(np.isneginf(got), mask)
    np.testing.assert_allclose(got[~mask], scores[~mask], rtol=0, atol=1e-6)


@pytest.mark.parametrize("n", SETS)
@pytest.mark.parametrize("name", PROCESSORS)
def test_equal_to_transformers(n, name):
    meta, state, scores, masks = recorded(n)
    got = apply(HOST, processors(meta)[name], state, scores)
    expect(got, scores, masks[:, PROCESSORS.index(name)])


def test_the_cases_cover_every_rule():
    """The recorded masks exercise each rule (else the comparisons above prove little): rows
    counted over all sets, from transformers' timestamp masks."""
    begin = GENERATION["no_timestamps_token_id"] + 1
    count = dict.fromkeys(["initial window", "mass rule", "text wins", "no timestamp after",
                           "timestamps from the last on", "other widths"], 0)
    for n in SETS:
        meta, state, scores, masks = recorded(n)
        ts, first = masks[:, 0], state.lengths == state.prompt_lengths
        text_banned, stamps = ts[:, :begin].all(1), ts[:, begin:]
        if meta["max_initial_timestamp_index"] is not None:
            window = begin + meta["max_initial_timestamp_index"] + 1
            count["initial window"] += int((first & ts[:, window:].all(1)
                                            & ~ts[:, begin:window].all(1)).sum())
        count["mass rule"] += int((~first & text_banned & ~stamps.all(1)).sum())
        count["text wins"] += int((~first & ~text_banned).sum())
        count["no timestamp after"] += int((~first & stamps.all(1)).sum())
        count["timestamps from the last on"] += int((stamps[:, 0] & ~stamps.all(1)).sum())
        count["other widths"] += len(set(state.lengths.tolist())) - 1
    assert min(count.values()) >= 3, count


def test_from_config_validates():
    with pytest.raises(InputError, match="no_timestamps_token_id"):
        WhisperTimestamps.from_config({"eos_token_id": 3})
    with pytest.raises(InputError, match="eos_token_id"):
        WhisperTimestamps.from_config({"no_timestamps_token_id": 5, "eos_token_id": [1, 2]})
    with pytest.raises(InputError, match="max_initial_timestamp_index"):
        WhisperTimestamps(5, 1, max_initial_timestamp_index=-1)
    assert WhisperTimestamps.from_config({"no_timestamps_token_id": 5, "bos_token_id": 2}).eos == 2
    assert whisper_processors({}) == []


def test_whisper_processors_jit_under_jax():
    import jax

    from transmuter.backends.jax import JaxNamespace
    meta, state, scores, masks = recorded(0)
    procs = processors(meta)["chain"]
    with jax.enable_x64(True):
        got = jax.jit(lambda st, x: apply(JaxNamespace(), procs, P.State(*st), x))(
            tuple(state), scores)
    expect(np.asarray(got), scores, masks[:, PROCESSORS.index("chain")])
