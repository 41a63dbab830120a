"""text2text-generation, summarization, translation: transformers' Text2TextGenerationPipeline
family over an encoder and a merged decoder (``transmuter.generation.seq2seq``).

    pipe = transmuter.pipeline("translation_en_to_de", "tests/fixtures/t5")
    pipe("The house is wonderful.", max_new_tokens=20)  -> [{"translation_text": ...}]
    pipe(["...", "..."], batch_size=2)                   -> [[{...}], [{...}]]
    pipe("...", return_tensors=True)                     -> [{"translation_token_ids": ...}]

As transformers: config.json's ``prefix`` (or ``task_specific_params[task]["prefix"]``) goes
before each input, ``task_specific_params[task]`` sets generation options, generation_config.json
applies, call options override. Outputs are decoded with special tokens skipped; token ids
include the decoder start token, as ``generate`` returns them.

NLLB / M2M100 (a tokenizer with language codes) take ``src_lang`` / ``tgt_lang``, as transformers'
TranslationPipeline: the source language token placed as tokenizer.json's template places it, the
target's token forced first (``forced_bos_token_id``). ``translation`` needs both there;
``translation_en_to_fr`` means src_lang="en", tgt_lang="fr" (M2M100's ``__en__``, ``__fr__``).

    pipe = transmuter.pipeline("translation", "Xenova/nllb-200-distilled-600M")
    pipe("The house is wonderful.", src_lang="eng_Latn", tgt_lang="fra_Latn")
"""

from ...generation import GenerationConfig
from ...generation.config import OPTIONS, check_options
from .. import encoder_decoder
from ...errors import PipelineError
from .base import TextPipeline, check_text

# transformers' Text2TextGenerationPipeline._default_generation_config (4.57): beam search.
PIPELINE_DEFAULTS = {"max_new_tokens": 256, "num_beams": 4}


class Text2TextGenerationPipeline(TextPipeline):
    task = "text2text-generation"
    return_name = "generated"
    # the second graph this task loads; factory.pipeline passes its variant= on as encoder_variant=
    encoder_component = "encoder_model"

    def __init__(self, model, config=None, *, repo=None, encoder=None,
                 encoder_variant=None, **kwargs):
        self.generator = encoder_decoder.generator(model, config, repo, encoder, encoder_variant)
        self.generation_file = repo.json("generation_config.json", {}) if repo else {}
        params = dict((config or {}).get("task_specific_params") or {}).get(self.task) or {}
        self.prefix = params.get("prefix", (config or {}).get("prefix")) or ""
        self.task_options = {k: v for k, v in params.items() if k in OPTIONS}
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """The merged decoder, else a split pair's decoder_model (hub.Repo.decoder_component)."""
        return repo.decoder_component()

    def _input_kind(self):
        return "a string"

    def _sanitize_parameters(self, return_tensors=None, return_text=None, return_type=None,
                             clean_up_tokenization_spaces=None, truncation=None, src_lang=None,
                             tgt_lang=None, token_summary=False, **options):
        check_options(self.task, options)
        if truncation not in (None, False, True, "longest_first", "only_first"):
            raise PipelineError(f"truncation must be a bool or 'longest_first', got "
                                f"{truncation!r}")
        src_lang, tgt_lang, missing = self._languages(src_lang, tgt_lang)
        tensors = return_type == "tensors" or (return_tensors and return_type is None)
        config = GenerationConfig.from_dicts(self.generation_file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS,
                                             task_options=self.task_options, **options)
        if config.pad_token_id is None and self.tokenizer.pad_token_id is not None:
            config.pad_token_id = self.tokenizer.pad_token_id  # as transformers' Pipeline does
        if tgt_lang is not None:  # _build_translation_inputs' forced_bos_token_id beats the files
            config.forced_bos_token_id = self.tokenizer.language_token_id(tgt_lang)
        pre = {"truncation": truncation, "src_lang": src_lang, "missing_languages": missing}
        post = {"tensors": bool(tensors), "clean_up": bool(clean_up_tokenization_spaces),
                "summary": bool(token_summary)}
        return pre, {"config": config}, post

    def _languages(self, src_lang, tgt_lang):
        """(src_lang, tgt_lang, missing) checked against the tokenizer's codes: from the task
        name (translation_xx_to_yy) when not given; ``missing`` when ``translation`` lacks one
        (an error at the call, as transformers' TranslationPipeline with an NLLB / M2M100
        tokenizer; the pipeline can be built without them)."""
        if not getattr(self.tokenizer, "languages", None):
            if src_lang is not None or tgt_lang is not None:
                # refuse rather than translate from or into the wrong language
                raise PipelineError("src_lang / tgt_lang need a tokenizer with language codes "
                                    "(NLLB, M2M100); this one has none. Marian and T5 take "
                                    "the language from the model or the prefix")
            return None, None, False
        parts = self.task.split("_")
        if src_lang is None and tgt_lang is None and len(parts) == 4:
            src_lang, tgt_lang = parts[1], parts[3]
        for code in (src_lang, tgt_lang):
            if code is not None:
                self.tokenizer.language_token(code)  # an unknown code fails here, before any work
        missing = self.task.startswith("translation") and None in (src_lang, tgt_lang)
        return src_lang, tgt_lang, missing

    def preprocess(self, inputs, truncation=None, src_lang=None, missing_languages=False):
        if missing_languages:
            raise PipelineError("Translation with this model needs src_lang= and tgt_lang= "
                                "(language codes such as "
                                f"{', '.join(self.tokenizer.languages[:3])})")
        text = self.prefix + check_text(inputs, "input")
        ids = list(self.tokenizer.encode(text, truncation=truncation or False,
                                         src_lang=src_lang).ids)
        if len(ids) > self.max_length:  # past the encoder's positions: an error, not garbage
            raise PipelineError(f"The input has {len(ids)} tokens; the model takes at most "
                                f"{self.max_length}. Pass truncation=True to cut it, or a "
                                "shorter text")
        yield {"ids": ids}

    def _forward(self, chunks, config):
        sources, start = [c["ids"] for c in chunks], self.generator.start_ids(config)
        encoded, prompts = self.generator.encode_ids(sources), [start] * len(sources)
        if config.num_beams > 1:
            new, _ = self.generator.beam_search(prompts, config, encoded)
        else:
            new = [[n] for n in self.generator.generate(
                prompts, config, encoded, decode=lambda ids: self._decode(ids, False))]
        summaries = self.generator.stats.summaries([len(s) for s in sources])
        return [dict(c, output_ids=[start + s for s in n], summaries=t)
                for c, n, t in zip(chunks, new, summaries)]

    def postprocess(self, outputs, tensors=False, clean_up=False, summary=False):
        """transformers' records; with ``token_summary=True`` each also has ``token_summary``
        (input: source tokens, output: new tokens, padding: source padding + idle steps)."""
        out = outputs[0]
        if tensors:
            records = [{f"{self.return_name}_token_ids": ids} for ids in out["output_ids"]]
        else:
            records = [{f"{self.return_name}_text": self._decode(ids, clean_up)}
                       for ids in out["output_ids"]]
        if summary:
            records = [dict(r, token_summary=t) for r, t in zip(records, out["summaries"])]
        return records

    def _decode(self, ids, clean_up):
        return self.tokenizer.decode(ids, skip_special_tokens=True,
                                     clean_up_tokenization_spaces=clean_up)


class SummarizationPipeline(Text2TextGenerationPipeline):
    task = "summarization"
    return_name = "summary"


class TranslationPipeline(Text2TextGenerationPipeline):
    """``translation`` and ``translation_xx_to_yy`` (``for_task``): the task name picks
    task_specific_params (T5's prefixes)."""

    task = "translation"
    return_name = "translation"

    @classmethod
    def for_task(cls, task):
        return type(cls.__name__, (cls,), {"task": task})

