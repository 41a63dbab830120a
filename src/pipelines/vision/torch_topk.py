"""``torch.topk(x, k, sorted=False)`` of a 1-D CPU tensor, in the order torch returns it.

ATen's ``topk_impl_loop`` fills (value, index) pairs in index order and runs libstdc++'s
``std::partial_sort`` when ``k * 64 <= n``, else ``std::nth_element`` (introselect), then returns
the first k pairs as they lie. MaskFormer's instance route keeps that order: it decides segment
ids and which mask paints over which. So both algorithms are followed step by step (GCC's
bits/stl_algo.h and bits/stl_heap.h), with torch's comparator: larger first, NaN above all.
Checked against torch on ties, NaNs and both sides of the threshold (tests/test_torch_topk.py)."""

import numpy as np


def topk_unsorted(values, k):
    """Indices of ``torch.topk(values, k, largest=True, sorted=False)`` for 1-D float ``values``."""
    vals = np.asarray(values, np.float64).reshape(-1).tolist()
    n = len(vals)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is outside [0, {n}]")
    if k == 0:
        return np.zeros(0, np.int64)

    def comp(i, j):  # torch's "x before y": NaN above every number, else larger first
        x, y = vals[i], vals[j]
        return x > y or (x != x and y == y)

    order = list(range(n))
    if k * 64 <= n:
        _heap_select(order, 0, k, n, comp)
        _sort_heap(order, 0, k, comp)
    else:
        _introselect(order, 0, k - 1, n, 2 * (n.bit_length() - 1), comp)
    return np.array(order[:k], np.int64)


def _introselect(a, first, nth, last, depth, comp):
    while last - first > 3:
        if depth == 0:
            _heap_select(a, first, nth + 1, last, comp)
            a[first], a[nth] = a[nth], a[first]
            return
        depth -= 1
        cut = _partition_pivot(a, first, last, comp)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(a, first, last, comp)


def _partition_pivot(a, first, last, comp):
    """__unguarded_partition_pivot: the median of a[first + 1], the middle and the last moved to
    a[first], then the rest partitioned around it."""
    mid = first + (last - first) // 2
    _median_to_first(a, first, first + 1, mid, last - 1, comp)
    lo, hi, pivot = first + 1, last, a[first]
    while True:
        while comp(a[lo], pivot):
            lo += 1
        hi -= 1
        while comp(pivot, a[hi]):
            hi -= 1
        if not lo < hi:
            return lo
        a[lo], a[hi] = a[hi], a[lo]
        lo += 1


def _median_to_first(a, result, x, y, z, comp):
    if comp(a[x], a[y]):
        pick = y if comp(a[y], a[z]) else z if comp(a[x], a[z]) else x
    else:
        pick = x if comp(a[x], a[z]) else z if comp(a[y], a[z]) else y
    a[result], a[pick] = a[pick], a[result]


def _insertion_sort(a, first, last, comp):
    for i in range(first + 1, last):
        value = a[i]
        if comp(value, a[first]):
            a[first + 1:i + 1] = a[first:i]
            a[first] = value
            continue
        j = i
        while comp(value, a[j - 1]):
            a[j] = a[j - 1]
            j -= 1
        a[j] = value


def _heap_select(a, first, middle, last, comp):
    _make_heap(a, first, middle, comp)
    for i in range(middle, last):
        if comp(a[i], a[first]):
            _pop_heap(a, first, middle, i, comp)


def _sort_heap(a, first, last, comp):
    while last - first > 1:
        last -= 1
        _pop_heap(a, first, last, last, comp)


def _make_heap(a, first, last, comp):
    length = last - first
    if length < 2:
        return
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(a, first, parent, length, a[first + parent], comp)


def _pop_heap(a, first, last, result, comp):
    value = a[result]
    a[result] = a[first]
    _adjust_heap(a, first, 0, last - first, value, comp)


def _adjust_heap(a, first, hole, length, value, comp):
    """__adjust_heap: the hole sinks to a leaf along the larger children, then ``value`` rises
    from there (__push_heap)."""
    top = child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(a[first + child], a[first + child - 1]):
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and comp(a[first + parent], value):
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = value
