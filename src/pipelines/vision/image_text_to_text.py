"""image-text-to-text: transformers' ImageTextToTextPipeline over decoder-only vision-language
exports in transformers.js' layout (onnx/vision_encoder + embed_tokens + decoder_model_merged):
Idefics3 / SmolVLM and Qwen2-VL (what differs between them: vlm_families.py).

    pipe = transmuter.pipeline("image-text-to-text", "HuggingFaceTB/SmolVLM-256M-Instruct")
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}]
    pipe(text=chat, images=["cat.png"], max_new_tokens=20)
        -> [{"input_text": chat, "generated_text": chat + [{"role": "assistant", ...}]}]
    pipe(images="cat.png", text="<image>A photo of")  -> [{"input_text", "generated_text"}]
    pipe(text=[chat_a, chat_b], images=[[a], [b]])   -> one list of records per chat

As transformers: an image part without "image" / "url" / "path" takes the next of ``images``;
a chat renders with the repo's chat template (a final assistant message is continued); each
image token of the prompt (``<image>``, Qwen2-VL's ``<|image_pad|>``) becomes the processor's
expansion (Idefics3: the tiles' ``<row_r_col_c>`` blocks, then the global image; Qwen2-VL: one
token per merged patch pair), the vision encoder's features replace those tokens' embeddings
(in order), Qwen2-VL's prompt takes M-RoPE positions, and the decoder generates with
text-generation's options (``max_new_tokens``, ``num_beams``, ``do_sample`` with ``seed``,
``generate_kwargs``; the pipeline's default of 256 new tokens). ``return_full_text=False`` gives
the new text only, ``return_tensors=True`` the token ids, ``token_summary=True`` each record's
token counts; ``do_image_splitting`` (Idefics3) and ``min_pixels`` / ``max_pixels`` (Qwen2-VL)
override preprocessor_config.json for the call, as transformers' processor kwargs do;
``stream=True`` (one input) yields the new text in chunks (TextStreamer's rule). A chat's images
run through the vision encoder together, alone: a batch of chats gives what each gives alone.
"""

import copy

import numpy as np

from ...engine.compiled import compile
from ...errors import InputError, PipelineError
from ...generation import GenerationConfig, Generator
from ...generation.config import check_options
from ...generation.streaming import stream as stream_text
from ...hub.load import load_beside
from ...preprocess.image.load import load_image
from ...preprocess.text import chat_template
from ...preprocess.text.tokenizer import clean_up_tokenization
from .. import shared
from ..base import Pipeline, generation_options
from .vlm_families import family_of

PIPELINE_DEFAULTS = {"max_new_tokens": 256}  # transformers' _default_generation_config (4.57)


class ImageTextToTextPipeline(Pipeline):
    task = "image-text-to-text"
    featurizers = ("tokenizer",)
    encoder_component = "vision_encoder"  # factory.pipeline passes variant= on as encoder_variant=

    def __init__(self, model, config=None, *, tokenizer, repo=None, encoder_variant=None,
                 vision_encoder=None, embed_tokens=None, **kwargs):
        self.family = family_of(config)(repo, config)
        self.tokenizer = tokenizer
        self.vision = vision_encoder or side_model(repo, model, "vision_encoder",
                                                   encoder_variant, required=False)
        embed = embed_tokens or side_model(repo, model, "embed_tokens", encoder_variant)
        text = dict((config or {}).get("text_config") or {})
        self.generator = shared.per_model(
            model, "vlm", lambda: EmbedsGenerator(model, {**config, **text}, embed))
        self.image_token_id = config.get("image_token_id")
        self.generation_file = repo.json("generation_config.json", {}) if repo else {}
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        family_of(repo.config())  # before the decoder file is looked for
        return "decoder_model_merged"

    # --- calling -------------------------------------------------------------------------------

    def __call__(self, images=None, text=None, *, stream=False, **kwargs):
        inputs = _inputs(images, text)
        if not stream:
            return super().__call__(inputs, **kwargs)
        if not isinstance(inputs, dict):
            raise PipelineError("stream=True takes one input (one chat or one prompt)")
        kwargs.pop("batch_size", None)
        pre, fwd, post = self._sanitize_parameters(**{**self._defaults, **kwargs})
        config = fwd["config"]
        if config.num_beams > 1:
            raise PipelineError("stream=True cannot stream beam search (num_beams > 1)")
        if post["summary"]:
            raise PipelineError("stream=True yields text chunks only here: drop token_summary, or "
                                "call without stream=True to get it in each record")
        chunk = next(iter(self.preprocess(inputs, **pre)))
        embeds = self._prompt_embeds(chunk)
        decode = lambda ids: self._decode(ids, None)  # noqa: E731
        return stream_text(lambda on_step: self.generator.generate(
            [chunk["ids"]], config, [embeds], [chunk["positions"]], decode=decode,
            on_step=on_step), decode)

    def _is_single(self, inputs):
        return isinstance(inputs, dict)

    def _input_kind(self):
        return (f"images= and text= (a prompt with {self.family.image_token} tokens, or chat "
                "messages whose content parts are {'type': 'image'} / {'type': 'text', 'text': "
                "...})")

    def _sanitize_parameters(self, max_new_tokens=None, generate_kwargs=None,
                             return_full_text=None, return_tensors=None,
                             clean_up_tokenization_spaces=None, continue_final_message=None,
                             do_image_splitting=None, min_pixels=None, max_pixels=None,
                             token_summary=False, **options):
        options = generation_options(generate_kwargs, max_new_tokens, options)
        check_options(self.task, options)
        config = GenerationConfig.from_dicts(self.generation_file, self.config,
                                             pipeline_defaults=PIPELINE_DEFAULTS, **options)
        if return_full_text is not None and return_tensors:
            raise PipelineError("return_full_text and return_tensors exclude each other")
        pre = {"continue_final": continue_final_message, "split": do_image_splitting,
               "bounds": _pixel_bounds(min_pixels, max_pixels)}
        post = {"return_type": "tensors" if return_tensors else
                "new_text" if return_full_text is False else "full_text",
                "clean_up": clean_up_tokenization_spaces, "continue_final": continue_final_message,
                "summary": bool(token_summary)}
        return pre, {"config": config}, post

    # --- inputs --------------------------------------------------------------------------------

    def preprocess(self, inputs, continue_final=None, split=None, bounds=None):
        """One chunk: the prompt's ids (image tokens expanded), its images' vision inputs and
        its positions (None: the token index)."""
        images = inputs.get("images")
        images = [] if images is None else list(images) if isinstance(images, (list, tuple)) \
            else [images]
        if "messages" in inputs:
            messages = _with_images(inputs["messages"], images)
            if continue_final is None:
                continue_final = messages[-1]["role"] == "assistant"
            text = self._render(messages, continue_final)
            images = [part.get("image", part.get("url", part.get("path")))
                      for m in messages for part in _parts(m) if part.get("type") == "image"]
            prompt = messages
        else:
            prompt = text = inputs.get("text")
            if not isinstance(text, str):
                raise PipelineError(f"text must be a prompt string or chat messages, got "
                                    f"{text!r:.80}")
            token = self.family.image_token
            if text.count(token) != len(images):
                raise PipelineError(f"The prompt has {text.count(token)} {token} token(s) but "
                                    f"{len(images)} image(s) were given: give one image per "
                                    f"{token}")
        if images and self.vision is None:
            raise PipelineError("This model has no vision encoder (onnx/vision_encoder*.onnx): "
                                "give text without images")
        expanded, vision = self.family.prepare(text, [load_image(i) for i in images], split,
                                               bounds)
        bos = self.tokenizer.config.get("bos_token")
        bos = bos.get("content") if isinstance(bos, dict) else bos
        ids = self.tokenizer.encode(expanded, truncation=False, add_special_tokens=not (
            bos and expanded.startswith(bos))).ids
        context = self.generator.context
        if context and len(ids) >= context:
            raise PipelineError(f"The prompt is {len(ids)} tokens (its images included) but the "
                                f"model's context is {context} positions: shorten the text or "
                                "give fewer or smaller images")
        yield {"prompt": prompt, "ids": ids, "vision": vision, "continue_final": continue_final,
               "positions": self.family.positions(ids, vision)}

    def _render(self, messages, continue_final):
        """transformers' apply_chat_template: the generation prompt, or the final message's last
        text part continued (the template's text up to it)."""
        config = self.tokenizer.config
        template = chat_template.find_template(self.repo, config)
        tag = "CONTINUE_FINAL_MESSAGE_TAG "
        if continue_final:
            messages = copy.deepcopy(messages)
            part = next((p for p in reversed(_parts(messages[-1])) if "text" in p), None)
            if part is None:
                raise PipelineError("continue_final_message: the final message has no text part")
            part["text"] += tag
        text = chat_template.render(template, messages, add_generation_prompt=not continue_final,
                                    special_tokens=chat_template.special_tokens(config))
        if continue_final:
            at = text.rindex(tag.strip())
            text = text[:at] if text[at:at + len(tag)] == tag else text[:at].rstrip()
        return text

    # --- the model -----------------------------------------------------------------------------

    def _prompt_embeds(self, chunk):
        """[n, hidden] embeddings of the prompt, the image tokens' rows the vision features."""
        embeds = self.generator.embed_ids(np.asarray([chunk["ids"]], np.int64))[0]
        if chunk["vision"] is None:
            return embeds
        # the vision encoder's compiled function, as _run_model shares a model's
        fn = shared.per_model(self.vision, "compiled",
                              lambda: compile(self.vision, cache_size=self.cache_size))
        features = self.family.features(fn, chunk["vision"])
        at = np.nonzero(np.asarray(chunk["ids"]) == self.image_token_id)[0]
        if len(at) != len(features):
            raise PipelineError(f"The prompt holds {len(at)} image tokens but its images give "
                                f"{len(features)} feature rows: write each image as one "
                                f"{self.family.image_token} in the prompt, not expanded")
        embeds[at] = features.astype(embeds.dtype)
        return embeds

    def _forward(self, chunks, config):
        prompts = [c["ids"] for c in chunks]
        embeds = [self._prompt_embeds(c) for c in chunks]
        positions = [c["positions"] for c in chunks]
        try:
            if config.num_beams > 1:
                new, _ = self.generator.beam_search(prompts, config, embeds, positions)
                summaries = self.generator.stats.summaries([len(p) for p in prompts])
            else:
                r = config.num_return_sequences
                flat = self.generator.generate([p for p in prompts for _ in range(r)], config,
                                               [e for e in embeds for _ in range(r)],
                                               [p for p in positions for _ in range(r)],
                                               decode=lambda ids: self._decode(ids, None))
                new = [flat[i * r:(i + 1) * r] for i in range(len(chunks))]
                rows = [len(p) for p in prompts for _ in range(r)]
                flat = [t[0] for t in self.generator.stats.summaries(rows)]
                summaries = [flat[i * r:(i + 1) * r] for i in range(len(chunks))]
        except InputError as e:
            raise PipelineError(str(e)) from None
        return [dict(c, new_ids=n, summaries=t) for c, n, t in zip(chunks, new, summaries)]

    # --- outputs -------------------------------------------------------------------------------

    def postprocess(self, outputs, return_type="full_text", clean_up=None, continue_final=None,
                    summary=False):
        """transformers' records; with ``token_summary=True`` each also has ``token_summary``:
        input (the prompt's tokens, its image tokens included), output and padding counts
        (generation.loop.token_summary)."""
        out = outputs[0]
        records = [self._record(out, list(out["ids"]) + list(new), return_type, clean_up)
                   for new in out["new_ids"]]
        if summary:
            records = [dict(r, token_summary=t) for r, t in zip(records, out["summaries"])]
        return records

    def _record(self, out, sequence, return_type, clean_up):
        """transformers' postprocess: the decoded prompt cut from the decoded sequence when it
        starts within 2 characters of its start."""
        prompt = out["prompt"]
        if return_type == "tensors":
            return {"input_text": prompt, "generated_token_ids": sequence}
        text, given = self._decode(sequence, clean_up), self._decode(out["ids"], clean_up)
        at = text.find(given)
        if 0 <= at <= 2:
            text = text[at + len(given):]
        if return_type == "full_text":
            if isinstance(prompt, str):
                text = prompt + text
            elif out["continue_final"]:
                last = dict(prompt[-1]["content"][-1])
                last["text"] += text
                text = prompt[:-1] + [dict(prompt[-1], content=prompt[-1]["content"][:-1] +
                                           [last])]
            else:
                text = list(prompt) + [{"role": "assistant", "content": text}]
        return {"input_text": prompt, "generated_text": text}

    def _decode(self, ids, clean_up):
        text = self.tokenizer.backend.decode([int(i) for i in ids], skip_special_tokens=True)
        clean = self.tokenizer.clean_up_tokenization_spaces if clean_up is None else clean_up
        return clean_up_tokenization(text) if clean else text


class EmbedsGenerator(Generator):
    """A Generator over a decoder that takes inputs_embeds: each graph call's ids go through
    embed_tokens, and a prompt token takes its row of the prompt's own embeddings (the image
    features in place) instead. ``embeds``: one [n, hidden] array per prompt; ``positions``:
    one per prompt, None or its [3, n] M-RoPE positions (the steppers' ``row_positions``)."""

    def __init__(self, model, model_config, embed_model):
        super().__init__(model, model_config)
        self.embed_fn = compile(embed_model)
        self._rows = self.row_positions = None

    def embed_ids(self, ids):
        return np.array(self.embed_fn({"input_ids": ids})["inputs_embeds"])  # a writable copy

    def embed(self, feed, index):
        """``feed`` with inputs_embeds for its input_ids; ``index`` [B, S]: each prompt token's
        index in its prompt, where it takes the prompt's own row (None: new tokens)."""
        feed = dict(feed)
        embeds = self.embed_ids(feed.pop("input_ids"))
        for b, row in enumerate(self._rows if index is not None else ()):
            inside = index[b] < len(row)
            embeds[b, inside] = row[index[b, inside]]
        feed["inputs_embeds"] = embeds
        return feed

    def generate(self, prompts, config, embeds=(), positions=None, **kwargs):
        return self._with(list(embeds), positions, super().generate, prompts, config, **kwargs)

    def beam_search(self, prompts, config, embeds=(), positions=None, **kwargs):
        return self._with(list(embeds), positions, super().beam_search, prompts, config,
                          **kwargs)

    def _with(self, rows, positions, run, *args, **kwargs):
        self._rows = rows
        self.row_positions = positions if positions and any(
            p is not None for p in positions) else None
        try:
            return run(*args, **kwargs)
        finally:
            self._rows = self.row_positions = None


def side_model(repo, model, component, variant, required=True):
    """The repo's ``component`` graph (onnx/vision_encoder*, embed_tokens*) beside ``model``."""
    if repo is None:
        raise PipelineError(f"A model loaded by hand needs {component}= (its transmuter.Model) "
                            "or config= its repo folder")
    names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
    if not any(n.startswith(component) for n in names):
        if not required:
            return None
        raise PipelineError(f"{repo.label} has no onnx/{component}*.onnx (the transformers.js "
                            f"layout: vision_encoder, embed_tokens, decoder_model_merged); it has "
                            f"{', '.join(sorted(names))}")
    return load_beside(model, repo, repo.choose(component, variant).path)


def _inputs(images, text):
    """transformers' call forms as our inputs: a dict per chat or prompt."""
    if text is None and _is_chat(images):
        images, text = None, images
    if text is None and isinstance(images, dict):
        return images
    if text is None and isinstance(images, (list, tuple)) and images and \
            all(isinstance(i, dict) for i in images):
        return list(images)
    if _is_chat(text):
        return {"messages": text, "images": images}
    if isinstance(text, (list, tuple)) and text and all(_is_chat(t) or isinstance(t, str)
                                                          for t in text):
        images = [None] * len(text) if images is None else images
        if len(images) != len(text):
            raise PipelineError(f"{len(text)} texts but {len(images)} image lists: give one "
                                "image list per text")
        return [{"messages": t, "images": i} if _is_chat(t) else {"text": t, "images": i}
                for t, i in zip(text, images)]
    if text is None:
        raise PipelineError("image-text-to-text needs text= (a prompt or chat messages)")
    return {"text": text, "images": images}


def _is_chat(x):
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(m, dict) and "role" in m
                                                            for m in x)


def _parts(message):
    content = message.get("content")
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _pixel_bounds(min_pixels, max_pixels):
    """The call's image-area bounds (transformers hands them to Qwen2-VL's image processor),
    checked: {} when neither is given."""
    bounds = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels))
              if v is not None}
    for name, value in bounds.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise PipelineError(f"{name} must be a positive number of pixels (an int), got "
                                f"{value!r}")
    return bounds


def _with_images(messages, images):
    """transformers' add_images_to_messages: each image part without its own image takes the
    next of ``images``; every image must be used."""
    messages, left = copy.deepcopy(list(messages)), list(images)
    chat_template.check_messages(messages)
    for m in messages:
        for part in _parts(m):
            if part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
                part.update(type="image", image=part.pop("image_url").get("url"))
            if part.get("type") == "image" and not any(k in part for k in ("image", "url",
                                                                            "path")):
                if not left:
                    raise PipelineError(f"The chat has more image parts than the {len(images)} "
                                        "image(s) given: give one image per {'type': 'image'} "
                                        "part, or put it in the part as 'image'")
                part["image"] = left.pop(0)
    if left:
        raise PipelineError(f"{len(left)} image(s) were given beyond the chat's image parts: "
                            "add a {'type': 'image'} part for each")
    return messages
