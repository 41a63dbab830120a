"""Ops of the ai.onnx.ml domain (traditional ML pipelines exported to ONNX): Binarizer,
ArrayFeatureExtractor, TreeEnsemble."""

import numpy as np

from .registry import op


@op("Binarizer", 1, domain="ai.onnx.ml")
def binarizer(xp, x, *, threshold=0.0):
    return xp.astype(x > xp.asarray(threshold, xp.dtype_of(x)), xp.dtype_of(x))


@op("ArrayFeatureExtractor", 1, domain="ai.onnx.ml")
def array_feature_extractor(xp, x, indices):
    """Selects columns of the last axis (a 1-D input counts as one row)."""
    out = xp.take(x, xp.reshape(indices, (-1,)), axis=x.ndim - 1)
    return xp.reshape(out, (1, -1)) if x.ndim == 1 else out


# -- TreeEnsemble (ai.onnx.ml 5) ------------------------------------------------------------------
# The trees are attributes, so their tables are built on the host once. Interior nodes keep their
# positions 0..N-1 and leaf j becomes position N + j, a node that points to itself: every sample
# walks every tree together, one gather per level, for as many levels as the deepest tree has.

MEMBER = 6
# Each comparison mode as its outcome when x is below, equal to, above the split (a NaN x compares
# false, so it follows "missing tracks true", or NEQ's x != split, which is true).
OUTCOMES = {0: (1, 1, 0), 1: (1, 0, 0), 2: (0, 1, 1), 3: (0, 0, 1), 4: (0, 1, 0), 5: (1, 0, 1),
            MEMBER: (0, 0, 0)}
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
FEATURE, BELOW, EQUAL, ABOVE, NAN, TRUE, FALSE = range(7)  # columns of the node table


def _tree_tables(featureids, modes, splits, truenodeids, falsenodeids, trueleafs, falseleafs,
                 n_leaves, missing_tracks_true, membership_values):
    """(node table (N + L, 7) int64, splits (N + L,), members (N + L, M) or None): one row per
    position, so a level of the walk is one row gather."""
    n = len(featureids)
    lengths = {len(featureids), len(modes), len(splits), len(truenodeids), len(falsenodeids),
               len(trueleafs), len(falseleafs)}
    if len(lengths) != 1:
        raise ValueError("the nodes_* attributes must all have the same length")
    if not set(modes.tolist()) <= set(OUTCOMES):
        raise ValueError(f"nodes_modes holds {sorted(set(modes.tolist()))}; the comparisons are "
                         "0..6 (BRANCH_LEQ .. BRANCH_MEMBER)")
    interior = np.zeros((n, 7), np.int64)
    interior[:, FEATURE] = featureids
    interior[:, BELOW:NAN] = np.array([OUTCOMES[m] for m in modes]).reshape(n, 3)
    interior[:, NAN] = missing_tracks_true | (modes == 5)
    interior[:, TRUE] = truenodeids + n * trueleafs
    interior[:, FALSE] = falsenodeids + n * falseleafs
    leaves = np.zeros((n_leaves, 7), np.int64)
    leaves[:, TRUE] = leaves[:, FALSE] = n + np.arange(n_leaves)
    splits = np.concatenate([splits, np.zeros(n_leaves, splits.dtype)])
    members = _member_sets(modes, membership_values)
    if members is not None:
        members = np.concatenate([members, np.full((n_leaves, members.shape[1]), np.nan)])
    return np.concatenate([interior, leaves]), splits, members


def _member_sets(modes, membership_values):
    """(N, M) members of each BRANCH_MEMBER node, NaN-padded (NaN equals nothing); the attribute
    lists the sets in node order, each ended by a NaN."""
    member_nodes = np.flatnonzero(modes == MEMBER)
    if not len(member_nodes):
        return None
    values = np.asarray(membership_values if membership_values is not None else [], np.float64)
    ends = np.flatnonzero(np.isnan(values))
    if len(ends) != len(member_nodes):
        raise ValueError(f"membership_values holds {len(ends)} NaN-ended sets for "
                         f"{len(member_nodes)} BRANCH_MEMBER nodes")
    sets = np.split(values, ends[:-1] + 1)
    out = np.full((len(modes), max(len(s) for s in sets)), np.nan)
    for node, s in zip(member_nodes, sets):
        out[node, :len(s) - 1] = s[:-1]
    return out


def _depth(nodes, roots, n_interior):
    """Interior levels on the longest root-to-leaf path (what the walk must take)."""
    depth, level = 0, {int(r) for r in roots if r < n_interior}
    while level:
        depth += 1
        if depth > n_interior:
            raise ValueError("the nodes_* attributes do not describe trees (a branch loops)")
        level = {int(nodes[i, side]) for i in level for side in (TRUE, FALSE)
                 if nodes[i, side] < n_interior}
    return depth


def _level(xp, x, rows, nodes, splits, members, cur):
    """One step of every walk: x (n, F) samples, cur (n, T) positions -> the next positions.
    Plain indexing, not take: positions are in bounds by construction, and JAX's take would add
    the masking of its out-of-bounds fill mode to every gather."""
    row = nodes[cur]  # (n, T, 7)
    value = x[rows, row[..., FEATURE]]
    split = splits[cur]
    goes_true = xp.where(value < split, row[..., BELOW],
                         xp.where(value == split, row[..., EQUAL], row[..., ABOVE])) > 0
    if members is not None:  # the rows of other nodes hold only NaN, which equals nothing
        goes_true = goes_true | xp.any(xp.expand_dims(value, -1) == members[cur], axis=-1)
    goes_true = xp.where(xp.isnan(value), row[..., NAN] > 0, goes_true)
    return xp.where(goes_true, row[..., TRUE], row[..., FALSE])


def _aggregate(xp, weights, targets, n_targets, aggregate_function, dt):
    """Per-sample leaf weights (n, T) into (n, n_targets) by target."""
    n, trees = weights.shape
    flat = xp.reshape(xp.reshape(xp.arange(n, dtype=np.int64), (n, 1)) * n_targets + targets,
                      (-1,))
    kind = {0: "add", 1: "add", 2: "min", 3: "max"}[aggregate_function]
    start = {"add": 0, "min": np.finfo(dt).max, "max": np.finfo(dt).min}[kind]
    out = xp.index_update(xp.full((n * n_targets,), start, dt), (flat,),
                          xp.reshape(weights, (-1,)), kind)
    if aggregate_function == 0:
        out = out / xp.asarray(trees, dt)
    elif kind != "add":  # a target no leaf reaches is 0, as ONNX Runtime gives (the spec is silent)
        hits = xp.index_update(xp.zeros((n * n_targets,), np.int32), (flat,),
                               xp.ones((n * trees,), np.int32), "add")
        out = xp.where(hits > 0, out, xp.zeros((), dt))
    return xp.reshape(out, (n, n_targets))


def _erf_inv(xp, x):
    """The erf inverse approximation ONNX's and ONNX Runtime's PROBIT use (a = 0.147)."""
    sign = xp.where(x < 0, -1.0, 1.0)
    log = xp.log((1 - x) * (1 + x))
    v = 2 / (np.pi * 0.147) + 0.5 * log
    return sign * xp.sqrt(-v + xp.sqrt(v * v - log / 0.147))


def _post_transform(xp, y, post_transform):
    if post_transform == 0:
        return y
    if post_transform == 1:
        return xp.softmax(y, axis=-1)
    if post_transform == 2:
        return 1 / (1 + xp.exp(-y))
    if post_transform == 3:  # softmax over the non-zero scores; an all-zero row gives 0.5
        m = xp.max(y, axis=-1, keepdims=True)
        e = xp.where(xp.abs(y) > 1e-7, xp.exp(y - m), y * xp.exp(-m))
        s = xp.sum(e, axis=-1, keepdims=True)
        return xp.where(s == 0, xp.asarray(0.5, xp.dtype_of(y)), e / xp.where(s == 0, 1, s))
    if post_transform == 4:
        return xp.astype(1.41421356 * _erf_inv(xp, y * 2 - 1), xp.dtype_of(y))
    raise ValueError(f"post_transform {post_transform} is not one of NONE (0), SOFTMAX (1), "
                     "LOGISTIC (2), SOFTMAX_ZERO (3), PROBIT (4)")


@op("TreeEnsemble", 5, domain="ai.onnx.ml")
def tree_ensemble(xp, x, *, nodes_splits, nodes_featureids, nodes_modes, nodes_truenodeids,
                  nodes_falsenodeids, nodes_trueleafs, nodes_falseleafs, leaf_targetids,
                  leaf_weights, tree_roots, n_targets, aggregate_function=1, post_transform=0,
                  nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                  membership_values=None):
    # nodes_hitrates is a performance hint with no effect on the result.
    if aggregate_function not in AGGREGATES:
        raise ValueError(f"aggregate_function {aggregate_function} is not one of "
                         f"{AGGREGATES}")
    if x.ndim != 2:
        raise ValueError(f"X must be (N, features), got shape {tuple(x.shape)}")
    dt = xp.dtype_of(x)
    targets = np.asarray(leaf_targetids, np.int64)
    if len(targets) != len(leaf_weights) or ((targets < 0) | (targets >= n_targets)).any():
        raise ValueError(f"leaf_targetids must be {len(leaf_weights)} values in [0, "
                         f"{n_targets})")
    n_nodes = len(nodes_featureids)
    tracks = (np.zeros(n_nodes, bool) if nodes_missing_value_tracks_true is None
              else np.asarray(nodes_missing_value_tracks_true, bool))
    nodes, splits, members = _tree_tables(
        np.asarray(nodes_featureids, np.int64), np.asarray(nodes_modes, np.int64).reshape(-1),
        np.asarray(nodes_splits).reshape(-1).astype(dt), np.asarray(nodes_truenodeids, np.int64),
        np.asarray(nodes_falsenodeids, np.int64), np.asarray(nodes_trueleafs, np.int64),
        np.asarray(nodes_falseleafs, np.int64), len(targets), tracks, membership_values)
    roots = np.asarray(tree_roots, np.int64)
    depth = _depth(nodes, roots, n_nodes)
    nodes, splits = xp.asarray(nodes), xp.asarray(splits)
    members = None if members is None else xp.asarray(members.astype(dt))
    cur = xp.broadcast_to(xp.reshape(xp.asarray(roots), (1, -1)), (x.shape[0], len(roots)))
    # Unrolled over the depth the attributes fix: eager JAX then reuses one level's kernels,
    # where a scan would compile its body again on every call.
    rows = xp.reshape(xp.arange(x.shape[0], dtype=np.int64), (-1, 1))
    for _ in range(depth):
        cur = _level(xp, x, rows, nodes, splits, members, cur)
    leaf = cur - n_nodes
    weights = xp.asarray(np.asarray(leaf_weights).astype(dt))[leaf]
    y = _aggregate(xp, weights, xp.asarray(targets)[leaf], n_targets, aggregate_function, dt)
    return _post_transform(xp, y, post_transform)
