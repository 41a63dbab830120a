"""token-classification (alias ner): transformers' TokenClassificationPipeline.

    pipe("My name is Wolfgang")  -> [{"entity": "B-PER", "score", "index", "word", "start", "end"}]
    pipe(text, aggregation_strategy="simple")  -> [{"entity_group", "score", "word", "start", "end"}]

Aggregation follows transformers exactly: ``none`` (one dict per token), ``simple`` (adjacent
tokens of one entity grouped, B-/I- aware), and the word strategies ``first``, ``average``,
``max`` that first force the sub-tokens of a word to agree. Long texts are truncated to the
largest compiled length (transformers' ``truncation=True``).
"""

import warnings

import numpy as np

from ...errors import PipelineError
from ..heads import softmax
from .base import TextPipeline, check_text

STRATEGIES = ("none", "simple", "first", "average", "max")


class TokenClassificationPipeline(TextPipeline):
    task = "token-classification"

    def __init__(self, model, config=None, **kwargs):
        if not (config or {}).get("id2label"):
            raise PipelineError(f"{self.task}: the model's config.json has no id2label, so it has "
                                "no token classification head; use a model fine-tuned for it")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, aggregation_strategy="none", ignore_labels=None, **unknown):
        super()._sanitize_parameters(**unknown)
        strategy = str(getattr(aggregation_strategy, "value", aggregation_strategy)).lower()
        if strategy not in STRATEGIES:
            raise PipelineError(f"aggregation_strategy must be one of {STRATEGIES}, got "
                                f"{aggregation_strategy!r}")
        if strategy in ("first", "average", "max") and not self.tokenizer.continuing_subword_prefix:
            # transformers warns and falls back to a space heuristic; say so once, here.
            warnings.warn("Tokenizer does not support real words, using fallback heuristic")
        ignore = ["O"] if ignore_labels is None else list(ignore_labels)
        return {}, {}, {"strategy": strategy, "ignore_labels": ignore}

    def preprocess(self, sentence):
        encoding = self.tokenizer.encode(check_text(sentence, "sentence"),
                                         max_length=self.sequence_lengths[-1])
        yield {"encoding": encoding, "sentence": sentence}

    def postprocess(self, outputs, strategy="none", ignore_labels=("O",)):
        out = outputs[0]
        enc = out["encoding"]
        scores = softmax(self.output(out, "logits")[:len(enc.ids)])
        pre = self.gather_pre_entities(out["sentence"], enc, scores, strategy)
        entities = self.aggregate(pre, strategy)
        return [e for e in entities if e.get("entity") not in ignore_labels
                and e.get("entity_group") not in ignore_labels]

    def gather_pre_entities(self, sentence, enc, scores, strategy):
        """One dict per non-special token: its word, scores, character span, and whether it
        continues the previous word."""
        pre = []
        has_prefix = bool(self.tokenizer.continuing_subword_prefix)
        for idx, token_scores in enumerate(scores):
            if enc.special_tokens_mask[idx]:
                continue
            word = self.tokenizer.id_to_token(enc.ids[idx])
            start, end = enc.offsets[idx]
            word_ref = sentence[start:end]
            if has_prefix:
                is_subword = len(word) != len(word_ref)
            else:
                is_subword = start > 0 and " " not in sentence[start - 1:start + 1]
            if enc.ids[idx] == self.tokenizer.unk_token_id:
                word, is_subword = word_ref, False
            pre.append({"word": word, "scores": token_scores, "start": start, "end": end,
                        "index": idx, "is_subword": is_subword})
        return pre

    def aggregate(self, pre, strategy):
        if strategy in ("none", "simple"):
            entities = []
            for p in pre:
                best = int(p["scores"].argmax())
                entities.append({"entity": self.label(best), "score": float(p["scores"][best]),
                                 "index": p["index"], "word": p["word"], "start": p["start"],
                                 "end": p["end"]})
        else:
            entities = self.aggregate_words(pre, strategy)
        return entities if strategy == "none" else self.group_entities(entities)

    def aggregate_word(self, tokens, strategy):
        word = self.tokenizer.tokens_to_string([t["word"] for t in tokens])
        if strategy == "first":
            scores = tokens[0]["scores"]
        elif strategy == "max":
            scores = max(tokens, key=lambda t: t["scores"].max())["scores"]
        else:  # average
            scores = np.nanmean(np.stack([t["scores"] for t in tokens]), axis=0)
        best = int(scores.argmax())
        return {"entity": self.label(best), "score": float(scores[best]), "word": word,
                "start": tokens[0]["start"], "end": tokens[-1]["end"]}

    def aggregate_words(self, pre, strategy):
        """Make the sub-tokens of each word agree (micro|soft -> one word)."""
        words, group = [], None
        for p in pre:
            if group is None:
                group = [p]
            elif p["is_subword"]:
                group.append(p)
            else:
                words.append(self.aggregate_word(group, strategy))
                group = [p]
        if group is not None:
            words.append(self.aggregate_word(group, strategy))
        return words

    def group_sub_entities(self, entities):
        return {"entity_group": entities[0]["entity"].split("-", 1)[-1],
                "score": float(np.mean(np.nanmean([e["score"] for e in entities]))),
                "word": self.tokenizer.tokens_to_string([e["word"] for e in entities]),
                "start": entities[0]["start"], "end": entities[-1]["end"]}

    def group_entities(self, entities):
        """Adjacent entities with the same tag join unless the next one starts with B-."""
        groups, current = [], []
        for entity in entities:
            if not current:
                current.append(entity)
                continue
            bi, tag = get_tag(entity["entity"])
            _, last_tag = get_tag(current[-1]["entity"])
            if tag == last_tag and bi != "B":
                current.append(entity)
            else:
                groups.append(self.group_sub_entities(current))
                current = [entity]
        if current:
            groups.append(self.group_sub_entities(current))
        return groups


def get_tag(name):
    if name.startswith("B-"):
        return "B", name[2:]
    if name.startswith("I-"):
        return "I", name[2:]
    return "I", name  # not in B/I format: treated as I so that same tags group
