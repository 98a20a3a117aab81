"""The full-vocabulary mask: a vectorised walk of llama.cpp's candidate rejection, and its caches.

``llama_grammar_reject_candidates`` walks every candidate through every stack, one code point at a time. Here all
candidates that share a stack configuration at the same code-point depth move together as one numpy index array,
so the walk costs a few numpy operations per (stack, depth) pair instead of Python work per token.

On top of that, the adaptive token mask cache of XGrammar, adapted to llama.cpp's stack machine: for a stack whose
top is a character class, the part of the walk that stays within the top few stack elements (the *suffix*, see
``GrammarRules.split``: the top three elements plus any generated helper-rule elements under them) depends on the
suffix alone. :func:`local_info` runs that part once per suffix (with a sentinel standing for the rest of the
stack) and records which tokens it accepts for sure and, for the others, the remainder with which they would pop
into the rest of the stack ("uncertain"). At run time a stack costs one OR of packed bits plus a walk of the
uncertain remainders (usually few) through the actual rest of the stack. Suffix results are shared between grammars
whose reachable rules are identical (``GrammarRules.canonical_key``).

Rows of a :class:`~constrained.grammar.tokenindex.TokenTable` are sorted by length, longest first, so that at code point
depth ``d`` the candidates with nothing left are a tail of any sorted row set; ``TokenTable.col(d)`` holds the
code points at depth ``d``.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> from constrained.grammar.stacks import GrammarRules
    >>> from constrained.grammar.tokenindex import vocab_index
    >>> g = GrammarRules(ParsedGrammar((((T.CHAR, 97), (T.CHAR, 98), (T.END, 0)),), {"root": 0}, 0))
    >>> t = vocab_index(Vocabulary([b"a", b"ab", b"b"])).table
    >>> by_id(t, walk(g, t, g.initial_stacks())).tolist()
    [True, True, False]
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass

import numpy as np

from ..errors import GrammarLimitError
from .stacks import _ANY_HI as _ANY_CP
from .stacks import IMPORT_ERROR, PURE, TOKEN, TOKEN_NOT, GrammarRules, Stack, Stacks, _walk_ext  # noqa: F401
from .tokenindex import TokenTable

_ALL = None   # "every row of the table" at depth 0
# the extension (``_walk_ext``, ``PURE``, ``IMPORT_ERROR``) is loaded once, by the lower module stacks.py

COMPILED_HELPERS = True
"""Whether the compiled packing and class summaries are used where the extension is built (the tests turn them off
to compare against the numpy reference)."""


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


LOOP_MIN_ROWS = 256
"""Fewer candidate rows than this at a looping stack: the plain walk (the shortcut's set-up costs more)."""


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
        if _walk_ext is not None and COMPILED_HELPERS:
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
        if _walk_ext is not None and COMPILED_HELPERS:
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
    if _walk_ext is not None and COMPILED_HELPERS:
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


@dataclass(frozen=True)
class MatcherLimits:
    """Work bounds of the matcher: past them a :class:`~constrained.errors.GrammarLimitError` says which bound and
    how to raise it, instead of minutes of work.

    Work is counted in *row steps*: one candidate token looked at by one stack at one code point, plus a constant
    per (stack, depth) visit: the unit of ``llama_grammar_reject_candidates``, so a bound here is a bound on what
    llama.cpp's own walk would do. Set it on a compiled grammar with ``matcher.compiled.limits = MatcherLimits(...)``.

    >>> MatcherLimits().max_mask_work >= 100_000_000
    True
    """

    max_mask_work: int = 500_000_000     # row steps per mask (llama.cpp does ~10 ns of work per row step)
    max_stacks: int = 65_536             # stacks alive in one state (llama.cpp: 246 s to accept into 196,608)
    max_accept_work: int = 20_000_000    # stack steps to accept one token (about 2 s; see stacks.MAX_ACCEPT_WORK)


DEFAULT_MATCHER_LIMITS = MatcherLimits()

VISIT_COST = 1000
"""Row steps charged per (stack, depth) visit on top of its rows: the fixed cost of a few numpy calls."""


class WorkBudget:
    """A counter of row steps that raises :class:`GrammarLimitError` when ``limit`` is spent."""

    __slots__ = ("left", "limit", "looped", "rows", "spent_total", "visits")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit
        self.spent_total = 0
        self.rows = 0        # candidates looked at, summed over (stack, depth) visits (llama.cpp's unit)
        self.visits = 0      # (stack, depth) visits
        self.looped = 0      # rows decided at once by the loop shortcut (see GrammarRules.loop_exits)

    def spend(self, k: int) -> None:
        self.left -= k
        if self.left < 0:
            self.spent_total = self.limit - self.left
            raise GrammarLimitError(
                f"computing the token mask needs more than MatcherLimits.max_mask_work = {self.limit:,} row steps "
                "(many live parse stacks or an ambiguous grammar); raise it with "
                "`matcher.compiled.limits = MatcherLimits(max_mask_work=...)`")

    @property
    def spent(self) -> int:
        return self.limit - self.left


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


def walk(g: GrammarRules, t: TokenTable, stacks: Stacks, *, pops: list | None = None,
         work: WorkBudget | None = None, seed: np.ndarray | None = None, sure: list | None = None) -> np.ndarray:
    """Rows of ``t`` that some stack in ``stacks`` does not reject (``llama_grammar_reject_candidates``).

    The compiled walk (:mod:`constrained.grammar._walk`) where it is built and the trie ranges are off, else
    :func:`walk_py`, the reference: the same algorithm, order, results and work counters.
    """
    if work is None:
        work = WorkBudget(DEFAULT_MATCHER_LIMITS.max_mask_work)
    if _walk_ext is not None:
        return walk_kernel(g, t, stacks, pops=pops, work=work, seed=seed, sure=sure)
    return walk_py(g, t, stacks, pops=pops, work=work, seed=seed, sure=sure)


def _kernel(g: GrammarRules):  # noqa: ANN202
    """The compiled walk bound to ``g``'s stack machine (built once per rules object)."""
    k = g.__dict__.get("_walk_kernel")
    if k is None:
        classes = g.classes
        values = g.values
        k = g.__dict__["_walk_kernel"] = (_walk_ext.Kernel(array("i", g.types), g.bottom, TOKEN, TOKEN_NOT,
                                                            VISIT_COST),
                                          (g.next_stacks, g.loop_exits, lambda p: classes[p][:2], values.__getitem__,
                                           g.chain))
    return k


def _kernel_table(t: TokenTable) -> tuple:
    """The arrays of ``t`` the compiled walk reads (the per-depth columns only where built, as for the vocabulary)."""
    kt = t.__dict__.get("_kernel_table")
    if kt is None:
        c = np.ascontiguousarray
        cols = t.__dict__.get("_cols", {})
        cols = tuple(c(cols[d], dtype=np.int32) for d in range(len(t.longer)) if d in cols) \
            if t.inv is not None and all(d in cols for d in range(len(t.longer) - 1)) else ()
        kt = t.__dict__["_kernel_table"] = (c(t.ids, dtype=np.int64), c(t.rem, dtype=np.int64),
                                            c(t.val, dtype=np.int64), c(t.longer, dtype=np.int64), cols,
                                            c(t.flat, dtype=np.int64), c(t.start, dtype=np.int64),
                                            c(t.length, dtype=np.int64))
    return kt


def walk_kernel(g: GrammarRules, t: TokenTable, stacks: Stacks, *, pops: list | None = None,
                work: WorkBudget | None = None, seed: np.ndarray | None = None, sure: list | None = None
                ) -> np.ndarray:
    """:func:`walk_py` compiled: raises ImportError where the extension is not built."""
    if _walk_ext is None:
        raise ImportError("constrained.grammar._walk is not built (pip install -e . builds it)")
    if work is None:
        work = WorkBudget(DEFAULT_MATCHER_LIMITS.max_mask_work)
    if seed is not None:
        seed = np.ascontiguousarray(seed, dtype=bool)
    lex = None
    if t.lex is not None:
        lex = t.__dict__.get("_kernel_lex")
        if lex is None:
            lex = t.__dict__["_kernel_lex"] = (np.ascontiguousarray(t.lex[0], dtype=np.int64),
                                               tuple(np.ascontiguousarray(c, dtype=np.int32) for c in t.lex[1]),
                                               np.ascontiguousarray(t.cp0, dtype=np.int64),
                                               np.ascontiguousarray(t.order0, dtype=np.int64))
    kernel, grammar_calls = _kernel(g)
    acc, left, rows, visits, looped, kpops, ksure = kernel.walk(
        stacks, _kernel_table(t), work.left, LOOP_MIN_ROWS, KERNEL_RANGE_MIN_ROWS, KERNEL_RANGE_MAX_STACKS,
        RANGE_DEPTH, lex,
        seed, pops is not None, sure is not None, (*grammar_calls,
        lambda p: _first_rows_cached(g, p, t), lambda p: _all_in(g, p, t), lambda p: _loop_parts(g, p, t)))
    work.rows += rows
    work.visits += visits
    work.looped += looped
    work.left = left
    if acc is None:
        work.spend(0)         # out of work: the limit error
    if kpops is not None:
        pops.extend((np.frombuffer(b, dtype=np.int64), d) for b, d in kpops)
    if ksure is not None:
        sure.extend(ksure)
    return np.frombuffer(acc, dtype=bool)


def walk_py(g: GrammarRules, t: TokenTable, stacks: Stacks, *, pops: list | None = None,
            work: WorkBudget | None = None, seed: np.ndarray | None = None, sure: list | None = None) -> np.ndarray:
    """Rows of ``t`` that some stack in ``stacks`` does not reject (``llama_grammar_reject_candidates``), in Python.

    llama.cpp's own order, vectorised: the stacks are tried one after the other and each sees only the candidates
    the previous ones rejected; under a stack, the candidates matching its top go on together (one index array)
    through the stacks it leads to, and so on down the code points. A candidate is dropped as soon as one stack
    accepts it, so the work never exceeds llama.cpp's (``work`` counts it and raises past its limit).

    With ``pops`` given, a stack reduced to the sentinel ``(g.bottom,)`` is not looked into: the rows that reach it
    (not known to be accepted) and their depth are appended to ``pops`` as ``(rows, depth)``, and they count as
    rejected for the walk (a later stack may still accept them). Rows are positions in ``t`` (see :func:`by_id`).
    ``seed`` (bool over rows) marks rows already known to be accepted: they are not walked again. With ``sure``
    given, the packed id-order bits of row sets accepted wholesale (loop shortcut) are appended to it as well.
    """
    n = t.n
    if work is None:
        work = WorkBudget(DEFAULT_MATCHER_LIMITS.max_mask_work)
    need = 2 * len(t.longer) + 200
    if sys.getrecursionlimit() < need + 800:       # the walk recurses once per code point of the longest token
        sys.setrecursionlimit(need + 800)
    acc = np.zeros(n, dtype=bool) if seed is None else np.array(seed, dtype=bool)
    k0 = int(t.longer[0]) if len(t.longer) else 0   # rows k0.. have no code points
    rem_t, val_t = t.rem[k0:], t.val[k0:]
    none_left = rem_t == 0
    types, values, bottom = g.types, g.values, g.bottom
    # trie ranges for a few stacks (a position's walk); many stacks (a wide alternative walked directly) share the
    # pruning of the row walk instead: rows accepted by one stack are not looked at by the next
    ranges = t.lex is not None and t.n >= RANGE_MIN_ROWS and len(stacks) <= RANGE_MAX_STACKS
    for s in stacks:
        work.spend(VISIT_COST)
        if not s:      # an empty stack rejects every candidate with something left
            acc[k0:] |= none_left
            continue
        top = s[-1]
        ty = types[top]
        if top == bottom:
            acc[k0:] |= none_left
            if pops is not None:
                pops.append((np.flatnonzero(~acc), 0))
            continue
        if ty == TOKEN or ty == TOKEN_NOT:        # decided by id (llama_grammar_match_token)
            acc[k0:] |= none_left
            ids = t.ids[:k0]
            acc[:k0] |= (ids == values[top]) if ty == TOKEN else (ids != values[top])
            work.spend(n)
            work.rows += n
            work.visits += 1
            continue
        acc[k0:] |= none_left | _partial_match(g, top, val_t, rem_t)
        exits = g.loop_exits(s) if k0 >= LOOP_MIN_ROWS else None
        if exits is not None:     # rows wholly in the loop's class: decided at their end (loop_exits)
            clean, clean_bits, pending, matched = _loop_parts(g, top, t)
            if sure is not None and clean_bits is not None:
                sure.append(clean_bits)
            acc |= clean
            e = pending[~acc[pending]]
            acc[e[_loop_end_ok(g, t, top, exits, e)]] = True
            work.looped += k0 - len(matched)
            work.spend(n // 64)
        elif (k0 >= LOOP_MIN_ROWS and len(_first_rows_cached(g, top, t)) >= LOOP_MIN_ROWS
              and (chain := g.chain(s)) is not None):
            # rows wholly in a bounded repetition's class: decided by their length (GrammarRules.chain)
            # from the loop shortcut's cached parts of the class: rows from ``lim`` on have at most len(levels)
            # code points (rows are sorted by length)
            levels, ended = chain
            clean, clean_bits, pending, rest = _loop_parts(g, top, t)
            lim = int(t.longer[len(levels)]) if len(levels) < len(t.longer) else 0
            if lim == 0:
                if sure is not None and clean_bits is not None:
                    sure.append(clean_bits)
                acc |= clean
            else:
                acc[lim:] |= clean[lim:]
            e = pending[pending >= lim]
            e = e[~acc[e]]
            acc[e[_chain_end_ok(g, t, levels, e, t.length[e])]] = True
            matched = rest if ended or lim == 0 else np.union1d(rest, np.flatnonzero(_all_in(g, top, t)[:lim]))
            work.looped += k0 - len(matched)
            work.spend(n // 64)
        else:
            cps = _single_cps(g, top) if ranges else None
            if cps is not None:           # the first code point's rows, as trie ranges
                work.rows += n - k0
                work.visits += 1
                nxt = g.next_stacks(s)
                col0 = t.lex[1][0]
                for c in cps:
                    a, b = int(np.searchsorted(col0, c, "left")), int(np.searchsorted(col0, c, "right"))
                    if b > a:
                        i = int(np.searchsorted(t.cp0, c, "left"))
                        asc = t.order0[i:i + b - a]       # the same rows in ascending order
                        for s2 in nxt:
                            _acc_range(g, t, s2, a, b, 1, asc, acc, pops, work)
                continue
            matched = _first_rows_cached(g, top, t)
        matched = matched[~acc[matched]]
        work.rows += len(matched) + (n - k0)
        work.visits += 1
        if len(matched):
            sub = _acc_stacks(g, t, g.next_stacks(s), matched, 1, pops, work)
            acc[matched[sub]] = True
    return acc


RANGE_MIN_ROWS = 1 << 62
"""Trie ranges smaller than this are walked row by row. Off by default: measured on gemma-4's JSON-schema walks
(``bench_grammar.py`` schemas, 1,016 first passes) the row walk's pruning wins overall (143 ms in all against 202 ms
with ranges from 512 rows; the ambiguous grammar 9 ms against 88 ms); the tests run the range walk with it at 0."""

KERNEL_RANGE_MIN_ROWS = 512
""":data:`RANGE_MIN_ROWS` of the compiled walk: there a slice costs a few binary searches and no numpy calls, so the
trie ranges pay from 512 rows (gemma-4, ``bench_grammar.py`` schemas: a space-led position's first walk
0.8 -> 0.3 ms, the half of the vocabulary that starts with a space no longer scanned row by row)."""

KERNEL_RANGE_MAX_STACKS = 1 << 30
""":data:`RANGE_MAX_STACKS` of the compiled walk: no bound (a slice costs binary searches there, so many stacks
over one slice cost little: the ambiguous grammar's 192 stacks after six spaces, 96 -> 2 ms)."""

RANGE_DEPTH = 2
"""Trie ranges are followed to this depth, then walked row by row (which prunes the rows one stack accepted from the
next: without it an ambiguous grammar's paths would each see the whole slice)."""

RANGE_MAX_STACKS = 16
"""Walks of more stacks than this do not use trie ranges (an enum of 2,000 strings: 6x slower with them)."""


def _single_cps(g: GrammarRules, p: int) -> tuple[int, ...] | None:
    """The code points of a positive class of at most 8 single code points, else None."""
    positive, items, _ = g.classes[p]
    if not positive or len(items) > 8 or any(lo != hi for lo, hi in items):
        return None
    return tuple(sorted({lo for lo, _ in items}))


def _acc_range(g: GrammarRules, t: TokenTable, s: Stack, a: int, b: int, d: int, asc: np.ndarray | None,
               acc: np.ndarray, pops: list | None, work: WorkBudget) -> None:
    """``llama_grammar_reject_candidates_for_stack`` for the rows sharing one prefix of ``d`` code points: the slice
    ``a:b`` of the table's trie order (``asc``: the same rows in ascending order, if at hand). Accepted rows are set
    in ``acc`` (bool over rows; rows already set there are not walked again). A class is matched against the slice by
    binary search: a single code point leads to a narrower slice one code point deeper; other spans, small slices and
    stacks topped by a token, the sentinel, a loop or nothing are walked row by row (:func:`_acc_stack`)."""
    work.spend(VISIT_COST)
    work.visits += 1
    order, cols = t.lex
    top = s[-1] if s else -1
    if (d >= len(cols) or b - a < RANGE_MIN_ROWS or not s or top == g.bottom or g.types[top] == TOKEN
            or g.types[top] == TOKEN_NOT or g.loop_exits(s) is not None):
        _rows_walk(g, t, s, np.sort(order[a:b]) if asc is None else asc, d, acc, pops, work)
        return
    col = cols[d]
    e = int(np.searchsorted(col[a:b], 0))        # the rows that end here come first (-1)
    c = col[a + e:b]
    positive, items, _ = g.classes[top]
    spans = sorted((int(np.searchsorted(c, lo, "left")), int(np.searchsorted(c, hi, "right"))) for lo, hi in items)
    if not positive:
        out, at = [], 0
        for i0, i1 in spans:
            if i0 > at:
                out.append((at, i0))
            at = max(at, i1)
        spans = out + ([(at, len(c))] if at < len(c) else [])
    multi = [(i0, i1) for i0, i1 in spans if i1 > i0 and c[i0] != c[i1 - 1]]
    if asc is not None and sum(i1 - i0 for i0, i1 in multi) * 4 > len(c):
        _rows_walk(g, t, s, asc, d, acc, pops, work)        # mostly wide spans: a class test over the rows
        return
    work.rows += e                  # the slice itself costs binary searches, not row steps
    if e:
        er = order[a:a + e]
        er = er[~acc[er]]
        rem = t.rem[er]
        acc[er[(rem == 0) | _partial_match(g, top, t.val[er], rem)]] = True
    nxt = g.next_stacks(s)
    for i0, i1 in spans:
        if i1 <= i0:
            continue
        if c[i0] == c[i1 - 1] and d + 1 < RANGE_DEPTH:     # one code point: one slice again, one deeper
            for s2 in nxt:
                _acc_range(g, t, s2, a + e + i0, a + e + i1, d + 1, None, acc, pops, work)
        else:
            rows = np.sort(order[a + e + i0:a + e + i1])
            rows = rows[~acc[rows]]
            if len(rows):
                work.spend(len(rows))
                acc[rows[_acc_stacks(g, t, nxt, rows, d + 1, pops, work)]] = True


def _rows_walk(g: GrammarRules, t: TokenTable, s: Stack, rows: np.ndarray, d: int, acc: np.ndarray,
               pops: list | None, work: WorkBudget) -> None:
    rows = rows[~acc[rows]]
    if len(rows):
        acc[rows[_acc_stack(g, t, s, rows, d, pops, work)]] = True


def _acc_stacks(g: GrammarRules, t: TokenTable, stacks: Stacks, rows: np.ndarray, d: int, pops: list | None,
                work: WorkBudget) -> np.ndarray:
    """``llama_grammar_reject_candidates`` at code point depth ``d``, as a bool over ``rows`` (True = accepted)."""
    out: np.ndarray | None = None
    idx = None
    cur = rows
    for s in stacks:
        a = _acc_stack(g, t, s, cur, d, pops, work)
        if out is None:
            out = a
            if len(stacks) == 1:
                return out
            idx = np.flatnonzero(~a)
            cur = rows[idx]
        else:
            out[idx[a]] = True
            keep = ~a
            idx = idx[keep]
            cur = cur[keep]
        if not len(cur):
            break
    return out if out is not None else np.zeros(len(rows), dtype=bool)


def _acc_stack(g: GrammarRules, t: TokenTable, s: Stack, rows: np.ndarray, d: int, pops: list | None,
               work: WorkBudget) -> np.ndarray:
    """``llama_grammar_reject_candidates_for_stack`` at depth ``d``, as a bool over ``rows`` (True = accepted).

    ``rows`` ascending, so their lengths (all >= d) are non-increasing and the ended ones are a tail."""
    m = len(rows)
    work.spend(m + VISIT_COST)
    work.rows += m
    work.visits += 1
    k = int(np.searchsorted(rows, t.longer[d])) if d < len(t.longer) else m
    a = np.zeros(m, dtype=bool)
    types = g.types
    top = s[-1] if s else -1
    if k < m:                                     # candidates with no code points left
        e = rows[k:]
        rem = t.rem[e]
        if s and top != g.bottom and types[top] != TOKEN and types[top] != TOKEN_NOT:
            a[k:] = (rem == 0) | _partial_match(g, top, t.val[e], rem)
        else:
            a[k:] = rem == 0
    if not s or k == 0:
        return a
    if top == g.bottom:
        if pops is not None:
            pops.append((rows[~a], d))
        return a
    ty = types[top]
    cont = rows[:k]
    if ty == TOKEN or ty == TOKEN_NOT:
        ids = t.ids[cont]
        a[:k] = (ids == g.values[top]) if ty == TOKEN else (ids != g.values[top])
        return a
    exits = g.loop_exits(s) if k >= LOOP_MIN_ROWS else None
    if exits is not None:         # rows wholly in the loop's class: decided at their end (loop_exits)
        inside = _all_in(g, top, t)[cont]
        ia = np.flatnonzero(inside)
        a[ia] = _loop_end_ok(g, t, top, exits, cont[ia])
        work.looped += len(ia)
        rest = np.flatnonzero(~inside)
        hit = rest[_class_match(g, top, t.col(d)[cont[rest]])]
    else:
        hm = _class_match(g, top, t.col(d)[cont])
        if (k >= LOOP_MIN_ROWS and np.count_nonzero(hm) >= LOOP_MIN_ROWS
                and (chain := g.chain(s)) is not None):
            levels, ended = chain      # rows wholly in the class: decided by their length (GrammarRules.chain)
            left = t.length[cont] - d
            dec = _all_in(g, top, t)[cont] & ((left <= len(levels)) | ended)
            di = np.flatnonzero(dec)
            a[di] = _chain_end_ok(g, t, levels, cont[di], left[di])
            work.looped += len(di)
            hm &= ~dec
        hit = np.flatnonzero(hm)
    if len(hit):
        sub = _acc_stacks(g, t, g.next_stacks(s), cont[hit], d + 1, pops, work)
        a[hit[sub]] = True
    return a


def walk_bfs(g: GrammarRules, t: TokenTable, stacks: Stacks, *, pops: list | None = None) -> np.ndarray:
    """The breadth-first walk (every distinct stack at each depth once, candidates never dropped early): kept as an
    independent check of :func:`walk` in the tests; it is exponential where many stacks are live."""
    n = t.n
    acc = np.zeros(n, dtype=bool)
    frontier: dict[Stack, list] = {}
    for s in stacks:
        frontier.setdefault(s, []).append(_ALL)
    types, values = g.types, g.values
    bottom = g.bottom
    longer = t.longer
    depth = 0
    while frontier:
        nxt: dict[Stack, list] = {}
        prep: dict[int, list] = {}     # per row set shared by several stacks: the split and gathers, done once
        keep: list = []                # keeps the keyed arrays alive while their ids are in use
        for stack, parts in frontier.items():
            if any(p is _ALL for p in parts):
                rows = _ALL
            else:
                rows = parts[0] if len(parts) == 1 else _ascending(parts, n)
            if stack and stack[-1] == bottom:
                if pops is not None:
                    pops.append((np.arange(n) if rows is _ALL else rows, depth))
                continue
            key = -1 if rows is _ALL else id(rows)
            pr = prep.get(key)
            if pr is None:
                if rows is _ALL:
                    k = int(longer[0])
                    ended, cont = np.arange(k, n), _ALL
                else:   # rows ascending = lengths non-increasing, all >= depth: the ended ones are a tail
                    k = int(np.searchsorted(rows, longer[depth])) if depth < len(longer) else len(rows)
                    ended, cont = rows[k:], rows[:k]
                pr = [ended, t.rem[ended], t.val[ended], cont, None]
                if len(parts) == 1:
                    prep[key] = pr
                    keep.append(parts[0])
            ended, rem_e, val_e, cont, cps = pr
            # candidates with no code points left
            if len(ended):
                if stack and types[stack[-1]] not in (TOKEN, TOKEN + 1):
                    ok = (rem_e == 0) | _partial_match(g, stack[-1], val_e, rem_e)
                else:
                    ok = rem_e == 0
                acc[ended[ok]] = True
            if not stack:
                continue
            top = stack[-1]
            ty = types[top]
            if ty == TOKEN or ty == TOKEN + 1:       # TOKEN / TOKEN_NOT: decided by id
                rows = np.arange(int(longer[0])) if cont is _ALL else cont
                ids = t.ids[rows]
                acc[rows[(ids == values[top]) if ty == TOKEN else (ids != values[top])]] = True
                continue
            if cont is _ALL:
                matched = _first_rows(g, top, t)
            else:
                if not len(cont):
                    continue
                if cps is None:
                    cps = pr[4] = t.col(depth)[cont]
                matched = cont[_class_match(g, top, cps)]
            if not len(matched):
                continue
            for s in g.next_stacks(stack):
                nxt.setdefault(s, []).append(matched)
        frontier = nxt
        depth += 1
    return acc


@dataclass
class LocalInfo:
    """What the stack ``(…, p)`` accepts whatever lies below ``p`` (see the module docstring)."""

    bits: np.ndarray              # packed bool over token ids (np.packbits): accepted for sure
    unc_ids: np.ndarray           # token ids that pop into the rest of the stack, one per row of ``keys``
    keys: TokenTable | None       # their remainders (code points from the pop on, final partial state)
    unc_bits: np.ndarray          # packed bool over token ids: the ids in ``unc_ids``


def local_info(g: GrammarRules, t: TokenTable, suffix: Stack, work: WorkBudget | None = None) -> LocalInfo:
    """Walk the table from the stack ``(sentinel, *suffix)`` (the XGrammar-style per-position precomputation)."""
    pops: list = []
    wholesale: list = []
    acc = walk(g, t, g.advance((g.bottom, *suffix)), pops=pops, work=work, sure=wholesale)
    # a pop with nothing left and no pending sequence is accepted by any stack below
    rows_l, depth_l = [], []
    for rows, depth in pops:
        rows = rows[~acc[rows]]
        if not len(rows):
            continue
        sure = (t.length[rows] == depth) & (t.rem[rows] == 0)
        acc[rows[sure]] = True
        rows = rows[~sure]
        if len(rows):
            rows_l.append(rows)
            depth_l.append(np.full(len(rows), depth, dtype=np.int64))
    keys = None
    unc_rows = np.empty(0, dtype=np.int64)
    if rows_l:
        unc_rows = np.concatenate(rows_l)
        depths = np.concatenate(depth_l)
        keep = ~acc[unc_rows]
        unc_rows, depths = unc_rows[keep], depths[keep]
        if len(unc_rows):
            keys = t.shifted(unc_rows, depths)
            unc_rows = unc_rows[keys.perm]
    unc_ids = t.ids[unc_rows]
    if len(unc_ids):                      # over token ids directly (a scatter of the few uncertain ones)
        unc_bits = pack_ids(unc_ids, t.n)
    else:
        unc_bits = _zero_bits(t.n)
    if wholesale:                         # the wholesale-accepted rows come as bits already: pack only the rest
        for outside, _ in wholesale:
            acc &= outside
        bits = pack_by_id(t, acc)
        for _, b in wholesale:
            bits |= b
    else:
        bits = pack_by_id(t, acc)
    return LocalInfo(bits, unc_ids, keys, unc_bits)


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
