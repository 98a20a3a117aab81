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

from . import stdalgo

_F32 = np.float32
_BUCKET_SCALE = _F32(6.4)   # 128 / (10 - -10), in float
_BUCKET_INTER = _F32(64.0)  # -(-10) * scale


class Candidates:
    """ids/logits/p arrays plus ``sorted`` and ``selected``, as ``llama_token_data_array``."""

    __slots__ = ("ids", "logits", "p", "sorted", "selected")

    def __init__(self, ids: np.ndarray, logits: np.ndarray, p: np.ndarray, sorted: bool = False,
                 selected: int = -1) -> None:
        self.ids = ids
        self.logits = logits
        self.p = p
        self.sorted = sorted
        self.selected = selected

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> Candidates:
        """``{id, logit, 0}`` in id order, unsorted, nothing selected (as common_sampler's set_logits)."""
        n = len(logits)
        return cls(np.arange(n, dtype=np.int32), np.array(logits, dtype=np.float32, copy=True),
                   np.zeros(n, np.float32))

    @property
    def size(self) -> int:
        return len(self.ids)

    def copy(self) -> Candidates:
        return Candidates(self.ids.copy(), self.logits.copy(), self.p.copy(), self.sorted, self.selected)

    def take(self, order: np.ndarray) -> None:
        """Keep the elements at ``order`` (indices into the current array), in that order."""
        self.ids = self.ids[order]
        self.logits = self.logits[order]
        self.p = self.p[order]

    def truncate(self, n: int) -> None:
        """``cur_p->size = n``."""
        self.ids = self.ids[:n]
        self.logits = self.logits[:n]
        self.p = self.p[:n]

    def advance(self, n: int) -> None:
        """``cur_p->data += n; cur_p->size -= n`` (XTC)."""
        self.ids = self.ids[n:]
        self.logits = self.logits[n:]
        self.p = self.p[n:]

    # as llama_token_data_array_partial_sort_inplace
    def partial_sort_inplace(self, npartial: int) -> None:
        """Sort the top ``npartial`` to the front (heap partial sort up to 128, buckets above), keep only them."""
        if npartial <= 128:
            order = top_partial_sort(self.logits, npartial)
        else:
            order = bucket_partial_sort(self.logits, npartial)[:npartial]
        self.take(order)
        self.sorted = True


def top_partial_sort(keys: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` indices of ``std::partial_sort(first, first+k, last, greater)`` over ``keys``.

    Without ties among the leaders the answer is just the top ``k`` by value (found with one threshold pass);
    otherwise libstdc++'s heap selection decides, via :func:`sampler.stdalgo.partial_sort_perm`.
    """
    n = len(keys)
    if k <= 0:
        return np.empty(0, np.intp)
    if n > 4096 and k <= 256:
        fast = _distinct_top(keys, k)
        if fast is not None:
            return fast
    return np.asarray(stdalgo.partial_sort_perm(keys, k, descending=True))[:k]


def _distinct_top(keys: np.ndarray, k: int) -> np.ndarray | None:
    """Top-k indices in descending order when the k+1 largest values are all distinct, else None."""
    n = len(keys)
    stride = max(1, n // 2048)
    sample = keys[::stride]
    r = min(len(sample), (3 * k) // stride + 2)
    t = np.partition(sample, len(sample) - r)[len(sample) - r]
    idx = np.flatnonzero(keys >= t)
    if len(idx) < k or len(idx) > 16 * k + 64:
        return None
    vals = keys[idx]
    order = np.argsort(vals, kind="stable")[::-1]
    top = vals[order[: k + 1]]
    if not np.all(top[:-1] > top[1:]):
        return None
    if len(idx) == k and not np.all(top[:-1] > top[1:]):
        return None
    return idx[order[:k]]


# as llama_token_data_array_partial_sort (writes into a buffer, does not change the array)
def bucket_partial_sort(keys: np.ndarray, npartial: int) -> np.ndarray:
    """Indices of the buffer llama.cpp's bucket pre-pass builds: every element of the buckets taken, the first
    ``npartial`` in libstdc++ sorted order (the rest of the last bucket in partial_sort's leftover order)."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = keys * _BUCKET_SCALE + _BUCKET_INTER
        v = np.clip(v, _F32(-1.0), _F32(1024.0))  # -inf lands in bucket 0, as on x86
    b = v.astype(np.int32)
    np.clip(b, 0, 127, out=b)
    histo = np.bincount(b, minlength=128)
    cum = np.cumsum(histo[::-1])
    j = int(np.searchsorted(cum, npartial))  # first position (from the top) with cum >= npartial
    ib = 127 - j if j < 128 else -1
    sel = np.flatnonzero(b >= ib)
    if ib > 0 or len(sel) != len(b):
        order = sel[np.argsort(-b[sel], kind="stable")]
    else:
        order = np.argsort(-b, kind="stable")
    out = np.empty(len(order), np.intp)
    pos = 0
    ndone = 0
    for bj in range(127, ib, -1):
        h = int(histo[bj])
        if h == 0:
            continue
        seg = order[pos:pos + h]
        if h > 1:
            seg = seg[np.asarray(stdalgo.sort_perm(keys[seg], descending=True))]
        out[pos:pos + h] = seg
        pos += h
        ndone += h
    h = int(histo[ib]) if ib >= 0 else 0
    if h:
        seg = order[pos:pos + h]
        m = npartial - ndone
        if h > 1 and m > 0:
            seg = seg[np.asarray(stdalgo.partial_sort_perm(keys[seg], m, descending=True))]
        out[pos:pos + h] = seg
    return out
