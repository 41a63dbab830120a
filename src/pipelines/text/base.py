"""What text tasks share: a tokenizer, sequence-length buckets capped by what the model takes,
and the check of a text input."""

from ...errors import InputError
from ... import buckets
from ..base import Pipeline
from ..featurizers import TextFeaturizer

# Model types whose position ids start after the padding index (RoBERTa's create_position_ids):
# max_position_embeddings counts pad_token_id + 1 positions no token can use.
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "camembert", "longformer", "mpnet", "data2vec-text",
                     "xlm-roberta-xl", "roberta-prelayernorm", "bart", "mbart", "ibert"}


class TextPipeline(Pipeline):
    """A pipeline over a tokenizer: encodings padded to ``sequence_length`` buckets, each capped
    at the longest sequence the model takes (and at ``max_length``, e.g. sentence-transformers'
    max_seq_length); by default ``buckets.octave_lengths`` up to that cap (16, 20, 24, 28, 32,
    40, ...: a batch pads to at most 1/4 past its longest row), where rows pad to a longer
    compiled length until that costs a compile (buckets.pad_or_compile); a ``sequence_length=``
    given keeps each row at its own bucket of it."""

    featurizers = ("tokenizer",)

    def __init__(self, model, config=None, *, tokenizer, sequence_length=None, max_length=None,
                 **kwargs):
        self.tokenizer = tokenizer
        self.config = dict(config or {})
        self.max_length = min(x for x in (self._max_length(), max_length) if x)
        self.sequence_lengths = (buckets.octave_lengths(self.max_length) if sequence_length is None
                                 else buckets.lengths(sequence_length, self.max_length))
        self.featurizer = TextFeaturizer(tokenizer, self.sequence_lengths,
                                         coarsens=sequence_length is None)
        super().__init__(model, config, **kwargs)

    def __repr__(self):
        return (f"{type(self).__name__}(task={self.task!r}, batch_size={self.batch_size}, "
                f"sequence_lengths={list(self.sequence_lengths)})")

    def _max_length(self):
        """Longest sequence the model takes: tokenizer's model_max_length, capped by the
        position embeddings of config.json."""
        limits = [self.tokenizer.model_max_length]
        positions = self.config.get("max_position_embeddings")
        if positions:
            if self.config.get("model_type") in _OFFSET_POSITIONS:
                positions -= (self.config.get("pad_token_id") or 0) + 1
            limits.append(positions)
        limits = [x for x in limits if x]
        return min(limits) if limits else max(buckets.DEFAULT_SEQUENCE_LENGTHS)


def check_text(text, what="input"):
    """A clear error for a non-string or an empty string (before the tokenizer sees it)."""
    if not isinstance(text, str):
        raise InputError(f"The {what} must be a string, got {type(text).__name__}: {text!r:.80}")
    if not text.strip():
        raise InputError(f"The {what} is an empty string; give some text")
    return text
