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

from dataclasses import dataclass

import numpy as np

from .stacks import TOKEN, GrammarRules, Stack, Stacks
from .tokenindex import TokenTable

_ALL = None   # "every row of the table" at depth 0


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


def _first_rows(g: GrammarRules, p: int, t: TokenTable) -> np.ndarray:
    """Rows whose first code point the class at ``p`` matches, from the table's sorted index (no full scan)."""
    positive, items, _ = g.classes[p]
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


def walk(g: GrammarRules, t: TokenTable, stacks: Stacks, *, pops: list | None = None) -> np.ndarray:
    """Rows of ``t`` that some stack in ``stacks`` does not reject (``llama_grammar_reject_candidates``).

    With ``pops`` given, a stack reduced to the sentinel ``(g.bottom,)`` is not looked into: the rows that reach it
    and their depth are appended to ``pops`` as ``(rows, depth)``. Rows are positions in ``t`` (see
    :func:`by_id`).
    """
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


def local_info(g: GrammarRules, t: TokenTable, suffix: Stack) -> LocalInfo:
    """Walk the table from the stack ``(sentinel, *suffix)`` (the XGrammar-style per-position precomputation)."""
    pops: list = []
    acc = walk(g, t, g.advance((g.bottom, *suffix)), pops=pops)
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
    unc = np.zeros(t.n, dtype=bool)
    unc[unc_rows] = True
    return LocalInfo(np.packbits(by_id(t, acc)), t.ids[unc_rows], keys, np.packbits(by_id(t, unc)))


def by_id(t: TokenTable, acc: np.ndarray) -> np.ndarray:
    """A bool array over the table's rows as one over token ids (the vocabulary table holds every id)."""
    out = np.zeros(t.n, dtype=bool)
    out[t.ids] = acc
    return out
