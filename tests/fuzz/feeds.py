"""Call-time inputs: the recorded feed of a fixture graph, made wrong in one way. Each function
returns (the feed we hand Transmuter, the plain-NumPy feed onnxruntime gets, a detail); the
second is None where onnxruntime cannot take the input at all (then only our own error passes)."""

import numpy as np

OUT_OF_RANGE = [600, 1000, 10**6, 2**31, 2**62, -2**63, -601, -10**6, -1]


def _name(rng, feed, kinds=None):
    names = [k for k, v in feed.items() if kinds is None or np.asarray(v).dtype.kind in kinds]
    return rng.choice(names) if names else rng.choice(list(feed))


def wrong_dtype(rng, feed):
    name = _name(rng, feed)
    to = rng.choice([np.int32, np.int64, np.float64, np.float32, np.float16, np.bool_, np.uint8])
    feed[name] = feed[name].astype(to)
    return feed, dict(feed), f"{name} as {np.dtype(to).name}"


def wrong_rank(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    feed[name] = v[None] if rng.random() < 0.5 or v.ndim == 0 else v.reshape(-1)
    return feed, dict(feed), f"{name} shape {list(v.shape)} -> {list(feed[name].shape)}"


def wrong_shape(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    if v.ndim == 0:
        return wrong_rank(rng, feed)
    axis = rng.randrange(v.ndim)
    n = rng.choice([1, 2, 3, 5, 17]) if v.shape[axis] != 1 else 2
    feed[name] = np.resize(v, v.shape[:axis] + (n,) + v.shape[axis + 1:]).astype(v.dtype)
    return feed, dict(feed), f"{name} axis {axis}: {v.shape[axis]} -> {n}"


def missing_name(rng, feed):
    name = _name(rng, feed)
    del feed[name]
    return feed, dict(feed), f"{name} left out"


def unknown_name(rng, feed):
    name = rng.choice(["input_idz", "pixel_values_", "labels", ""])
    feed[name] = np.zeros((1, 2), np.int64)
    return feed, None, f"extra input {name!r}"


def ids_out_of_range(rng, feed):
    name = _name(rng, feed, "iu")
    v = feed[name].copy()
    value = rng.choice(OUT_OF_RANGE)
    if v.size:
        v.reshape(-1)[rng.randrange(v.size)] = np.array(value).astype(v.dtype)
    feed[name] = v
    return feed, dict(feed), f"{name} holds {value}"


def nan_inf(rng, feed):
    name = _name(rng, feed, "f")
    v = feed[name].copy()
    if v.dtype.kind != "f" or not v.size:
        return ids_out_of_range(rng, feed)
    value = rng.choice([np.nan, np.inf, -np.inf])
    v.reshape(-1)[rng.randrange(v.size)] = value
    if rng.random() < 0.3:
        v[...] = value
    feed[name] = v
    return feed, dict(feed), f"{name} holds {value}"


def huge_dim(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    if v.ndim == 0:
        return wrong_rank(rng, feed)
    axis = rng.randrange(v.ndim)
    n = rng.choice([4096, 100_000, 2**31 + 1])
    shape = v.shape[:axis] + (n,) + v.shape[axis + 1:]
    # A zero-stride view: huge to the graph, no memory in the feed itself.
    feed[name] = np.broadcast_to(np.zeros((), v.dtype), shape)
    return feed, dict(feed), f"{name} axis {axis} -> {n} (broadcast view)"


def zero_dim(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    if v.ndim == 0:
        return wrong_rank(rng, feed)
    axis = rng.randrange(v.ndim)
    feed = {k: (np.take(x, [], axis=axis) if x.ndim > axis and (k == name or rng.random() < 0.7)
                else x) for k, x in feed.items()}
    return feed, dict(feed), f"axis {axis} empty (at least {name})"


def as_list(rng, feed):
    names = [n for n in feed if rng.random() < 0.6] or [_name(rng, feed)]
    plain = dict(feed)
    for n in names:
        feed[n] = feed[n].tolist()
    return feed, plain, f"{names} as nested lists"


def masked_array(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    mask = np.zeros(v.shape, bool)
    if v.size and rng.random() < 0.7:
        mask.reshape(-1)[rng.randrange(v.size)] = True
    feed[name] = np.ma.masked_array(v, mask=mask)
    # Plain data when nothing is masked; a masked element has no value onnxruntime could see.
    plain = dict(feed, **{name: v}) if not mask.any() else None
    return feed, plain, f"{name} masked ({int(mask.sum())} masked)"


def big_endian(rng, feed):
    names = [n for n in feed if feed[n].dtype.itemsize > 1] or [_name(rng, feed)]
    name = rng.choice(names)
    plain = dict(feed)
    feed[name] = feed[name].astype(feed[name].dtype.newbyteorder(">"))
    return feed, plain, f"{name} big-endian"


def non_contiguous(rng, feed):
    name = _name(rng, feed)
    v = feed[name]
    plain = dict(feed)
    if v.ndim >= 2 and rng.random() < 0.5:
        feed[name] = np.asfortranarray(v)
    else:
        doubled = np.repeat(v, 2, axis=-1) if v.ndim else v
        feed[name] = doubled[..., ::2] if v.ndim else v
    return feed, plain, f"{name} non-contiguous"


def scalar(rng, feed):
    name = _name(rng, feed)
    feed[name] = np.asarray(feed[name]).reshape(-1)[:1].reshape(()) if feed[name].size else 0
    return feed, dict(feed), f"{name} 0-d"


def python_objects(rng, feed):
    name = _name(rng, feed)
    value = rng.choice([None, "text", {"a": 1}, object(), [[1, 2], [3]], b"\x00\x01", 3.5, True])
    feed[name] = value
    return feed, None, f"{name} = {type(value).__name__}"


MUTATIONS = {"wrong-dtype": wrong_dtype, "wrong-rank": wrong_rank, "wrong-shape": wrong_shape,
             "missing-name": missing_name, "unknown-name": unknown_name,
             "ids-out-of-range": ids_out_of_range, "nan-inf": nan_inf, "huge-dim": huge_dim,
             "zero-dim": zero_dim, "list": as_list, "masked-array": masked_array,
             "big-endian": big_endian, "non-contiguous": non_contiguous, "scalar": scalar,
             "python-objects": python_objects}


def mutate_feed(rng, kind, feed):
    """(ours, onnxruntime's or None, detail) for ``kind`` of cases.KINDS['inputs']."""
    return MUTATIONS[kind](rng, {k: np.array(v) for k, v in feed.items()})
