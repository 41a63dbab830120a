"""Strings, on the host (NumPy object arrays of str): StringNormalizer, StringConcat, StringSplit,
RegexFullMatch, TfIdfVectorizer, and ai.onnx.ml's LabelEncoder."""

import re

import numpy as np

from .registry import op


def _strings(values):
    return np.array(list(values), dtype=object)


def _map(fn, *arrays, otype=object):
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in arrays])
    flat = [fn(*vals) for vals in zip(*[a.reshape(-1) for a in arrays])]
    return np.array(flat, dtype=otype).reshape(arrays[0].shape)


@op("StringNormalizer", 10, host=True)
def string_normalizer(xp, x, *, case_change_action="NONE", is_case_sensitive=0, locale=None,
                      stopwords=None):
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": lambda s: s}[case_change_action]
    fold = (lambda s: s) if is_case_sensitive else str.lower
    stops = {fold(w) for w in stopwords or ()}
    rows = np.asarray(x, dtype=object).reshape(-1)
    kept = [change(s) for s in rows if fold(s) not in stops] or [""]
    out = _strings(kept)
    return out.reshape(1, -1) if np.ndim(x) == 2 else out


@op("StringConcat", 20, host=True)
def string_concat(xp, x, y):
    return _map(lambda a, b: a + b, x, y)


@op("StringSplit", 20, host=True)
def string_split(xp, x, *, delimiter=None, maxsplit=None):
    x = np.asarray(x, dtype=object)
    sep = delimiter or None  # empty or absent: split on runs of whitespace
    parts = [s.split(sep, -1 if maxsplit is None else maxsplit) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, :len(p)] = p
    counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
    return y.reshape(x.shape + (width,)), counts


@op("RegexFullMatch", 20, host=True)
def regex_full_match(xp, x, *, pattern):
    compiled = re.compile(pattern)
    return _map(lambda s: compiled.fullmatch(s) is not None, x, otype=np.bool_)


@op("TfIdfVectorizer", 9, host=True)
def tfidf_vectorizer(xp, x, *, max_gram_length, min_gram_length, max_skip_count, mode,
                     ngram_counts, ngram_indexes, pool_int64s=None, pool_strings=None,
                     weights=None):
    pool = list(pool_strings if pool_strings is not None else pool_int64s)
    # n-grams of length n sit in pool[ngram_counts[n-1]:ngram_counts[n]], numbered in order.
    grams, number = {}, 0
    for n, start in enumerate(ngram_counts, 1):
        end = ngram_counts[n] if n < len(ngram_counts) else len(pool)
        for k in range(start, end, n):
            grams[tuple(pool[k:k + n])] = ngram_indexes[number]
            number += 1
    size = max(ngram_indexes) + 1 if len(ngram_indexes) else 0
    x = np.asarray(x)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    tf = np.zeros((rows.shape[0], size), np.float32)
    for r, tokens in enumerate(rows.tolist()):
        for start in range(len(tokens)):
            for skip in range(max_skip_count + 1):
                for n in range(min_gram_length, max_gram_length + 1):
                    if n == 1 and skip:
                        continue  # a unigram counts once per position, whatever the skip
                    last = start + (n - 1) * (skip + 1)
                    if last >= len(tokens):
                        break
                    index = grams.get(tuple(tokens[start:last + 1:skip + 1]))
                    if index is not None:
                        tf[r, index] += 1
    w = np.ones(size, np.float32) if weights is None else np.asarray(weights, np.float32)
    if mode == "IDF":
        tf = (tf > 0).astype(np.float32) * w
    elif mode == "TFIDF":
        tf = tf * w
    return tf[0] if x.ndim == 1 else tf


@op("LabelEncoder", 1, domain="ai.onnx.ml", host=True)
def label_encoder(xp, x, *, keys_strings=None, keys_int64s=None, keys_floats=None,
                  keys_tensor=None, values_strings=None, values_int64s=None, values_floats=None,
                  values_tensor=None, default_string="_Unused", default_int64=-1,
                  default_float=-0.0, default_tensor=None):
    keys = next(k for k in (keys_tensor, keys_strings, keys_int64s, keys_floats) if k is not None)
    if values_tensor is not None:
        values, dtype = values_tensor, np.asarray(values_tensor).dtype
        default = np.asarray(default_tensor).reshape(-1)[0] if default_tensor is not None else (
            "_Unused" if dtype == object else -1 if dtype.kind in "iu" else -0.0)
    elif values_strings is not None:
        values, dtype, default = values_strings, np.dtype(object), default_string
    elif values_int64s is not None:
        values, dtype, default = values_int64s, np.dtype(np.int64), default_int64
    else:
        values, dtype, default = values_floats, np.dtype(np.float32), default_float
    table = dict(zip(np.asarray(keys).reshape(-1).tolist(),
                     np.asarray(values).reshape(-1).tolist()))
    x = np.asarray(x)
    out = [table.get(v, default) for v in x.reshape(-1).tolist()]
    return np.array(out, dtype=dtype).reshape(x.shape)
