"""libstdc++'s ``std::partial_sort`` top ``k`` (``__heap_select`` + ``__sort_heap``) run only on the elements that
can enter its heap: what top-k needs on a large vocabulary whose leading logits tie.

``std::partial_sort(first, first + k, last, greater)`` heapifies the first ``k`` elements, then, for each later
element ``i``, replaces the heap top when ``*i > top`` (``comp(*i, *first)``).  The heap always holds the ``k`` largest
values of the prefix seen so far (as a multiset), so its top is the ``k``-th largest value of ``keys[:i]``: an element
below that value changes nothing and may be skipped.  :func:`top_sparse` takes that skip as given for every position
at or after ``stop`` that is not in ``tail``; :func:`top_k` establishes it with one pass over the keys (every element
``>= t`` for a threshold ``t`` taken from a sample: once the prefix holds ``k`` of them, the top is ``>= t``).

The heap itself runs in C :mod:`heapq`, which performs libstdc++'s very moves (see
:func:`sampler.stdalgo._heap_select`); entries are plain floats compared by value alone, so ties fall the same way.
Only the survivors are mapped back to their positions, by object identity, at the end.

Example:
    >>> import numpy as np
    >>> from sampler import stdalgo
    >>> keys = np.round(np.random.default_rng(1).standard_normal(50_000) * 2).astype(np.float32)
    >>> bool((top_k(keys, 40) == stdalgo.partial_sort_top(keys, 40)).all())
    True
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools

import numpy as np

from . import stdalgo

__all__ = ["top_k", "top_sparse"]

_GROW = 4  # chunk growth of the candidate filter (cost only: any chunking is exact)
_FIRST = 128


def top_sparse(keys: np.ndarray, k: int, stop: int, tail: np.ndarray) -> np.ndarray:
    """``std::partial_sort(first, first + k, last, greater)``'s first ``k`` (as indices), given that no element at a
    position ``>= stop`` outside ``tail`` (ascending positions, all ``>= stop``) can enter the heap.

    ``keys`` is float32 without NaN among the first ``k``; ``0 < k <= min(stop, 2500)``.
    """
    head = keys[:k].tolist()
    heap = head[:]
    heapq.heapify(heap)  # __make_heap (CPython's heapify for up to 2500 entries: see stdalgo._heap_select)
    pushpop = functools.partial(heapq.heappushpop, heap)  # "if (*i > top) __pop_heap(first, middle, i)"
    vals_l: list[list[float]] = [head]
    pos_l: list[np.ndarray] = [np.arange(k)]
    keys_l: list[np.ndarray] = [keys[:k]]
    drain = collections.deque(maxlen=0).extend
    f32 = np.float32

    def feed(chunk: np.ndarray, where: np.ndarray | int) -> None:
        c = (chunk > f32(heap[0])).nonzero()[0]  # a superset: the top only rises within the chunk
        if c.size:
            kv = chunk[c]
            v = kv.tolist()
            keys_l.append(kv)
            vals_l.append(v)
            pos_l.append(c + where if isinstance(where, int) else where[c])
            drain(map(pushpop, v))

    pos, step = k, max(_FIRST, k)
    while pos < stop:
        end = min(stop, pos + step)
        feed(keys[pos:end], pos)
        pos, step = end, step * _GROW
    if tail.size:
        # one filter for the whole tail (a few hundred elements, all >= t): the superset costs less than more chunks
        feed(keys[tail], tail)
    out = [heapq.heappop(heap) for _ in range(k)]  # __sort_heap fills the back first
    out.reverse()
    # every candidate is alive in vals_l, so id() names it; a survivor is >= the last one out, so only those
    # candidates are looked at (the flattened lists and arrays are in the same order)
    sel = np.flatnonzero(np.concatenate(keys_l) >= f32(out[-1])).tolist()
    flat = list(itertools.chain.from_iterable(vals_l))
    at = np.concatenate(pos_l)[sel].tolist()
    where = {id(flat[i]): j for i, j in zip(sel, at, strict=True)}
    return np.array([where[id(v)] for v in out], dtype=np.intp)


def top_k(keys: np.ndarray, k: int, nan_check: bool = False) -> np.ndarray | None:
    """``std::partial_sort(first, first + k, last, greater)``'s first ``k`` indices over float32 ``keys``.

    For ``len(keys) >= 8192`` and ``k <= 256`` (smaller inputs go to :func:`sampler.stdalgo.partial_sort_top`).  One
    pass finds every element ``>= t`` (``t`` from a sample of the keys); when the ``k + 1`` largest are distinct the
    answer is their value order, else the heap runs on the elements that can enter it (:func:`top_sparse`).  With
    ``nan_check`` the same pass also finds every NaN (``not key < t``), and the answer is None if there is one.
    """
    n = len(keys)
    if k <= 0:
        return None if nan_check and np.isnan(keys.max()) else np.empty(0, np.intp)
    if n < 8192 or k > 256 or np.isnan(keys[:k]).any():
        if nan_check and np.isnan(keys.max()):
            return None
        return np.asarray(stdalgo.partial_sort_top(keys, k, descending=True), dtype=np.intp)
    # the sample: 16 runs of 128 spread over the keys (contiguous runs: a few cache lines each, unlike a stride)
    step = n // 16
    if keys.flags.c_contiguous:
        sample = keys[: 16 * step].reshape(16, step)[:, :128].ravel()
    else:
        sample = keys[:: n // 2048][:2048].copy()
    m = sample.size
    r = min(m, (4 * k * m) // n + 2)
    part = np.partition(sample, m - r)
    t = part[m - r]  # the r-th largest of the sample (NaN sorts last: t is NaN only if the sample holds NaN)
    if t == -np.inf:  # mostly -inf (after top-n-sigma, say): a -inf is never > the top, so never enters the heap
        if nan_check and np.isnan(keys.max()):
            return None
        return top_sparse(keys, k, k, np.flatnonzero(keys[k:] > t) + k)  # (a NaN never enters either)
    if t != t:
        if nan_check:
            return None
        idx = np.empty(0, np.intp)
        vals = keys[idx]
    elif nan_check:
        hit = keys < t
        np.logical_not(hit, out=hit)  # >= t, and every NaN
        idx = hit.nonzero()[0]
        vals = keys[idx]
        if np.isnan(vals).any():
            return None
    else:
        idx = (keys >= t).nonzero()[0]
        vals = keys[idx]
    if idx.size <= k:  # an unlucky sample: the heap over everything
        return top_sparse(keys, k, n, np.empty(0, np.intp))
    if len(set(part[m - r:].tolist())) == r:  # (a cost decision only: sampled leaders that tie predict ties)
        order = vals.argsort()[: -(k + 2): -1]  # the k + 1 largest, in value order (ties in any order)
        tv = vals[order]
        if (tv[:-1] > tv[1:]).all():  # k + 1 distinct leaders: the heap can only give them in value order
            return idx[order[:k]]
    # after the k-th element >= t the heap top is >= t: only the other elements >= t can still enter
    return top_sparse(keys, k, int(idx[k - 1]) + 1, idx[k:])
