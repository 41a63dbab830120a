"""text-generation: transformers' TextGenerationPipeline over ``transmuter.generation``.

    pipe("Once upon a time", max_new_tokens=20)        -> [{"generated_text": prompt + new text}]
    pipe([{"role": "user", "content": "Hi"}])          -> [{"generated_text": messages + reply}]
    pipe("...", return_full_text=False)                -> the new text only
    pipe("...", return_tensors=True)                   -> [{"generated_token_ids": prompt + new}]

Generation settings start from the repo's generation_config.json; call options override them.
``device_loop=True`` (a pipeline or call option) runs the decode loop as one compiled
``lax.while_loop`` on the device (generation/device_loop.py; JAX, fixed-cache graphs): the same
tokens, no token through the host until the end; an int k runs k tokens per device call (a
stream then gets its chunks every k tokens; ``True`` streams every STREAM_EVERY).
Chat messages render with the repo's chat template (``template_options`` such as
``enable_thinking=False``, ``tools``, ``documents`` reach it) and tokenize without special tokens,
as ``apply_chat_template`` does. Inputs of one batch run together, each with its own length.
"""

from ...generation import GenerationConfig, Generator
from ...generation.config import check_options
from ...generation.loop import token_summary
from ...generation.streaming import stream as stream_text
from ...preprocess.text import chat_template
from ...preprocess.text.tokenizer import clean_up_tokenization
from ...errors import PipelineError
from .base import TextPipeline, check_text
from .continuous import ContinuousServer

# Tokens per device call when a stream runs with device_loop=True (an int sets its own).
STREAM_EVERY = 8


class TextGenerationPipeline(TextPipeline):
    task = "text-generation"

    def __init__(self, model, config=None, *, repo=None, **kwargs):
        self.generator = Generator(model, config)
        self.generation_file = repo.json("generation_config.json", {}) if repo else {}
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """onnx/model*.onnx (optimum, genai builder), else the merged decoder (Xenova/gpt2)."""
        names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
        if any(n.startswith("model") for n in names):
            return "model"
        return "decoder_model_merged"

    def serve(self, max_batch_size=None, batch_timeout_ms=None, **call_options):
        """A ``ContinuousServer`` (continuous.py): ``max_batch_size`` rows of one running decode
        (default ``batch_size``), a new request joining it in a free row."""
        return ContinuousServer(self, max_batch_size, batch_timeout_ms, **call_options)

    def __call__(self, inputs, *, stream=False, **kwargs):
        """With ``stream=True`` (one input): an iterator of new-text chunks (TextStreamer rule);
        with ``token_summary=True`` too, one dict after the last chunk:
        ``{"token_summary": {"input", "output", "padding"}, "finish_reason": "stop" | "length"}``
        ("stop": an eos token or a stop string ended it; "length": the token budget)."""
        if not stream:
            return super().__call__(inputs, **kwargs)
        if not self._is_single(inputs):
            raise PipelineError("stream=True takes one input (a string or one chat)")
        kwargs.pop("batch_size", None)
        pre, fwd, post = self._sanitize_parameters(**{**self._defaults, **kwargs})
        config = fwd["config"]
        if config.num_beams > 1:
            raise PipelineError("stream=True cannot stream beam search (num_beams > 1)")
        chunk = next(iter(self.preprocess(inputs, **pre)))
        final = (lambda new: self._stream_summary(chunk["ids"], new[0], config)) \
            if post["summary"] else None
        device_loop = STREAM_EVERY if fwd["device_loop"] is True else fwd["device_loop"]
        return stream_text(lambda on_step: self.generator.generate(
            [chunk["ids"]], config, decode=lambda ids: self._decode(ids, None),
            on_step=on_step, device_loop=device_loop), lambda ids: self._decode(ids, None), final)

    def _stream_summary(self, prompt_ids, new_ids, config):
        """The last item of a stream with ``token_summary=True``."""
        budget = config.new_tokens(len(prompt_ids))
        ended = bool(new_ids) and new_ids[-1] in (config.eos_token_id or [])
        # no budget left (a prompt at max_length): generate ran no step and kept no stats
        summary = self.generator.stats.summaries([len(prompt_ids)])[0][0] if new_ids else \
            token_summary(len(prompt_ids), 0, 0, 0)
        return {"token_summary": summary,
                "finish_reason": "stop" if ended or len(new_ids) < budget else "length"}

    # --- options -------------------------------------------------------------------------------

    def _sanitize_parameters(self, return_full_text=None, return_tensors=None, return_text=None,
                             clean_up_tokenization_spaces=None, add_special_tokens=None,
                             template_options=None, tools=None, documents=None,
                             chat_template_name=None, token_summary=False, device_loop=False,
                             **options):
        check_options(self.task, options)
        if template_options is not None and not isinstance(template_options, dict):
            raise PipelineError(f"template_options must be a dict, got {template_options!r:.80}")
        config = GenerationConfig.from_dicts(self.generation_file, self.config, **options)
        if device_loop is not False:  # refused at once: the backend, the graph, the options
            self.generator.check_device_loop(device_loop, config)
        pre = {"add_special_tokens": add_special_tokens, "template_options": template_options or {},
               "tools": tools, "documents": documents, "template_name": chat_template_name}
        post = {"return_type": "tensors" if return_tensors else
                "new_text" if return_full_text is False else "full_text",
                "clean_up": clean_up_tokenization_spaces, "summary": bool(token_summary)}
        return pre, {"config": config, "device_loop": device_loop}, post

    # --- inputs --------------------------------------------------------------------------------

    def _is_single(self, inputs):
        return isinstance(inputs, (str, dict)) or _is_chat(inputs)

    def _input_kind(self):
        return "a string or chat messages (a list of {'role', 'content'} dicts)"

    def preprocess(self, inputs, add_special_tokens=None, template_options=None, tools=None,
                   documents=None, template_name=None):
        if isinstance(inputs, str):
            ids = self.tokenizer.encode(check_text(inputs, "prompt"), truncation=False,
                                        add_special_tokens=add_special_tokens is not False).ids
            yield {"prompt": inputs, "ids": ids}
            return
        messages = inputs.get("messages") if isinstance(inputs, dict) else inputs
        if messages is None:
            raise PipelineError(f"A dict input needs 'messages', got keys {sorted(inputs)}")
        config = self.tokenizer.config
        template = chat_template.find_template(self.repo, config, template_name, tools)
        text = chat_template.render(template, messages, special_tokens=chat_template
                                    .special_tokens(config), tools=tools, documents=documents,
                                    **(template_options or {}))
        ids = self.tokenizer.encode(text, truncation=False, add_special_tokens=bool(
            add_special_tokens)).ids
        yield {"prompt": list(messages), "ids": ids}

    # --- the model -----------------------------------------------------------------------------

    def _forward(self, chunks, config, device_loop=False):
        prompts = [c["ids"] for c in chunks]
        if config.num_beams > 1:
            new, _ = self.generator.beam_search(prompts, config)
            summaries = self.generator.stats.summaries([len(p) for p in prompts])
            return [dict(c, new_ids=n, summaries=t) for c, n, t in zip(chunks, new, summaries)]
        # num_return_sequences (sampling): each prompt runs that many rows, as generate expands
        r = config.num_return_sequences
        rows = [p for p in prompts for _ in range(r)]
        flat = self.generator.generate(rows, config, decode=lambda ids: self._decode(ids, None),
                                       device_loop=device_loop)
        summaries = [t[0] for t in self.generator.stats.summaries([len(p) for p in rows])]
        return [dict(c, new_ids=flat[i * r:(i + 1) * r], summaries=summaries[i * r:(i + 1) * r])
                for i, c in enumerate(chunks)]

    def postprocess(self, outputs, return_type="full_text", clean_up=None, summary=False):
        """transformers' records; with ``token_summary=True`` each also has ``token_summary``:
        input, output and padding token counts (loop.token_summary)."""
        out = outputs[0]
        records = [self._record(out, new, return_type, clean_up) for new in out["new_ids"]]
        if summary:
            records = [dict(r, token_summary=t) for r, t in zip(records, out["summaries"])]
        return records

    def _record(self, out, new_ids, return_type, clean_up):
        sequence = list(out["ids"]) + list(new_ids)
        if return_type == "tensors":
            return {"generated_token_ids": sequence}
        # as transformers: decode the whole sequence and cut the decoded prompt's length
        text = self._decode(sequence, clean_up)[len(self._decode(out["ids"], clean_up)):]
        prompt = out["prompt"]
        if return_type == "new_text":
            return {"generated_text": text}
        if isinstance(prompt, str):
            return {"generated_text": prompt + text}
        if prompt[-1]["role"] == "assistant":  # continuing the final message
            last = dict(prompt[-1], content=prompt[-1]["content"] + text)
            return {"generated_text": prompt[:-1] + [last]}
        return {"generated_text": prompt + [{"role": "assistant", "content": text}]}

    def _decode(self, ids, clean_up):
        text = self.tokenizer.backend.decode([int(i) for i in ids], skip_special_tokens=True)
        clean = self.tokenizer.clean_up_tokenization_spaces if clean_up is None else clean_up
        return clean_up_tokenization(text) if clean else text


def _is_chat(inputs):
    return isinstance(inputs, (list, tuple)) and bool(inputs) and \
        all(isinstance(m, dict) and "role" in m for m in inputs)
