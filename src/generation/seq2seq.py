"""Encoder-decoder generation: an encoder once, then the merged decoder (or a split pair: the
decoder without past, then the one with past) with a growing cache.

    gen = Seq2SeqGenerator(encoder, decoder, model_config)
    encoded = gen.encode_ids([[13, 8, 1], [42, 1]])          # text sources (T5, BART, Marian)
    encoded = gen.encode({"input_features": features})       # any encoder: audio, pixels
    new_ids = gen.generate(prompts, config, encoded)         # decoder prompts per row

The generator takes the encoder's *outputs*, so any encoder (text, Whisper's audio, a vision
encoder) shares the decoding. Text sources are right-padded to a power of two (the encoder
compiles a few shapes) and the padding is masked in the encoder and in cross-attention. Each row
starts from its decoder prompt (``start_ids``: ``decoder_start_token_id``; Whisper's prompt holds
its language and task tokens too); the decoder's first call computes the cross-attention KV,
which later steps reuse (steppers.GrowingCache).
"""

import collections

import numpy as np

from ..engine.compiled import compile
from ..errors import InputError
from ..buckets import next_pow2
from .loop import Generator

ENCODER_OUTPUTS = ("encoder_hidden_states", "encoder_attention_mask")
# Sources shorter than this share one encoder shape (and so one shape of every decoder step).
MIN_SOURCE_WIDTH = 32

# What an encoder gave for a batch: hidden states [B, W, H], the mask of its valid positions
# (int64 [B, W], or None when every position is valid) and each row's padding [B].
Encoded = collections.namedtuple("Encoded", "states mask padding")


class Seq2SeqGenerator:
    def __init__(self, encoder, decoder, model_config=None, first_decoder=None):
        """``first_decoder``: a split pair's decoder without past (``decoder`` is then the one
        with past: cache.py)."""
        if len(encoder.outputs) < 1:
            raise InputError("The encoder graph has no outputs")
        self.encoder = encoder
        self.encoder_inputs = {v.name: v.dtype for v in encoder.inputs}
        self.encoder_fn = compile(encoder, cache_size=8)
        self.decoder = Generator(decoder, model_config, extra_inputs=ENCODER_OUTPUTS,
                                 first=first_decoder)
        self.decoder_inputs = {v.name for g in (decoder, first_decoder) if g is not None
                               for v in g.inputs}
        self.model_config = dict(model_config or {})
        self.source_padding = np.zeros(0, np.int64)

    @property
    def layout(self):
        return self.decoder.layout

    @property
    def stats(self):
        """The decoder's last Stats, with the sources' padding as the prompt padding."""
        stats = self.decoder.stats
        stats.prompt_padding = self.source_padding
        return stats

    def start_ids(self, config):
        start = config.decoder_start_token_id
        if start is None:
            start = config.bos_token_id
        if start is None:
            raise InputError("Encoder-decoder generation needs decoder_start_token_id (in "
                             "generation_config.json or config.json, or as an option)")
        return [int(start)]

    def encode(self, feed, mask=None):
        """``Encoded`` for one batch of encoder inputs (cast to the graph's dtypes; inputs the
        graph does not take are dropped). ``mask``: the valid positions of the states, when
        the caller padded them."""
        unknown = sorted(set(self.encoder_inputs) - set(feed))
        if unknown:
            raise InputError(f"The encoder takes input(s) {unknown} that were not given (given: "
                             f"{sorted(feed)})")
        feed = {k: np.asarray(v).astype(self.encoder_inputs[k], copy=False)
                for k, v in feed.items() if k in self.encoder_inputs}
        with self.encoder.backend.scope():
            out = self.encoder_fn(feed)
        states = np.asarray(out.get("last_hidden_state", out[self.encoder.outputs[0].name]))
        padding = np.zeros(len(states), np.int64) if mask is None else \
            states.shape[1] - np.asarray(mask).sum(axis=1).astype(np.int64)
        return Encoded(states, mask, padding)

    def encode_ids(self, sources):
        """``Encoded`` for token id sources, right-padded and masked."""
        sources = [list(map(int, s)) for s in sources]
        if not sources or any(not s for s in sources):
            raise InputError("Each source needs at least one token")
        width = max(next_pow2(max(len(s) for s in sources)), MIN_SOURCE_WIDTH)
        ids = np.zeros((len(sources), width), np.int64)
        mask = np.zeros((len(sources), width), np.int64)
        for b, s in enumerate(sources):
            ids[b, :len(s)], mask[b, :len(s)] = s, 1
        if "input_ids" not in self.encoder_inputs:
            raise InputError(f"The encoder graph takes {sorted(self.encoder_inputs)}; a text "
                             "encoder needs input_ids (and attention_mask)")
        feed = {"input_ids": ids, "attention_mask": mask}
        return self.encode({k: v for k, v in feed.items() if k in self.encoder_inputs}, mask)

    def _extra(self, encoded):
        self.source_padding = encoded.padding
        extra = {"encoder_hidden_states": encoded.states}
        if "encoder_attention_mask" in self.decoder_inputs:
            mask = encoded.mask if encoded.mask is not None else \
                np.ones(encoded.states.shape[:2], np.int64)
            extra["encoder_attention_mask"] = mask
        return extra

    def beam_search(self, prompts, config, encoded, processors=()):
        """``(sequences, scores)`` per row, as Generator.beam_search."""
        return self.decoder.beam_search(prompts, config, self._extra(encoded), processors)

    def generate(self, prompts, config, encoded, decode=None, on_step=None, processors=()):
        """New token ids per row (after its prompt; eos included when generated)."""
        return self.decoder.generate(prompts, config, decode=decode, on_step=on_step,
                                     extra=self._extra(encoded), processors=processors)
