"""The iteration order of libstdc++'s ``std::unordered_map<std::string, int>`` (g++ on 64-bit Linux).

llama.cpp's vocabulary loader walks ``token_to_id`` (an ``unordered_map`` filled with ``token_to_id[text] = id`` for
ids 0..n-1) and, for some roles (EOT, FIM prefix...), takes the first token in that walk whose text is one of several
candidates. qwen2 has two EOT candidates (``<|endoftext|>`` and ``<|im_end|>``), so the walk order decides.

libstdc++ keeps the elements in one singly linked list of bucket groups: a node inserted into an empty bucket starts
a new group at the front of the list, a node inserted into a non-empty bucket goes to the front of its group, and a
rehash re-inserts every node in list order by the same two rules. So between rehashes the order is: groups by
descending creation time, and within a group, nodes by descending insertion time. The bucket counts come from the
prime rehash policy (:data:`REHASHES`, read off g++ 12's libstdc++ by inserting one element at a time).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK = (1 << 64) - 1
_MUL = 0xC6A4A7935BD1E995
_SEED = 0xC70F6907

# (size at which the rehash happens, new bucket count), for a default-constructed map (1 bucket) grown by inserts
REHASHES: tuple[tuple[int, int], ...] = (
    (1, 13), (14, 29), (30, 59), (60, 127), (128, 257), (258, 541), (542, 1109), (1110, 2357), (2358, 5087),
    (5088, 10273), (10274, 20753), (20754, 42043), (42044, 85229), (85230, 172933), (172934, 351061),
    (351062, 712697), (712698, 1447153), (1447154, 2938679), (2938680, 5967347),
)


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def std_hash(data: bytes) -> int:
    """``std::hash<std::string>`` = ``std::_Hash_bytes(data, len, 0xc70f6907)`` (64-bit)."""
    n = len(data)
    h = (_SEED ^ (n * _MUL)) & _MASK
    aligned = n & ~7
    for i in range(0, aligned, 8):
        d = (_shift_mix((int.from_bytes(data[i:i + 8], "little") * _MUL) & _MASK) * _MUL) & _MASK
        h = ((h ^ d) * _MUL) & _MASK
    if n & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * _MUL) & _MASK
    h = _shift_mix((_shift_mix(h) * _MUL) & _MASK)
    return h


def iteration_order(keys: Sequence[bytes]) -> np.ndarray:
    """The indices of ``keys`` in the order a range-for over the map visits them, after inserting ``keys[0]``,
    ``keys[1]``... one by one (the keys must be distinct)."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n > REHASHES[-1][0]:
        raise ValueError(f"{n} keys: beyond the tabulated rehash sizes")
    hashes = np.array([std_hash(k) for k in keys], dtype=np.uint64)
    order = np.zeros(0, dtype=np.int64)
    bounds = [size for size, _ in REHASHES if size <= n] + [n + 1]
    for j, (size, buckets) in enumerate(REHASHES):
        if size > n:
            break
        # the rehash re-places the first size-1 nodes in list order, then nodes size-1 .. next rehash are inserted
        seq = np.concatenate([order, np.arange(size - 1, bounds[j + 1] - 1, dtype=np.int64)])
        bkt = hashes[seq] % np.uint64(buckets)
        _, first, inv = np.unique(bkt, return_index=True, return_inverse=True)
        created = first[inv]            # when the node's bucket group was created (its first node's time)
        t = np.arange(len(seq))
        order = seq[np.lexsort((-t, -created))]
    return order
