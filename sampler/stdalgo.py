"""libstdc++'s ``std::sort`` and ``std::partial_sort`` (g++ 12), exact in the order they leave tied elements, fast.

The elements are ``(key, id)`` pairs (``id`` = original index) and the comparator looks at the key only:
``a.key > b.key`` (``descending=True``, what llama.cpp and the s2 sampler use) or ``a.key < b.key``.  Every function
returns a permutation ``p`` (int64): ``p[j]`` is the id the C++ algorithm leaves at position ``j``.

How the exact result is obtained without a Python loop over every element:

* Keys are mapped to order-preserving integers (``-0.0`` folded onto ``0.0``) packed with the id into one int64
  *code* ``rank << 32 | id``; ``comp(a, b)`` is ``rank(a) < rank(b)``.  NaN keys raise ``ValueError`` (no strict
  weak order: libstdc++'s result would be undefined).
* ``std::sort`` (``__introsort_loop`` + ``__final_insertion_sort``) runs breadth first: all segments of one recursion
  depth are partitioned together with numpy.  ``__unguarded_partition`` is computed in closed form: on the array as
  it is after ``__move_median_to_first``, let ``L`` be the positions (after the pivot) whose key does not go before
  the pivot and ``R`` those (from the back, the pivot included) the pivot does not go before; the partition swaps
  ``L[j]`` with ``R[j]`` exactly for the ``j`` with ``L[j] < R[j]`` (a prefix), and returns ``L[0]`` when nothing
  was swapped, else ``min(L[m], R[m-1])``.  (Induction: between swaps the scans only read untouched elements, and
  the swapped-in elements are the scans' sentinels.)  Segments reaching depth 0 get ``__partial_sort(f, l, l)``,
  an exact heapsort in Python.  The final insertion sort is a stable insertion sort; since introsort leaves the
  array in blocks ordered against each other, it equals a stable sort by key of that arrangement.
  Shortcuts, each exact: distinct keys need no trace at all (one order exists); a segment whose key range holds
  no repeated key is left as it is (the final sort alone orders it); a segment whose keys are all equal is
  finished with a cached closed form (:func:`_equal_perm`); :func:`sort_prefix_perm` follows only the segments
  that reach the wanted prefix (what the s2 sampler needs).
* ``std::partial_sort`` is ``__heap_select`` + ``__sort_heap``.  The heap top only moves towards the front, so the
  elements that can trigger a ``__pop_heap`` (``comp(*i, *first)``) are found chunk by chunk with numpy float
  compares against the current top (a superset, re-checked one by one); only those run through the exact
  ``__adjust_heap``/``__push_heap`` port.  When the keys of all heap entrants are distinct, the heap's inner
  arrangement cannot show in the result, and C-speed :mod:`heapq` stands in for the port (checked afterwards).
  Every other element stays where it is; each trigger position receives the evicted top.

Example:
    >>> import numpy as np
    >>> keys = np.array([1, 3, 3, 2, 3], dtype=np.float32)
    >>> sort_perm(keys).tolist()
    [1, 2, 4, 3, 0]
    >>> partial_sort_perm(keys, 2).tolist()
    [2, 1, 0, 3, 4]
"""

from __future__ import annotations

import collections
import functools
import heapq

import numpy as np

__all__ = [
    "codes_for",
    "partial_sort_perm",
    "partial_sort_top",
    "sort_perm",
    "sort_prefix_perm",
    "sort_segments_perm",
]

_THRESHOLD = 16  # _S_threshold
_LOW = np.int64(0xFFFFFFFF)
_ONE_HI = np.int64(1 << 32)


# ----------------------------------------------------------------------------------------------------------- keys


def _ranks(keys: np.ndarray, descending: bool) -> np.ndarray:
    """Order-preserving int64 ranks: ``comp(a, b)`` (``a`` goes first) iff ``rank[a] < rank[b]``."""
    k = np.asarray(keys)
    if k.ndim != 1:
        raise ValueError(f"keys must be 1-D, got shape {k.shape}")
    k = k.astype(np.float32, copy=False)
    if np.isnan(k).any():
        raise ValueError("keys contain NaN: std::sort/partial_sort need a strict weak order")
    b = (k + np.float32(0.0)).view(np.int32)  # -0.0 + 0.0 == +0.0: equal keys get equal ranks
    mono = (b ^ ((b >> 31) & np.int32(0x7FFFFFFF))).astype(np.int64)  # increasing with the float value
    return ~mono if descending else mono


def codes_for(keys: np.ndarray, descending: bool = True) -> np.ndarray:
    """The packed ``rank << 32 | id`` codes the algorithms move around (exposed for callers that batch)."""
    r = _ranks(keys, descending)
    if r.size >= 1 << 31:
        raise ValueError("too many keys")
    return (r << 32) | np.arange(r.size, dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------- heaps


def _adjust_heap(hk: list, hid: list, hole: int, length: int, vk, vid: int) -> None:
    # as std::__adjust_heap followed by std::__push_heap, on the heap hk[:length] (keys) / hid (ids);
    # comp(a, b) is hk[a] < hk[b] (keys are ranks or negated floats)
    top = hole
    child = hole
    half = (length - 1) // 2
    while child < half:
        child = 2 * child + 2
        if hk[child] < hk[child - 1]:
            child -= 1
        hk[hole] = hk[child]
        hid[hole] = hid[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * child + 1
        hk[hole] = hk[child]
        hid[hole] = hid[child]
        hole = child
    parent = (hole - 1) // 2
    while hole > top and hk[parent] < vk:
        hk[hole] = hk[parent]
        hid[hole] = hid[parent]
        hole = parent
        parent = (hole - 1) // 2
    hk[hole] = vk
    hid[hole] = vid


def _make_heap(hk: list, hid: list, length: int) -> None:
    # as std::__make_heap
    if length < 2:
        return
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(hk, hid, parent, length, hk[parent], hid[parent])


def _sort_heap(hk: list, hid: list, length: int) -> None:
    # as std::__sort_heap: __pop_heap(first, last, last) while the heap has more than one element
    for last in range(length - 1, 0, -1):
        vk, vid = hk[last], hid[last]
        hk[last], hid[last] = hk[0], hid[0]
        _adjust_heap(hk, hid, 0, last, vk, vid)


def _heapsort_codes(codes: np.ndarray, start: int, end: int) -> None:
    # as std::__partial_sort(first, last, last): __heap_select (a make_heap, the loop is empty) + __sort_heap
    seg = codes[start:end]
    hk = (seg >> 32).tolist()
    hid = (seg & _LOW).tolist()
    _make_heap(hk, hid, end - start)
    _sort_heap(hk, hid, end - start)
    codes[start:end] = (np.array(hk, dtype=np.int64) << 32) | np.array(hid, dtype=np.int64)


def _candidates(keys: np.ndarray, start: int, bound: float, descending: bool):
    """Yield (positions, negated-or-plain keys) of the ``i >= start`` that go before ``bound``, chunk by chunk;
    the caller sends the current bound back (it only moves towards the front, so each chunk is a superset)."""
    n = keys.size
    pos = start
    step = max(256, start)
    while pos < n:
        end = min(n, pos + step)
        chunk = keys[pos:end]
        cand = np.flatnonzero(chunk > -bound) if descending else np.flatnonzero(chunk < bound)
        if cand.size:
            v = chunk[cand]
            bound = yield (cand + pos).tolist(), ((-v) if descending else v).tolist()
        pos = end
        step *= 2


_CHUNK, _GROW = 128, 4  # the candidate filter's first chunk and its growth (cost only: any chunking is exact)
_HEAPIFY_MAX = 2500  # CPython's C heapify switches to a differently ordered (cache-friendly) build above this


def _heap_select(kf: np.ndarray, k: int, descending: bool, record: bool):
    """``__heap_select(first, first + k, last)`` + ``__sort_heap(first, first + k)``, exact, run by C :mod:`heapq`.

    CPython's ``heapq`` performs libstdc++'s very moves: ``heapreplace``/``heappop`` sift the hole down to a leaf
    taking the right child unless the left one is strictly smaller (``__adjust_heap``: the left only if
    ``comp(right, left)``), then sift the value up while it is strictly smaller than its parent (``__push_heap``);
    ``heapify`` (up to 2500 entries) runs that from ``n // 2 - 1`` down to 0 (``__make_heap``); ``heappop`` moves the
    last entry to the root and sifts it over the shortened heap, as ``__pop_heap(first, last - 1, last - 1)`` in
    ``__sort_heap``.  The entries are plain Python floats compared by value alone (no tie-break), so heapq's minimum
    is libstdc++'s top (the worst kept key) and every tie falls the same way.  Each entry is a distinct float
    object: ``where[id(obj)]`` names its element (set when it enters; an object in the heap is alive, so its
    address is not reused meanwhile).  Returns (the sorted first k ids, the trigger positions, the ids evicted
    there) (the last two empty unless ``record``).
    """
    n = kf.size
    # entries hold w = key (descending) or -key (ascending): heapq's "<" is then libstdc++'s comp(b, a)
    head = (kf[:k] if descending else -kf[:k]).tolist()
    where = {id(v): j for j, v in enumerate(head)}
    if k <= _HEAPIFY_MAX:
        heap = head[:]
        heapq.heapify(heap)
    else:  # as std::__make_heap, by the Python port (max-heap on the negated keys)
        hk = [-v for v in head]
        hid = list(range(k))
        _make_heap(hk, hid, k)
        heap = [head[j] for j in hid]
    evict_pos: list[int] = []
    evict_id: list[int] = []
    # heappushpop(heap, v) is "if heap[0] < v: heapreplace(heap, v)" (the same sift), else v comes straight back:
    # libstdc++'s "if (comp(*i, *first)) __pop_heap(first, middle, i)", so map() runs the loop in C
    pushpop = functools.partial(heapq.heappushpop, heap)
    alive = [head]  # every candidate float stays alive to the end: its id() names its element
    pos, step = k, max(_CHUNK, k)
    while pos < n:  # chunk by chunk: the top only rises, so "w > top" at the chunk start is a superset
        end = min(n, pos + step)
        chunk = kf[pos:end]
        t32 = np.float32(heap[0])  # exact: every w is a float32 value
        if descending:
            c = (chunk > t32).nonzero()[0]
            vals = chunk[c].tolist()
        else:
            c = (chunk < -t32).nonzero()[0]
            vals = (-chunk[c]).tolist()
        if vals:
            alive.append(vals)
            idx = (c + pos).tolist()
            where.update(zip(map(id, vals), idx, strict=True))
            if record:
                for i, v, r in zip(idx, vals, map(pushpop, vals), strict=True):
                    if r is not v:  # a trigger: the evicted top is stored at i
                        evict_pos.append(i)
                        evict_id.append(where[id(r)])
            else:
                collections.deque(map(pushpop, vals), maxlen=0)
        pos, step = end, step * _GROW
    pop = heapq.heappop
    out = [where[id(pop(heap))] for _ in range(k)]  # __sort_heap fills the back first
    out.reverse()
    return out, evict_pos, evict_id


def partial_sort_perm(keys: np.ndarray, k: int, descending: bool = True) -> np.ndarray:
    """The whole arrangement (length n) ``std::partial_sort(first, first + k, last, comp)`` leaves.

    ``k`` must be in ``[0, n]``.  The first ``k`` positions hold the sorted top ``k``; the tail is the original order
    except where ``__heap_select`` stored an evicted heap top (llama-server sums probabilities in this order).

    Example:
        >>> partial_sort_perm(np.array([0.0, 2.0, 1.0, 2.0], dtype=np.float32), 1).tolist()
        [1, 0, 2, 3]
    """
    kf = np.asarray(keys)
    if kf.ndim != 1:
        raise ValueError(f"keys must be 1-D, got shape {kf.shape}")
    kf = kf.astype(np.float32, copy=False)
    if np.isnan(kf).any():
        raise ValueError("keys contain NaN: std::sort/partial_sort need a strict weak order")
    n = kf.size
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}], got {k}")
    perm = np.arange(n, dtype=np.int64)
    if n == 0:
        return perm
    # heap keys: comp(a, b) is key_a > key_b (descending) == (-key_a) < (-key_b); floats compare -0.0 == 0.0
    head = (-kf[: max(k, 1)] if descending else kf[: max(k, 1)]).astype(np.float64).tolist()
    if k == 0:
        # __heap_select with an empty heap: every comp(*i, *first) swaps *i with *first (position 0)
        cur_k, cur_id = head[0], 0
        gen = _candidates(kf, 1, cur_k, descending)
        try:
            cands = next(gen)
            while True:
                for i, vi in zip(*cands, strict=True):
                    if vi < cur_k:
                        perm[i] = cur_id
                        cur_k, cur_id = vi, i
                cands = gen.send(cur_k)
        except StopIteration:
            pass
        perm[0] = cur_id
        return perm
    top_ids, evict_pos, evict_id = _heap_select(kf, k, descending, True)
    perm[:k] = top_ids
    if evict_pos:
        perm[np.array(evict_pos, dtype=np.int64)] = np.array(evict_id, dtype=np.int64)
    return perm


def partial_sort_top(keys: np.ndarray, k: int, descending: bool = True) -> np.ndarray:
    """``partial_sort_perm(keys, k, descending)[:k]``: only the sorted first ``k``, by the exact heap port alone.

    Same exact heap run as :func:`partial_sort_perm`, without recording the evicted elements.  NaN keys after the
    first ``k`` are allowed (they never enter the heap, in libstdc++ as here); NaN among the first ``k`` raise.

    Example:
        >>> partial_sort_top(np.array([1, 3, 3, 2, 3], dtype=np.float32), 2).tolist()
        [2, 1]
    """
    kf = np.asarray(keys)
    if kf.ndim != 1:
        raise ValueError(f"keys must be 1-D, got shape {kf.shape}")
    kf = kf.astype(np.float32, copy=False)
    n = kf.size
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}], got {k}")
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    # a NaN past the first k is never compared with anything but the heap top, and that comparison is false for
    # libstdc++ as for numpy and Python: it cannot enter, so only NaN among the first k is refused
    if np.isnan(kf[:k]).any():
        raise ValueError("keys contain NaN: std::sort/partial_sort need a strict weak order")
    return np.array(_heap_select(kf, k, descending, False)[0], dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------- sort


def _median_to_first(codes: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
    # as std::__move_median_to_first(first, first + 1, mid, last - 1), for many segments at once
    a = s + 1
    b = s + (e - s) // 2
    c = e - 1
    ha, hb, hc = codes[a] >> 32, codes[b] >> 32, codes[c] >> 32
    ab, bc, ac = ha < hb, hb < hc, ha < hc
    sel = np.where(ab, np.where(bc, b, np.where(ac, c, a)), np.where(ac, a, np.where(bc, c, b)))
    first = codes[s]
    codes[s] = codes[sel]
    codes[sel] = first


def _partition_one(codes: np.ndarray, s: int, e: int) -> tuple[int, int, int, int]:
    """``__unguarded_partition_pivot`` on one segment; returns (cut, pivot rank, #left stoppers, #right stoppers)."""
    # as std::__move_median_to_first(first, first + 1, mid, last - 1)
    a, b, c = s + 1, s + (e - s) // 2, e - 1
    ha, hb, hc = int(codes[a]) >> 32, int(codes[b]) >> 32, int(codes[c]) >> 32
    if ha < hb:
        sel = b if hb < hc else (c if ha < hc else a)
    else:
        sel = a if ha < hc else (c if hb < hc else b)
    codes[s], codes[sel] = codes[sel], codes[s]
    seg = codes[s:e]
    prank = int(seg[0]) >> 32
    p0 = prank << 32
    lidx = np.flatnonzero(seg[1:] >= p0) + 1  # not comp(x, pivot), after the pivot
    ridx = np.flatnonzero(seg < p0 + (1 << 32))[::-1]  # not comp(pivot, x), from the back (the pivot included)
    mm = min(lidx.size, ridx.size)
    m = int(np.searchsorted(lidx[:mm] - ridx[:mm], 0))  # L[j] < R[j] holds for a prefix of j
    if m:
        li, ri = lidx[:m], ridx[:m]
        tmp = seg[li]
        seg[li] = seg[ri]
        seg[ri] = tmp
        cut = int(ridx[m - 1]) if m >= lidx.size else min(int(lidx[m]), int(ridx[m - 1]))
    else:
        cut = int(lidx[0])
    return s + cut, prank, lidx.size, ridx.size


def _partition_all(act: np.ndarray, off: np.ndarray, ln: np.ndarray):
    """``__unguarded_partition_pivot`` on every segment ``[off, off + ln)`` of ``act`` at once.  The segments must
    tile ``act`` exactly, in order, each longer than 16.  Returns (cuts, pivot ranks, #left, #right stoppers).

    Left stoppers are gathered in one ascending list; segment ``s``'s ``j``-th one pairs with the right stopper at
    index ``K[s] - t`` of the ascending right-stopper list (``t`` its global index, ``K = startR + cntR + startL - 1``).
    An index below the segment's own right stoppers names one of an earlier segment (or, clipped at 0, the first
    segment's pivot), whose position is smaller, so ``L < R`` fails there exactly as "no partner" should.
    """
    _median_to_first(act, off, off + ln)
    prank = act[off] >> 32
    p0 = np.repeat(prank << 32, ln)  # codes >= p0: not comp(x, pivot); codes < p0 + 2**32: not comp(pivot, x)
    lmask = act >= p0
    lmask[off] = False  # the left scan starts after the pivot
    p0 += _ONE_HI
    rmask = act < p0
    lidx = np.flatnonzero(lmask)
    ridx = np.flatnonzero(rmask)
    start_l = np.searchsorted(lidx, off)
    start_r = np.searchsorted(ridx, off)
    cnt_l = np.diff(start_l, append=lidx.size)
    cnt_r = np.diff(start_r, append=ridx.size)
    at = np.repeat(start_r + cnt_r + start_l - 1, cnt_l) - np.arange(lidx.size)
    np.maximum(at, 0, out=at)
    rj = ridx[at]
    swap = lidx < rj
    nswap = np.add.reduceat(swap, start_l, dtype=np.int64)  # swaps are a prefix of each segment's pairs
    li = lidx[swap]
    ri = rj[swap]
    if li.size:
        tmp = act[li]
        act[li] = act[ri]
        act[ri] = tmp
    total = act.size
    cut_l = np.where(nswap < cnt_l, lidx[start_l + np.minimum(nswap, cnt_l - 1)], total)
    cut_r = np.where(nswap > 0, ridx[start_r + cnt_r - np.maximum(nswap, 1)], total)
    return np.minimum(cut_l, cut_r), prank, cnt_l, cnt_r


def _partition_many(codes: np.ndarray, s: np.ndarray, e: np.ndarray):
    """``__unguarded_partition_pivot`` on every segment ``[s, e)`` (sorted, disjoint, all of size > 16) at once:
    the segments are gathered into one tiled array for :func:`_partition_all` and written back."""
    lens = e - s
    offs = np.cumsum(lens) - lens
    total = int(offs[-1] + lens[-1])
    if s.size == 1 or np.array_equal(e[:-1], s[1:]):  # adjacent segments: one contiguous run
        a = int(s[0])
        act = codes[a: a + total]  # a view: partitioned in place
        cut, prank, cnt_l, cnt_r = _partition_all(act, offs, lens)
        return cut + a, prank, cnt_l, cnt_r
    step = np.ones(total, dtype=np.int64)  # positions advance by one inside a segment and jump between segments
    step[0] = s[0]
    step[offs[1:]] = s[1:] - e[:-1] + 1
    pos = np.cumsum(step)
    act = codes[pos]
    cut, prank, cnt_l, cnt_r = _partition_all(act, offs, lens)
    codes[pos] = act
    return s + (cut - offs), prank, cnt_l, cnt_r


def _lg(n: int) -> int:
    return n.bit_length() - 1  # std::__lg


_CACHE_MAX = 8192


def _equal_perm(length: int, depth: int) -> np.ndarray:
    """What ``__introsort_loop`` (then the final insertion sort) does to ``length`` equal elements at ``depth``.

    With all keys equal every comparison is false: the median is ``mid`` (swapped to the front), the partition
    swaps ``first+1+j`` with ``last-1-j`` while ``j < (length-1)//2``, i.e. reverses ``[first+1, last)``, and the cut
    is ``first + (length+1)//2``.  The two halves recurse with ``depth - 1``; proven by the oracle tests too.
    """
    if length <= _CACHE_MAX:
        return _equal_perm_cached(length, depth)
    return _equal_perm_build(length, depth)


@functools.lru_cache(maxsize=512)  # at most 512 * 8192 * 8 bytes = 32 MiB
def _equal_perm_cached(length: int, depth: int) -> np.ndarray:
    return _equal_perm_build(length, depth)


def _equal_perm_build(length: int, depth: int) -> np.ndarray:
    if length <= _THRESHOLD:
        p = np.arange(length, dtype=np.int64)
    elif depth == 0:
        hk = [0] * length
        hid = list(range(length))
        _make_heap(hk, hid, length)
        _sort_heap(hk, hid, length)
        p = np.array(hid, dtype=np.int64)
    else:
        p = np.arange(length, dtype=np.int64)
        mid = length // 2
        p[0], p[mid] = p[mid], p[0]
        p[1:] = p[1:][::-1].copy()
        cut = (length + 1) // 2
        p[:cut] = p[:cut][_equal_perm(cut, depth - 1)]
        p[cut:] = p[cut:][_equal_perm(length - cut, depth - 1)]
    p.setflags(write=False)
    return p


def _apply_equal(codes: np.ndarray, s: np.ndarray, e: np.ndarray, d: np.ndarray) -> None:
    """Finish segments whose elements are all equal with the cached :func:`_equal_perm`."""
    lens = e - s
    big = lens > _THRESHOLD
    if not big.any():
        return
    s, lens, d = s[big], lens[big], d[big]
    if s.size == 1:
        a, n = int(s[0]), int(lens[0])
        codes[a: a + n] = codes[a: a + n][_equal_perm(n, int(d[0]))]
        return
    key = lens * 4096 + d
    for kv in np.unique(key).tolist():
        sel = s[key == kv]
        p = _equal_perm(kv // 4096, kv % 4096)
        idx = sel[:, None] + p[None, :]
        codes[sel[:, None] + np.arange(p.size)[None, :]] = codes[idx]


_BIG = 2048  # segments at least this long are partitioned one at a time (cheaper than the batched bookkeeping)
_INF = np.iinfo(np.int64).max


def _introsort(codes: np.ndarray, starts: list[int], ends: list[int], limit: int | None = None,
               dups: np.ndarray | None = None) -> int:
    """``std::__introsort_loop`` on each segment (in place), breadth first.

    With ``limit``, segments starting at or after it are left alone; returns the smallest cut point >= ``limit``
    (the block bound the prefix's final insertion sort needs).  With ``dups`` (sorted ranks that occur more than
    once), segments whose rank range holds no such rank are left alone: their keys are distinct, so the final
    insertion sort alone fixes their order whatever introsort would have done.
    """
    bound = codes.size
    s_l, e_l = [], []
    for s, e in zip(starts, ends, strict=True):
        if e - s > _THRESHOLD and (limit is None or s < limit):
            s_l.append(s)
            e_l.append(e)
    s_a = np.array(s_l, dtype=np.int64)
    e_a = np.array(e_l, dtype=np.int64)
    d_a = np.array([2 * _lg(e - s) for s, e in zip(s_l, e_l, strict=True)], dtype=np.int64)
    lo_a = np.full(s_a.size, -_INF, dtype=np.int64)
    hi_a = np.full(s_a.size, _INF, dtype=np.int64)
    while s_a.size:
        done = d_a == 0
        if done.any():
            for s, e in zip(s_a[done].tolist(), e_a[done].tolist(), strict=True):
                _heapsort_codes(codes, s, e)
            keep = ~done
            s_a, e_a, d_a, lo_a, hi_a = s_a[keep], e_a[keep], d_a[keep], lo_a[keep], hi_a[keep]
            if not s_a.size:
                break
        lens = e_a - s_a
        big = lens >= _BIG
        if big.all() or s_a.size <= 2:
            res = [_partition_one(codes, s, e) for s, e in zip(s_a.tolist(), e_a.tolist(), strict=True)]
            cut, prank, cnt_l, cnt_r = (np.array(x, dtype=np.int64) for x in zip(*res, strict=True))
        elif big.any():
            cut = np.empty_like(s_a)
            prank, cnt_l, cnt_r = np.empty_like(s_a), np.empty_like(s_a), np.empty_like(s_a)
            bi = np.flatnonzero(big)
            for i in bi.tolist():
                cut[i], prank[i], cnt_l[i], cnt_r[i] = _partition_one(codes, int(s_a[i]), int(e_a[i]))
            si = np.flatnonzero(~big)
            cut[si], prank[si], cnt_l[si], cnt_r[si] = _partition_many(codes, s_a[si], e_a[si])
        else:
            cut, prank, cnt_l, cnt_r = _partition_many(codes, s_a, e_a)
        if limit is not None:
            over = cut[cut >= limit]
            if over.size:
                bound = min(bound, int(over.min()))
        d_a = d_a - 1
        # a child is all equal when the pivot's side had no element strictly before (left) / after (right) it
        left_eq = cnt_l == lens - 1
        right_eq = cnt_r == lens
        if left_eq.any():
            _apply_equal(codes, s_a[left_eq], cut[left_eq], d_a[left_eq])
        if right_eq.any():
            _apply_equal(codes, cut[right_eq], e_a[right_eq], d_a[right_eq])
        ls, le, lk = s_a[~left_eq], cut[~left_eq], ~left_eq
        rs, re_, rk = cut[~right_eq], e_a[~right_eq], ~right_eq
        s_a = np.concatenate([ls, rs])
        e_a = np.concatenate([le, re_])
        d_a = np.concatenate([d_a[lk], d_a[rk]])
        lo_a, hi_a = np.concatenate([lo_a[lk], prank[rk]]), np.concatenate([prank[lk], hi_a[rk]])
        keep = e_a - s_a > _THRESHOLD
        if limit is not None:
            keep &= s_a < limit
        if dups is not None:
            keep &= np.searchsorted(dups, lo_a, "left") < np.searchsorted(dups, hi_a, "right")
        s_a, e_a, d_a, lo_a, hi_a = s_a[keep], e_a[keep], d_a[keep], lo_a[keep], hi_a[keep]
    return bound


def _introsort_prefix(codes: np.ndarray, limit: int) -> int:
    """``std::__introsort_loop`` on all of ``codes``, depth first, skipping segments that start at or after
    ``limit``; returns the smallest cut point >= ``limit`` (cheaper per level than the batched :func:`_introsort`
    when only a prefix is wanted: one or two segments per level)."""
    n = codes.size
    bound = n
    work = [(0, n, 2 * _lg(n))]
    while work:
        s, e, d = work.pop()
        while e - s > _THRESHOLD and s < limit:
            if d == 0:
                _heapsort_codes(codes, s, e)
                break
            d -= 1
            cut, _, cnt_l, cnt_r = _partition_one(codes, s, e)
            if cut >= limit:
                bound = min(bound, cut)
            elif e - cut > _THRESHOLD:  # the right part, as __introsort_loop's recursive call
                if cnt_r == e - s:
                    codes[cut:e] = codes[cut:e][_equal_perm(e - cut, d)]
                else:
                    work.append((cut, e, d))
            if cnt_l == e - s - 1:  # the left part is all equal: finish it in closed form
                if cut - s > _THRESHOLD:
                    codes[s:cut] = codes[s:cut][_equal_perm(cut - s, d)]
                break
            e = cut
    return bound


def sort_perm(keys: np.ndarray, descending: bool = True) -> np.ndarray:
    """The arrangement ``std::sort(first, last, comp)`` leaves, as original indices.

    Example:
        >>> sort_perm(np.array([0.5, -1.0, 0.5], dtype=np.float32), descending=False).tolist()
        [1, 0, 2]
    """
    codes = codes_for(keys, descending)
    n = codes.size
    if n <= 1:
        return codes & _LOW
    hi = (codes >> 32).astype(np.int32)  # ranks fit in 32 bits; sorting int32 is cheaper
    srt = np.sort(hi)
    eq = srt[1:] == srt[:-1]
    if not eq.any():  # distinct keys: one order only
        return np.sort(codes) & _LOW
    if n <= _SMALL:
        return np.array(_sort_small(hi.tolist()), dtype=np.int64)
    _introsort(codes, [0], [n], dups=np.unique(srt[1:][eq]).astype(np.int64))
    # as std::__final_insertion_sort: a stable sort by key of the arrangement introsort left
    return codes[np.argsort((codes >> 32).astype(np.int32), kind="stable")] & _LOW


_SMALL = 256  # below this, a direct port on Python lists beats the batched numpy trace


def _sort_small(r: list[int]) -> list[int]:
    """``std::sort`` of ids 0..n-1 with ``comp(a, b) = r[a] < r[b]``: a direct port of libstdc++'s
    ``__introsort_loop`` (median of first+1/mid/last-1, unguarded partition, heapsort at depth 0) and
    ``__final_insertion_sort`` (equal to a stable sort of the arrangement by key, see the module doc)."""
    n = len(r)
    a = list(range(n))
    work = [(0, n, 2 * _lg(n))]
    while work:
        first, last, depth = work.pop()
        while last - first > _THRESHOLD:
            if depth == 0:  # as std::__partial_sort(first, last, last): a heapsort
                seg = a[first:last]
                hk = [r[i] for i in seg]
                _make_heap(hk, seg, last - first)
                _sort_heap(hk, seg, last - first)
                a[first:last] = seg
                break
            depth -= 1
            # as std::__move_median_to_first(first, first + 1, mid, last - 1)
            x, y, z = first + 1, first + (last - first) // 2, last - 1
            rx, ry, rz = r[a[x]], r[a[y]], r[a[z]]
            if rx < ry:
                m = y if ry < rz else (z if rx < rz else x)
            else:
                m = x if rx < rz else (z if ry < rz else y)
            a[first], a[m] = a[m], a[first]
            # as std::__unguarded_partition(first + 1, last, first)
            pv = r[a[first]]
            lo, hi = first + 1, last
            while True:
                while r[a[lo]] < pv:
                    lo += 1
                hi -= 1
                while pv < r[a[hi]]:
                    hi -= 1
                if not lo < hi:
                    break
                a[lo], a[hi] = a[hi], a[lo]
                lo += 1
            work.append((lo, last, depth))  # as the recursive __introsort_loop(cut, last, depth)
            last = lo
    a.sort(key=r.__getitem__)  # list.sort is stable: the final insertion sort
    return a


def sort_prefix_perm(keys: np.ndarray, m: int, descending: bool = True) -> np.ndarray:
    """``sort_perm(keys, descending)[:m]``, tracing only the introsort segments that reach the first ``m`` places.

    Example:
        >>> sort_prefix_perm(np.array([1, 3, 3, 2, 3], dtype=np.float32), 2).tolist()
        [1, 2]
    """
    codes = codes_for(keys, descending)
    n = codes.size
    m = max(0, min(int(m), n))
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    bound = n
    if n > 1:
        bound = _introsort_prefix(codes, m)
    head = codes[:bound]
    return head[np.argsort(head >> 32, kind="stable")[:m]] & _LOW


def sort_segments_perm(keys: np.ndarray, bounds: np.ndarray, descending: bool = True) -> np.ndarray:
    """``std::sort`` applied separately to each ``[bounds[i], bounds[i+1])`` (``bounds`` from 0 to n, ascending),
    all segments processed together; returns the whole arrangement as original indices.

    Example:
        >>> sort_segments_perm(np.array([1, 2, 3, 4], dtype=np.float32), np.array([0, 2, 4])).tolist()
        [1, 0, 3, 2]
    """
    codes = codes_for(keys, descending)
    b = np.asarray(bounds, dtype=np.int64)
    n = codes.size
    if b.ndim != 1 or b.size < 1 or b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
        raise ValueError("bounds must ascend from 0 to len(keys)")
    if n == 0:
        return codes
    segid = np.repeat(np.arange(b.size - 1, dtype=np.int64), np.diff(b))
    hi = (codes >> 32).astype(np.int32)
    srt = np.sort(hi)
    eq = srt[1:] == srt[:-1]
    if eq.any():
        # only segments holding a repeated key need the introsort trace (distinct keys have one order only); a
        # key repeated across segments only makes this a superset
        dups = np.unique(srt[1:][eq]).astype(np.int64)
        starts, ends = b[:-1], b[1:]
        nonempty = ends > starts
        hit = np.zeros(starts.size, dtype=bool)
        # a segment may hold a repeated key if one lies within its key range (a superset, as _introsort's own test)
        lo = np.minimum.reduceat(hi, starts[nonempty])
        up = np.maximum.reduceat(hi, starts[nonempty])
        hit[nonempty] = np.searchsorted(dups, lo, "left") < np.searchsorted(dups, up, "right")
        _introsort(codes, starts[hit].tolist(), ends[hit].tolist(), dups=dups)
    order = np.lexsort((codes >> 32, segid))  # stable: the final insertion sort of every segment
    return codes[order] & _LOW
