"""Whisper's token timestamps from the decoder's cross-attentions: transformers'
``WhisperGenerationMixin._extract_token_timestamps`` (4.57) in NumPy, for word timestamps
(``return_timestamps="word"``; the tokenizer's ``_decode_asr`` then groups tokens into words,
pipelines/audio/whisper/text.py).

    layers = stack_steps(steps)            # steps: per decode step, per layer [B, H, n, F]
    times = token_timestamps(layers, generation_config["alignment_heads"],
                             num_frames=[100], num_input_ids=len(prompt))   # float32 [B, T + 1]

The alignment heads' attention (probabilities: the softmax is already applied) is cut to the
audio's encoder frames, normalised over the tokens (mean / std), median-filtered along time,
averaged over the heads, and dynamic time warping aligns tokens to frames; a token's time is the
frame where the path first reaches it. The prompt's tokens get 0.0 and the last token (never fed
back, so without a row) repeats the time before it. Every step follows transformers' operation by
operation (float32 where it works in float32, the DTW's cost in float32 over a float64 matrix), so
the times are the same floats.
"""

import numpy as np

from ....errors import InputError


def stack_steps(steps):
    """One array per decoder layer, [B, H, tokens, F], from the decode steps' outputs (each a list
    of per-layer cross-attentions [B, H, n, F]: the prompt's n rows first, then one row a step),
    concatenated along the tokens as transformers concatenates ``generate``'s
    ``cross_attentions``."""
    steps = list(steps)
    if not steps or not all(isinstance(s, (list, tuple)) and s for s in steps):
        raise InputError("steps must be a non-empty list of decode steps, each a non-empty list "
                         "of per-layer cross-attentions [batch, heads, tokens, frames]")
    layers = len(steps[0])
    if any(len(s) != layers for s in steps):
        raise InputError(f"every decode step needs the same {layers} layers of cross-attentions, "
                         f"got {[len(s) for s in steps]}")
    return [np.concatenate([np.asarray(s[layer], np.float32) for s in steps], axis=2)
            for layer in range(layers)]


def token_timestamps(cross_attentions, alignment_heads, num_frames=None, time_precision=0.02,
                     num_input_ids=0, median_filter_width=7, beam_indices=None):
    """Seconds of each token of the sequences, float32 [batch, tokens + 1] (transformers'
    ``_extract_token_timestamps``; ``generate`` calls it with the default ``time_precision``
    0.02 and ``num_input_ids`` the prompt's length).

    ``cross_attentions``: per decoder layer, float [rows, heads, tokens, frames] (stack_steps).
    ``alignment_heads``: ``[[layer, head], ...]`` (generation_config.json).
    ``num_frames``: None, an int, or one per row (repeated when there are several sequences a
    row): the mel frames of the audio, the feature extractor's ``attention_mask`` summed; the
    attention is cut to ``num_frames // 2`` encoder frames.
    ``num_input_ids``: the prompt's length; its rows are left out of the alignment.
    ``median_filter_width``: the model config's (odd; 7 by default).
    ``beam_indices``: beam search's ``[batch, steps]`` (-1 past a sequence's end): each
    sequence's rows are taken from the beam that made its token."""
    weights = _alignment_weights(cross_attentions, alignment_heads)
    num_input_ids = _count("num_input_ids", num_input_ids)
    if not isinstance(median_filter_width, (int, np.integer)) or median_filter_width <= 0 or \
            median_filter_width % 2 != 1:
        raise InputError(f"median_filter_width must be an odd number, got {median_filter_width!r}")
    if not isinstance(time_precision, (int, float, np.floating)) or not time_precision > 0:
        raise InputError(f"time_precision must be seconds > 0, got {time_precision!r}")
    rows = weights.shape[2]
    if beam_indices is not None:
        weights, length = _follow_beams(weights, beam_indices, num_input_ids)
        rows = length or rows  # transformers' `weight_length or ...`: no beam step, every row
    batch = weights.shape[0]
    frames = _frames(num_frames, batch, weights.shape[3])
    timestamps = np.zeros((batch, rows + 1), np.float32)
    weights = weights[:, :, num_input_ids:, :]
    if weights.shape[2] == 0:  # nothing fed after the prompt: every token at 0.0
        return timestamps
    for b in range(batch):
        matrix = _smoothed(weights[b, :, :, :frames[b]], median_filter_width)
        text, time = dynamic_time_warping(-matrix.astype(np.float64))
        jumps = np.pad(np.diff(text), (1, 0), constant_values=1).astype(bool)
        jump_times = time[jumps] * time_precision
        timestamps[b] = np.concatenate([np.zeros(num_input_ids), jump_times, jump_times[-1:]])
    return timestamps


def _alignment_weights(cross_attentions, alignment_heads):
    """The alignment heads' attention, float32 [rows, heads, tokens, frames]."""
    if isinstance(cross_attentions, np.ndarray) or not hasattr(cross_attentions, "__len__") or \
            not len(cross_attentions):
        raise InputError("cross_attentions must be a list with one array per decoder layer, "
                         "[batch, heads, tokens, frames] (stack_steps makes it from the steps)")
    layers = [np.asarray(a, np.float32) for a in cross_attentions]
    shapes = {a.shape for a in layers}
    if len(shapes) != 1 or layers[0].ndim != 4:
        raise InputError("each layer's cross-attentions must be [batch, heads, tokens, frames], "
                         f"all of one shape; got {sorted(shapes)}")
    heads = layers[0].shape[1]
    try:
        pairs = [(int(layer), int(head)) for layer, head in alignment_heads]
    except (TypeError, ValueError):
        raise InputError(f"alignment_heads must be [[layer, head], ...], got "
                         f"{alignment_heads!r:.80}") from None
    bad = [p for p in pairs if not (0 <= p[0] < len(layers) and 0 <= p[1] < heads)]
    if not pairs or bad:
        raise InputError(f"alignment_heads {bad or pairs} do not fit the cross-attentions' "
                         f"{len(layers)} layers of {heads} heads")
    return np.stack([layers[layer][:, head] for layer, head in pairs], axis=1)


def _follow_beams(weights, beam_indices, num_input_ids):
    """transformers' beam gather: the real length is the longest sequence's, the prompt's rows
    come from each sequence's first beam, -1 (past the end) reads beam 0."""
    beams = np.asarray(beam_indices)
    if beams.ndim != 2 or not np.issubdtype(beams.dtype, np.integer):
        raise InputError(f"beam_indices must be ints [batch, steps], got {beams.dtype} "
                         f"{beams.shape}")
    length = int((beams != -1).sum(-1).max()) if beams.size else 0
    beams = beams[:, :length]
    if num_input_ids > 1:
        length += num_input_ids - 1
        beams = np.concatenate([np.repeat(beams[:, :1], num_input_ids - 1, axis=1), beams], axis=1)
    beams = np.where(beams == -1, 0, beams)
    if beams.shape[1] > weights.shape[2] or (beams.size and beams.max() >= weights.shape[0]):
        raise InputError(f"beam_indices ({beams.shape[1]} rows of beams up to {beams.max()}) do "
                         f"not fit the cross-attentions' {weights.shape[0]} beams of "
                         f"{weights.shape[2]} tokens")
    steps = np.arange(beams.shape[1])
    gathered = weights[beams, :, steps[None, :], :]  # [batch, rows, heads, frames]
    return gathered.transpose(0, 2, 1, 3), length


def _frames(num_frames, batch, available):
    """Encoder frames kept per row."""
    if num_frames is None:
        return [available] * batch
    if isinstance(num_frames, (int, np.integer)) and not isinstance(num_frames, bool):
        return [_count("num_frames", num_frames) // 2] * batch
    counts = np.asarray(num_frames).reshape(-1)
    if not counts.size or not np.issubdtype(counts.dtype, np.integer) or batch % counts.size or \
            (counts < 0).any():
        raise InputError(f"num_frames must be an int or one int per row ({batch} rows, or a "
                         f"divisor of that), got {num_frames!r:.80}")
    return [int(n) // 2 for n in np.repeat(counts, batch // counts.size)]


def _count(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise InputError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


def _smoothed(matrix, filter_width):
    """[heads, tokens, frames] -> [tokens, frames]: normalised over the tokens, median-filtered
    along time, averaged over the heads (float32, as transformers)."""
    # torch's std / mean accumulate a float32 tensor in double: round once to float32
    mean = matrix.astype(np.float64).mean(axis=-2, keepdims=True).astype(np.float32)
    std = matrix.astype(np.float64).std(axis=-2, keepdims=True).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):  # one token: 0 / 0 as transformers
        matrix = (matrix - mean) / std
    matrix = median_filter(matrix, filter_width)
    return matrix.mean(axis=0, dtype=np.float32)


def median_filter(inputs, filter_width):
    """transformers' ``_median_filter``: the median of each window of ``filter_width`` along
    the last axis, the edges padded by reflection; too short an axis is returned as it is."""
    pad = filter_width // 2
    if inputs.shape[-1] <= pad:
        return inputs
    padded = np.pad(inputs, [(0, 0)] * (inputs.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, filter_width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]  # NaN sorts last, as torch.sort


def dynamic_time_warping(matrix):
    """transformers' ``_dynamic_time_warping`` on a float64 [tokens, frames] cost matrix:
    (text_indices, time_indices) of the cheapest monotonic path. The cost table is float32 as
    there; cells are filled an anti-diagonal at a time (each depends only on the two before),
    with the same comparisons, so ties and NaN fall the same way as transformers' loop."""
    rows, cols = matrix.shape
    cost = np.full((rows + 1, cols + 1), np.inf, np.float32)
    trace = -np.ones((rows + 1, cols + 1), np.float32)
    cost[0, 0] = 0
    for d in range(2, rows + cols + 1):
        i = np.arange(max(1, d - cols), min(rows, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        first = (c0 < c1) & (c0 < c2)
        second = ~first & (c1 < c0) & (c1 < c2)
        c = np.where(first, c0, np.where(second, c1, c2))
        cost[i, j] = matrix[i - 1, j - 1] + c.astype(np.float64)
        trace[i, j] = np.where(first, 0, np.where(second, 1, 2))
    return _backtrace(trace)


def _backtrace(trace):
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = trace.shape[0] - 1, trace.shape[1] - 1
    text, time = [], []
    while i > 0 or j > 0:
        text.append(i - 1)
        time.append(j - 1)
        step = trace[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text)[::-1], np.array(time)[::-1]
