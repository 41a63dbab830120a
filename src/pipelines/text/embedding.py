"""text-embedding (sentence embeddings, as sentence-transformers 5) and feature-extraction (raw
hidden states, as transformers).

    embed = transmuter.pipeline("text-embedding", "Xenova/bge-small-en-v1.5")
    embed("The cat sat on the mat.")             -> np.ndarray [d] (float32)
    embed(["first", "second"])                    -> np.ndarray [2, d] (as encode)
    embed.encode_query("a question")              -> with the model's "query" prompt, if it has one
    embed(texts, truncate_dim=256, precision="ubinary")   -> [n, 32] uint8
    features = transmuter.pipeline("feature-extraction", folder)
    features("Hello")                             -> [[[float] * hidden] * tokens]  (batch of one)

Pooling, the modules after it, normalization, the maximum length and the prompts come from the
sentence-transformers files (modules.json, 1_Pooling/config.json, 2_Dense/config.json and its
weights, sentence_bert_config.json, config_sentence_transformers.json), read from the repo, else
from the ``base_model`` its model card names (Xenova's ONNX repos lack them). Dense modules run
with NumPy over their weights (st_modules.py), in modules.json's order. ``pooling=`` and
``normalize=`` override them, at construction or per call (``normalize=`` drops a Normalize
module or adds one at the end, after ``truncate_dim``); a module we do not run (LayerNorm, ...)
is an error unless both are given at construction. Call options follow ``encode``:
``prompt_name``, ``prompt``, ``truncate_dim``, ``precision``, ``normalize_embeddings``
(= ``normalize``), ``convert_to_numpy`` (False: a list of vectors), ``show_progress_bar``
(= ``progress``).
"""

import logging
import re

import numpy as np

from ... import hub
from ...errors import PipelineError
from ...options import positive_int
from . import st_modules
from .base import TextPipeline, check_text

log = logging.getLogger(__name__)

# sentence-transformers Pooling: concatenation order of the modes, and the old boolean keys.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_OLD_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_tokens": "mean",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
             "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
_ALIASES = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max",
            "mean_sqrt_len": "mean_sqrt_len_tokens"}


class FeatureExtractionPipeline(TextPipeline):
    """transformers' FeatureExtractionPipeline: the first output (last_hidden_state) per token;
    transformers.js' call options pool it: ``pooling`` ("none", "mean", "cls" / "first_token",
    "last_token" / "eos", or a sentence-transformers mode), ``normalize``, ``quantize`` with
    ``precision`` ("binary", "ubinary"): then [1, d] per input."""

    task = "feature-extraction"

    def _sanitize_parameters(self, return_tensors=False, pooling=None, normalize=False,
                             quantize=False, precision="binary", **unknown):
        super()._sanitize_parameters(**unknown)
        modes = None if pooling in (None, "none") else \
            _pooling_modes(_JS_POOLING.get(pooling, pooling))
        if (normalize or quantize) and modes is None:
            raise PipelineError("normalize= and quantize= apply to pooled vectors: give pooling= "
                                "('mean', 'cls', 'last_token', ...) too")
        if quantize and precision not in ("binary", "ubinary"):
            raise PipelineError(f"quantize=True takes precision='binary' or 'ubinary' (as "
                                f"transformers.js), got {precision!r}")
        return {}, {}, {"return_tensors": return_tensors, "modes": modes, "normalize": normalize,
                        "precision": precision if quantize else None}

    def preprocess(self, text):
        yield {"encoding": self.tokenizer.encode(check_text(text, "text"),
                                                 max_length=self.sequence_lengths[-1])}

    def postprocess(self, outputs, return_tensors=False, modes=None, normalize=False,
                    precision=None):
        out = outputs[0]
        hidden = self.output(out, "last_hidden_state", "token_embeddings")
        hidden = hidden[:len(out["encoding"].ids)][None]
        if modes is not None:  # the input's own tokens: every one attended
            hidden = pool(hidden, np.ones(hidden.shape[:2], np.int64), modes)
            hidden = st_modules.normalize(hidden) if normalize else hidden
            hidden = st_modules.quantize(hidden, precision) if precision else hidden
        return hidden if return_tensors else hidden.tolist()


# transformers.js FeatureExtractionPipeline's pooling names -> sentence-transformers' modes
_JS_POOLING = {"first_token": "cls", "last_token": "lasttoken", "eos": "lasttoken"}


class TextEmbeddingPipeline(TextPipeline):
    """Sentence embeddings: pooled (and by default normalized) token embeddings, as
    ``SentenceTransformer.encode``: a list gives one [n, d] array (``convert_to_numpy=False``: a
    list of [d] vectors), one text a [d] vector, any other iterable a lazy iterator of vectors.
    ``prompts`` / ``default_prompt_name`` (construction) update config_sentence_transformers.json's,
    as SentenceTransformer(prompts=, default_prompt_name=) does."""

    task = "text-embedding"

    def __init__(self, model, config=None, *, repo=None, pooling=None, normalize=None,
                 normalize_embeddings=None, prompts=None, default_prompt_name=None, **kwargs):
        settings = sentence_transformers_settings(repo) if repo is not None else {}
        normalize = _one_of(normalize, normalize_embeddings)
        self.modes = _pooling_modes(pooling) if pooling is not None else settings.get("pooling")
        self.modules = _modules(settings)
        self.head = _head(self.modules, normalize)
        self.include_prompt = settings.get("include_prompt", True)
        self.prompts, self.default_prompt_name = _prompts(settings, prompts, default_prompt_name)
        unsupported = settings.get("unsupported")
        if unsupported and (pooling is None or normalize is None):
            raise PipelineError(
                f"text-embedding: modules.json has module(s) Transmuter does not run: "
                f"{', '.join(unsupported)}. Give pooling= and normalize= to embed without them "
                "(the vectors will differ from sentence-transformers')")
        if not self.modes:
            raise PipelineError(
                "text-embedding: no pooling found (no modules.json / 1_Pooling/config.json in the "
                "repo, nor in the base_model its README names); give pooling='mean' or 'cls' "
                "(and normalize=True/False)")
        self.lowercase = settings.get("do_lower_case", False)
        # what the whole call's output is: applied in __call__, not per input
        self.precision = _precision(kwargs.pop("precision", "float32"))
        self.convert_to_numpy = kwargs.pop("convert_to_numpy", True)
        progress = kwargs.pop("show_progress_bar", None)
        if progress is not None:
            kwargs["progress"] = _one_of(kwargs.get("progress"), progress, "progress",
                                         "show_progress_bar")
        super().__init__(model, config, repo=repo, max_length=settings.get("max_seq_length"),
                         **kwargs)

    def __call__(self, inputs, *, precision=None, convert_to_numpy=None, show_progress_bar=None,
                 progress=None, **kwargs):
        """``pipe(texts)``; ``show_progress_bar`` is sentence-transformers' name of ``progress``.
        ``precision`` ("float32", "int8", "uint8", "binary", "ubinary") quantizes as
        sentence_transformers.quantize_embeddings does: int8/uint8 over the ranges of all the
        call's embeddings (so a lazy iterable takes binary/ubinary only)."""
        precision = self.precision if precision is None else _precision(precision)
        as_array = self.convert_to_numpy if convert_to_numpy is None else convert_to_numpy
        progress = _one_of(progress, show_progress_bar, "progress", "show_progress_bar")
        lazy = not self._is_single(inputs) and not isinstance(inputs, (list, tuple))
        if lazy and precision in ("int8", "uint8"):
            raise PipelineError(f"precision={precision!r} takes its ranges from all the "
                                "embeddings of the call: give a list, not a lazy iterable")
        results = super().__call__(inputs, progress=progress, **kwargs)
        if self._is_single(inputs):
            return results if isinstance(results, Exception) else \
                st_modules.quantize(results[None], precision)[0]
        if lazy:
            return (r if isinstance(r, Exception) else st_modules.quantize(r[None], precision)[0]
                    for r in results)
        done = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
        if done:
            for i, row in zip(done, st_modules.quantize(np.stack([results[i] for i in done]),
                                                        precision)):
                results[i] = row
        if len(done) < len(results) or not as_array:  # on_error="return": errors in place
            return results
        # one [n, d] array, as SentenceTransformer.encode (np.asarray([]) for no input)
        return np.stack(results) if results else np.zeros(0, np.float32)

    def encode_query(self, inputs, prompt_name=None, prompt=None, **options):
        """sentence-transformers 5's encode_query: the "query" prompt unless one is given."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self(inputs, prompt_name=prompt_name, prompt=prompt, **options)

    def encode_document(self, inputs, prompt_name=None, prompt=None, **options):
        """sentence-transformers 5's encode_document: the first of the "document", "passage",
        "corpus" prompts the model has, unless one is given."""
        if prompt_name is None and prompt is None:
            prompt_name = next((n for n in ("document", "passage", "corpus") if n in self.prompts),
                               None)
        return self(inputs, prompt_name=prompt_name, prompt=prompt, **options)

    def _sanitize_parameters(self, prompt_name=None, prompt=None, pooling=None, normalize=None,
                             normalize_embeddings=None, truncate_dim=None, **unknown):
        super()._sanitize_parameters(**unknown)
        normalize = _one_of(normalize, normalize_embeddings)
        if truncate_dim is not None:
            positive_int(truncate_dim, "truncate_dim")
        text_prompt = self._prompt(prompt, prompt_name)
        forward = {"modes": self.modes if pooling is None else _pooling_modes(pooling),
                   "head": self.head if normalize is None else _head(self.modules, normalize),
                   "truncate_dim": truncate_dim, "renormalize": bool(normalize)}
        return {"prompt": text_prompt}, forward, {}

    def _prompt(self, prompt, prompt_name):
        """The text put before each input: ``prompt``, else the prompt named ``prompt_name``,
        else the default prompt's (sentence-transformers' _resolve_prompt)."""
        if prompt is not None and prompt_name is not None:
            raise PipelineError("Give prompt= (the text itself) or prompt_name= (a key of the "
                                "model's prompts), not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise PipelineError(f"prompt must be a string, got {prompt!r:.80}")
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise PipelineError(f"prompt_name={prompt_name!r} is not one of the model's "
                                    f"prompts: {sorted(self.prompts) or 'it has none'} "
                                    "(config_sentence_transformers.json, or prompts=)")
            return self.prompts[prompt_name]
        return self.prompts.get(self.default_prompt_name, "") if self.default_prompt_name else ""

    def preprocess(self, text, prompt=""):
        text = prompt + check_text(text, "text")
        chunk = {"encoding": self.tokenizer.encode(text.lower() if self.lowercase else text,
                                                   max_length=self.sequence_lengths[-1])}
        if prompt and not self.include_prompt:
            chunk["prompt_length"] = self._prompt_length(prompt)
        yield chunk

    def _prompt_length(self, prompt):
        """Tokens of the prompt as it starts every input (its special tokens before, not the
        one after), which pooling leaves out where 1_Pooling/config.json says include_prompt
        false (sentence-transformers' Transformer._get_prompt_length)."""
        ids = self.tokenizer.encode(prompt.lower() if self.lowercase else prompt).ids
        special = getattr(self.tokenizer, "all_special_ids", ())
        return len(ids) - (1 if ids and ids[-1] in special else 0)

    def feeds_model(self):
        return True

    def _forward(self, chunks, modes=None, head=None, truncate_dim=None, renormalize=False):
        # Pool the whole padded batch at once, on the host: one vectorized NumPy pass.
        feed = self._feed(chunks)
        out = self._run_model(feed)
        hidden = self.output(out, "last_hidden_state", "token_embeddings")
        lengths = [c.get("prompt_length", 0) for c in chunks]
        mask = _without_prompts(feed["attention_mask"], lengths)
        embeddings = pool(hidden, mask, self.modes if modes is None else modes)
        for module in self.head if head is None else head:
            embeddings = module(embeddings)
        if truncate_dim is not None:  # Matryoshka: the first dimensions, as truncate_embeddings
            embeddings = embeddings[:, :truncate_dim]
            if renormalize:  # normalize=True gives unit vectors, after truncation too
                embeddings = st_modules.normalize(embeddings)
        return [dict(c, embedding=embeddings[i]) for i, c in enumerate(chunks)]

    def postprocess(self, outputs):
        return outputs[0]["embedding"]


def _precision(value):
    if value not in st_modules.PRECISIONS:
        raise PipelineError(f"precision must be one of {', '.join(st_modules.PRECISIONS)}, "
                            f"got {value!r}")
    return value


def _without_prompts(mask, lengths):
    """The attention mask with each row's first ``lengths[i]`` attended positions zeroed (after
    any left padding), as sentence-transformers' Pooling._exclude_prompt_from_mask."""
    if not any(lengths):
        return mask
    mask = mask.copy()
    for row, length in enumerate(lengths):
        first = int(np.argmax(mask[row] > 0))
        mask[row, first:first + length] = 0
    return mask


def _one_of(ours, theirs, name="normalize", peer="normalize_embeddings"):
    """Our option or its peer's name (sentence-transformers'), given once."""
    if ours is not None and theirs is not None and ours != theirs:
        raise PipelineError(f"{name}= and {peer}= are the same option, given two values; "
                            "give one")
    return theirs if ours is None else ours


def _prompts(settings, prompts, default_name):
    """config_sentence_transformers.json's prompts updated by ``prompts``, and the default
    prompt's name (``default_name``, else the file's), checked as SentenceTransformer checks."""
    # SentenceTransformer's _default_prompts: "query" and "document" exist, empty, unless set
    found = {"query": "", "document": "", **(settings.get("prompts") or {})}
    if prompts is not None:
        if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
            raise PipelineError(f"prompts must be a dict of name -> prompt text, got "
                                f"{prompts!r:.80}")
        found.update(prompts)
    if default_name is None:
        default_name = settings.get("default_prompt_name")
    if default_name is not None and default_name not in found:
        raise PipelineError(f"default_prompt_name {default_name!r} is not one of the prompts: "
                            f"{sorted(found)}")
    return found, default_name


def _modules(settings):
    """modules.json's Dense and Normalize modules after pooling, in order (Dense weights read
    once)."""
    source = settings.get("source")
    return [st_modules.normalize if kind == "Normalize" else st_modules.load_dense(source, path)
            for kind, path in settings.get("head", [])]


def _head(modules, normalize):
    """The modules after pooling: ``modules``, Normalize dropped or appended at the end by
    ``normalize=``."""
    head = list(modules)
    if normalize is not None:
        head = [m for m in head if m is not st_modules.normalize]
        head += [st_modules.normalize] if normalize else []
    return head


def pool(hidden, mask, modes, xp=np):
    """sentence-transformers Pooling.forward over [B, L, H] with an attention mask [B, L], in
    the array namespace ``xp`` (NumPy on the host; jax.numpy in a traced training loss)."""
    hidden = hidden.astype(np.float32, copy=False)
    m = mask.astype(np.float32)[..., None]
    parts = []
    for mode in modes:
        if mode == "cls":
            parts.append(hidden[:, 0])
        elif mode == "max":
            parts.append(xp.where(m > 0, hidden, -1e9).max(axis=1))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (hidden * m).sum(axis=1)
            count = xp.maximum(m.sum(axis=1), 1e-9)
            parts.append(total / (count if mode == "mean" else xp.sqrt(count)))
        elif mode == "weightedmean":
            w = m * xp.arange(1, hidden.shape[1] + 1, dtype=np.float32)[None, :, None]
            parts.append((hidden * w).sum(axis=1) / xp.maximum(w.sum(axis=1), 1e-9))
        elif mode == "lasttoken":
            # the last attended position of each row (right or left padding alike)
            last = hidden.shape[1] - 1 - xp.argmax(mask[:, ::-1] > 0, axis=1)
            parts.append(hidden[xp.arange(hidden.shape[0]), last])
    return xp.concatenate(parts, axis=-1)


def _pooling_modes(value):
    """Modes from pooling= or 1_Pooling/config.json (new ``pooling_mode`` or old boolean keys)."""
    if isinstance(value, dict):
        if "pooling_mode" in value:
            value = value["pooling_mode"]
        else:
            value = [mode for key, mode in _OLD_KEYS.items() if value.get(key)]
    modes = [value] if isinstance(value, str) else list(value)
    modes = [_ALIASES.get(m, m) for m in modes]
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad:
        raise PipelineError(f"Unknown pooling {bad}; use one or more of {POOLING_MODES}")
    return [m for m in POOLING_MODES if m in modes]


def sentence_transformers_settings(repo):
    """Pooling modes, the modules after pooling (``head``: (kind, folder) of each Dense and
    Normalize), max_seq_length, do_lower_case, the modules we do not run, and the repo they
    come from (``source``), from the repo's sentence-transformers files or those of its model
    card's base_model."""
    source = repo if repo.has("modules.json") else _base_model_repo(repo)
    if source is None:
        return {}
    settings = dict(source.json("sentence_bert_config.json", {}) or {})
    settings.pop("pooling", None)
    settings["source"] = source
    model = source.json("config_sentence_transformers.json", {}) or {}
    settings["prompts"] = {k: v for k, v in (model.get("prompts") or {}).items()
                           if isinstance(v, str)}
    settings["default_prompt_name"] = model.get("default_prompt_name")
    for module in source.json("modules.json", []):
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Transformer":
            continue
        if kind == "Pooling":
            path = module.get("path") or "1_Pooling"
            pooling = source.json(f"{path}/config.json", {})
            settings["pooling"] = _pooling_modes(pooling)
            settings["include_prompt"] = bool(pooling.get("include_prompt", True))
        elif kind in ("Normalize", "Dense"):
            settings.setdefault("head", []).append((kind, module.get("path") or ""))
        else:
            settings.setdefault("unsupported", []).append(module.get("type"))
    return settings


def _base_model_repo(repo):
    """The repo named by ``base_model:`` in the README's front matter, when it has
    modules.json (fetched through the Hub; None when unreachable or absent)."""
    if not repo.has("README.md"):
        return None
    with open(repo.file("README.md"), encoding="utf-8") as f:
        text = f.read()
    front = text.split("---")[1] if text.startswith("---") else ""
    match = re.search(r"^base_model:\s*(?:\n\s*-\s*)?['\"]?([\w.-]+/[\w.-]+)", front, re.M)
    if not match:
        return None
    try:
        base = hub.resolve(match.group(1), local_files_only=getattr(repo, "offline", False))
    except Exception as e:  # noqa: BLE001 - a missing base model only means "no settings"
        log.warning("cannot read the sentence-transformers files of base model %s: %s",
                    match.group(1), e)
        return None
    return base if base.has("modules.json") else None
