"""Whisper's given prompt, as transformers 4.57's ``WhisperGenerationMixin`` takes it:
``generate_kwargs={"prompt_ids": ids, "prompt_condition_type": ...}``, ``ids`` being
``<|startofprev|>`` and the text's tokens (transformers' ``tokenizer.get_prompt_ids(text)``;
``get_prompt_ids`` below).

The prompt goes before each window's start tokens and is never part of the output. In
sequential long-form decoding ``prompt_condition_type`` says how it meets the previous text
(``condition_on_prev_tokens``, pipelines/audio/whisper/fallback.py):

- ``"first-segment"`` (the default): the prompt's text is the first "previous text" a
  conditioned window repeats after ``<|startofprev|>``, so it is cut with it to the last
  ``max_target_positions // 2 - 1`` tokens (``_prepare_segments``); a window that does not
  condition gets the prompt itself;
- ``"all-segments"`` (needs ``condition_on_prev_tokens=True``): every window starts with the
  whole prompt, then the previous text.

As for conditioning, each row decides by its own windows (transformers by its first row's).
"""

import dataclasses

import numpy as np

from ....errors import PipelineError
from .fallback import conditioned

OPTIONS = ("prompt_ids", "prompt_condition_type")
CONDITION_TYPES = ("first-segment", "all-segments")


@dataclasses.dataclass(frozen=True)
class GivenPrompt:
    ids: tuple = ()
    condition_type: str = "first-segment"

    @classmethod
    def from_options(cls, options, fallback, vocab_size):
        """From the call's options (popped); ``fallback`` tells whether rows condition."""
        ids = options.pop("prompt_ids", None)
        condition_type = options.pop("prompt_condition_type", None) or CONDITION_TYPES[0]
        if condition_type not in CONDITION_TYPES:
            raise PipelineError(f"prompt_condition_type must be one of {', '.join(CONDITION_TYPES)}, "
                                f"got {condition_type!r}")
        if condition_type == "all-segments" and not fallback.condition_on_prev_tokens:
            raise PipelineError("prompt_condition_type='all-segments' puts the prompt before the "
                                "previous text of every window: pass condition_on_prev_tokens=True "
                                "with it")
        return cls(_checked_ids(ids, vocab_size), condition_type)

    def first_windows(self, prev_sot):
        """What a row has kept before its first window: with ``first-segment``, the prompt
        without its ``<|startofprev|>`` (when it starts with the generation config's)."""
        if not self.ids or self.condition_type != "first-segment":
            return []
        ids = list(self.ids)
        return [ids[1:] if prev_sot is not None and ids[0] == prev_sot else ids]

    def window(self, head, start, windows, condition):
        """A window's decoder input: ``start`` (its start tokens) after the prompt and, when the
        row conditions, the previous text of ``windows`` (transformers'
        ``_prepare_decoder_input_ids`` for one row)."""
        if condition and windows and head.no_timestamps is not None:
            bos = list(self.ids) if self.ids and self.condition_type == "all-segments" else None
            return conditioned(head, start, windows, True, bos=bos)
        return list(self.ids) + start


def _checked_ids(ids, vocab_size):
    if ids is None:
        return ()
    try:
        array = np.asarray(ids)
    except Exception:  # noqa: BLE001 - anything NumPy cannot read is refused below
        array = np.asarray([None], dtype=object)
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
        raise PipelineError("prompt_ids must be a non-empty 1-D sequence of token ids (as "
                            "get_prompt_ids(tokenizer, text) makes them: <|startofprev|> and the "
                            f"text's tokens), got {_describe(ids)}")
    bad = array[(array < 0) | (array >= vocab_size)]
    if bad.size:
        raise PipelineError(f"prompt_ids holds {int(bad[0])}, outside this model's vocabulary of "
                            f"{vocab_size} tokens")
    return tuple(int(i) for i in array)


def _describe(ids):
    text = repr(ids)
    return text if len(text) <= 80 else text[:77] + "..."


def get_prompt_ids(tokenizer, text):
    """transformers' ``WhisperTokenizer.get_prompt_ids``: ``<|startofprev|>`` then the tokens of
    ``" " + text.strip()`` (no special tokens), as a NumPy int64 array; a text that encodes to
    a special token is refused."""
    prev = tokenizer.token_to_id("<|startofprev|>")
    if prev is None:
        raise PipelineError("This tokenizer has no <|startofprev|> token: it is not Whisper's")
    if not isinstance(text, str):
        raise PipelineError(f"The prompt text must be a str, got {type(text).__name__}")
    encoding = tokenizer.encode(" " + text.strip(), add_special_tokens=False, truncation=False)
    ids = [int(i) for i in encoding.ids]
    special = next((i for i in ids if i >= _first_special(tokenizer)), None)
    if special is not None:
        raise PipelineError(f"The prompt text encodes to the special token "
                            f"{tokenizer.id_to_token(special)!r}: give plain text")
    return np.array([int(prev)] + ids, np.int64)


def _first_special(tokenizer):
    """The lowest special token id (transformers' ``all_special_ids[0]``: Whisper's
    <|endoftext|>, the first added token)."""
    eos = tokenizer.token_to_id("<|endoftext|>")
    return int(eos if eos is not None else tokenizer.eos_token_id)
