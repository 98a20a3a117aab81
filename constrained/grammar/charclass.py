"""The vocabulary table seen through one character class of the grammar: vectorised ``llama_grammar_match_char``
and ``llama_grammar_match_partial_char``, the rows whose first code point (or every code point) a class matches, and
the loop and chain shortcuts' parts of the table, each cached per table and class.

Rows of a :class:`~constrained.grammar.tokenindex.TokenTable` are sorted by length, longest first (see
:mod:`constrained.grammar.mask`). The compiled versions are used where the extension is built and
``packing.COMPILED_HELPERS`` is on; the numpy ones are their reference.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> from constrained.grammar.stacks import GrammarRules
    >>> from constrained.grammar.tokenindex import vocab_index
    >>> g = GrammarRules(ParsedGrammar((((T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0))   # root ::= "a"
    >>> t = vocab_index(Vocabulary([b"a", b"ab", b"b"])).table
    >>> sorted(t.ids[_first_rows(g, 0, t)].tolist()), _first_count(g, 0, t)
    ([0, 1], 2)
"""

from __future__ import annotations

import numpy as np

from . import packing as _packing
from .packing import _inv32, pack_by_id
from .stacks import _ANY_HI as _ANY_CP
from .stacks import GrammarRules, _walk_ext
from .tokenindex import TokenTable


def _class_match(g: GrammarRules, p: int, cps: np.ndarray) -> np.ndarray:
    """Vectorised ``llama_grammar_match_char``."""
    positive, items, _ = g.classes[p]
    hit = np.zeros(cps.shape, dtype=bool)
    for lo, hi in items:
        if lo == hi:
            hit |= cps == lo
        else:
            hit |= (cps >= lo) & (cps <= hi)
    return hit if positive else ~hit


def _partial_match(g: GrammarRules, p: int, val: np.ndarray, rem: np.ndarray) -> np.ndarray:
    """Vectorised ``llama_grammar_match_partial_char`` (rows with ``rem <= 0`` give False)."""
    ok = rem > 0
    if not ok.any():
        return ok
    ok &= ~((rem == 1) & (val < 2))
    r = np.where(ok, rem, 1)
    low = val << (6 * r)
    high = low | ((np.int64(1) << (6 * r)) - 1)
    low = np.where((low == 0) & (r == 2), 1 << 11, low)
    low = np.where((low == 0) & (r == 3), 1 << 16, low)
    positive, items, _ = g.classes[p]
    hit = np.zeros(val.shape, dtype=bool)
    for lo, hi in items:
        hit |= (low <= hi) & (high >= lo)
    return ok & (hit if positive else ~hit)


def _all_in(g: GrammarRules, p: int, t: TokenTable) -> np.ndarray:
    """Rows of ``t`` all of whose code points the class at ``p`` matches (a sound under-approximation: a row left
    out only means the exact walk looks at it), from :meth:`TokenTable.summary`; cached per table and class."""
    cache = t.__dict__.setdefault("_all_in", {})
    key = g.ranges(p)
    r = cache.get(key)
    if r is None:
        lo, hi, na_min, na_max = t.summary()
        mlo = mhi = 0
        na: list[tuple[int, int]] = []
        for a, b in key:
            for c in range(a, min(b, 127) + 1):
                if c < 64:
                    mlo |= 1 << c
                else:
                    mhi |= 1 << (c - 64)
            if b >= 128:
                na.append((max(a, 128), b))
        mode = 0 if na == [(128, _ANY_CP)] else 1 if not na else 2
        if _walk_ext is not None and _packing.COMPILED_HELPERS:
            k0 = int(t.longer[0]) if len(t.longer) else 0
            # no other row with a code point can be wholly in the class than those it starts (when they are few)
            first = _first_rows_cached(g, p, t) if _first_count(g, p, t) * 4 < t.n else None
            r = np.frombuffer(_walk_ext.all_in(lo, hi, na_min, na_max, mlo, mhi, mode, tuple(na), first, k0,
                                               *t.__dict__.get("_ascii_rows", (None, None))), dtype=bool)
        else:
            r = ((lo & np.uint64(~mlo & 0xFFFFFFFFFFFFFFFF)) == 0) & ((hi & np.uint64(~mhi & 0xFFFFFFFFFFFFFFFF)) == 0)
            none = na_max < 0
            if mode == 1:
                r &= none
            elif mode == 2:
                inside = none.copy()
                for a, b in na:        # every code point from 128 on within one range of the class
                    inside |= (na_min >= a) & (na_max <= b)
                r &= inside
        if len(cache) >= 32:
            cache.clear()
        cache[key] = r
    return r


def _loop_parts(g: GrammarRules, p: int, t: TokenTable) -> tuple[np.ndarray, tuple | None, np.ndarray, np.ndarray]:
    """What a loop on the class at ``p`` makes of the whole table at depth 0, whatever its exits (cached per table
    and class): ``(clean, clean_bits, pending, rest)``: the rows wholly in the class with no pending UTF-8 sequence
    (accepted; bool over rows, and for the vocabulary table ``(~clean, packed bits over token ids)``), the rows wholly in the
    class with one (decided by :func:`_loop_end_ok`), and the other rows whose first code point is in the class
    (walked)."""
    cache = t.__dict__.setdefault("_loop_parts", {})
    key = g.ranges(p)
    r = cache.get(key)
    if r is None:
        k0 = int(t.longer[0]) if len(t.longer) else 0      # rows with at least one code point
        if _walk_ext is not None and _packing.COMPILED_HELPERS:
            positive, items, _ = g.classes[p]
            compact = t.compact()
            first = _first_rows_cached(g, p, t) if _first_count(g, p, t) * 4 < t.n else None
            clean, outside, pending, rest, bits = _walk_ext.loop_parts(
                _all_in(g, p, t), compact[0], k0, np.ascontiguousarray(t.col(0), dtype=np.int32), positive, items,
                compact[1] if t.inv is not None else None, first, _inv32(t) if t.inv is not None else None)
            clean, outside = np.frombuffer(clean, dtype=bool), np.frombuffer(outside, dtype=bool)
            pending, rest = np.frombuffer(pending, dtype=np.int64), np.frombuffer(rest, dtype=np.int64)
            clean_bits = (outside, np.frombuffer(bits, dtype=np.uint8)) if bits is not None else None
        else:
            inside = _all_in(g, p, t)[:k0]
            clean = np.zeros(t.n, dtype=bool)
            clean[:k0] = inside & (t.rem[:k0] == 0)
            pending = np.flatnonzero(inside & (t.rem[:k0] > 0))
            out = np.flatnonzero(~inside)              # rows with a code point outside the class somewhere
            rest = out[_class_match(g, p, t.col(0)[out])]
            clean_bits = (~clean, pack_by_id(t, clean)) if t.inv is not None else None
        if len(cache) >= 8:
            cache.clear()
        r = cache[key] = (clean, clean_bits, pending, rest)
    return r


def _loop_end_ok(g: GrammarRules, t: TokenTable, top: int, exits: tuple[int, ...], e: np.ndarray) -> np.ndarray:
    """For rows ``e`` that stay in the loop at ``top`` to their end: ``llama.cpp``'s verdict at the end (no
    pending sequence, or one that the loop's class or one of its exits' classes may continue)."""
    rem = t.rem[e]
    ok = rem == 0
    if (rem > 0).any():
        val = t.val[e]
        for q in (top, *exits):
            ok |= _partial_match(g, q, val, rem)
    return ok


def _chain_end_ok(g: GrammarRules, t: TokenTable, levels: tuple[tuple[int, ...], ...], e: np.ndarray,
                  left: np.ndarray) -> np.ndarray:
    """For rows ``e`` wholly in a chain's class with ``left`` code points to go: the rows that end within the chain
    end at level ``left - 1``, accepted there if they end cleanly or their pending UTF-8 sequence may continue one
    of that level's classes; rows longer than the chain (an ended chain) are rejected."""
    ok = np.zeros(len(e), dtype=bool)
    for j in np.unique(left[left <= len(levels)]).tolist():
        sel = np.flatnonzero(left == j)
        rows = e[sel]
        rem = t.rem[rows]
        o = rem == 0
        if (rem > 0).any():
            val = t.val[rows]
            for q in levels[j - 1]:
                o |= _partial_match(g, q, val, rem)
        ok[sel] = o
    return ok


def _first_count(g: GrammarRules, p: int, t: TokenTable) -> int:
    """``len(_first_rows(g, p, t))`` from binary searches alone (the rows are not gathered)."""
    positive, items, _ = g.classes[p]
    cp0 = t.cp0
    spans = sorted((int(np.searchsorted(cp0, lo, "left")), int(np.searchsorted(cp0, hi, "right"))) for lo, hi in items)
    n, at = 0, 0
    for a, b in spans:
        if b > at:
            n += b - max(a, at)
            at = b
    return n if positive else len(cp0) - n


def _first_rows(g: GrammarRules, p: int, t: TokenTable) -> np.ndarray:
    """Rows whose first code point the class at ``p`` matches, from the table's sorted index (no full scan)."""
    positive, items, _ = g.classes[p]
    if _walk_ext is not None and _packing.COMPILED_HELPERS:
        cp0, order0 = t.__dict__.get("_kernel_cp0") or t.__dict__.setdefault(
            "_kernel_cp0", (np.ascontiguousarray(t.cp0, dtype=np.int64), np.ascontiguousarray(t.order0, dtype=np.int64)))
        return np.frombuffer(_walk_ext.first_rows(cp0, order0, positive, tuple(items)), dtype=np.int64)
    return _first_rows_py(positive, items, t)


def _first_rows_py(positive: bool, items: tuple, t: TokenTable) -> np.ndarray:
    """:func:`_first_rows` in numpy (the reference of the compiled ``first_rows``)."""
    cp0, order0 = t.cp0, t.order0
    spans = sorted((int(np.searchsorted(cp0, lo, "left")), int(np.searchsorted(cp0, hi, "right")))
                   for lo, hi in items)
    if positive:
        parts = [order0[a:b] for a, b in spans if b > a]
    else:
        parts, at = [], 0
        for a, b in spans:
            if a > at:
                parts.append(order0[at:a])
            at = max(at, b)
        parts.append(order0[at:])
    parts = [q for q in parts if len(q)]
    if not parts:
        return np.empty(0, dtype=np.int64)
    if len(parts) == 1:
        if positive and len(spans) == 1 and cp0[spans[0][0]] == cp0[spans[0][1] - 1]:
            return parts[0]         # one code point: its rows are in ascending order already (stable sort)
        return np.sort(parts[0]) if len(parts[0]) < 4096 else _ascending([parts[0]], t.n)
    return _ascending(parts, t.n)


def _ascending(parts: list[np.ndarray], n: int) -> np.ndarray:
    """The union of index arrays, sorted (rows in ascending order are in non-increasing length order)."""
    total = sum(len(a) for a in parts)
    if total * 64 > n:
        m = np.zeros(n, dtype=bool)
        for a in parts:
            m[a] = True
        return np.flatnonzero(m)
    a = np.sort(np.concatenate(parts), kind="stable")    # sorted runs: a merge
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def _first_rows_cached(g: GrammarRules, p: int, t: TokenTable) -> np.ndarray:
    """:func:`_first_rows`, memoised per table and class (at most ~4 rows' worth of indices per row of the table)."""
    positive, items, _ = g.classes[p]
    cache = t.__dict__.setdefault("_first_cache", {})
    key = (positive, items)
    r = cache.get(key)
    if r is None:
        r = _first_rows(g, p, t)
        held = t.__dict__.get("_first_held", 0) + len(r) + 64
        if held > 4 * t.n + 65_536:      # a few full row sets per table (its own size bounds the cache)
            cache.clear()
            held = len(r) + 64
        t.__dict__["_first_held"] = held
        cache[key] = r
    return r
