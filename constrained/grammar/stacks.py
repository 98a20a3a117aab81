"""llama.cpp's grammar stack machine, ported exactly (src/llama-grammar.cpp at 0c1e57098).

A *position* is an index into the concatenation of all rules' element vectors (llama.cpp's element pointer); a
*stack* is a tuple of positions with the top last; the state of a grammar is a tuple of stacks (in llama.cpp's
order) plus the partial UTF-8 state. This module is the reference that the fast mask in :mod:`constrained.grammar.mask` is
checked against, and it is what accepting a token runs.

Example:
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> g = GrammarRules(ParsedGrammar(((( T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0))
    >>> g.initial_stacks()
    ((0,),)
    >>> g.accept_token(g.initial_stacks(), (0, 0), 5, [97])
    (((),), (0, 0))
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import weakref
from array import array
from operator import itemgetter

import numpy as np

from ..errors import GrammarLimitError, GrammarStateError
from .ir import ElementType, ParsedGrammar, endless_expansion_index, left_recursion_index

END, ALT, RULE_REF = int(ElementType.END), int(ElementType.ALT), int(ElementType.RULE_REF)
CHAR, CHAR_NOT, CHAR_RNG_UPPER = int(ElementType.CHAR), int(ElementType.CHAR_NOT), int(ElementType.CHAR_RNG_UPPER)
CHAR_ALT, CHAR_ANY = int(ElementType.CHAR_ALT), int(ElementType.CHAR_ANY)
TOKEN, TOKEN_NOT = int(ElementType.TOKEN), int(ElementType.TOKEN_NOT)
BOTTOM_TYPE = 99           # a sentinel position: "the rest of the stack" (used by the mask cache)
_CLASS = (CHAR, CHAR_NOT, CHAR_ANY)
_TERMINAL = (CHAR, CHAR_NOT, CHAR_ANY, TOKEN, TOKEN_NOT, BOTTOM_TYPE)
_ANY_HI = 0xFFFFFFFF

Stack = tuple[int, ...]
Stacks = tuple[Stack, ...]
Partial = tuple[int, int]   # (value, n_remain)


_RULES_SERIAL = itertools.count()

PURE = os.environ.get("CONSTRAINED_PURE_PYTHON", "") not in ("", "0")
"""``CONSTRAINED_PURE_PYTHON=1``: the compiled helpers (:mod:`constrained.grammar._walk`) are not used even where
they are built (:mod:`constrained.grammar.mask` reads the same switch)."""

IMPORT_ERROR: ImportError | None = None
_walk_ext = None
if not PURE:
    try:     # the package's one loader of its extension: charclass, packing and mask read ``_walk_ext`` from here
        from . import _walk as _walk_ext
    except ImportError as e:       # not built: the Python reference does the work
        IMPORT_ERROR = e

COMPILED_DIGEST = True
"""Whether :meth:`GrammarRules._closure_digest` uses the compiled byte stream where it is built (the tests turn it
off to compare against the Python reference, :meth:`GrammarRules._closure_bytes_py`)."""

COMPILED_ADVANCE = True
"""Whether :meth:`GrammarRules.advance` uses the compiled expansion where it is built (the tests turn it off to
compare against the Python reference, :meth:`GrammarRules.advance_py`)."""

CANON_MAX_ELEMENTS = 1024
"""Suffixes whose reachable rules hold more elements than this are not shared between grammars: the structural
key would cost more to build than it saves (their per-suffix walks are keyed on the grammar instead)."""


CHAIN_MAX = 64
"""Links of a bounded repetition followed by :meth:`GrammarRules.chain` (more than any token's code points; a
compiled grammar lowers its rules' ``chain_max`` to its vocabulary's longest token: no candidate needs more)."""


MAX_STACKS = 65_536
"""Default bound on the stacks one state may hold (``MatcherLimits.max_stacks`` sets it per compiled grammar)."""


MAX_ACCEPT_WORK = 20_000_000
"""Default bound on the stack steps (one stack one code point leads to) accepting one token or byte string may take
(``MatcherLimits.max_accept_work``): about 2 s of work here; the fuzzer's `[^\n]{0,3}{0,300}` then 'aaa' takes
81M (8 s; llama.cpp's own loop is the same algorithm)."""


def _too_many(limit: int, where: str) -> GrammarLimitError:
    return GrammarLimitError(
        f"the grammar state holds more than MatcherLimits.max_stacks = {limit:,} parse stacks ({where}): the "
        "grammar is ambiguous (llama.cpp would keep them all and slow down to minutes per token); raise it with "
        "`matcher.compiled.limits = MatcherLimits(max_stacks=...)`")


class BoundedMemo(dict):
    """A memo of stack operations bounded by the number of stack positions it holds (keys and results).

    When ``budget`` would be exceeded the memo is emptied (amortised O(1)); ``stats()`` counts hits, misses and
    clears. Memory is then O(budget) whatever the grammar and however deep its stacks grow.

    >>> m = BoundedMemo("demo", budget=16)
    >>> m.put((1, 2), ((3,),)); m.put((4, 5), ()); len(m), m.stats()["clears"]
    (1, 1)
    """

    def __init__(self, name: str, budget: int = 1 << 19) -> None:
        super().__init__()
        self.name = name
        self.budget = budget
        self.held = 0
        self.hits = self.misses = self.clears = 0

    def put(self, key: tuple, value: tuple, cost: int | None = None) -> None:
        if cost is None:
            cost = 4 + len(key) + sum(len(v) + 4 if isinstance(v, tuple) else 1 for v in value)
        if self.held + cost > self.budget:
            super().clear()
            self.held = 0
            self.clears += 1
            if cost > self.budget:
                return
        self[key] = value
        self.held += cost

    def clear(self) -> None:
        super().clear()
        self.held = 0

    def stats(self) -> dict[str, int]:
        return {"entries": len(self), "held": self.held, "budget": self.budget, "hits": self.hits,
                "misses": self.misses, "clears": self.clears}


class _Classes:
    """Character classes by position, compiled on first use: ``(positive, ((lo, hi), ...), position after)``."""

    def __init__(self, rules: GrammarRules) -> None:
        self.rules = rules
        self.done: dict[int, tuple[bool, tuple[tuple[int, int], ...], int]] = {}

    def __contains__(self, p: object) -> bool:
        return isinstance(p, int) and 0 <= p < len(self.rules.types) and self.rules.types[p] in _CLASS

    def __getitem__(self, p: int) -> tuple[bool, tuple[tuple[int, int], ...], int]:
        c = self.done.get(p)
        if c is None:
            if p not in self:
                raise KeyError(p)
            c = self.done[p] = self.rules._compile_class(p)
        return c

    def get(self, p: int, default: object = None) -> object:
        return self[p] if p in self else default


class _AsciiTables(dict):
    """Per class position, whether each ASCII code point matches (built on first use)."""

    def __init__(self, rules: GrammarRules) -> None:
        super().__init__()
        self.rules = rules

    def __missing__(self, p: int) -> bytes:
        t = self[p] = bytes(self.rules.match_char(p, c) for c in range(128))
        return t


class _RuleOf:
    """``rule_of[p]``: the rule id of position ``p`` (-1 for the sentinel and after it), by binary search over the
    rules' start positions (no per-position table: a 4M-element grammar would need 32 MB)."""

    __slots__ = ("starts", "total")

    def __init__(self, starts: list[int], total: int) -> None:
        self.starts, self.total = starts, total

    def __getitem__(self, p: int) -> int:
        if p >= self.total:
            return -1
        return bisect.bisect_right(self.starts, p) - 1

    def __len__(self) -> int:
        return self.total + 2


class GrammarRules:
    """The flat element vectors of a :class:`ParsedGrammar` and the exact stack operations on them."""

    def __init__(self, parsed: ParsedGrammar) -> None:
        self.chain_max = CHAIN_MAX
        rules = parsed.rules
        n_rules = len(rules)
        chain = itertools.chain.from_iterable
        # as llama_grammar_init_impl: each rule copied up to its first END, then END. Rules from the parser end with
        # their only END: then the flat concatenation is the layout (no Python loop per element, one per rule)
        types: list[int] = list(map(itemgetter(0), chain(rules)))
        if types.count(END) == n_rules and all(r and r[-1][0] == END for r in rules):
            values: list[int] = list(map(itemgetter(1), chain(rules)))
            self.rule_start = [0, *itertools.accumulate(map(len, rules[:-1]))] if n_rules else []
        else:
            types, values = [], []
            self.rule_start = []
            for rule in rules:
                self.rule_start.append(len(types))
                if rule:
                    kinds = list(map(itemgetter(0), rule))
                    k = kinds.index(END) if END in kinds else len(kinds)
                    types += kinds[:k]
                    values += list(map(itemgetter(1), rule[:k]))
                types.append(END)
                values.append(0)
        if set(map(type, types)) - {int}:          # IntEnum members (hand-built rules) become plain ints
            types = list(map(int, types))
        if set(map(type, values)) - {int}:
            values = list(map(int, values))
        total = len(types)
        if RULE_REF in types:
            refs = np.array(values, dtype=np.int64)[np.array(types, dtype=np.int64) == RULE_REF]
            bad = refs[(refs < 0) | (refs >= n_rules)]
            if len(bad):
                raise GrammarStateError(f"rule reference {int(bad[0])} out of range ({n_rules} rules)")
        if not 0 <= parsed.root_id < n_rules:
            raise GrammarStateError(f"root rule {parsed.root_id} out of range ({n_rules} rules)")
        bad = left_recursion_index(parsed.rules)     # llama_grammar_init_impl refuses these
        if bad is not None:
            raise GrammarStateError(f"unsupported grammar, left recursion detected for nonterminal at index {bad}")
        bad = endless_expansion_index(parsed.rules, parsed.root_id)   # llama.cpp would expand these forever
        if bad is not None:
            raise GrammarStateError(f"left recursion through rules that can match the empty string at index {bad}")
        self.bottom = total            # sentinel position, then an END so that pos + 1 of the sentinel is readable
        types += [BOTTOM_TYPE, END]
        values += [0, 0]
        self.types = types
        self.values = values
        self.rule_of = _RuleOf(self.rule_start, total)     # rule id of each position (a binary search)
        # rules the GBNF parser generated (groups, repetitions): their names carry an underscore
        helper = {i for name, i in parsed.symbol_ids.items() if "_" in name}
        self.helper = [r in helper for r in range(n_rules)] + [False]
        self.root_id = parsed.root_id
        self.has_tokens = TOKEN in types or TOKEN_NOT in types
        # character classes: position -> (positive, ((lo, hi), ...), position after the class), compiled on first
        # use (a 4M-element grammar would otherwise build 4M entries up front)
        self.classes = _Classes(self)
        # per class position, whether each ASCII code point matches (a fast path for allows)
        self.ascii_ok = _AsciiTables(self)
        # memos of stack operations, bounded by the number of positions they hold (keys and results)
        self._advance_memo = BoundedMemo("advance")
        self._next_memo = BoundedMemo("next_stacks")
        self._split_memo = BoundedMemo("split")
        self._canon_memo = BoundedMemo("canonical_key", budget=1 << 18)
        self._loop_memo = BoundedMemo("loop_exits", budget=1 << 18)
        self._shape_memo = BoundedMemo("rule_shape", budget=1 << 18)
        self._chain_memo = BoundedMemo("chain_step", budget=1 << 18)
        self._disjoint_memo = BoundedMemo("disjoint", budget=1 << 16)
        # memos of the matchers compiled from these rules (accept_token's transitions, per vocabulary), held weakly:
        # memo_stats and clear_memos see them too
        self._attached: weakref.WeakValueDictionary[int, BoundedMemo] = weakref.WeakValueDictionary()
        self._ranges: dict[int, tuple[tuple[int, int], ...]] = {}
        self._serial = next(_RULES_SERIAL)
        self.max_stacks = MAX_STACKS
        self.max_accept_work = MAX_ACCEPT_WORK
        self._alts: dict[int, tuple[int, ...]] = {}
        self._advance_table: bytes | None = None     # built on the first compiled advance

    def attach_memo(self, memo: BoundedMemo) -> None:
        """Count ``memo`` (a compiled grammar's) among these rules' memos: :meth:`memo_stats` reports it and
        :meth:`clear_memos` empties it, as long as it is alive."""
        self._attached[id(memo)] = memo

    def _memos(self) -> list[BoundedMemo]:
        return [self._advance_memo, self._next_memo, self._split_memo, self._canon_memo, self._loop_memo,
                self._shape_memo, self._chain_memo, self._disjoint_memo, *self._attached.values()]

    def memo_stats(self) -> dict[str, dict[str, int]]:
        """Entries, held positions, hits, misses and clears of each memo (every memo here is bounded)."""
        return {m.name: m.stats() for m in self._memos()}

    def clear_memos(self) -> None:
        """Drop every memoised stack operation (they are rebuilt on demand)."""
        for m in self._memos():
            m.clear()

    # as llama_grammar_match_char's walk over a class, turned into ranges
    def _compile_class(self, p: int) -> tuple[bool, tuple[tuple[int, int], ...], int]:
        types, values = self.types, self.values
        positive = types[p] in (CHAR, CHAR_ANY)
        items: list[tuple[int, int]] = []
        while True:
            if types[p + 1] == CHAR_RNG_UPPER:
                items.append((values[p], values[p + 1]))
                p += 2
            elif types[p] == CHAR_ANY:
                items.append((0, _ANY_HI))
                p += 1
            else:
                items.append((values[p], values[p]))
                p += 1
            if types[p] != CHAR_ALT:
                break
        return positive, tuple(items), p

    def ranges(self, p: int) -> tuple[tuple[int, int], ...]:
        """The code points the class at ``p`` matches, as sorted disjoint ``(lo, hi)`` ranges (complement taken)."""
        r = self._ranges.get(p)
        if r is None:
            positive, items, _ = self.classes[p]
            merged: list[list[int]] = []
            for lo, hi in sorted(items):
                if lo > hi:
                    continue
                if merged and lo <= merged[-1][1] + 1:
                    merged[-1][1] = max(merged[-1][1], hi)
                else:
                    merged.append([lo, hi])
            if positive:
                r = tuple((lo, hi) for lo, hi in merged)
            else:
                out, at = [], 0
                for lo, hi in merged:
                    if lo > at:
                        out.append((at, lo - 1))
                    at = max(at, hi + 1)
                if at <= _ANY_HI:
                    out.append((at, _ANY_HI))
                r = tuple(out)
            self._ranges[p] = r
        return r

    def disjoint(self, p: int, q: int) -> bool:
        """Whether the classes at ``p`` and ``q`` share no code point (memoised per pair)."""
        memo = self._disjoint_memo.get((p, q))
        if memo is not None:
            return memo
        res = self._disjoint(p, q)
        self._disjoint_memo.put((p, q), res, 4)
        return res

    def _disjoint(self, p: int, q: int) -> bool:
        a, b = self.ranges(p), self.ranges(q)
        i = j = 0
        while i < len(a) and j < len(b):
            if a[i][1] < b[j][0]:
                i += 1
            elif b[j][1] < a[i][0]:
                j += 1
            else:
                return False
        return True

    def loop_exits(self, stack: Stack) -> tuple[int, ...] | None:
        """For a class-topped ``stack`` that loops on its class ``C`` (``stack`` is among its own
        :meth:`next_stacks`) and whose other next stacks are empty or topped by classes disjoint from ``C``: the tops
        of those other class-topped stacks. None otherwise (memoised).

        From such a stack, a candidate whose remaining code points all match ``C`` can only stay in the loop to its
        end: it is accepted iff it ends cleanly or its pending UTF-8 sequence may continue ``C`` or one of the
        returned classes (the mask walk's shortcut for string bodies and other ``C*`` loops).
        """
        memo = self._loop_memo.get(stack, 0)
        if memo != 0:
            return memo
        top = stack[-1]
        res: tuple[int, ...] | None = None
        if self.types[top] in _CLASS:
            nxt = self.next_stacks(stack)
            if stack in nxt:
                tops = []
                for o in nxt:
                    if o == stack or not o:
                        continue
                    q = o[-1]
                    if self.types[q] not in _CLASS or not self.disjoint(top, q):
                        tops = None
                        break
                    tops.append(q)
                if tops is not None:
                    res = tuple(dict.fromkeys(tops))
        self._loop_memo.put(stack, res, 8 + len(stack) + (len(res) if res else 0))
        return res

    def chain_step(self, stack: Stack) -> tuple[Stack | None, tuple[int, ...]] | None:
        """For a class-topped ``stack`` (class ``C`` at position ``p``) whose :meth:`next_stacks` are empty or
        class-topped, and among the class-topped ones at most one can take a code point of ``C`` and it is topped by
        ``p`` itself (the next *link*): ``(link or None, the class tops of the next stacks)``. None otherwise
        (memoised). A bounded repetition of one class (``[^"]{0,40}``, llama.cpp's nested optional rules) is a
        chain of such links."""
        memo = self._chain_memo.get(stack, 0)
        if memo != 0:
            return memo
        top = stack[-1]
        res: tuple[Stack | None, tuple[int, ...]] | None = None
        if self.types[top] in _CLASS:
            link: Stack | None = None
            tops: list[int] = []
            ok = True
            for o in self.next_stacks(stack):
                if not o:
                    continue
                q = o[-1]
                if self.types[q] not in _CLASS:
                    ok = False
                    break
                tops.append(q)
                if q == top and link is None:
                    link = o
                elif not self.disjoint(top, q):
                    ok = False
                    break
            if ok:
                res = (link, tuple(dict.fromkeys(tops)))
        self._chain_memo.put(stack, res, 8 + len(stack) + (len(res[1]) + (len(res[0]) if res[0] else 0) if res
                                                           else 0))
        return res

    def chain(self, stack: Stack) -> tuple[tuple[tuple[int, ...], ...], bool] | None:
        """The chain of links from a class-topped ``stack`` that is not a loop (see :meth:`chain_step`), up to
        ``chain_max`` links (:data:`CHAIN_MAX` unless lowered): ``(levels, ended)``, where ``levels[j]`` are the class tops of the next stacks at
        link ``j`` and ``ended`` says the last link has no successor. A candidate whose remaining ``R`` code points
        all match the class ends at link ``R - 1`` if ``R <= len(levels)`` (accepted iff it ends cleanly or its
        pending UTF-8 sequence may continue one of ``levels[R - 1]``), and is rejected if ``R > len(levels)`` and
        ``ended``; otherwise the walk decides it. None where the first step is not a link or is a loop
        (memoised)."""
        memo = self._chain_memo.get(("chain", stack), 0)
        if memo != 0:
            return memo
        first = self.chain_step(stack)
        if first is None or first[0] is None or first[0] == stack:
            self._chain_memo.put(("chain", stack), None, 8 + len(stack))
            return None
        levels: list[tuple[int, ...]] = []
        ended = False
        cur = stack
        while len(levels) < self.chain_max:
            step = self.chain_step(cur)
            if step is None:
                break
            link, tops = step
            levels.append(tops)
            if link is None:
                ended = True
                break
            if link == cur:       # the chain runs into a loop: the walk decides longer candidates
                break
            cur = link
        res = (tuple(levels), ended)
        self._chain_memo.put(("chain", stack), res, 8 + len(stack) + sum(map(len, levels)))
        return res

    def is_eos(self, p: int) -> bool:
        """``llama_grammar_is_end_of_sequence``."""
        return self.types[p] in (END, ALT)

    def match_char(self, p: int, cp: int) -> bool:
        """``llama_grammar_match_char(pos, chr).first``."""
        positive, items, _ = self.classes[p]
        for lo, hi in items:
            if lo <= cp <= hi:
                return positive
        return not positive

    def match_partial(self, p: int, value: int, n_remain: int) -> bool:
        """``llama_grammar_match_partial_char``."""
        if n_remain < 0 or (n_remain == 1 and value < 2):
            return False
        low = value << (n_remain * 6)
        high = low | ((1 << (n_remain * 6)) - 1)
        if low == 0:
            if n_remain == 2:
                low = 1 << 11
            elif n_remain == 3:
                low = 1 << 16
        positive, items, _ = self.classes[p]
        for lo, hi in items:
            if lo <= high and low <= hi:
                return positive
        return not positive

    def match_token(self, p: int, token: int) -> bool:
        """``llama_grammar_match_token``."""
        if self.types[p] == TOKEN:
            return self.values[p] == token
        return self.values[p] != token

    # as llama_grammar_advance_stack (LIFO work list, seen set, output in discovery order)
    def advance(self, stack: Stack) -> Stacks:
        """The stacks ``stack`` expands to, each with a terminal on top or empty (memoised; the compiled twin
        :meth:`advance_compiled` where built, else :meth:`advance_py`)."""
        memo = self._advance_memo.get(stack)
        if memo is not None:
            self._advance_memo.hits += 1
            return memo
        self._advance_memo.misses += 1
        res = self.advance_compiled(stack) if COMPILED_ADVANCE else None
        if res is None:                     # not built, switched off, or a case it leaves to the reference
            res = self.advance_py(stack)
        self._advance_memo.put(stack, res, 4 + len(stack) + sum(map(len, res)) + 4 * len(res))
        return res

    def advance_compiled(self, stack: Stack) -> Stacks | None:
        """:meth:`advance_py` by the compiled extension (not memoised): the same stacks in the same order, or the
        same exception; None where the extension is not built or leaves the case to the Python loop (a position
        outside the element vector, a value past 32 bits)."""
        if _walk_ext is None or type(stack) is not tuple:
            return None
        table = self._advance_table
        if table is None:
            try:
                table = _walk_ext.advance_table(self.types, self.values, self.rule_start, self.bottom, RULE_REF, ALT)
            except (ValueError, OverflowError):
                table = b""
            self._advance_table = table
        if not table:
            return None
        res = _walk_ext.advance(table, stack, self.max_stacks, RULE_REF, END, ALT, _TERMINAL)
        if type(res) is int:                # the errors advance_py raises, at the same point of the same loop
            if res < 0:
                raise _too_many(self.max_stacks, "expanding one stack")
            raise GrammarStateError(f"stack top at a non-terminal element (type {self.types[res]}) at position {res}")
        return res

    def advance_py(self, stack: Stack) -> Stacks:
        """The Python reference of :meth:`advance` (not memoised)."""
        types, values, alts, max_stacks = self.types, self.values, self._alts, self.max_stacks
        out: list[Stack] = []
        todo = [stack]
        seen: set[Stack] = set()
        pop, push, see = todo.pop, todo.append, seen.add
        while todo:
            cur = pop()
            if cur in seen:     # each stack is looked at once: a terminal one joins ``out`` once, in discovery order
                continue
            see(cur)
            if len(seen) > max_stacks:
                raise _too_many(max_stacks, "expanding one stack")
            if not cur:
                out.append(cur)
                continue
            pos = cur[-1]
            t = types[pos]
            if t == RULE_REF:
                nt = types[pos + 1]               # is_eos(pos + 1)
                base = cur[:-1] if nt == END or nt == ALT else cur[:-1] + (pos + 1,)
                rid = values[pos]
                for sub in alts.get(rid) or self.alternatives(rid):
                    t = types[sub]
                    push(base if t == END or t == ALT else base + (sub,))
            elif t in _TERMINAL:
                out.append(cur)
            else:
                raise GrammarStateError(f"stack top at a non-terminal element (type {t}) at position {pos}")
        return tuple(out)

    def advance_into(self, stack: Stack, out: list[Stack], outset: set[Stack]) -> None:
        """``llama_grammar_advance_stack(rules, stack, new_stacks)`` appending to an existing output."""
        for s in self.advance(stack):
            if s not in outset:
                outset.add(s)
                out.append(s)

    def after_char(self, stack: Stack) -> Stack:
        """The stack once the class on top has matched one code point (before advancing)."""
        nxt = self.classes[stack[-1]][2]
        return stack[:-1] if self.is_eos(nxt) else stack[:-1] + (nxt,)

    def next_stacks(self, stack: Stack) -> Stacks:
        """``advance(after_char(stack))``, memoised: where a class-topped stack goes after one code point."""
        memo = self._next_memo.get(stack)
        if memo is None:
            memo = self.advance(self.after_char(stack))
            self._next_memo.put(stack, memo, 4 + len(stack) + sum(map(len, memo)) + 4 * len(memo))
        return memo

    def initial_stacks(self) -> Stacks:
        """The stacks of a fresh grammar, as ``llama_grammar_init_impl`` builds them."""
        out: list[Stack] = []
        outset: set[Stack] = set()
        for pos in self.alternatives(self.root_id):
            self.advance_into(() if self.is_eos(pos) else (pos,), out, outset)
        return tuple(out)

    def alternatives(self, rid: int) -> tuple[int, ...]:
        """The start positions of rule ``rid``'s alternatives, in order (found once per rule at C speed)."""
        a = self._alts.get(rid)
        if a is None:
            start = self.rule_start[rid]
            stop = self.rule_start[rid + 1] if rid + 1 < len(self.rule_start) else self.bottom
            seg = self.types[start:stop]
            out = [start]
            i = 0
            while True:
                try:
                    i = seg.index(ALT, i)
                except ValueError:
                    break
                i += 1
                out.append(start + i)
            a = self._alts[rid] = tuple(out)
        return a

    # as llama_grammar_accept_chr + llama_grammar_accept (one code point, all stacks)
    def accept_char(self, stacks: Stacks, cp: int, budget: list[int] | None = None) -> Stacks:
        """``llama_grammar_accept_chr`` over every stack (``budget``: a one-item list of stack steps left, see
        :data:`MAX_ACCEPT_WORK`)."""
        out: list[Stack] = []
        outset: set[Stack] = set()
        limit = self.max_stacks
        if budget is None:
            budget = [self.max_accept_work]
        for stack in stacks:
            self._accept_chr(stack, cp, out, outset, budget)
            if len(out) > limit:
                raise _too_many(limit, "after a code point")
        return tuple(out)

    def _accept_chr(self, stack: Stack, cp: int, out: list[Stack], outset: set[Stack], budget: list[int]) -> None:
        if not stack:
            return
        pos = stack[-1]
        if self.types[pos] in (TOKEN, TOKEN_NOT):
            return
        if self.match_char(pos, cp):
            nxt = self.next_stacks(stack)
            budget[0] -= len(nxt) + 1
            if budget[0] < 0:
                raise GrammarLimitError(
                    f"accepting this token needs more than MatcherLimits.max_accept_work = {self.max_accept_work:,} "
                    "stack steps (nested repetitions that can match the empty string multiply the parse stacks per "
                    "character, as in llama.cpp, which would take as long); raise it with "
                    "`matcher.compiled.limits = MatcherLimits(max_accept_work=...)`")
            for s in nxt:
                if s not in outset:
                    outset.add(s)
                    out.append(s)

    # as llama_grammar_accept_token (the state change of llama_grammar_accept_impl for a non-EOG token)
    def accept_token(self, stacks: Stacks, partial: Partial, token: int, cps: list[int],
                     new_partial: Partial | None = None) -> tuple[Stacks, Partial] | None:
        """Advance ``stacks`` over ``token`` whose accept-side code points are ``cps``.

        Returns ``None`` where llama.cpp throws "Unexpected empty grammar stack".
        """
        out: list[Stack] = []
        outset: set[Stack] = set()
        budget = [self.max_accept_work]
        for stack in stacks:
            if not stack:
                continue
            pos = stack[-1]
            if self.types[pos] in (TOKEN, TOKEN_NOT):
                if self.match_token(pos, token):
                    nxt = stack[:-1] if self.is_eos(pos + 1) else stack[:-1] + (pos + 1,)
                    self.advance_into(nxt, out, outset)
            else:
                cur: Stacks = (stack,)
                for cp in cps:
                    cur = self.accept_char(cur, cp, budget)
                    if not cur:
                        break
                for s in cur:
                    if s not in outset:
                        outset.add(s)
                        out.append(s)
            if len(out) > self.max_stacks:
                raise _too_many(self.max_stacks, "after a token")
        if not out:
            return None
        return tuple(out), (new_partial if new_partial is not None else partial)

    # a boolean llama_grammar_reject_candidates for one candidate (depth-first, each (stack, depth) once)
    def stacks_accept(self, stacks: Stacks, cps: list[int], value: int, n_remain: int, token: int,
                      start: int = 0) -> bool:
        """True unless every stack rejects the candidate whose code points from ``start`` on are ``cps[start:]``
        and whose final partial UTF-8 state is ``(value, n_remain)`` (``llama_grammar_reject_candidates``)."""
        n = len(cps)
        types, values, classes, ascii_ok = self.types, self.values, self.classes, self.ascii_ok
        next_memo = self._next_memo
        todo = [(s, start) for s in stacks]
        seen: set[tuple[Stack, int]] | None = None
        while todo:
            stack, i = todo.pop()
            if not stack:
                if i == n and n_remain == 0:
                    return True
                continue
            pos = stack[-1]
            ty = types[pos]
            if ty == TOKEN or ty == TOKEN_NOT:
                if i == n:
                    if n_remain == 0:
                        return True
                elif (values[pos] == token) == (ty == TOKEN):
                    return True
                continue
            if i == n:
                if n_remain == 0 or self.match_partial(pos, value, n_remain):
                    return True
                continue
            cp = cps[i]
            if cp < 128:
                if not ascii_ok[pos][cp]:
                    continue
            else:
                positive, items, _ = classes[pos]
                for lo, hi in items:
                    if lo <= cp <= hi:
                        break
                else:
                    positive = not positive
                if not positive:
                    continue
            nxt = next_memo.get(stack)
            if nxt is None:
                nxt = self.next_stacks(stack)
            if seen is None:
                seen = set()
            i += 1
            for s in nxt:
                key = (s, i)
                if key not in seen:
                    seen.add(key)
                    todo.append(key)
        return False

    # as llama_grammar_reject_candidates_for_stack, with llama.cpp's output order (for test-llama-grammar)
    def reject_candidates_for_stack(self, stack: Stack, cands: list[tuple[int, list[int], int, Partial, int]]
                                    ) -> list[tuple[int, list[int], int, Partial, int]]:
        """Candidates are ``(index, code_points, offset, (value, n_remain), token)``; returns the rejected ones."""
        rejects = []
        if not stack:
            return [c for c in cands if c[2] < len(c[1]) or c[3][1] != 0]
        pos = stack[-1]
        if self.types[pos] in (TOKEN, TOKEN_NOT):
            for c in cands:
                if c[2] == len(c[1]):
                    if c[3][1] != 0:
                        rejects.append(c)
                elif not self.match_token(pos, c[4]):
                    rejects.append(c)
            return rejects
        nxt = []
        for c in cands:
            if c[2] == len(c[1]):
                if c[3][1] != 0 and not self.match_partial(pos, *c[3]):
                    rejects.append(c)
            elif self.match_char(pos, c[1][c[2]]):
                nxt.append((c[0], c[1], c[2] + 1, c[3], c[4]))
            else:
                rejects.append(c)
        for c in self.reject_candidates(self.next_stacks(stack), nxt):
            rejects.append((c[0], c[1], c[2] - 1, c[3], c[4]))
        return rejects

    def reject_candidates(self, stacks: Stacks, cands: list) -> list:
        """``llama_grammar_reject_candidates``."""
        if not cands:
            return []
        rejects = self.reject_candidates_for_stack(stacks[0], cands)
        for s in stacks[1:]:
            rejects = self.reject_candidates_for_stack(s, rejects)
        return rejects

    def split(self, stack: Stack, least: int = 3, limit: int = 6) -> tuple[Stack, Stack]:
        """``(below, suffix)`` for the mask cache, which treats the suffix as one unit keyed on its positions.

        The suffix holds the top ``least`` elements, extended down through the elements of generated helper rules
        (groups, repetitions) up to ``limit`` elements, so that a rule's loop and its closing element usually sit
        in the suffix together (a string's characters and its closing quote).
        """
        memo = self._split_memo.get(stack)
        if memo is not None:
            return memo
        i = max(len(stack) - least, 0)
        helper, rule_of = self.helper, self.rule_of
        while i > 0 and len(stack) - i < limit and helper[rule_of[stack[i]]]:
            i -= 1
        memo = stack[:i], stack[i:]
        self._split_memo.put(stack, memo, 12 + 2 * len(stack))
        return memo

    def canonical_key(self, suffix: Stack) -> tuple:
        """A key equal for suffixes of any two grammars whose reachable rules are laid out identically.

        The walk from ``(sentinel, *suffix)`` only sees the rules of the suffix elements and the rules they reach,
        so its result can be shared between grammars (JSON-schema grammars share ``string``, ``space``...). The key
        is the suffix's offsets within its rules (numbered in order of appearance) and, per rule, a digest of the
        rules it reaches (its closure's structure, renumbered in order of discovery): computed once per rule, so
        the many suffixes of one rule (a JSON value's alternatives under the same object) cost a lookup each. A
        closure past :data:`CANON_MAX_ELEMENTS` elements keys the suffix on this grammar instead. Memory: O(1) per
        suffix, O(1) per rule.
        """
        rule_of, rule_start = self.rule_of, self.rule_start
        rids = [rule_of[p] for p in suffix]
        rules = tuple(dict.fromkeys(rids))
        order = {r: i for i, r in enumerate(rules)}
        head = tuple((order[r], p - rule_start[r]) for p, r in zip(suffix, rids, strict=True))
        memo = self._canon_memo
        digests = []
        for r in rules:
            digest = memo.get(r)
            if digest is None:
                memo.misses += 1
                digest = self._closure_digest((r,))
                memo.put(r, (digest,), 12)
            else:
                memo.hits += 1
                digest = digest[0]
            if not digest:
                return ("grammar", self._serial, suffix)
            digests.append(digest)
        return (head, tuple(digests))

    def _closure_digest(self, rules: tuple[int, ...]) -> bytes:
        """A digest of the rules reachable from ``rules``, renumbered in order of discovery (b"" if too large)."""
        if _walk_ext is not None and COMPILED_DIGEST:
            data = _walk_ext.closure_bytes(self.types, self.values, self.rule_start, self.bottom, rules,
                                           CANON_MAX_ELEMENTS, RULE_REF)
        else:
            data = self._closure_bytes_py(rules)
        return b"" if data is None else hashlib.blake2b(data, digest_size=16).digest()

    def _closure_bytes_py(self, rules: tuple[int, ...]) -> bytes | None:
        """What :meth:`_closure_digest` hashes (None past :data:`CANON_MAX_ELEMENTS`): per reachable rule in order
        of discovery, its shape (:meth:`_rule_shape`) and the discovery numbers of the rules it references. The
        reference of the compiled ``closure_bytes``."""
        canon: dict[int, int] = {r: i for i, r in enumerate(rules)}
        order = list(rules)
        out: list[bytes] = []
        seen = 0
        k = 0
        while k < len(order):
            shape, refs, size = self._rule_shape(order[k])
            k += 1
            seen += size
            if seen > CANON_MAX_ELEMENTS:
                return None
            idx = []
            for v in refs:
                c = canon.get(v)
                if c is None:
                    c = canon[v] = len(order)
                    order.append(v)
                idx.append(c)
            out.append(shape)
            out.append(array("q", idx).tobytes())
        return b"".join(out)

    def _rule_shape(self, r: int) -> tuple[bytes, tuple[int, ...], int]:
        """Rule ``r``'s elements as bytes with rule references blanked, the rules it references in order, and its
        element count (memoised in a bounded memo): the parts of :meth:`_closure_digest`."""
        memo = self._shape_memo.get(r)
        if memo is not None:
            return memo
        start = self.rule_start[r]
        stop = self.rule_start[r + 1] if r + 1 < len(self.rule_start) else self.bottom
        if stop - start > CANON_MAX_ELEMENTS + 1:
            memo = (b"", (), stop - start)
        else:
            types = self.types[start:stop]
            values = self.values[start:stop]
            refs = tuple(v for t, v in zip(types, values, strict=True) if t == RULE_REF)
            body = array("q", [len(types)])
            body.extend(types)
            body.extend(-1 if t == RULE_REF else v for t, v in zip(types, values, strict=True))
            memo = (body.tobytes(), refs, len(types) - 1)
        self._shape_memo.put(r, memo, 8 + len(memo[1]) + len(memo[0]) // 8)
        return memo

    def describe(self, stack: Stack) -> list[tuple[int, int]]:
        """The ``(type, value)`` elements of a stack, bottom first."""
        return [(self.types[p], self.values[p]) for p in stack]
