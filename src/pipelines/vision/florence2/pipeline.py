"""image-to-text over Florence-2 exports in transformers.js' layout (onnx-community/Florence-2-*):
onnx/vision_encoder (pixels -> image features), embed_tokens, encoder_model (BART encoder over
the image features followed by the prompt's embeddings) and decoder_model_merged (inputs_embeds:
each decoder token goes through embed_tokens).

    pipe = transmuter.pipeline("image-to-text", "onnx-community/Florence-2-base-ft")
    pipe("car.jpg")                  -> [{"generated_text": "</s><s>A car.</s>",
                                          "<CAPTION>": "A car."}]
    pipe("car.jpg", task="<OD>")     -> [{"generated_text": ..., "<OD>": {"bboxes": [[x0, y0,
                                          x1, y1], ...], "labels": ["car", ...]}}]
    pipe("car.jpg", task="<CAPTION_TO_PHRASE_GROUNDING>", text="a green car")

``task`` is any task token of Florence2Processor (default ``<CAPTION>``); ``text`` the input of
the tasks that take one; a task string that is no task token is used as the prompt itself (its
answer is the text). The prompt is transformers' (the task token's prompt text, between <s> and
</s>); generation follows generation_config.json (Florence-2's: beam 3, no_repeat_ngram_size 3,
forced bos / eos) under the pipeline's 256 new tokens, with image-to-text's options
(``max_new_tokens``, ``num_beams``, ``generate_kwargs``, ...). Each record holds the generated
text decoded with its special tokens (what ``post_process_generation`` reads) and, under the task
token, ``post_process_generation``'s answer in the input image's pixels (parse.py beside this
file). The registry's family table (pipelines/registry.py) gives image-to-text on a model whose
config.json says model_type "florence2" this class.
"""

import numpy as np

from ....buckets import next_pow2
from ....engine.compiled import compile
from ....errors import PipelineError
from ....generation.seq2seq import Seq2SeqGenerator
from ... import shared
from ...encoder_decoder import load_encoder
from ..base import VisionPipeline
from ..image_text_to_text import side_model
from ..image_to_text import ImageToTextPipeline
from . import parse as florence2_parse

DEFAULT_TASK = "<CAPTION>"
MIN_PROMPT_WIDTH = 32  # task prompts (10-20 tokens) share one encoder shape


class Florence2Pipeline(ImageToTextPipeline):
    def __init__(self, model, config=None, *, tokenizer, repo=None, encoder=None,
                 encoder_variant=None, vision_encoder=None, embed_tokens=None, **kwargs):
        self.tokenizer = tokenizer
        self.vision = vision_encoder or side_model(repo, model, "vision_encoder", encoder_variant)
        embed = embed_tokens or side_model(repo, model, "embed_tokens", encoder_variant)

        def make():
            text = dict((config or {}).get("text_config") or {})
            generator = Seq2SeqGenerator(encoder or load_encoder(repo, model, encoder_variant),
                                         model, {**config, **text})
            # the decoder takes inputs_embeds: steppers call its embed() on each step's ids
            generator.decoder.embed = TokenEmbedder(embed)
            return generator

        self.generator = shared.per_model(model, "florence2", make, renew=encoder is not None)
        self.embed = self.generator.decoder.embed
        self.generation_file = repo.json("generation_config.json", {}) if repo else {}
        processor = repo.json("processor_config.json", {}) if repo else {}
        self.parse_config = processor.get("post_processor_config") or {}
        self.task_options = {}  # Florence-2's config has no task_specific_params["image-to-text"]
        VisionPipeline.__init__(self, model, config, repo=repo, **kwargs)

    def _sanitize_parameters(self, task=None, text=None, prompt=None, **options):
        if prompt is not None:
            raise PipelineError("Florence-2 takes task= (a task token such as '<OD>') and "
                                "text= (the input of tasks that take one), not prompt=")
        task = DEFAULT_TASK if task is None else task
        if not isinstance(task, str) or (text is not None and not isinstance(text, str)):
            raise PipelineError(f"task= and text= must be strings, got {task!r}, {text!r}")
        if text is not None and task not in florence2_parse.PROMPTS_WITH_INPUT and \
                task in florence2_parse.ANSWER_TYPES:
            raise PipelineError(f"The task {task} takes no text; tasks that take one: "
                                f"{', '.join(florence2_parse.PROMPTS_WITH_INPUT)}")
        if task in florence2_parse.PROMPTS_WITH_INPUT and not text:
            raise PipelineError(f"The task {task} needs text= (e.g. a phrase or region)")
        _, forward, _ = super()._sanitize_parameters(**options)
        return {"prompt_ids": prompt_ids(self.tokenizer, task, text)}, forward, {"task": task}

    def preprocess(self, image, prompt_ids):
        yield dict(self.features(image), prompt_ids=prompt_ids)

    def _encode(self, chunks):
        """The BART encoder's ``Encoded`` over [image features, prompt embeddings] per image,
        as Florence2ForConditionalGeneration merges them. The prompt is right-padded (pad
        token, masked out in the encoder and in cross-attention, as transformers pads a batch)
        to a power of two, so that every task's prompt shares a few compiled shapes."""
        n = len(chunks)
        feed = self.featurizer.batch([c["image"] for c in chunks], self._rows(n),
                                     {"pixel_values": None}, self.task)
        vision = self._run_model({"pixel_values": feed["pixel_values"].astype(np.float32)},
                                 self.vision)
        features = vision.get("image_features", next(iter(vision.values())))[:n]
        features = features.astype(np.float32)
        width = self._prompt_width(max(len(c["prompt_ids"]) for c in chunks), features.shape[1])
        ids = np.full((n, width), self.tokenizer.pad_token_id, np.int64)
        mask = np.ones((n, features.shape[1] + width), np.int64)
        for b, c in enumerate(chunks):
            ids[b, :len(c["prompt_ids"])] = c["prompt_ids"]
            mask[b, features.shape[1] + len(c["prompt_ids"]):] = 0
        embeds = np.concatenate([features, self.embed.ids(ids)], axis=1)
        return self.generator.encode({"inputs_embeds": embeds, "attention_mask": mask}, mask)

    def _prompt_width(self, longest, image_tokens):
        """The padded prompt width: a power of two, within the encoder's positions (BART's
        learned positions: an index past them would be clamped, not refused, by a gather)."""
        text = dict(self.config.get("text_config") or {})
        limit = text.get("max_position_embeddings") or self.config.get("max_position_embeddings")
        width = max(next_pow2(longest), MIN_PROMPT_WIDTH)
        if limit is None:
            return width
        if image_tokens + longest > int(limit):
            raise PipelineError(f"The prompt is {longest} tokens: with the image's "
                                f"{image_tokens} it passes the encoder's {limit} positions; "
                                "give a shorter text=")
        return min(width, int(limit) - image_tokens)

    def postprocess(self, outputs, task):
        height, width = (int(v) for v in outputs[0]["image"]["original_size"])
        records = []
        for ids in outputs[0]["output_ids"]:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            answer = florence2_parse.post_process_generation(text, task, (width, height),
                                                             self.parse_config)
            records.append({"generated_text": text, **answer})
        return records


def prompt_ids(tokenizer, task, text=None):
    """The encoder prompt's ids: the task's prompt between <s> and </s>, tokenized without
    added special tokens (Florence2Processor.__call__)."""
    prompt = florence2_parse.task_prompt(task, text)
    return tokenizer.encode(f"{tokenizer.bos_token}{prompt}{tokenizer.eos_token}",
                            add_special_tokens=False).ids


class TokenEmbedder:
    """input_ids -> inputs_embeds through embed_tokens, for a decoder that takes embeddings."""

    def __init__(self, embed_model):
        self.fn = compile(embed_model)

    def ids(self, ids):
        return np.asarray(self.fn({"input_ids": np.asarray(ids, np.int64)})["inputs_embeds"])

    def __call__(self, feed, index=None):  # index: each token's place in its row (unused here)
        feed = dict(feed)
        feed["inputs_embeds"] = self.ids(feed.pop("input_ids"))
        return feed

