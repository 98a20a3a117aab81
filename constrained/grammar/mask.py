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
    >>> from constrained.grammar.packing import by_id
    >>> g = GrammarRules(ParsedGrammar((((T.CHAR, 97), (T.CHAR, 98), (T.END, 0)),), {"root": 0}, 0))
    >>> t = vocab_index(Vocabulary([b"a", b"ab", b"b"])).table
    >>> by_id(t, walk(g, t, g.initial_stacks())).tolist()
    [True, True, False]

The parts live in lower modules (import them from there): :mod:`.limits` (``MatcherLimits``, ``WorkBudget``),
:mod:`.packing` (rows <-> token-id bits), :mod:`.charclass` (the table through one character class),
:mod:`.walk_python` (the Python reference walk ``walk_py`` and ``walk_bfs``) and :mod:`.stacks` (the stack machine
and the compiled extension); this module keeps the walk's driver (``walk``, the compiled ``walk_kernel``) and the
per-suffix :func:`local_info`. The walk's settings (``LOOP_MIN_ROWS``, ``RANGE_*``; ``COMPILED_HELPERS``) live in
the modules that read them, walk_python and packing (one value each); the compiled walk's own two are below.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from . import walk_python as _walk_python
from .charclass import _all_in, _first_rows_cached, _loop_parts
from .limits import DEFAULT_MATCHER_LIMITS, VISIT_COST, WorkBudget
from .packing import _zero_bits, pack_by_id, pack_ids
from .stacks import TOKEN, TOKEN_NOT, GrammarRules, Stack, Stacks, _walk_ext
from .tokenindex import TokenTable
from .walk_python import walk_py


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
        stacks, _kernel_table(t), work.left, _walk_python.LOOP_MIN_ROWS, KERNEL_RANGE_MIN_ROWS, KERNEL_RANGE_MAX_STACKS,
        _walk_python.RANGE_DEPTH, lex,
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


KERNEL_RANGE_MIN_ROWS = 512
""":data:`RANGE_MIN_ROWS` of the compiled walk: there a slice costs a few binary searches and no numpy calls, so the
trie ranges pay from 512 rows (gemma-4, ``bench_grammar.py`` schemas: a space-led position's first walk
0.8 -> 0.3 ms, the half of the vocabulary that starts with a space no longer scanned row by row)."""

KERNEL_RANGE_MAX_STACKS = 1 << 30
""":data:`RANGE_MAX_STACKS` of the compiled walk: no bound (a slice costs binary searches there, so many stacks
over one slice cost little: the ambiguous grammar's 192 stacks after six spaces, 96 -> 2 ms)."""


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
    # a pop with nothing left and no pending sequence is accepted by any stack below; the others are uncertain
    # unless accepted some other way (all the pops at once: the same rows in the same order as one at a time)
    keys = None
    unc_rows = np.empty(0, dtype=np.int64)
    pops = [(rows, depth) for rows, depth in pops if len(rows)]
    if pops:
        rows = np.concatenate([r for r, _ in pops]) if len(pops) > 1 else pops[0][0]
        depths = np.repeat(np.array([d for _, d in pops], dtype=np.int64), [len(r) for r, _ in pops])
        sure = (t.length[rows] == depths) & (t.rem[rows] == 0)
        acc[rows[sure]] = True
        unc_rows, depths = rows[~sure], depths[~sure]
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
