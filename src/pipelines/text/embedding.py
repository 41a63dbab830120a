"""text-embedding (sentence embeddings, as sentence-transformers) and feature-extraction (raw
hidden states, as transformers).

    embed = transmuter.pipeline("text-embedding", "Xenova/bge-small-en-v1.5")
    embed("The cat sat on the mat.")             -> np.ndarray [hidden] (float32)
    features = transmuter.pipeline("feature-extraction", folder)
    features("Hello")                             -> [[[float] * hidden] * tokens]  (batch of one)

Pooling, the modules after it, normalization and the maximum length come from the
sentence-transformers files (modules.json, 1_Pooling/config.json, 2_Dense/config.json and its
weights, sentence_bert_config.json), read from the repo, else from the ``base_model`` its model
card names (Xenova's ONNX repos lack them). Dense modules run with NumPy over their weights
(st_modules.py), in modules.json's order. ``pooling=`` and ``normalize=`` override them
(``normalize=`` drops a Normalize module or adds one at the end); a module we do not run
(LayerNorm, ...) is an error unless both are given.
"""

import logging
import re

import numpy as np

from ... import hub
from ...errors import PipelineError
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
    """transformers' FeatureExtractionPipeline: the first output (last_hidden_state) per token."""

    task = "feature-extraction"

    def _sanitize_parameters(self, return_tensors=False, **unknown):
        super()._sanitize_parameters(**unknown)
        return {}, {}, {"return_tensors": return_tensors}

    def preprocess(self, text):
        yield {"encoding": self.tokenizer.encode(check_text(text, "text"),
                                                 max_length=self.sequence_lengths[-1])}

    def postprocess(self, outputs, return_tensors=False):
        out = outputs[0]
        hidden = self.output(out, "last_hidden_state", "token_embeddings")
        hidden = hidden[:len(out["encoding"].ids)][None]
        return hidden if return_tensors else hidden.tolist()


class TextEmbeddingPipeline(TextPipeline):
    """Sentence embeddings: pooled (and by default normalized) token embeddings."""

    task = "text-embedding"

    def __init__(self, model, config=None, *, repo=None, pooling=None, normalize=None,
                 **kwargs):
        settings = sentence_transformers_settings(repo) if repo is not None else {}
        self.modes = _pooling_modes(pooling) if pooling is not None else settings.get("pooling")
        self.head = _head(settings, normalize)
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
        super().__init__(model, config, repo=repo, max_length=settings.get("max_seq_length"),
                         **kwargs)

    def preprocess(self, text):
        text = check_text(text, "text")
        yield {"encoding": self.tokenizer.encode(text.lower() if self.lowercase else text,
                                                 max_length=self.sequence_lengths[-1])}

    def _forward(self, chunks):
        # Pool the whole padded batch at once, on the host: one vectorized NumPy pass.
        feed = self._feed(chunks)
        out = self._run_model(feed)
        hidden = self.output(out, "last_hidden_state", "token_embeddings")
        embeddings = pool(hidden, feed["attention_mask"], self.modes)
        for module in self.head:
            embeddings = module(embeddings)
        return [dict(c, embedding=embeddings[i]) for i, c in enumerate(chunks)]

    def postprocess(self, outputs):
        return outputs[0]["embedding"]


def _head(settings, normalize):
    """The modules after pooling: modules.json's Dense and Normalize in order, Normalize
    dropped or appended at the end by ``normalize=``."""
    source = settings.get("source")
    head = [st_modules.normalize if kind == "Normalize" else st_modules.load_dense(source, path)
            for kind, path in settings.get("head", [])]
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
    for module in source.json("modules.json", []):
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Transformer":
            continue
        if kind == "Pooling":
            path = module.get("path") or "1_Pooling"
            settings["pooling"] = _pooling_modes(source.json(f"{path}/config.json", {}))
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
