"""The Python reference walk of llama.cpp's candidate rejection (``llama_grammar_reject_candidates``) over a
:class:`~constrained.grammar.tokenindex.TokenTable`: :func:`walk_py`, which the compiled walk
(:func:`constrained.grammar.mask.walk_kernel`) reproduces step for step, and :func:`walk_bfs`, an independent
breadth-first check of both. The thresholds here (``LOOP_MIN_ROWS``, ``RANGE_*``) are read by the compiled walk too.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> from constrained.grammar.stacks import GrammarRules
    >>> from constrained.grammar.tokenindex import vocab_index
    >>> from constrained.grammar.packing import by_id
    >>> g = GrammarRules(ParsedGrammar((((T.CHAR, 97), (T.CHAR, 98), (T.END, 0)),), {"root": 0}, 0))
    >>> t = vocab_index(Vocabulary([b"a", b"ab", b"b"])).table
    >>> by_id(t, walk_py(g, t, g.initial_stacks())).tolist(), by_id(t, walk_bfs(g, t, g.initial_stacks())).tolist()
    ([True, True, False], [True, True, False])
"""

from __future__ import annotations

import sys

import numpy as np

from .charclass import (
    _all_in,
    _ascending,
    _chain_end_ok,
    _class_match,
    _first_count,
    _first_rows,
    _first_rows_cached,
    _loop_end_ok,
    _loop_parts,
    _partial_match,
)
from .limits import DEFAULT_MATCHER_LIMITS, VISIT_COST, WorkBudget
from .stacks import TOKEN, TOKEN_NOT, GrammarRules, Stack, Stacks
from .tokenindex import TokenTable

_ALL = None   # "every row of the table" at depth 0


LOOP_MIN_ROWS = 256
"""Fewer candidate rows than this at a looping stack: the plain walk (the shortcut's set-up costs more)."""


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
        # a few single code points go to the trie ranges even where they make a chain (a space after a space): the
        # chain shortcut decides the rows wholly in the class, there few, and walks the rest row by row
        cps = _single_cps(g, top) if ranges and exits is None else None
        if exits is not None:     # rows wholly in the loop's class: decided at their end (loop_exits)
            clean, clean_bits, pending, matched = _loop_parts(g, top, t)
            if sure is not None and clean_bits is not None:
                sure.append(clean_bits)
            acc |= clean
            e = pending[~acc[pending]]
            acc[e[_loop_end_ok(g, t, top, exits, e)]] = True
            work.looped += k0 - len(matched)
            work.spend(n // 64)
        elif (cps is None and k0 >= LOOP_MIN_ROWS and _first_count(g, top, t) >= LOOP_MIN_ROWS
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
            if k0 >= LOOP_MIN_ROWS and _same_class_loop(g, s, top):
                # a class followed by a loop on the same class (x x*, as [a-z]+): a row wholly in the class with
                # no pending sequence is accepted by the loop whatever its exits (as in the looping branch)
                clean, clean_bits, _, _ = _loop_parts(g, top, t)
                if sure is not None and clean_bits is not None:
                    sure.append(clean_bits)
                acc |= clean
                work.spend(n // 64)
            matched = _first_rows_cached(g, top, t)
        matched = matched[~acc[matched]]
        work.rows += len(matched) + (n - k0)
        work.visits += 1
        if len(matched):
            sub = _acc_stacks(g, t, g.next_stacks(s), matched, 1, pops, work)
            acc[matched[sub]] = True
    return acc


def _same_class_loop(g: GrammarRules, s: Stack, top: int) -> bool:
    """Whether a stack after the class top of ``s`` loops (``loop_exits``) on the same class as ``top``."""
    want = g.classes[top][:2]
    for q in g.next_stacks(s):
        if q and q[-1] != g.bottom and g.types[q[-1]] not in (TOKEN, TOKEN_NOT) \
                and g.classes[q[-1]][:2] == want and g.loop_exits(q) is not None:
            return True
    return False


RANGE_MIN_ROWS = 1 << 62
"""Trie ranges smaller than this are walked row by row. Off by default: measured on gemma-4's JSON-schema walks
(``bench_grammar.py`` schemas, 1,016 first passes) the row walk's pruning wins overall (143 ms in all against 202 ms
with ranges from 512 rows; the ambiguous grammar 9 ms against 88 ms); the tests run the range walk with it at 0."""

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
