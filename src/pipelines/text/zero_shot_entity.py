"""zero-shot-entity-recognition: GLiNER span and token models, as the gliner package runs them.

    pipe = transmuter.pipeline("zero-shot-entity-recognition", "onnx-community/gliner_small-v2.1")
    pipe("Clara works for the United Nations.", labels=["person", "organization"])
    -> [{"start": 0, "end": 5, "text": "Clara", "label": "person", "score": 0.97}, ...]
    pipe([{"text": "...", "labels": ["city"]}, ...])      # labels per input
    pipe(texts, labels=[["city"], ["person", "date"]])    # or gliner's list of label lists

Everything follows gliner 0.2.x (``GLiNER.inference``) on the model's gliner_config.json:
the text is split into words by its whitespace splitter; the prompt ``<<ENT>> label ... <<SEP>>``
goes before the words, and the whole is tokenized as pre-split words (transformers'
``is_split_into_words``); ``words_mask`` numbers the first (``subtoken_pooling``) sub-token of each
text word. A span model (span_mode "markerV0", ...) also takes every span of up to ``max_width``
words (``span_idx``/``span_mask``) and scores it per label (logits [B, words, max_width,
labels]); a token model (span_mode "token_level") scores start/end/inside per word and label, and a
span is a start and an end of one label with every word between inside. Scores are sigmoids; spans
above ``threshold`` go through gliner's greedy search (best first; ``flat_ner`` forbids any
overlap, else only partial overlaps are dropped; ``multi_label`` keeps other labels of one span),
and come back sorted by start, as character offsets into the text.
"""

import re
from collections.abc import Mapping

import numpy as np

from ... import buckets
from ...errors import PipelineError
from ..heads import sigmoid
from .base import TextPipeline, check_text

WORDS = re.compile(r"\w+(?:[-_]\w+)*|\S")  # gliner's WhitespaceTokenSplitter
POOLING = ("first", "last", "mean", "max")
# Graph inputs of the uni-encoder exports (gliner's export_to_onnx / convert_to_onnx).
SPAN_INPUTS = {"input_ids", "attention_mask", "words_mask", "text_lengths", "span_idx",
               "span_mask"}


class ZeroShotEntityRecognitionPipeline(TextPipeline):
    task = "zero-shot-entity-recognition"

    def __init__(self, model, config=None, *, repo=None, **kwargs):
        self.gliner = _gliner_config(config, repo)
        names = {v.name for v in model.inputs}
        unknown = names - SPAN_INPUTS
        if unknown or not {"input_ids", "words_mask", "text_lengths"} <= names:
            raise PipelineError(f"{self.task} runs uni-encoder GLiNER exports (inputs input_ids, "
                                "attention_mask, words_mask, text_lengths[, span_idx, span_mask]);"
                                f" this graph takes {sorted(names)}")
        self.span_model = "span_idx" in names
        self.max_width = int(self.gliner.get("max_width", 12))
        self.max_words = int(self.gliner.get("max_len", 384))
        # gliner's config defaults (older gliner_config.json files leave them out)
        self.ent_token = self.gliner.get("ent_token", "<<ENT>>")
        self.sep_token = self.gliner.get("sep_token", "<<SEP>>")
        self.pooling = self.gliner.get("subtoken_pooling") or "first"
        self.pooling = self.pooling if isinstance(self.pooling, str) else "first"
        _check_supported(self.gliner, self.pooling, self.span_model)
        super().__init__(model, config, repo=repo, **kwargs)

    # --- options -------------------------------------------------------------------------------

    def _sanitize_parameters(self, labels=None, threshold=0.5, flat_ner=True, multi_label=False,
                             **unknown):
        super()._sanitize_parameters(**unknown)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not 0 <= threshold <= 1:
            raise PipelineError(f"threshold must be a number in [0, 1], got {threshold!r}")
        pre = {} if labels is None else {"labels": labels}
        post = {"threshold": float(threshold), "flat_ner": bool(flat_ner),
                "multi_label": bool(multi_label)}
        return pre, {}, post

    def __call__(self, inputs, labels=None, **kwargs):
        if _per_input(labels):  # gliner's labels=[[...], [...]]: one label set per text
            if not isinstance(inputs, (list, tuple)) or len(inputs) != len(labels):
                raise PipelineError(f"labels has {len(labels)} label sets, one per input: give "
                                    "a list of as many texts (or {'text', 'labels'} dicts)")
            inputs = [{"text": t, "labels": ls} for t, ls in zip(inputs, labels)]
            labels = None
        if labels is not None:
            kwargs["labels"] = labels
        return super().__call__(inputs, **kwargs)

    def _input_kind(self):
        return "a string or a {'text': ..., 'labels': [...]} dict"

    def serve(self, max_batch_size=None, batch_timeout_ms=5, **call_options):
        # a batch's inputs come from different callers: label sets by position would go to
        # whichever inputs share a batch
        if _per_input(call_options.get("labels")):
            raise PipelineError("serve(labels=) takes one label set for every call; give each "
                                "call its own as {'text': ..., 'labels': [...]}")
        return super().serve(max_batch_size, batch_timeout_ms, **call_options)

    # --- preprocess ----------------------------------------------------------------------------

    def preprocess(self, item, labels=None):
        if isinstance(item, Mapping):
            if "text" not in item:
                raise PipelineError(f"An input dict needs a 'text' key (and may give 'labels'); "
                                    f"got keys {sorted(item)}")
            labels = item.get("labels", labels)
            item = item["text"]
        text = check_text(item, "text")
        prompts, names = _label_set(labels)
        found = [(m.group(), m.start(), m.end()) for m in WORDS.finditer(text)]
        words = [w for w, _, _ in found][:self.max_words]  # gliner truncates to max_len words
        prompt = []
        for label in prompts:
            prompt += [self.ent_token, label]
        prompt.append(self.sep_token)
        encoding = _encode_words(self.tokenizer, prompt + words)
        yield {"encoding": encoding, "text": text, "names": names, "num_words": len(words),
               "starts": [s for _, s, _ in found], "ends": [e for _, _, e in found],
               "words_mask": _words_mask(encoding.word_ids, len(prompt), self.pooling)}

    # --- the model -----------------------------------------------------------------------------

    def _forward(self, chunks):
        feed = self._feed_gliner(chunks)
        logits = self.output(self._run_model(feed), "logits")
        out = []
        for i, c in enumerate(chunks):
            n, labels = c["num_words"], len(c["names"])
            row = logits[i, :n, :, :labels] if self.span_model else logits[i, :n, :labels, :]
            out.append(dict(c, logits=row))
        return out

    def _feed_gliner(self, chunks):
        """The graph's inputs for ``chunks``, as gliner's collator makes them (tokens, word
        numbers, word counts, every span of up to max_width words), padded to a few shapes.

        A GLiNER graph takes its sizes from the data (the longest text in words, how many words
        and <<ENT>> tokens the batch holds: NonZero, ReduceMax), so every new batch would compile
        anew. Rows never mix, so the batch gets spare rows (copies of the first, up to a power of
        two) and one last *balancing* row that pins those sizes: it is ``words`` long (a power of
        two), holds ``classes`` <<ENT>> tokens (a power of two) and enough marked words to round
        the batch's count up to a multiple of ``words``. The real rows' logits do not change."""
        encodings = [c["encoding"] for c in chunks]
        longest = max(len(e.ids) for e in encodings)
        length = buckets.length(longest, self.sequence_lengths)
        rows = self._rows(len(chunks))
        feed = self.tokenizer.pad(encodings, length, ["input_ids", "attention_mask"])
        feed["words_mask"] = np.zeros_like(feed["input_ids"])
        for i, c in enumerate(chunks):
            n = len(c["words_mask"])
            where = slice(length - n, length) if self.tokenizer.padding_side == "left" \
                else slice(0, n)
            feed["words_mask"][i, where] = c["words_mask"]
        feed["text_lengths"] = np.array([[c["num_words"]] for c in chunks], np.int64)
        longest_text = max(c["num_words"] for c in chunks)
        words = buckets.pow2(longest_text, self.max_words, least=32)
        classes = buckets.pow2(max(len(c["names"]) for c in chunks), length, least=4)
        ent = self.tokenizer.token_to_id(self.ent_token)
        balance = ent is not None and words <= length and classes <= length
        words = words if balance else longest_text  # unbalanced: the graph's own sizes
        if self.span_model:
            feed["span_idx"], feed["span_mask"] = _spans(chunks, words, self.max_width)
        spare = rows - len(chunks)
        feed = {k: np.concatenate([v, np.repeat(v[:1], spare, 0)]) if spare else v
                for k, v in feed.items()}
        if balance:
            feed = self._balance(feed, words, classes, ent)
        return {k: v.astype(self._inputs[k].dtype, copy=False) for k, v in feed.items()
                if k in self._inputs}

    def _balance(self, feed, words, classes, ent):
        """Append the balancing row (see ``_feed_gliner``): ``classes`` <<ENT>> tokens, a text
        of ``words`` words, and marked words that round the batch's count up to a multiple of
        ``words`` (fewer than ``words``, so they fit the row)."""
        row = {k: np.zeros_like(v[:1]) for k, v in feed.items()}
        row["input_ids"][:] = self.tokenizer.pad_token_id or 0
        row["input_ids"][0, :classes] = ent
        row["attention_mask"][:] = 1
        extra = -int((feed["words_mask"] > 0).sum()) % words
        row["words_mask"][0, :extra] = np.arange(1, extra + 1)
        row["text_lengths"][:] = words
        return {k: np.concatenate([v, row[k]]) for k, v in feed.items()}

    # --- postprocess ---------------------------------------------------------------------------

    def postprocess(self, outputs, threshold=0.5, flat_ner=True, multi_label=False):
        out = outputs[0]
        names = out["names"]
        if self.span_model:
            spans = _span_candidates(out["logits"], out["num_words"], threshold)
        else:
            spans = _token_candidates(out["logits"], threshold)
        spans = greedy_search(spans, flat_ner, multi_label)
        text, starts, ends = out["text"], out["starts"], out["ends"]
        return [{"start": starts[s], "end": ends[e], "text": text[starts[s]:ends[e]],
                 "label": names[c], "score": score} for s, e, c, score in spans]


# --- configuration ---------------------------------------------------------------------------

def _gliner_config(config, repo):
    found = repo.json("gliner_config.json", None) if repo is not None else None
    if found is None and isinstance(config, Mapping) and {"span_mode", "max_width",
                                                           "class_token_index"} & set(config):
        found = config  # gliner_config.json given by hand as config=
    if not found:
        where = repo.label if repo is not None else "the model"
        raise PipelineError(f"zero-shot-entity-recognition needs a GLiNER model: {where} has no "
                            "gliner_config.json (give config= the model's folder or repo, or the "
                            "parsed gliner_config.json)")
    return dict(found)


def _check_supported(gliner, pooling, span_model):
    for key, what in (("labels_encoder", "bi-encoder"), ("labels_decoder", "label-decoder"),
                      ("relations_layer", "relation-extraction")):
        if gliner.get(key):
            raise PipelineError(f"This is a {what} GLiNER model ({key} in gliner_config.json); "
                                "only uni-encoder span and token models are supported")
    if gliner.get("precomputed_prompts_mode"):
        raise PipelineError("GLiNER models with precomputed prompts are not supported")
    splitter = gliner.get("words_splitter_type", "whitespace")
    if splitter != "whitespace":
        raise PipelineError(f"words_splitter_type {splitter!r} in gliner_config.json is not "
                            "supported; only gliner's 'whitespace' splitter is")
    if pooling not in POOLING:
        raise PipelineError(f"subtoken_pooling {pooling!r} in gliner_config.json; expected one "
                            f"of {POOLING}")
    mode = gliner.get("span_mode")  # the graph decides; a config that says otherwise is wrong
    if mode is not None and (mode in ("token_level", "token-level")) == span_model:
        raise PipelineError(f"gliner_config.json says span_mode {mode!r}, but the graph "
                            f"{'takes' if span_model else 'lacks'} span_idx/span_mask")


def _per_input(labels):
    return isinstance(labels, (list, tuple)) and any(
        isinstance(x, (list, tuple, Mapping)) for x in labels)


def _label_set(labels):
    """(prompts, names): gliner's ``_normalize_label_set``. A list (duplicates dropped, order
    kept) prompts with the labels themselves; a {label: description} mapping prompts with the
    descriptions and names entities by the keys."""
    if labels is None or isinstance(labels, (str, Mapping)) and not labels:
        raise PipelineError("zero-shot-entity-recognition needs labels: a list of entity types "
                            "like ['person', 'city'] (or a {label: description} dict)")
    if isinstance(labels, str):
        labels = [labels]
    if isinstance(labels, Mapping):
        names, prompts = list(labels), list(labels.values())
    else:
        names = prompts = list(dict.fromkeys(labels))
    if not names:
        raise PipelineError("labels is empty: give at least one entity type")
    for x in list(names) + list(prompts):
        if not isinstance(x, str) or not x.strip():
            raise PipelineError(f"Each label (and description) must be a non-empty string, got "
                                f"{x!r}")
    if len(set(prompts)) != len(prompts):
        raise PipelineError("Label descriptions must be unique within a label set")
    return prompts, names


# --- tokens and words ------------------------------------------------------------------------

def _encode_words(tokenizer, words):
    """transformers' ``tokenizer(words, is_split_into_words=True, truncation=True)``: each word
    tokenized on its own (``word_ids`` tell them apart), cut at model_max_length."""
    return tokenizer.encode_words(words)


def _words_mask(word_ids, skip, pooling):
    """gliner's ``prepare_word_mask``: per token, the 1-based index of its text word (prompt
    words skipped) on the sub-tokens ``pooling`` selects, else 0."""
    mask, previous, seen = [], None, 0
    for i, wid in enumerate(word_ids):
        if wid is None:
            mask.append(0)
        else:
            first = wid != previous
            seen += first
            following = word_ids[i + 1] if i + 1 < len(word_ids) else None
            chosen = (pooling in ("mean", "max") or (pooling == "first" and first)
                      or (pooling == "last" and following != wid))
            mask.append(seen - skip if seen > skip and chosen else 0)
        previous = wid
    return mask


def _spans(chunks, words, width):
    """gliner's ``prepare_span_idx`` per row (every start, widths 0..width-1), padded to the
    longest row; a span is valid while it ends inside its text."""
    rows = len(chunks)
    span_idx = np.zeros((rows, words * width, 2), np.int64)
    span_mask = np.zeros((rows, words * width), bool)
    for i, c in enumerate(chunks):
        n = c["num_words"]
        starts = np.repeat(np.arange(n), width)
        ends = starts + np.tile(np.arange(width), n)
        span_idx[i, :n * width, 0], span_idx[i, :n * width, 1] = starts, ends
        span_mask[i, :n * width] = ends < n
    return span_idx, span_mask


# --- decoding --------------------------------------------------------------------------------

def _span_candidates(logits, num_words, threshold):
    """gliner's SpanDecoder: (start, end, label, score) of every span above ``threshold`` that
    ends inside the text, in torch.where order (start, width, label)."""
    probs = sigmoid(logits.astype(np.float32))
    s, k, c = np.nonzero(probs > np.float32(threshold))
    keep = s + k + 1 <= num_words
    return [(int(a), int(a + b), int(l), float(probs[a, b, l]))
            for a, b, l in zip(s[keep], k[keep], c[keep])]


def _token_candidates(logits, threshold):
    """gliner's TokenDecoder: a start and an end of one label (start <= end) with every word
    between scored inside >= ``threshold``; the span's score is the least of those scores."""
    probs = sigmoid(logits.astype(np.float32))
    start, end, inside = probs[..., 0], probs[..., 1], probs[..., 2]
    starts = list(zip(*np.nonzero(start > np.float32(threshold))))
    ends = list(zip(*np.nonzero(end > np.float32(threshold))))
    spans = []
    for st, label in starts:
        for ed, label_end in ends:
            if ed < st or label != label_end:
                continue
            ins = [float(x) for x in inside[st:ed + 1, label]]
            if any(x < threshold for x in ins):
                continue
            score = min(*ins, float(start[st, label]), float(end[ed, label]))
            spans.append((int(st), int(ed), int(label), score))
    return spans


def greedy_search(spans, flat_ner=True, multi_label=False):
    """gliner's ``greedy_search``: best score first (stable), a span is kept unless it clashes
    with one kept before; then sorted by start (stable). Flat: any overlap clashes. Nested: only
    a partial overlap does. The same (start, end) clashes unless ``multi_label``."""
    kept = []
    for span in sorted(spans, key=lambda x: -x[3]):
        if not any(_clash(span, other, flat_ner, multi_label) for other in kept):
            kept.append(span)
    return sorted(kept, key=lambda x: x[0])


def _clash(a, b, flat_ner, multi_label):
    if a[:2] == b[:2]:
        return not multi_label
    disjoint = a[0] > b[1] or b[0] > a[1]
    if flat_ner:
        return not disjoint
    nested = (a[0] <= b[0] and a[1] >= b[1]) or (b[0] <= a[0] and b[1] >= a[1])
    return not (disjoint or nested)
