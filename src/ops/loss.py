"""Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.

Inputs are (N, C, d1, ...) with integer targets (N, d1, ...). A target equal to ``ignore_index``
contributes nothing, and a weighted (or ignoring) mean divides by the summed weights of the
targets that count. Half-precision inputs compute in f32 and return their dtype."""

import numpy as np

from .registry import op

_REDUCTIONS = ("none", "sum", "mean")


def _f32(xp, x):
    return xp.astype(x, np.float32) if xp.is_half(x) else x


def nll(xp, log_prob, target, weight=None, *, reduction="mean", ignore_index=None):
    """Mean/sum/none of -log_prob[n, target[n, d...], d...] (weighted), in log_prob's dtype."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, not {reduction!r}")
    dt = xp.dtype_of(log_prob)
    n_classes = log_prob.shape[1]
    target = xp.astype(target, np.int64)
    keep = None if ignore_index is None else target != ignore_index
    safe = xp.clip(target, 0, n_classes - 1)  # an ignored target may lie outside [0, C)
    picked = xp.take_along_axis(log_prob, xp.expand_dims(safe, 1), axis=1)
    loss = -xp.squeeze(picked, axis=1)
    w = None
    if weight is not None:
        w = xp.astype(xp.take(weight, safe), dt)
    if keep is not None:
        w = xp.where(keep, w if w is not None else xp.ones(target.shape, dt),
                     xp.zeros((), dt))
    if w is not None:
        loss = loss * w
    if reduction == "none":
        return loss
    total = xp.sum(loss)
    if reduction == "sum":
        return total
    return total / xp.sum(w) if w is not None else total / max(loss.size, 1)


@op("NegativeLogLikelihoodLoss", 12)
def negative_log_likelihood_loss(xp, x, target, weight=None, *, ignore_index=None,
                                 reduction="mean"):
    loss = nll(xp, _f32(xp, x), target, None if weight is None else _f32(xp, weight),
               reduction=reduction, ignore_index=ignore_index)
    return xp.astype(loss, xp.dtype_of(x))


@op("SoftmaxCrossEntropyLoss", 12)
def softmax_cross_entropy_loss(xp, scores, labels, weights=None, *, ignore_index=None,
                               reduction="mean"):
    """The loss, and (second output) the log-softmax of the scores over the class axis."""
    dt = xp.dtype_of(scores)
    log_prob = xp.log_softmax(_f32(xp, scores), axis=1)
    loss = nll(xp, log_prob, labels, None if weights is None else _f32(xp, weights),
               reduction=reduction, ignore_index=ignore_index)
    return xp.astype(loss, dt), xp.astype(log_prob, dt)
