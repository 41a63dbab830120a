"""Rerankers that are causal LMs (Qwen3-Reranker and the like), scored as sentence-transformers'
``CrossEncoder`` scores them: the pair renders through the chat template as a "query" and a
"document" message, and ``LogitScore`` reads the last token's logits:
``logit[true_token_id] - logit[false_token_id]`` ("yes" and "no" unless modules.json's LogitScore
config names others; the true token's logit alone when it names no false token). Through a
sigmoid (CrossEncoder's default for one score) that is Qwen3-Reranker's documented
``softmax([no, yes])[yes]``.

A causal LM is a reranker when modules.json has a LogitScore module, or when config.json names a
``*ForCausalLM`` architecture (CrossEncoder then adds LogitScore over "yes" / "no" itself).
"""

import posixpath

import numpy as np

from ...generation import Generator
from ...preprocess.text import chat_template
from ...errors import PipelineError
from ...buckets import next_pow2

PAIR_ROLES = ("query", "document")
# sentence-transformers derives the template's tail from two renders whose contents differ
# (Transformer._chat_template_suffix_ids): the tokens they share at the end are the template's.
_FILLERS = ("0", "1 2 3 4")


def logit_score_config(repo, config):
    """LogitScore's settings ({"true_token_id", "false_token_id"}, ids or None for "yes"/"no"),
    or None when the model is no causal-LM reranker."""
    modules = repo.json("modules.json", []) if repo is not None else []
    for module in modules:
        if str(module.get("type", "")).rsplit(".", 1)[-1] == "LogitScore":
            path = posixpath.join(module.get("path") or "", "config.json")
            return dict(repo.json(path, {}) or {}, file=path)
    architectures = (config or {}).get("architectures") or [""]
    if str(architectures[0]).endswith("ForCausalLM"):
        return {"true_token_id": None, "false_token_id": None}
    return None


class LogitScorer:
    """Renders (query, document) pairs into prompt ids and scores batches of them."""

    def __init__(self, model, config, repo, tokenizer, settings, max_length):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.template = chat_template.find_template(repo, tokenizer.config)
        self.special = chat_template.special_tokens(tokenizer.config)
        self.true_id = self._token(settings.get("true_token_id"), "yes", settings)
        self.false_id = settings.get("false_token_id")
        if settings.get("file") is None:  # CrossEncoder's default LogitScore
            self.false_id = self._token(None, "no", settings)
        self.system = _default_prompt(repo)
        self.generator = Generator(model, config)
        self._suffix = None

    def _token(self, given, word, settings):
        if given is not None:
            return int(given)
        ids = self.tokenizer.backend.token_to_id(word)
        if ids is None:
            raise PipelineError(f"This causal LM has no {word!r} token to score with (a "
                                "CrossEncoder reranker reads the logits of 'yes' and 'no'); add "
                                "a LogitScore module with true_token_id/false_token_id to "
                                "modules.json")
        return ids

    def prompt_ids(self, query, document):
        """The pair's token ids, as sentence-transformers makes them: rendered without a
        generation prompt, tokenized without special tokens, cut at ``max_length`` with the
        template's tail written back over the last tokens."""
        ids = self._ids(self._messages(query, document))
        if len(ids) > self.max_length:
            suffix = self.suffix()
            ids = ids[:self.max_length]
            keep = min(len(suffix), len(ids))
            if keep:
                ids[-keep:] = suffix[-keep:]
        return ids

    def suffix(self):
        if self._suffix is None:
            first, second = (self._ids(self._messages(f, f)) for f in _FILLERS)
            count = 0
            for a, b in zip(reversed(first), reversed(second)):
                if a != b:
                    break
                count += 1
            self._suffix = first[len(first) - count:] if 0 < count < min(map(len, (first, second))) \
                else []
        return self._suffix

    def _messages(self, query, document):
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": "query", "content": query},
                         {"role": "document", "content": document}]

    def _ids(self, messages):
        text = chat_template.render(self.template, messages, add_generation_prompt=False,
                                    special_tokens=self.special,
                                    roles=(*chat_template.ROLES, *PAIR_ROLES))
        return list(self.tokenizer.encode(text, add_special_tokens=False, truncation=False).ids)

    def scores(self, prompts, rows):
        """LogitScore's score of each prompt; the batch runs as ``rows`` rows (the spare ones
        copies of the first), so batches of a few sizes share compiled shapes."""
        batch = list(prompts) + [prompts[0]] * (rows - len(prompts))
        # padded to a power of two (at most max_length): one prompt shape per octave of lengths
        width = min(next_pow2(max(map(len, batch))), self.max_length)
        with self.generator.model.backend.scope():
            stepper = self.generator.stepper(batch, 0, width=width)
            logits = np.asarray(stepper.start(), np.float32)[:len(prompts)]
        score = logits[:, self.true_id]
        return score if self.false_id is None else score - logits[:, int(self.false_id)]


def _default_prompt(repo):
    """config_sentence_transformers.json's default prompt (a system message), if it names one."""
    settings = repo.json("config_sentence_transformers.json", {}) if repo is not None else {}
    name = (settings or {}).get("default_prompt_name")
    return ((settings or {}).get("prompts") or {}).get(name) if name else None
