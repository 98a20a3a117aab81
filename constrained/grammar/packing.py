"""Packing between the rows of a :class:`~constrained.grammar.tokenindex.TokenTable` and token ids: bool masks over
rows read as masks over ids, and both packed into bits (``np.packbits`` order, or least significant bit first for
:func:`set_bits`), compiled where the extension (:mod:`constrained.grammar._walk`) is built.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.tokenindex import vocab_index
    >>> t = vocab_index(Vocabulary([b"a", b"ab", b"b"])).table
    >>> acc = np.zeros(t.n, dtype=bool); acc[t.inv[1]] = True      # the row of token 1
    >>> by_id(t, acc).tolist(), pack_ids(np.array([1]), 3).tolist(), pack_by_id(t, acc).tolist()
    ([False, True, False], [64], [64])
"""

from __future__ import annotations

import numpy as np

from .stacks import _walk_ext
from .tokenindex import TokenTable

COMPILED_HELPERS = True
"""Whether the compiled packing and class summaries are used where the extension is built (the tests turn them off
to compare against the numpy reference)."""


_ZERO_BITS: dict[int, np.ndarray] = {}


def _zero_bits(n: int) -> np.ndarray:
    """A shared read-only all-zero packed bit array over ``n`` ids."""
    z = _ZERO_BITS.get(n)
    if z is None:
        z = np.zeros((n + 7) // 8, dtype=np.uint8)
        z.setflags(write=False)
        if len(_ZERO_BITS) >= 8:
            _ZERO_BITS.clear()
        _ZERO_BITS[n] = z
    return z


def pack_by_id(t: TokenTable, acc: np.ndarray) -> np.ndarray:
    """``np.packbits(by_id(t, acc))``, in one pass where the extension is built (a table holding every id once)."""
    if _walk_ext is not None and COMPILED_HELPERS and t.inv is not None:
        return np.frombuffer(_walk_ext.pack_rows(np.ascontiguousarray(acc, dtype=bool), t.compact()[1], _inv32(t)),
                             dtype=np.uint8)
    return np.packbits(by_id(t, acc))


def rows_of(t: TokenTable, m: np.ndarray) -> np.ndarray:
    """``m[t.ids]``: a bool over token ids read over the rows of ``t`` (compiled where built)."""
    if _walk_ext is not None and COMPILED_HELPERS:
        return np.frombuffer(_walk_ext.by_rows(np.ascontiguousarray(m, dtype=bool), t.compact()[1]), dtype=bool)
    return m[t.ids]


def set_rows(t: TokenTable, m: np.ndarray, acc: np.ndarray) -> None:
    """``m[t.ids[acc]] = True`` in place (``m`` a writable bool over ids, ``acc`` one over the rows of ``t``)."""
    if _walk_ext is not None and COMPILED_HELPERS and m.flags.c_contiguous and m.dtype == bool:
        _walk_ext.set_rows(m, np.ascontiguousarray(acc, dtype=bool), t.compact()[1])
    else:
        m[t.ids[acc]] = True


def set_bits(out: np.ndarray, id_arrays: list[np.ndarray]) -> None:
    """Set bit ``i & 7`` (least significant first) of byte ``i >> 3`` of ``out`` (writable uint8) for every id ``i``
    in the arrays (compiled where built)."""
    if _walk_ext is not None and COMPILED_HELPERS:
        _walk_ext.set_bits(out, tuple(np.ascontiguousarray(a, dtype=np.int64) for a in id_arrays))
        return
    for a in id_arrays:
        a = np.asarray(a, dtype=np.int64)
        np.bitwise_or.at(out, a >> 3, (1 << (a & 7)).astype(np.uint8))


def _inv32(t: TokenTable) -> np.ndarray:
    """The row of each id of a table holding every id once, as int32 (built once per table)."""
    inv = t.__dict__.get("_inv32")
    if inv is None:
        inv = t.__dict__["_inv32"] = np.ascontiguousarray(t.inv, dtype=np.int32)
    return inv


def pack_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """Packed bits (``np.packbits`` order) over ``n`` ids with ``ids`` set."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if _walk_ext is not None and COMPILED_HELPERS:
        return np.frombuffer(_walk_ext.pack_ids(np.ones(len(ids), dtype=bool), ids, n), dtype=np.uint8)
    m = np.zeros(n, dtype=bool)
    m[ids] = True
    return np.packbits(m)


def by_id(t: TokenTable, acc: np.ndarray) -> np.ndarray:
    """A bool array over the table's rows as one over token ids (the vocabulary table holds every id)."""
    if t.inv is not None:              # every id once: a gather, or a scatter of the few accepted rows
        if np.count_nonzero(acc) * 8 > t.n:
            return acc[t.inv]
        out = np.zeros(t.n, dtype=bool)
        out[t.ids[np.flatnonzero(acc)]] = True
        return out
    out = np.zeros(t.n, dtype=bool)
    out[t.ids] = acc
    return out
