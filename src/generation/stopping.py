"""Stopping: eos tokens, per-row length limits, and stop strings.

eos and length checks are array expressions over the whole batch; stop strings need the text,
so they decode on the host (the tokens of a row since its prompt)."""

import numpy as np

from ..errors import InputError


def finished(tokens, lengths, max_lengths, eos_token_id, xp=np):
    """bool [B]: rows whose new token is an eos, or that reached their length limit (over the
    array namespace ``xp``: NumPy on the host, jnp inside the device loop)."""
    reached = lengths >= max_lengths
    if not eos_token_id:
        return reached
    eos = xp.asarray(np.asarray(eos_token_id, np.int64))
    return xp.any(tokens[:, None] == eos[None, :], axis=-1) | reached


class StopStrings:
    """A row stops once a stop string ends inside the text of its newest token (so the string
    is complete, as transformers' StopStringCriteria decides), searching only the new text."""

    def __init__(self, stop_strings, decode):
        if decode is None:
            raise InputError("stop_strings need a tokenizer to decode the generated text")
        self.strings, self.decode = list(stop_strings), decode
        self.longest = max(len(s) for s in self.strings)

    def __call__(self, generated):
        """bool per row, for ``generated``: each row's new token ids so far (lists)."""
        out = np.zeros(len(generated), bool)
        for row, ids in enumerate(generated):
            if not ids:
                continue
            before = self.decode(ids[:-1]) if len(ids) > 1 else ""
            text = self.decode(ids)
            # a stop string counts when it ends past the text that was there before this token
            start = max(len(before) - self.longest + 1, 0)
            tail = text[start:]
            out[row] = any(_ends_after(tail, s, len(before) - start) for s in self.strings)
        return out


def _ends_after(text, string, boundary):
    at = text.find(string)
    while at != -1:
        if at + len(string) > boundary:
            return True
        at = text.find(string, at + 1)
    return False
