"""Speech-to-text encoder-decoders other than Whisper (Moonshine: the encoder takes the raw 16 kHz
samples, ``input_values``; a merged decoder), as transformers' AutomaticSpeechRecognitionPipeline
runs its "seq2seq" type:

- ``generate`` from the decoder start token on the encoder's states, with the pipeline's
  generation defaults (``num_beams=5``, ``max_new_tokens=256``) under the model's
  generation_config.json and the caller's options;
- the text is ``tokenizer.decode(tokens, skip_special_tokens=True)``; with ``chunk_length_s`` the
  windows' tokens are joined and decoded as one sequence (transformers sends no stride to a
  seq2seq postprocess, so the overlaps are not merged);
- no timestamps, no language, no input ``stride`` (transformers refuses them for this type).

A batch holds clips of one length (AudioPipeline groups by shape), each row unpadded: Moonshine's
encoder normalizes over time (GroupNorm), so padding samples would change every frame. A clip
gives what it gives alone; transformers' padded batch does not (its shorter rows hear the zeros).
The encoder's states are then zero-padded to a power of two of frames and masked in
cross-attention, so the decoder compiles a few widths, not one per recording length.
"""

import numpy as np

from ...generation import GenerationConfig
from ...generation.config import check_options
from ...generation.seq2seq import Encoded
from .. import encoder_decoder
from ...errors import PipelineError
from ...buckets import next_pow2

# transformers' AutomaticSpeechRecognitionPipeline._default_generation_config
PIPELINE_DEFAULTS = {"max_new_tokens": 256, "num_beams": 5}
MODEL_TYPES = ("moonshine",)
# samples per encoder frame of the models whose decoder takes the samples' attention mask and
# downsamples it (Moonshine: its conv strides 64 * 3 * 2)
MASK_STRIDE = {"moonshine": 384}
# Encoder states shorter than this share one width (Moonshine: 128 frames, 12.3 s of speech), so
# the decoder compiles once for most clips; masked frames cost little next to a compile.
MIN_FRAMES = 128


def is_seq2seq_speech(config):
    return (config or {}).get("model_type") in MODEL_TYPES


class Head:
    align_to = 1  # no inputs_to_logits_ratio: windows are cut at any sample, as transformers

    def __init__(self, pipe, model, config, *, repo=None, encoder=None, encoder_variant=None):
        self.pipe, self.config = pipe, dict(config or {})
        self.generator = encoder_decoder.generator(model, config, repo, encoder, encoder_variant)
        self.file = repo.json("generation_config.json", {}) if repo else {}

    def sanitize(self, return_timestamps, return_language, options):
        if return_language is not None:
            raise PipelineError("Only Whisper can return language for now (return_language=)")
        if return_timestamps:
            raise PipelineError("We cannot return_timestamps yet on non-CTC models apart from "
                                f"Whisper: this {self.config.get('model_type')} model gives text "
                                "only")
        check_options(self.pipe.task, options)
        config = GenerationConfig.from_dicts(self.file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS, **options)
        if config.pad_token_id is None:
            config.pad_token_id = (config.eos_token_id or [None])[0]
        return {"config": config}, {}

    def features(self, samples):
        return self.pipe.feature_extractor(samples)

    def whole(self, samples):
        # "whole" tells forward that a stride on this chunk is the input's own, which transformers
        # refuses for seq2seq models ("Stride is only usable with CTC models")
        yield {"audio": self.features(samples), "stride": None, "is_last": True, "whole": True}

    def forward(self, chunks, config):
        if any(c.get("whole") and c["stride"] is not None for c in chunks):
            raise PipelineError("An input's 'stride' is only usable with CTC models: remove it "
                                f"for this {self.config.get('model_type')} model")
        gen = self.generator
        encoded = self._encode(chunks)
        prompts = [gen.start_ids(config) for _ in chunks]
        if config.num_beams > 1:
            new = [seqs[0] for seqs in gen.beam_search(prompts, config, encoded)[0]]
        else:
            new = gen.generate(prompts, config, encoded)
        return [{"tokens": np.array(prompt + [int(i) for i in ids], np.int64)}
                for prompt, ids in zip(prompts, new)]

    def _encode(self, chunks):
        """The encoder's states of one batch (rows of one length). A decoder that masks
        cross-attention gets them zero-padded to a power of two of frames, the padding masked, so
        that it compiles a few widths rather than one per recording length."""
        pipe, gen = self.pipe, self.generator
        items, n = [c["audio"] for c in chunks], len(chunks)
        encoded = gen.encode(pipe.featurizer.batch(items, pipe._rows(n), gen.encoder_inputs,
                                                   pipe.task))
        states = encoded.states[:n]
        if "encoder_attention_mask" not in gen.decoder_inputs:
            return Encoded(states, None, np.zeros(n, np.int64))
        frames = states.shape[1]
        width = max(next_pow2(frames), MIN_FRAMES)
        padded = np.zeros((n, width, states.shape[2]), states.dtype)
        padded[:, :frames] = states
        mask = np.zeros((n, width), np.int64)
        mask[:, :frames] = 1
        # Moonshine's decoder takes the mask of the samples and keeps every 384th value
        # (mask[..., ::384][..., :frames]): each frame's value repeated gives it this mask
        mask = np.repeat(mask, MASK_STRIDE.get(self.config.get("model_type"), 1), axis=1)
        return Encoded(padded, mask, np.full(n, width - frames, np.int64))

    def postprocess(self, outputs):
        tokens = np.concatenate([o["tokens"] for o in outputs])
        return {"text": self.pipe.tokenizer.decode(tokens, skip_special_tokens=True)}
