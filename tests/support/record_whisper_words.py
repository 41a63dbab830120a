"""Records transformers' Whisper token timestamps (``WhisperGenerationMixin._extract_token_timestamps``:
the alignment heads' cross-attentions, the num_frames cut, mean / std normalisation, median filter,
DTW, jump times) on seeded synthetic cross-attentions, for tests/test_whisper_words.py.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_words.py

Each case is a "generate output" of ``layers`` tensors [rows, heads, tokens, frames]: softmax over
the frames of a noisy monotonic alignment (so the DTW path moves), stored as float16 to keep the
file small (the values handed to transformers are those float16 values as float32). Cases cover
one row and batches, num_frames None / an int / one per row (equal, different, repeated for
several sequences a row, a torch tensor as generate has it), one generated row (0 / 0 in the
normalisation), only the prompt, audio too short for the median filter, another filter width and
time precision, constant, equal-in-time and quantised attention (NaN and ties through the DTW),
and beam search (beam_indices with -1 past the end, prompts of 1 and 4 tokens).

Writes tests/fixtures/whisper/references/whisper_words.npz (transformers 4.57.6, torch CPU):
``{case}/layer{l}`` float16, ``{case}/timestamps`` float32, ``{case}/beam_indices`` int64 and
``{case}/num_frames`` int64 where given, and ``meta`` (JSON: each case's options).
"""

import json
import pathlib
import sys
import types

import numpy as np
import torch
from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from families_vision_audio import save_npz  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "whisper" / "references" / "whisper_words.npz"

# name: rows, layers, heads, prompt (num_input_ids), tokens (rows of attention), frames, options
CASES = {
    "one_row": dict(rows=1, layers=2, heads=2, prompt=3, tokens=10, frames=50,
                    alignment_heads=[[1, 0], [1, 1]]),
    "batch_int_frames": dict(rows=3, layers=3, heads=4, prompt=4, tokens=16, frames=50,
                             alignment_heads=[[2, 1], [0, 3], [1, 2]], num_frames=64),
    "per_row_frames": dict(rows=2, layers=2, heads=3, prompt=3, tokens=12, frames=40,
                           alignment_heads=[[0, 0], [1, 2]], num_frames=[80, 46]),
    "same_frames_list": dict(rows=2, layers=2, heads=2, prompt=3, tokens=12, frames=40,
                             alignment_heads=[[1, 0], [1, 1]], num_frames=[60, 60]),
    "frames_tensor": dict(rows=2, layers=2, heads=2, prompt=4, tokens=11, frames=50,
                          alignment_heads=[[0, 1], [1, 1]], num_frames=[100, 100],
                          num_frames_tensor=True),
    "frames_tensor_different": dict(rows=2, layers=2, heads=2, prompt=4, tokens=11, frames=50,
                                    alignment_heads=[[1, 0]], num_frames=[100, 57],
                                    num_frames_tensor=True),
    "repeated_frames": dict(rows=4, layers=2, heads=2, prompt=3, tokens=9, frames=40,
                            alignment_heads=[[1, 0], [0, 1]], num_frames=[70, 31]),
    "one_generated_row": dict(rows=2, layers=2, heads=2, prompt=4, tokens=5, frames=30,
                              alignment_heads=[[1, 0], [1, 1]]),
    "prompt_only": dict(rows=2, layers=2, heads=2, prompt=4, tokens=4, frames=30,
                        alignment_heads=[[1, 1]]),
    "short_audio_no_filter": dict(rows=1, layers=2, heads=2, prompt=3, tokens=8, frames=50,
                                  alignment_heads=[[1, 0], [1, 1]], num_frames=7),
    "short_audio_filtered": dict(rows=1, layers=2, heads=2, prompt=3, tokens=8, frames=50,
                                 alignment_heads=[[1, 0], [1, 1]], num_frames=8),
    "width5_precision": dict(rows=2, layers=2, heads=3, prompt=1, tokens=13, frames=45,
                             alignment_heads=[[0, 2], [1, 0], [1, 2]], median_filter_width=5,
                             time_precision=0.03),
    "width1": dict(rows=1, layers=2, heads=2, prompt=2, tokens=9, frames=30,
                   alignment_heads=[[1, 1]], median_filter_width=1),
    "constant": dict(rows=1, layers=2, heads=2, prompt=3, tokens=9, frames=30,
                     alignment_heads=[[1, 0], [1, 1]], kind="constant"),
    "tied_columns": dict(rows=2, layers=2, heads=2, prompt=3, tokens=12, frames=30,
                         alignment_heads=[[1, 0], [0, 1]], kind="tied_columns"),
    "quantised_ties": dict(rows=2, layers=2, heads=2, prompt=3, tokens=12, frames=30,
                           alignment_heads=[[1, 0], [1, 1]], kind="quantised"),
    "long_audio": dict(rows=1, layers=2, heads=2, prompt=4, tokens=24, frames=200,
                       alignment_heads=[[1, 0], [1, 1]], num_frames=400),
    "beams": dict(rows=6, layers=2, heads=2, prompt=4, tokens=12, frames=40,
                  alignment_heads=[[1, 0], [1, 1]], beams=3, batch=2),
    "beams_prompt_one": dict(rows=4, layers=2, heads=3, prompt=1, tokens=10, frames=40,
                             alignment_heads=[[1, 2], [0, 0]], beams=2, batch=2),
    "beams_per_row_frames": dict(rows=4, layers=2, heads=2, prompt=3, tokens=10, frames=50,
                                 alignment_heads=[[1, 0], [1, 1]], beams=2, batch=2,
                                 num_frames=[100, 62]),
}


def attention(rng, rows, layers, heads, tokens, frames, kind="aligned", **_):
    """Per layer [rows, heads, tokens, frames], rows summing to 1 (before the float16 rounding)."""
    if kind == "constant":
        return [np.full((rows, heads, tokens, frames), 1 / frames, np.float16) for _ in range(layers)]
    if kind == "tied_columns":  # every frame alike: every DTW cost comparison along time ties
        return [np.repeat(rng.uniform(0.5, 1.5, (rows, heads, tokens, 1)) / frames, frames, axis=-1)
                .astype(np.float16) for _ in range(layers)]
    out = []
    for _ in range(layers):
        rate = rng.uniform(0.5, 1.5) * frames / tokens
        centre = np.arange(tokens)[:, None] * rate + rng.normal(0, 2, (rows, heads, tokens, 1))
        # clipped far from the centre: no frame underflows to 0 for every token in float16 (a
        # column of equal values has std 0, and its NaN would flood the DTW; case "constant")
        distance = np.maximum(-((np.arange(frames) - centre) ** 2) / rng.uniform(4, 30), -6)
        logits = distance + rng.normal(0, 1, (rows, heads, tokens, frames))
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        if kind == "quantised":  # few distinct values: equal costs in the DTW; the last token
            p = np.round(p * 16) / 16  # apart so that no column is constant
            p[:, :, -1] += 1 / 32
        out.append(p.astype(np.float16))
    return out


def beam_indices(rng, batch, beams, steps):
    """Beam search's [batch, steps]: a beam row a step, -1 after each sequence's end (one ends early)."""
    idx = np.stack([b * beams + rng.integers(0, beams, steps) for b in range(batch)])
    idx[0, steps - 3:] = -1
    return idx.astype(np.int64)


def transformers_timestamps(layers, spec, beams=None):
    """transformers' _extract_token_timestamps on a stand-in for generate's output: the steps as
    generate returns them (the prompt's rows first, then one row a step)."""
    steps = [spec["prompt"]] + [1] * (spec["tokens"] - spec["prompt"])
    t = [torch.from_numpy(a.astype(np.float32)) for a in layers]
    splits = [torch.split(x, steps, dim=2) for x in t]
    cross = tuple(tuple(s[k] for s in splits) for k in range(len(steps)))
    batch = spec.get("batch", spec["rows"])
    out = _Output(cross_attentions=cross, sequences=torch.zeros(batch, spec["tokens"] + 1, dtype=torch.long))
    if beams is not None:
        out["beam_indices"] = torch.from_numpy(beams)
    model = types.SimpleNamespace(config=types.SimpleNamespace(
        decoder_layers=len(layers), median_filter_width=spec.get("median_filter_width", 7)))
    num_frames = spec.get("num_frames")
    if spec.get("num_frames_tensor"):
        num_frames = torch.tensor(num_frames)
    kwargs = {"num_frames": num_frames, "num_input_ids": spec["prompt"]}
    if "time_precision" in spec:
        kwargs["time_precision"] = spec["time_precision"]
    return WhisperGenerationMixin._extract_token_timestamps(model, out, spec["alignment_heads"], **kwargs)


class _Output(dict):
    """generate's ModelOutput as _extract_token_timestamps reads it: attributes and `in`."""

    __getattr__ = dict.__getitem__


def main():
    rng = np.random.default_rng(1234)
    arrays, meta = {}, {}
    for name, spec in CASES.items():
        layers = attention(rng, **spec)
        beams = None
        if "beams" in spec:
            beams = beam_indices(rng, spec["batch"], spec["beams"], spec["tokens"] - spec["prompt"] + 1)
            arrays[f"{name}/beam_indices"] = beams
        times = transformers_timestamps(layers, spec, beams)
        for i, a in enumerate(layers):
            arrays[f"{name}/layer{i}"] = a
        arrays[f"{name}/timestamps"] = times.numpy()
        if spec.get("num_frames") is not None:
            arrays[f"{name}/num_frames"] = np.asarray(spec["num_frames"], np.int64)
        meta[name] = {k: v for k, v in spec.items() if k not in ("rows", "frames")}
        print(f"{name}: {times.shape[1]} stamps, row 0 {np.round(times[0].numpy(), 2).tolist()}")
    arrays["meta"] = np.array(json.dumps(meta))
    save_npz(OUT, arrays)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1e3:.1f} kB, {len(CASES)} cases)")


if __name__ == "__main__":
    main()
