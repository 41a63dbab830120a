"""image-to-text: transformers' ImageToTextPipeline over VisionEncoderDecoder exports (ViT-GPT2
captioning, TrOCR, Donut): onnx/encoder_model.onnx once per image, then the merged decoder
generates from the decoder start token (``transmuter.generation.seq2seq``, shared with
text2text and speech).

    pipe = transmuter.pipeline("image-to-text", "Xenova/vit-gpt2-image-captioning")
    pipe("cat.jpg")                                   -> [{"generated_text": "a cat on a couch"}]
    pipe(["a.jpg", "b.jpg"], batch_size=2)            -> [[{...}], [{...}]]
    pipe("page.png", max_new_tokens=20, generate_kwargs={"num_beams": 3})

Generation settings as transformers resolves them: the pipeline's default of 256 new tokens,
under generation_config.json (a ``max_length`` there wins over the 256, as in transformers'
Pipeline), config.json's ``task_specific_params["image-to-text"]``, then the call's
``max_new_tokens`` and ``generate_kwargs``. The options of text-generation (``num_beams``,
``do_sample`` with ``seed``, ``num_return_sequences``, the logits processors) may also be passed
as plain keywords. Each result holds ``num_return_sequences`` records, decoded with special
tokens skipped. A vision-encoder-decoder model takes no ``prompt`` (transformers refuses it too).

Florence-2 (config.json's model_type "florence2") has its own graphs, prompts and parsing: the
registry's family table (pipelines/registry.py) gives it its class (vision/florence2/pipeline.py).
"""

import numpy as np

from ...generation import GenerationConfig
from ...generation.config import OPTIONS, check_options
from ...generation.seq2seq import Encoded
from .. import encoder_decoder
from ..base import generation_options
from ...errors import PipelineError
from .base import VisionPipeline

# transformers' ImageToTextPipeline._default_generation_config (4.57)
PIPELINE_DEFAULTS = {"max_new_tokens": 256}
MODEL_TYPES = ("vision-encoder-decoder",)


class ImageToTextPipeline(VisionPipeline):
    task = "image-to-text"
    featurizers = ("image_processor", "tokenizer")
    # the second graph this task loads; factory.pipeline passes its variant= on as encoder_variant=
    encoder_component = "encoder_model"

    def __init__(self, model, config=None, *, tokenizer, repo=None, encoder=None,
                 encoder_variant=None, **kwargs):
        kind = (config or {}).get("model_type")
        if kind not in MODEL_TYPES:
            raise PipelineError(f"{self.task} runs VisionEncoderDecoder exports (model_type "
                                f"'vision-encoder-decoder': ViT-GPT2, TrOCR, Donut); this model "
                                f"is {kind!r}")
        self.tokenizer = tokenizer
        self.generator = encoder_decoder.generator(model, config, repo, encoder, encoder_variant)
        self.generation_file = repo.json("generation_config.json", {}) if repo else {}
        params = dict((config or {}).get("task_specific_params") or {}).get(self.task) or {}
        self.task_options = {k: v for k, v in params.items() if k in OPTIONS}
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """The merged decoder, else a split pair's decoder_model (hub.Repo.decoder_component)."""
        return repo.decoder_component()

    def _sanitize_parameters(self, max_new_tokens=None, generate_kwargs=None, prompt=None,
                             **options):
        if prompt is not None:
            raise PipelineError(f"prompt= is not supported: a {self.config.get('model_type')} "
                                "model generates from the image alone (transformers refuses it "
                                "too); use image-text-to-text for models that take a prompt")
        options = generation_options(generate_kwargs, max_new_tokens, options)
        check_options(self.task, options)
        config = GenerationConfig.from_dicts(self.generation_file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS,
                                             task_options=self.task_options, **options)
        if config.pad_token_id is None and self.tokenizer.pad_token_id is not None:
            config.pad_token_id = self.tokenizer.pad_token_id  # as transformers' Pipeline does
        return {}, {"config": config}, {}

    def _forward_group(self, chunks, config):
        """Images of one size: the encoder once on the batch, then each image's
        ``num_return_sequences`` sequences (beam search, or that many sampled rows)."""
        gen, n = self.generator, len(chunks)
        encoded = self._encode(chunks)
        start = gen.start_ids(config)
        if config.num_beams > 1:
            new, _ = gen.beam_search([start] * n, config, encoded)
        else:
            r = config.num_return_sequences
            encoded = Encoded(*(None if v is None else np.repeat(v, r, axis=0) for v in encoded))
            flat = gen.generate([start] * (n * r), config, encoded)
            new = [flat[i * r:(i + 1) * r] for i in range(n)]
        return [dict(c, output_ids=[start + list(s) for s in seqs]) for c, seqs in zip(chunks, new)]

    def _encode(self, chunks):
        """The encoder's ``Encoded`` (states [n, W, H], no mask) of the images (one size) of
        ``chunks``."""
        gen, n = self.generator, len(chunks)
        feed = self.featurizer.batch([c["image"] for c in chunks], self._rows(n),
                                     gen.encoder_inputs, self.task)
        states = gen.encode(feed).states[:n]  # spare rows (copies of the first) dropped
        return Encoded(states, None, np.zeros(n, np.int64))

    def postprocess(self, outputs):
        return [{"generated_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
                for ids in outputs[0]["output_ids"]]
