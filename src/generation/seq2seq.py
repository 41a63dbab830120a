"""Encoder-decoder generation: the encoder once, then the merged decoder with a growing cache.

    gen = Seq2SeqGenerator(encoder, decoder, model_config)
    new_ids = gen.generate([[13, 8, 1], [42, 1]], config)   # source ids per row

The sources are right-padded to a power of two (the encoder compiles a few shapes) and the padding
is masked in the encoder and in cross-attention. Every row starts from
``decoder_start_token_id``, so all rows share the decoder length; the decoder's first call
computes the cross-attention KV, which later steps reuse (steppers.GrowingCache).
"""

import numpy as np

from ..compiled import CompiledFunction
from ..errors import InputError
from ..pipelines.buckets import next_pow2
from .loop import Generator

ENCODER_OUTPUTS = ("encoder_hidden_states", "encoder_attention_mask")
# Sources shorter than this share one encoder shape (and so one shape of every decoder step).
MIN_SOURCE_WIDTH = 32


class Seq2SeqGenerator:
    def __init__(self, encoder, decoder, model_config=None):
        names = {v.name for v in encoder.inputs}
        if "input_ids" not in names or len(encoder.outputs) < 1:
            raise InputError(f"The encoder graph takes {sorted(names)}; an encoder-decoder "
                             "encoder needs input_ids (and attention_mask)")
        self.encoder, self.encoder_inputs = encoder, names
        self.encoder_fn = CompiledFunction(encoder, cache_size=8)
        self.decoder = Generator(decoder, model_config, extra_inputs=ENCODER_OUTPUTS)
        self.model_config = dict(model_config or {})

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

    def encode(self, sources):
        """``(hidden states [B, W, H], mask int64 [B, W])`` for right-padded sources."""
        if not sources or any(not s for s in sources):
            raise InputError("Each source needs at least one token")
        width = max(next_pow2(max(len(s) for s in sources)), MIN_SOURCE_WIDTH)
        ids = np.zeros((len(sources), width), np.int64)
        mask = np.zeros((len(sources), width), np.int64)
        for b, s in enumerate(sources):
            ids[b, :len(s)], mask[b, :len(s)] = s, 1
        self.source_padding = width - np.array([len(s) for s in sources], np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        dtypes = {v.name: v.dtype for v in self.encoder.inputs}
        feed = {k: v.astype(dtypes[k]) for k, v in feed.items() if k in self.encoder_inputs}
        with self.encoder.backend.scope():
            out = self.encoder_fn(feed)
        states = out.get("last_hidden_state", out[self.encoder.outputs[0].name])
        return np.asarray(states), mask

    def extra(self, sources):
        states, mask = self.encode(sources)
        return {"encoder_hidden_states": states, "encoder_attention_mask": mask}

    def beam_search(self, sources, config):
        """``(sequences, scores)`` per source, as Generator.beam_search."""
        extra = self.extra([list(map(int, s)) for s in sources])
        return self.decoder.beam_search([self.start_ids(config)] * len(sources), config, extra)

    def generate(self, sources, config, decode=None, on_step=None):
        """New token ids per row (after the start token; eos included when generated)."""
        extra = self.extra([list(map(int, s)) for s in sources])
        return self.decoder.generate([self.start_ids(config)] * len(sources), config,
                                     decode=decode, on_step=on_step, extra=extra)
