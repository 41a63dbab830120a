"""Records transformers' Whisper logits processors (``WhisperTimeStampLogitsProcessor``,
``SuppressTokensLogitsProcessor``, ``SuppressTokensAtBeginLogitsProcessor`` and the chain
Whisper's generate builds) on random scores over the whisper fixture's vocabulary, for
tests/test_whisper_processors.py.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_processors.py

Each set is a batch sharing one configuration (begin_index = its prompt length,
max_initial_timestamp_index, _detect_timestamp_from_logprob, dtype); its rows have histories of
every kind (the first generated token, after one timestamp, after a pair, text then a timestamp,
text after timestamps, no timestamp yet, random) and their own lengths, padded with stray
timestamps that must be ignored. transformers runs each row on its own ids (``ids[k, :length]``:
its processors see one width per call). The timestamp columns get a random shift so the
mass rule goes both ways; rows whose two sides of that rule lie within 1e-3 are redrawn, so
float32 rounding cannot decide them.

Scores are multiples of 1/4 stored as int8 (exact in float16 and float32); the processors only
ever replace scores with -inf (checked here), so each output is stored as its -inf mask, packed.
Writes tests/fixtures/whisper/references/whisper_processors.npz (transformers 4.57.6).
"""

import json
import pathlib

import numpy as np
import torch
import transformers
from transformers.generation import logits_process as LP

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "whisper"
OUT = FIXTURE / "references" / "whisper_processors.npz"
SETS = [  # begin_index, max_initial_timestamp_index, _detect_timestamp_from_logprob, dtype
    (3, 50, True, "float32"), (3, None, True, "float32"), (1, 0, True, "float32"),
    (4, 50, False, "float32"), (3, 50, True, "float16"), (2, 3, True, "float32"),
    (5, 50, True, "float32")]
ROWS, NEW = 16, 12  # rows per set, generated tokens at most
KINDS = ["first", "one_timestamp", "pair", "text_then_timestamp", "text_after_timestamps",
         "no_timestamp", "random", "closing_repeat"]


def history(kind, rng, begin, eos):
    """Generated tokens of ``kind`` (timestamps rising from a random start)."""
    def text(n):
        return [int(t) for t in rng.integers(0, eos, n)]
    t = begin + int(rng.integers(0, 60))

    def stamp():
        nonlocal t
        t += int(rng.integers(0, 40))
        return t
    if kind == "first":
        return []
    if kind == "one_timestamp":
        return [stamp()]
    if kind == "pair":
        return [stamp()] + text(int(rng.integers(1, 4))) + [stamp(), stamp()]
    if kind == "text_then_timestamp":
        return [stamp()] + text(int(rng.integers(1, 5))) + [stamp()]
    if kind == "text_after_timestamps":
        return [stamp()] + text(2) + [stamp(), stamp()] + text(int(rng.integers(1, 4)))
    if kind == "no_timestamp":
        return text(int(rng.integers(1, NEW)))
    if kind == "closing_repeat":  # a segment closed on the timestamp it opened with
        s = stamp()
        return [s] + text(2) + [s]
    kinds = rng.choice(3, size=int(rng.integers(1, NEW)), p=[0.5, 0.4, 0.1])
    return [int(rng.integers(0, eos)) if k == 0 else int(rng.integers(begin, begin + 1501))
            if k == 1 else int(rng.choice([eos, begin - 1, begin - 2])) for k in kinds]


def margin(scores, begin):
    """The mass rule's two sides (float64), after the masks: timestamp logsumexp - best text."""
    x = scores.astype(np.float64)
    ts, text = x[begin:], x[:begin]
    if not np.isfinite(ts).any() or not np.isfinite(text).any():
        return np.inf  # one side is -inf: no rounding decides it
    return np.logaddexp.reduce(ts) - text.max()  # log-softmax's shift cancels


def record_set(rng, generation_config, begin_index, max_initial, detect, dtype):
    config = transformers.GenerationConfig(**generation_config.to_dict())
    config.max_initial_timestamp_index = max_initial
    ts_proc = LP.WhisperTimeStampLogitsProcessor(config, begin_index=begin_index,
                                                 _detect_timestamp_from_logprob=detect)
    suppress = LP.SuppressTokensLogitsProcessor(config.suppress_tokens)
    at_begin = LP.SuppressTokensAtBeginLogitsProcessor(config.begin_suppress_tokens, begin_index)
    begin, eos = ts_proc.timestamp_begin, ts_proc.eos_token_id
    vocab = begin + 1501
    width = begin_index + NEW
    ids = rng.integers(begin, vocab, (ROWS, width))  # stray timestamps past each row's length
    # a decoder prompt: special tokens, or previous text with timestamps (long-form decoding
    # conditions on the previous segment), which the rules must not count
    ids[:, :begin_index] = rng.integers(eos, begin, (ROWS, begin_index))
    ids[::2, 1:begin_index] = rng.integers(0, vocab, (ROWS // 2, begin_index - 1))
    lengths, q, masks = np.zeros(ROWS, np.int64), np.zeros((ROWS, vocab), np.int8), []
    for k in range(ROWS):
        seq = history(KINDS[k % len(KINDS)], rng, begin, eos)
        ids[k, begin_index:begin_index + len(seq)] = seq
        lengths[k] = begin_index + len(seq)
        row_ids = torch.tensor(ids[k:k + 1, :lengths[k]])
        while True:  # a shift of the timestamp columns that the rule decides clearly
            q[k] = np.clip(rng.normal(0, 12, vocab), -128, 127).astype(np.int8)
            q[k, begin:] = np.clip(q[k, begin:] + int(rng.integers(-48, 16)), -128, 127)
            scores = torch.tensor(q[k:k + 1].astype(np.float32) / 4).to(getattr(torch, dtype))
            masked = LP.WhisperTimeStampLogitsProcessor(
                config, begin_index=begin_index, _detect_timestamp_from_logprob=False)
            alone = masked(row_ids, scores)
            chained = masked(row_ids, suppress(row_ids, at_begin(row_ids, scores)))
            if min(abs(margin(x[0].float().numpy(), begin)) for x in (alone, chained)) > 1e-3:
                break
        chain = ts_proc(row_ids, suppress(row_ids, at_begin(row_ids, scores)))
        outs = [ts_proc(row_ids, scores), suppress(row_ids, scores), at_begin(row_ids, scores),
                chain]
        for out in outs:  # only ever -inf in place of a score
            kept = torch.isfinite(out)
            assert out.dtype == scores.dtype and torch.equal(out[kept], scores[kept])
            assert bool((out[~kept] == -float("inf")).all())
        masks.append([np.packbits(~torch.isfinite(out)[0].numpy()) for out in outs])
    masks = np.array(masks)  # [rows, 4 processors, packed vocab]
    meta = {"begin_index": begin_index, "max_initial_timestamp_index": max_initial,
            "detect_timestamp_from_logprob": detect, "dtype": dtype, "vocab": vocab}
    return {"ids": ids, "lengths": lengths, "scores_x4": q, "masks": masks,
            "meta": np.array(json.dumps(meta))}


if __name__ == "__main__":
    generation_config = transformers.GenerationConfig.from_pretrained(FIXTURE)
    vocab_size = json.loads((FIXTURE / "config.json").read_text())["vocab_size"]
    assert vocab_size == generation_config.no_timestamps_token_id + 1 + 1501
    rng = np.random.default_rng(0)
    arrays = {}
    for n, (begin_index, max_initial, detect, dtype) in enumerate(SETS):
        for key, value in record_set(rng, generation_config, begin_index, max_initial, detect,
                                     dtype).items():
            arrays[f"{n}/{key}"] = value
    arrays["how_made"] = np.array(
        "transformers " + transformers.__version__ + " WhisperTimeStampLogitsProcessor(config, "
        "begin_index), SuppressTokensLogitsProcessor, SuppressTokensAtBeginLogitsProcessor and "
        "their chain [at_begin, suppress, timestamps] per row; masks order: timestamps, "
        "suppress, at_begin, chain")
    arrays["generation_config"] = np.array(json.dumps(generation_config.to_diff_dict()))
    np.savez_compressed(OUT, **arrays)
    print(OUT, OUT.stat().st_size, "bytes")
