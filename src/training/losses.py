"""The losses of ``training.loss``: each ``kind(pipe)`` returns ``loss(params, batch) -> scalar``,
the mean over the batch's real rows (``batch.weights``), written as the peers write them
(transformers' ``*ForSequenceClassification`` heads, sentence-transformers' losses), and
the constants the batches share with them (IGNORE, MNRL_SCALE)."""

import jax
import jax.numpy as jnp

from ..engine.compiled import compile
from ..errors import InputError
from ..pipelines.text import st_modules
from ..pipelines.text.embedding import pool

IGNORE = -100  # transformers' ignore_index: tokens without a label (sub-tokens, specials, padding)
MNRL_SCALE = 20.0  # sentence-transformers MultipleNegativesRankingLoss(scale=20.0)


def _outputs(pipe):
    """The model's outputs of a feed with given params, traced in the caller's jit. Its index
    inputs are checked on the host (``training.Step``), so the traced call skips them."""
    fn = compile(pipe.model, checks=False, cache_size=pipe.cache_size)
    return lambda params, feed: fn(feed, params=params)


def _logits(pipe):
    outputs = _outputs(pipe)

    def forward(params, feed):
        return pipe.output(outputs(params, feed), "logits").astype(jnp.float32)
    return forward


def _mean(values, weights):
    """The weighted mean; padding rows (weight 0) count for nothing, even where their value is
    not finite (an MNRL anchor whose positive is a padding row)."""
    values = jnp.where(weights > 0, values, 0)
    return (values * weights).sum() / jnp.maximum(weights.sum(), 1)


def cross_entropy(pipe):
    """torch.nn.CrossEntropyLoss over the logits and integer labels: one per row, or one per
    token (token classification), where the mean runs over the tokens whose label is not
    IGNORE (torch's ``ignore_index=-100``) in the batch's real rows."""
    forward = _logits(pipe)

    def loss(params, batch):
        log_probs = jax.nn.log_softmax(forward(params, batch.inputs[0]))
        labels = batch.labels.astype(jnp.int32)
        if labels.ndim == 1:
            picked = jnp.take_along_axis(log_probs, labels[:, None], -1)
            return _mean(-picked[:, 0], batch.weights)
        labelled = (labels != IGNORE) & (batch.weights[:, None] > 0)
        picked = jnp.take_along_axis(log_probs, jnp.where(labelled, labels, 0)[..., None], -1)
        return jnp.where(labelled, -picked[..., 0], 0).sum() / jnp.maximum(labelled.sum(), 1)
    return loss


def mse(pipe):
    """torch.nn.MSELoss: one logit per row against a float label (transformers' regression;
    several logits against as many labels per row)."""
    forward = _logits(pipe)

    def loss(params, batch):
        logits = forward(params, batch.inputs[0])
        labels = batch.labels.reshape(logits.shape[0], -1).astype(jnp.float32)
        error = ((logits.reshape(labels.shape) - labels) ** 2).mean(axis=-1)
        return _mean(error, batch.weights)
    return loss


def binary_cross_entropy(pipe):
    """torch.nn.BCEWithLogitsLoss: each logit against a 0/1 (or soft) label."""
    forward = _logits(pipe)

    def loss(params, batch):
        logits = forward(params, batch.inputs[0])
        labels = batch.labels.reshape(logits.shape[0], -1).astype(jnp.float32)
        logits = logits.reshape(labels.shape)
        # log(1 + e^-|x|) + max(x, 0) - x*y: torch's stable form
        each = jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
        return _mean(each.mean(axis=-1), batch.weights)
    return loss


# st_modules.ACTIVATIONS, traced (torch's exact GELU, as there)
_ACTIVATIONS = {"Identity": lambda x: x, "Tanh": jnp.tanh, "ReLU": jax.nn.relu,
                "Sigmoid": jax.nn.sigmoid, "GELU": lambda x: jax.nn.gelu(x, approximate=False),
                "SiLU": jax.nn.silu}


def _embedder(pipe):
    """Sentence embeddings of a feed as the pipeline computes them, traced: pooled, then the
    modules after pooling in order. A Dense reads its weights from params where they are given
    (training.params: they train), else its own (frozen)."""
    outputs = _outputs(pipe)
    heads = head_names(pipe)

    def embed(params, feed):
        out = outputs({k: v for k, v in params.items() if k not in heads}, feed)
        hidden = pipe.output(out, "last_hidden_state", "token_embeddings")
        x = pool(hidden, feed["attention_mask"], pipe.modes, xp=jnp)
        for module in pipe.head:
            if module is st_modules.normalize:
                x = _unit(x)
                continue
            own = module.tensors()
            weight, bias = (params.get(module.param_name(t), own.get(t))
                            for t in ("linear.weight", "linear.bias"))
            x = x @ weight.T
            x = _ACTIVATIONS[module.kind](x if bias is None else x + bias)
        return x
    return embed


def head_names(pipe):
    """The training.params keys of the Dense modules after pooling."""
    return {m.param_name(t) for m in getattr(pipe, "head", ()) if hasattr(m, "tensors")
            for t in m.tensors()}


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def multiple_negatives_ranking(pipe):
    """sentence-transformers MultipleNegativesRankingLoss: each anchor's cosine scores (x20)
    against every positive and negative of the batch, cross-entropy towards its own positive.
    Padding rows are neither anchors nor candidates."""
    embed = _embedder(pipe)

    def loss(params, batch):
        anchors, *others = [_unit(embed(params, feed)) for feed in batch.inputs]
        candidates = jnp.concatenate(others, axis=0)
        scores = MNRL_SCALE * anchors @ candidates.T
        real = jnp.tile(batch.weights, len(others)) > 0
        scores = jnp.where(real[None, :], scores, -jnp.inf)
        log_probs = jax.nn.log_softmax(scores, axis=-1)
        own = jnp.diagonal(log_probs[:, :anchors.shape[0]])
        return _mean(-own, batch.weights)
    return loss


def cosine_similarity(pipe):
    """sentence-transformers CosineSimilarityLoss: MSE of the pair's cosine and the label."""
    embed = _embedder(pipe)

    def loss(params, batch):
        if len(batch.inputs) != 2:
            raise InputError("cosine-similarity trains on (text, text) pairs, got "
                             f"{len(batch.inputs)} texts per example")
        a, b = (_unit(embed(params, feed)) for feed in batch.inputs)
        return _mean(((a * b).sum(-1) - batch.labels) ** 2, batch.weights)
    return loss
