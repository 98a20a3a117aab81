"""The candidate array (llama.cpp's ``llama_token_data_array``) and its sorts.

A :class:`Candidates` holds parallel numpy arrays ``ids`` (int32), ``logits`` (float32) and ``p`` (float32), plus the
``sorted`` flag and the ``selected`` index, exactly the state llama.cpp's samplers pass along. The sorts reproduce
``llama_token_data_array_partial_sort`` (the 128-bucket pre-pass) and ``..._partial_sort_inplace`` with libstdc++'s
``std::sort``/``std::partial_sort`` tie order (from :mod:`sampler.stdalgo`).

Example:
    >>> import numpy as np
    >>> c = Candidates.from_logits(np.array([0.5, 2.0, 1.0], np.float32))
    >>> c.partial_sort_inplace(2); c.ids.tolist(), c.sorted
    ([1, 2], True)
"""

from __future__ import annotations

import numpy as np

from . import heapselect, stdalgo
from .kernels import REC, K

_F32 = np.float32
_BUCKET_SCALE = _F32(6.4)   # 128 / (10 - -10), in float
_BUCKET_INTER = _F32(64.0)  # -(-10) * scale
_EMPTY = np.empty(0, np.float32)


class Candidates:
    """ids/logits/p arrays plus ``sorted`` and ``selected``, as ``llama_token_data_array``.

    ``ids`` and ``p`` are created lazily (ids in id order, p = 0) and ``logits`` may share the caller's array until
    a sampler writes into it (:meth:`own`), so that a chain which truncates first never touches the whole vocabulary
    more than it must.

    With the compiled kernels (:mod:`sampler.kernels`) the state may instead live in one record array laid out as
    ``llama_token_data`` (:meth:`records`; its first ``size`` entries); reading ``ids``, ``logits`` or ``p`` turns
    it back into the three arrays.
    """

    __slots__ = ("_ids", "_lg", "_p", "sorted", "selected", "_owned", "_rec", "_n")

    def __init__(self, ids: np.ndarray | None, logits: np.ndarray, p: np.ndarray | None, sorted: bool = False,
                 selected: int = -1, owned: bool = True) -> None:
        self._ids = ids
        self._lg = logits
        self._p = p
        self.sorted = sorted
        self.selected = selected
        self._owned = owned
        self._rec: np.ndarray | None = None
        self._n = 0

    @classmethod
    def from_logits(cls, logits: np.ndarray, copy: bool = True) -> Candidates:
        """``{id, logit, 0}`` in id order, unsorted, nothing selected (as common_sampler's set_logits)."""
        lg = np.array(logits, dtype=np.float32, copy=True) if copy else np.asarray(logits, dtype=np.float32)
        return cls(None, lg, None, owned=copy)

    @classmethod
    def from_records(cls, rec: np.ndarray, n: int, sorted: bool) -> Candidates:
        """The first ``n`` entries of a :data:`sampler.kernels.REC` array."""
        c = cls(None, _EMPTY, None, sorted)
        c._rec, c._n = rec, n
        return c

    def records(self) -> np.ndarray:
        """The state as one record array (:data:`sampler.kernels.REC`; its first ``size`` entries), for the kernels."""
        if self._rec is None:
            lg = self._lg
            rec = np.empty(len(lg), REC)
            K.pack(rec, lg, self._ids, self._p)  # type: ignore[union-attr]
            self._rec, self._n = rec, len(lg)
            self._ids = self._p = None
            self._lg = _EMPTY
        return self._rec

    def _unrec(self) -> None:
        r = self._rec[: self._n]  # type: ignore[index]
        self._rec = None
        self._ids = r["id"].copy()
        self._lg = r["logit"].copy()
        self._p = r["p"].copy()
        self._owned = True

    def token(self, i: int) -> int:
        """``data[i].id``."""
        if self._rec is not None:
            return int(self._rec[i]["id"])
        return int(self._ids[i]) if self._ids is not None else int(i)

    @property
    def logits(self) -> np.ndarray:
        if self._rec is not None:
            self._unrec()
        return self._lg

    @logits.setter
    def logits(self, v: np.ndarray) -> None:
        if self._rec is not None:
            self._unrec()
        self._lg = v

    @property
    def ids(self) -> np.ndarray:
        if self._rec is not None:
            self._unrec()
        if self._ids is None:
            self._ids = np.arange(len(self._lg), dtype=np.int32)
        return self._ids

    @ids.setter
    def ids(self, v: np.ndarray) -> None:
        if self._rec is not None:
            self._unrec()
        self._ids = v

    @property
    def p(self) -> np.ndarray:
        if self._rec is not None:
            self._unrec()
        if self._p is None:
            self._p = np.zeros(len(self._lg), np.float32)
        return self._p

    @p.setter
    def p(self, v: np.ndarray) -> None:
        if self._rec is not None:
            self._unrec()
        self._p = v

    @property
    def identity(self) -> bool:
        """Whether the ids are still 0..size-1 in order (nothing has reordered or cut the array)."""
        return self._ids is None and self._rec is None

    @property
    def size(self) -> int:
        return self._n if self._rec is not None else len(self._lg)

    def own(self) -> np.ndarray:
        """Make ``logits`` a private array (before writing into it) and return it."""
        if self._rec is not None:
            self._unrec()
        if not self._owned:
            self._lg = self._lg.copy()
            self._owned = True
        return self._lg

    def copy(self) -> Candidates:
        if self._rec is not None:
            return Candidates.from_records(self._rec[: self._n].copy(), self._n, self.sorted)._sel(self.selected)
        return Candidates(self.ids.copy(), self._lg.copy(), self.p.copy(), self.sorted, self.selected)

    def _sel(self, selected: int) -> Candidates:
        self.selected = selected
        return self

    def take(self, order: np.ndarray) -> None:
        """Keep the elements at ``order`` (indices into the current array), in that order."""
        if self._rec is not None:
            self._rec = self._rec[: self._n][order]
            self._n = len(self._rec)
            return
        self._ids = order.astype(np.int32) if self._ids is None else self._ids[order]
        self._lg = self._lg[order]
        self._p = None if self._p is None else self._p[order]
        self._owned = True

    def truncate(self, n: int) -> None:
        """``cur_p->size = n``."""
        if self._rec is not None:
            self._n = min(n, self._n)
            return
        if n == len(self._lg):
            return
        self._ids = self.ids[:n]
        self._lg = self._lg[:n]
        self._p = None if self._p is None else self._p[:n]

    def advance(self, n: int) -> None:
        """``cur_p->data += n; cur_p->size -= n`` (XTC)."""
        if self._rec is not None:
            self._rec = self._rec[n:]
            self._n -= n
            return
        self._ids = self.ids[n:]
        self._lg = self._lg[n:]
        self._p = None if self._p is None else self._p[n:]

    # as llama_token_data_array_partial_sort_inplace
    def partial_sort_inplace(self, npartial: int) -> None:
        """Sort the top ``npartial`` to the front (heap partial sort up to 128, buckets above), keep only them."""
        if K is not None and npartial > 0:
            r = K.top_k_rec(self.records(), self._n, False, npartial)
            self._n, self.sorted = r >> 1, True
            return
        if npartial <= 128:
            order = top_partial_sort(self.logits, npartial)
        else:
            order = bucket_partial_sort(self.logits, npartial)[:npartial]
        self.take(order)
        self.sorted = True


if K is not None:
    K.bind_candidates(Candidates)  # the slots the compiled stages (K.Stage.apply) read and write


def top_partial_sort(keys: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` indices of ``std::partial_sort(first, first+k, last, greater)`` over ``keys``.

    Without ties among the leaders the answer is just the top ``k`` by value (found with one threshold pass);
    otherwise libstdc++'s heap selection decides, run exactly on the elements that can enter the heap
    (:func:`sampler.heapselect.top_k` for large arrays, else :func:`heap_participants` and
    :func:`sampler.stdalgo.partial_sort_top`).
    """
    if k <= 0:
        return np.empty(0, np.intp)
    n = len(keys)
    if n >= 8192 and k <= 256:
        out = heapselect.top_k(keys, k)  # one pass, then the heap on what can enter it
        assert out is not None
        return out
    sub = heap_participants(keys, k)
    vals = keys if sub is None else keys[sub]
    m = len(vals)
    if m > k + 1:
        lead = np.argpartition(vals, m - (k + 1))[m - (k + 1):]
    else:
        lead = np.arange(m)
    order = lead[np.argsort(vals[lead], kind="stable")[::-1]]
    top = vals[order[: k + 1]]
    if np.all(top[:-1] > top[1:]):
        # no ties among the leaders (nor at the cut): the heap selection can only give them in value order
        chosen = order[:k]
    else:
        chosen = stdalgo.partial_sort_top(vals, k, descending=True)
    return chosen if sub is None else sub[chosen]


def partial_sort_full(keys: np.ndarray, k: int) -> np.ndarray:
    """The whole permutation ``std::partial_sort(first, first+k, last, greater)`` leaves (leftovers included)."""
    n = len(keys)
    sub = heap_participants(keys, k) if 0 < k < n else None
    if sub is None:
        return np.asarray(stdalgo.partial_sort_perm(keys, k, descending=True))
    perm = np.arange(n)
    perm[sub] = sub[np.asarray(stdalgo.partial_sort_perm(keys[sub], k, descending=True))]
    return perm


def heap_participants(keys: np.ndarray, k: int) -> np.ndarray | None:
    """Indices (in order) of every element that can enter libstdc++'s heap selection for the top ``k``.

    ``__heap_select`` heapifies the first k elements, then lets element i in only if it beats the heap's top, which
    is the k-th largest value of ``keys[:i]``. An element that does not get in changes nothing, so running the
    partial sort on the first k elements plus every element above a lower bound of that k-th largest value gives
    the same first k (and, mapped back, the same leftover order). The bound is recomputed exactly at block
    boundaries of doubling size. Returns None when filtering would not pay.
    """
    n = len(keys)
    if k <= 0 or n < 2048 or n <= 8 * k:
        return None
    parts = [np.arange(k)]
    top = np.sort(keys[:k])
    low = top[0]
    pos, size = k, max(k, 32)
    while pos < n:
        end = min(n, pos + size)
        blk = keys[pos:end]
        sel = np.flatnonzero(blk > low)
        if sel.size:
            parts.append(sel + pos)
            vals = np.concatenate((top, blk[sel]))
            top = np.partition(vals, len(vals) - k)[len(vals) - k:]
            low = top.min()
        pos, size = end, size * 2
    sub = np.concatenate(parts)
    return sub if len(sub) < n // 2 else None


# as llama_token_data_array_partial_sort (writes into a buffer, does not change the array)
def bucket_partial_sort(keys: np.ndarray, npartial: int) -> np.ndarray:
    """Indices of the buffer llama.cpp's bucket pre-pass builds: every element of the buckets taken, the first
    ``npartial`` in libstdc++ sorted order (the rest of the last bucket in partial_sort's leftover order)."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = keys * _BUCKET_SCALE + _BUCKET_INTER
        # int(float) on x86 (cvttss2si): truncation, and INT_MIN for anything out of int range (or inf/NaN), so
        # -inf *and* huge logits (>= 2**31 / 6.4, e.g. after a tiny temperature) land in bucket 0
        wild = ~(np.abs(v) < _F32(2147483648.0))
        v = np.clip(v, _F32(-1.0), _F32(1024.0))
    b = v.astype(np.int32)
    b[wild] = 0
    np.clip(b, 0, 127, out=b)
    histo = np.bincount(b, minlength=128)
    cum = np.cumsum(histo[::-1])
    j = int(np.searchsorted(cum, npartial))  # first position (from the top) with cum >= npartial
    ib = 127 - j if j < 128 else -1
    sel = np.flatnonzero(b >= ib)
    # a stable sort by bucket, descending (uint8 keys: numpy's stable sort is then a radix sort)
    if ib > 0 or len(sel) != len(b):
        order = sel[np.argsort((127 - b[sel]).astype(np.uint8), kind="stable")]
    else:
        order = np.argsort((127 - b).astype(np.uint8), kind="stable")
    out = np.empty(len(order), np.intp)
    # every bucket above ib is std::sort-ed on its own: all of them in one batched introsort
    hs = histo[127:ib:-1] if ib >= 0 else histo[::-1]
    pos = ndone = int(hs.sum())
    if pos:
        seg = order[:pos]
        bounds = np.concatenate(([0], np.cumsum(hs)))
        out[:pos] = seg[np.asarray(stdalgo.sort_segments_perm(keys[seg], bounds, descending=True))]
    h = int(histo[ib]) if ib >= 0 else 0
    if h:
        seg = order[pos:pos + h]
        m = npartial - ndone
        if h > 1 and m > 0:
            seg = seg[partial_sort_full(keys[seg], m)]
        out[pos:pos + h] = seg
    return out
