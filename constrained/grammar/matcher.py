"""Grammar matching over a vocabulary with llama.cpp's grammar-sampler semantics, fast.

``compile_grammar(grammar, vocab)`` pairs a grammar with a :class:`~constrained.vocab.Vocabulary` once (vocabulary
preprocessing is shared by every grammar, grammar-position caches by every matcher); ``.matcher()`` gives a cheap
:class:`GrammarMatcher` whose answers are those of ``llama_sampler_init_grammar`` in every state: ``mask()`` is what
``llama_grammar_apply_impl`` leaves unmasked, ``accept_token`` is ``llama_grammar_accept_impl``.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> g = ParsedGrammar((((T.CHAR, 104), (T.CHAR, 105), (T.END, 0)),), {"root": 0}, 0)  # root ::= "hi"
    >>> m = compile_grammar(g, Vocabulary([b"h", b"i", b"hi", b"x", b"</s>"], eog_ids=[4])).matcher()
    >>> m.mask().tolist()
    [True, False, True, False, False]
    >>> m.accept_token(3), m.accept_token(0), m.allows(4), m.accept_token(1), m.can_end(), m.allows(4)
    (False, True, False, True, True, True)
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from ..errors import ConstrainedError
from ..vocab import Vocabulary
from .ir import ParsedGrammar
from .mask import (
    DEFAULT_MATCHER_LIMITS,
    LOOP_MIN_ROWS,
    VISIT_COST,
    LocalInfo,
    MatcherLimits,
    WorkBudget,
    _first_count,
    _loop_parts,
    local_info,
    pack_by_id,
    rows_of,
    set_bits,
    set_rows,
    walk,
)
from .stacks import (
    CHAR,
    CHAR_ALT,
    CHAR_ANY,
    CHAR_NOT,
    CHAR_RNG_UPPER,
    TOKEN,
    TOKEN_NOT,
    GrammarRules,
    Partial,
    Stack,
    Stacks,
)
from .tokenindex import apply_view, decode_utf8, vocab_index

__all__ = ["CompiledGrammar", "GrammarMatcher", "MatcherLimits", "TokenIdError", "compile_grammar"]

_NO_PARTIAL: Partial = (0, 0)


class TokenIdError(ConstrainedError, ValueError, TypeError):
    """A token id that is not an integer (a float, a string, bytes...) or is outside the vocabulary."""


def _norm(value: int, n_remain: int) -> Partial:
    return (value, n_remain) if n_remain > 0 else _NO_PARTIAL


class _LRU(OrderedDict):
    """A small thread-safe LRU mapping, bounded by the total ``cost`` of its values (1 each by default)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.held = 0
        self.costs: dict[Any, int] = {}
        self.lock = threading.Lock()

    def get_lru(self, key: Any) -> Any:
        v = self.get(key)          # a hit needs no lock: get and move_to_end are atomic under the GIL
        if v is not None:
            try:
                self.move_to_end(key)
            except KeyError:       # evicted by another thread in between: still a valid value
                pass
        return v

    def put(self, key: Any, value: Any, cost: int = 1) -> None:
        with self.lock:
            if key in self:
                self.held -= self.costs.pop(key, 1)
                del self[key]
            self[key] = value
            self.costs[key] = cost
            self.held += cost
            while self.held > self.size and len(self) > 1:
                k, _ = self.popitem(last=False)
                self.held -= self.costs.pop(k, 1)

    def clear(self) -> None:
        with self.lock:
            super().clear()
            self.costs.clear()
            self.held = 0


_SERIAL = itertools.count()
_MASK_CACHE_BYTES = 64 << 20        # per vocabulary, over all its grammars
_LOCAL_BYTES = 32 << 20             # per compiled grammar: its per-suffix walks (the shared cache holds more)
_TOKEN_TOP_BYTES = 8 << 20          # per compiled grammar: masks of token-topped stacks
_UNION_BYTES = 16 << 20             # per compiled grammar: unions of the sure tokens of sets of positions
_PLAN_BYTES = 32 << 20              # per compiled grammar: each stack's position, walk and uncertain answer
_UNION_ROW_BYTES = 4 << 20          # per compiled grammar: packed rows of those unions (fill_bits_for)
_MAX_CACHED_STATE = 4096            # states holding more stack positions are not kept in the state cache
_MAX_CACHED_BELOW = 1024            # nor uncertain-token answers for a longer rest of stack
_NEW_SUFFIXES_PER_MASK = 8          # more new suffixes in one state: the rest are walked directly
_PREPARE_MAX_ELEMENTS = 20_000      # grammars up to this size get their wide classes' table parts at compile time
_PREPARE_MAX_CLASSES = 4            # at most this many wide classes per grammar
_WIDE_SHARE = 16                    # a class is wide if it starts at least 1/16 of the tokens


def _vocab_caches(index: Any) -> tuple[_LRU, _LRU]:
    """The per-vocabulary LRUs of full masks and of uncertain-token answers (bounded whatever the grammars)."""
    with index._lock:
        caches = getattr(index, "matcher_caches", None)
        if caches is None:
            caches = index.matcher_caches = (_LRU(max(16, _MASK_CACHE_BYTES // max(index.n_vocab, 1))),
                                             _LRU(8 << 20))
        return caches


def _info_bytes(li: LocalInfo) -> int:
    n = li.bits.nbytes + li.unc_ids.nbytes + li.unc_bits.nbytes + 256
    if li.keys is not None:
        n += 3 * (li.keys.ids.nbytes + li.keys.start.nbytes + li.keys.length.nbytes)   # rows, columns, index
    return n


class CompiledGrammar:
    """A grammar bound to a vocabulary: the stack machine plus the mask caches, shared by its matchers.

    Build it with :func:`compile_grammar`. ``precompute()`` fills the per-position caches eagerly. Every cache is
    bounded (bytes or stack positions); ``limits`` (:class:`~constrained.grammar.mask.MatcherLimits`) bounds the
    work of one mask and the stacks of one state.
    """

    def __init__(self, parsed: ParsedGrammar, vocab: Vocabulary) -> None:
        self.parsed = parsed
        self.vocab = vocab
        self.index = vocab_index(vocab)
        self.n_vocab = self.index.n_vocab
        self.rules = GrammarRules(parsed)
        self._limits = DEFAULT_MATCHER_LIMITS
        self.initial_stacks: Stacks = self.rules.initial_stacks()
        self._local = _LRU(_LOCAL_BYTES)
        self._token_top = _LRU(_TOKEN_TOP_BYTES)
        self._unions = _LRU(_UNION_BYTES)
        self._plans = _LRU(_PLAN_BYTES)
        self._union_rows = _LRU(_UNION_ROW_BYTES)
        self._missed: tuple[Stack | None, tuple] = (None, ())   # the last suffix the caches missed, with its key
        self._empty: np.ndarray | None = None
        self._serial = next(_SERIAL)
        self._masks, self._unc = _vocab_caches(self.index)
        self._prepare_wide_classes()

    def _prepare_wide_classes(self) -> int:
        """Compile step: the vocabulary table's parts for the grammar's wide character classes (those that start a
        sixteenth of the tokens or more: a JSON string's characters, ``[a-z]``, ``.``, negated sets), as the loop shortcut
        needs them (``mask._loop_parts``, cached per table and class, so shared by every grammar of the
        vocabulary): ~0.6 ms per class at 262,144 tokens, counted in the compile time instead of the first mask
        that meets the class. Returns how many classes were prepared (bounded; none past
        ``_PREPARE_MAX_ELEMENTS`` elements)."""
        g, t = self.rules, self.index.table
        types = g.types
        if len(types) > _PREPARE_MAX_ELEMENTS or t.n < LOOP_MIN_ROWS or t.inv is None:
            return 0
        seen: set[tuple] = set()
        done = 0
        for p, ty in enumerate(types):
            if not (ty == CHAR_NOT or ty == CHAR_ANY or (ty == CHAR and types[p + 1] in (CHAR_ALT, CHAR_RNG_UPPER))):
                continue          # a single code point is never wide
            key = g.ranges(p)
            if key in seen:
                continue
            seen.add(key)
            if _first_count(g, p, t) * _WIDE_SHARE >= t.n:
                _loop_parts(g, p, t)
                done += 1
                if done >= _PREPARE_MAX_CLASSES:
                    break
        return done

    @property
    def limits(self) -> MatcherLimits:
        """The work bounds of this grammar's matchers (set a new :class:`MatcherLimits` to raise them)."""
        return self._limits

    @limits.setter
    def limits(self, value: MatcherLimits) -> None:
        if not isinstance(value, MatcherLimits):
            raise TypeError(f"expected MatcherLimits, got {type(value).__name__}")
        self._limits = value
        self.rules.max_stacks = value.max_stacks
        self.rules.max_accept_work = value.max_accept_work

    def matcher(self) -> GrammarMatcher:
        """A fresh matcher at the start of the grammar."""
        return GrammarMatcher(self)

    def cache_stats(self) -> dict[str, Any]:
        """Sizes of every cache this grammar uses (entries, held bytes or positions, bounds)."""
        return {"local": {"entries": len(self._local), "bytes": self._local.held, "budget": self._local.size},
                "token_top": {"entries": len(self._token_top), "bytes": self._token_top.held},
                "unions": {"entries": len(self._unions), "bytes": self._unions.held, "budget": self._unions.size},
                "plans": {"entries": len(self._plans), "bytes": self._plans.held, "budget": self._plans.size},
                "union_rows": {"entries": len(self._union_rows), "bytes": self._union_rows.held,
                               "budget": self._union_rows.size},
                "shared_local": {"entries": len(self.index.shared_local), "bytes": self.index.shared_local_held,
                                 "budget": self.index.shared_local_bytes},
                "state_masks": {"entries": len(self._masks), "budget": self._masks.size},
                "uncertain": {"entries": len(self._unc), "cost": self._unc.held, "budget": self._unc.size},
                **self.rules.memo_stats()}

    # ---- per-position caches -------------------------------------------------------------------------------
    def _cached_local(self, suffix: Stack) -> LocalInfo | None:
        li = self._local.get_lru(suffix)
        if li is None:
            key = self.rules.canonical_key(suffix)
            li = self.index.shared_get(key)
            if li is not None:
                self._local.put(suffix, li, _info_bytes(li))
            else:
                self._missed = (suffix, key)    # for local() right after: the key is not built twice
        return li

    def local(self, suffix: Stack, work: WorkBudget | None = None) -> LocalInfo:
        """The cached walk of the stack suffix (shared with other grammars of the same vocabulary)."""
        li = self._cached_local(suffix)
        if li is None:
            li = local_info(self.rules, self.index.table, suffix, work or self._work())
            nbytes = _info_bytes(li)
            missed = self._missed         # one read: another thread may have replaced it (then it is rebuilt)
            key = missed[1] if missed[0] == suffix else self.rules.canonical_key(suffix)
            self.index.shared_put(key, li, nbytes)
            self._local.put(suffix, li, nbytes)
        return li

    def _work(self) -> WorkBudget:
        return WorkBudget(self._limits.max_mask_work)

    def _token_bits(self, p: int, work: WorkBudget) -> np.ndarray:
        m = self._token_top.get_lru(p)
        if m is None:
            t = self.index.table
            m = pack_by_id(t, walk(self.rules, t, ((p,),), work=work))
            self._token_top.put(p, m, m.nbytes)
        return m

    def _empty_bits(self, work: WorkBudget) -> np.ndarray:
        if self._empty is None:
            t = self.index.table
            self._empty = pack_by_id(t, walk(self.rules, t, ((),), work=work))
        return self._empty

    def precompute(self, max_stacks: int = 20_000, max_depth: int = 24) -> int:
        """Fill the per-suffix caches ahead of time (XGrammar-style compile step); returns how many suffixes.

        Stacks are enumerated breadth-first from the initial ones (a class-topped stack leads to
        ``next_stacks``, a token-topped one to the stacks after the token), up to ``max_stacks`` stacks of at most
        ``max_depth`` elements; suffixes met later at run time are still computed on demand.
        """
        g = self.rules
        seen: set[Stack] = set(self.initial_stacks)
        todo = list(self.initial_stacks)
        suffixes: dict[Stack, None] = {}
        while todo and len(seen) < max_stacks:
            s = todo.pop(0)
            if not s:
                continue
            top = s[-1]
            if g.types[top] in (TOKEN, TOKEN_NOT):
                nxt = g.advance(s[:-1] if g.is_eos(top + 1) else s[:-1] + (top + 1,))
            else:
                suffixes.setdefault(g.split(s)[1])
                nxt = g.next_stacks(s)
            for n in nxt:
                if n not in seen and len(n) <= max_depth:
                    seen.add(n)
                    todo.append(n)
        for suffix in suffixes:
            self.local(suffix)
        return len(suffixes)

    def _uncertain(self, suffix: Stack, below: Stack, li: LocalInfo, work: WorkBudget) -> np.ndarray:
        """The token ids among the suffix's uncertain ones that the rest of the stack accepts (cached)."""
        key = (self._serial, suffix, below)
        ids = self._unc.get_lru(key)
        if ids is None:
            ids = li.unc_ids[walk(self.rules, li.keys, self.rules.advance(below), work=work)]
            if len(below) <= _MAX_CACHED_BELOW:
                self._unc.put(key, ids, ids.nbytes + 8 * (len(suffix) + len(below)) + 200)
        return ids

    # ---- the mask ------------------------------------------------------------------------------------------
    def _positions(self, stacks: Stacks, work: WorkBudget) -> tuple[dict[Any, Any], list[np.ndarray], list[Stack]]:
        """The positions a state is made of (suffix walks, token tops, the end), the uncertain tokens' answers and
        the stacks walked directly (past ``_NEW_SUFFIXES_PER_MASK`` new positions), with the per-stack plans."""
        g = self.rules
        unc: list[np.ndarray] = []
        direct: list[Stack] = []
        new = 0
        parts: dict[Any, Any] = {}     # the positions this state is made of: suffixes, token tops, end
        plans = self._plans
        for s in stacks:
            plan = plans.get(s)       # a stack met before: its position, walk and uncertain answer at once
            if plan is not None:
                parts[plan[0]] = plan[1]
                if plan[2] is not None:
                    unc.append(plan[2])
                continue
            if not s:
                parts[()] = None
                continue
            top = s[-1]
            if g.types[top] in (TOKEN, TOKEN_NOT):
                parts[top] = None
                continue
            below, suffix = g.split(s)
            li = parts.get(suffix)
            if li is None:
                li = self._cached_local(suffix)
                if li is None:
                    if new >= _NEW_SUFFIXES_PER_MASK:
                        direct.append(s)      # many new positions at once (wide alternatives): llama.cpp's walk
                        continue
                    new += 1
                    li = self.local(suffix, work)
                parts[suffix] = li
            ids = self._uncertain(suffix, below, li, work) if li.keys is not None else None
            if ids is not None:
                unc.append(ids)
            if len(below) <= _MAX_CACHED_BELOW:
                # charged with the walk it keeps alive too (shared, so overcounted): bounded memory
                plans.put(s, (suffix, li, ids), 8 * len(s) + 200 + _info_bytes(li)
                          + (0 if ids is None else ids.nbytes))
        return parts, unc, direct

    def _union(self, parts: dict[Any, Any], work: WorkBudget) -> tuple[tuple, np.ndarray]:
        """The union of the positions' sure tokens as a read-only bool over ids, kept per set of positions."""
        n = self.n_vocab
        ukey = tuple(parts)
        m = self._unions.get_lru(ukey)
        if m is None:
            bits = np.zeros((n + 7) // 8, dtype=np.uint8)
            for part, li in parts.items():
                work.spend(VISIT_COST + len(bits))
                if li is not None:
                    bits |= li.bits
                elif part == ():
                    bits |= self._empty_bits(work)
                else:
                    bits |= self._token_bits(part, work)
            m = np.unpackbits(bits, count=n).view(bool)
            m[self.index.eog_ids] = () in parts
            m.setflags(write=False)
            self._unions.put(ukey, m, m.nbytes + 64 * len(ukey))
        return ukey, m

    def mask_for(self, stacks: Stacks, partial: Partial, *, state_cache: bool = True) -> np.ndarray:
        """The read-only mask ``llama_grammar_apply_impl`` gives in state ``(stacks, partial)``.

        Masks are kept per state (LRU); ``state_cache=False`` bypasses that cache (the per-position caches still
        apply: each suffix's walk, the uncertain tokens' answers, and the union of the sure tokens of each set of
        positions met), which the benchmark uses to time the computation itself.

        Raises:
            GrammarLimitError: the mask needs more than ``limits.max_mask_work`` row steps.
        """
        key = (self._serial, stacks, partial)
        if state_cache:
            m = self._masks.get_lru(key)
            if m is not None:
                return m
        n = self.n_vocab
        t = self.index.table
        work = self._work()
        if partial[1] > 0:
            pt = self.index.partial_table(*partial)
            acc = walk(self.rules, pt, stacks, work=work)
            m = np.zeros(n, dtype=bool)
            m[pt.ids[acc]] = True
            m[self.index.eog_ids] = any(not s for s in stacks)
            m.setflags(write=False)
        else:
            parts, unc, direct = self._positions(stacks, work)
            _, m = self._union(parts, work)
            if direct or unc:
                m = m.copy()
                if direct:
                    acc = walk(self.rules, t, tuple(direct), work=work, seed=rows_of(t, m))
                    set_rows(t, m, acc)
                for rows in unc:
                    m[rows] = True
                m.setflags(write=False)
        if state_cache and sum(map(len, stacks)) <= _MAX_CACHED_STATE:
            self._masks.put(key, m)
        return m

    def fill_bits_for(self, stacks: Stacks, partial: Partial, out: np.ndarray, *, state_cache: bool = True) -> None:
        """Write the mask of state ``(stacks, partial)`` as packed bits into ``out`` (uint8, at least
        ``ceil(n_vocab / 8)`` bytes; token ``t`` is bit ``t & 7``, least significant first, of byte ``t >> 3``: the
        bytes of a little-endian int32 bitmask row). Bits past ``n_vocab`` in the last byte are cleared; bytes
        after it are left alone.

        The same answer as :meth:`mask_for`, built without a bool mask where the state allows (no pending UTF-8
        sequence, no stack walked directly): the packed union of the positions' sure tokens (kept per set of
        positions, as the bool one) copied, then the uncertain tokens' answers set bit by bit.
        ``state_cache=False`` bypasses the per-state cache as in :meth:`mask_for`.
        """
        n = self.n_vocab
        nb = (n + 7) // 8
        if out.dtype != np.uint8 or out.ndim != 1 or len(out) < nb or not out.flags.writeable:
            raise TypeError(f"out must be a writable 1-D uint8 array of at least {nb} bytes")
        m = self._masks.get_lru((self._serial, stacks, partial)) if state_cache else None
        if m is None and partial[1] == 0:
            work = self._work()
            parts, unc, direct = self._positions(stacks, work)
            if not direct:
                ukey, um = self._union(parts, work)
                row = self._union_rows.get_lru(ukey)
                if row is None:
                    row = np.packbits(um, bitorder="little")
                    row.setflags(write=False)
                    self._union_rows.put(ukey, row, row.nbytes + 64 * len(ukey))
                out[:nb] = row
                if unc:
                    set_bits(out, unc)
                return
        if m is None:
            m = self.mask_for(stacks, partial, state_cache=state_cache)
        out[:nb] = np.packbits(m, bitorder="little")

    def allows_in(self, stacks: Stacks, partial: Partial, token: int) -> bool:
        """Whether ``token`` survives ``llama_grammar_apply_impl`` in state ``(stacks, partial)``."""
        m = self._masks.get((self._serial, stacks, partial))
        if m is not None:
            return bool(m[token])
        idx = self.index
        if idx.eog[token]:
            return any(not s for s in stacks)
        if idx.dead[token]:
            return False
        cps, val, rem = idx.decode(token, *partial)
        cps = apply_view(cps)
        g = self.rules
        if partial[1] > 0:
            return g.stacks_accept(stacks, cps, val, rem, token)
        byte, bit = token >> 3, 0x80 >> (token & 7)
        for s in stacks:
            if s and g.types[s[-1]] not in (TOKEN, TOKEN_NOT):
                li = self._local.get(g.split(s)[1])
                if li is not None:     # the per-suffix cache decides unless the token is uncertain there
                    if li.bits[byte] & bit:
                        return True
                    if not li.unc_bits[byte] & bit:
                        continue
            if g.stacks_accept((s,), cps, val, rem, token):
                return True
        return False

    def dead_end(self, stacks: Stacks, partial: Partial) -> str | None:
        """Why no token at all can follow in this state, or None if some token can (or the grammar can end)."""
        if any(not s for s in stacks) or self.mask_for(stacks, partial).any():
            return None
        g = self.rules
        what = []
        for s in stacks[:4]:
            ty, v = g.types[s[-1]], g.values[s[-1]]
            if ty in (TOKEN, TOKEN_NOT):
                if ty == TOKEN and not 0 <= v < self.n_vocab:
                    what.append(f"token <[{v}]> (outside the vocabulary of {self.n_vocab})")
                elif ty == TOKEN and self.index.eog[v]:
                    what.append(f"token <[{v}]> (an end-of-generation token, which ends generation instead)")
                else:
                    what.append(f"{'!' if ty == TOKEN_NOT else ''}<[{v}]>")
            else:
                positive, items, _ = g.classes[s[-1]]
                what.append(f"a character in {'' if positive else 'the complement of '}"
                            f"{[(hex(lo), hex(hi)) for lo, hi in items][:4]} that no token starts with")
        return ("the grammar allows no token here and cannot end: it expects " + "; or ".join(what) +
                (" ..." if len(stacks) > 4 else ""))


def _pack_state(old: Stacks, new: Stacks) -> Any:
    """``old`` stored against the state ``new`` that follows it: long stacks keep only what differs from a stack of
    ``new`` (a deep nesting costs O(change) per step instead of O(depth))."""
    if not new or sum(map(len, old)) < 256:
        return old
    out: list[Any] = []
    packed = False
    for i, s in enumerate(old):
        j = min(i, len(new) - 1)
        ref = new[j]
        n = min(len(s), len(ref))
        if n < 64:
            out.append(s)
            continue
        if s[:n] == ref[:n]:
            lcp = n
        else:
            lo, hi = 0, n
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if s[:mid] == ref[:mid]:
                    lo = mid
                else:
                    hi = mid
            lcp = lo
        if lcp < 32:
            out.append(s)
        else:
            out.append(_Delta(j, lcp, s[lcp:]))
            packed = True
    return _Packed(out) if packed else old


class _Delta:
    __slots__ = ("j", "keep", "tail")

    def __init__(self, j: int, keep: int, tail: Stack) -> None:
        self.j, self.keep, self.tail = j, keep, tail


class _Packed(list):
    pass


def _unpack_state(packed: Any, new: Stacks) -> Stacks:
    if not isinstance(packed, _Packed):
        return packed
    return tuple(new[e.j][:e.keep] + e.tail if isinstance(e, _Delta) else e for e in packed)


class GrammarMatcher:
    """The state of one generation under a compiled grammar (llama.cpp's ``llama_grammar`` stacks + partial UTF-8).

    ``accept_token`` returns False, and changes nothing, for a token llama.cpp's grammar sampler would mask, and
    where llama.cpp would throw "Unexpected empty grammar stack". Every accepted token (or byte string) can be
    undone with ``rollback``. Memory per matcher: the current state plus, per accepted step, what changed.
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._stacks: Stacks = compiled.initial_stacks
        self._partial: Partial = _NO_PARTIAL
        self._terminated = False
        self._history: list[tuple[Any, Partial, bool]] = []

    def _check(self, token: Any) -> int:
        if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
            raise TokenIdError(f"a token id must be an int, got {type(token).__name__} {token!r}")
        t = int(token)
        if not 0 <= t < self.compiled.n_vocab:
            raise TokenIdError(f"token id {token} out of range (vocabulary of {self.compiled.n_vocab})")
        return t

    def _push(self, stacks: Stacks, partial: Partial) -> None:
        """Record the current state in the history and move to ``(stacks, partial)``."""
        self._history.append((_pack_state(self._stacks, stacks), self._partial, self._terminated))
        self._stacks, self._partial = stacks, partial

    @property
    def stacks(self) -> Stacks:
        """The current stacks (tuples of element positions, top last), in llama.cpp's order."""
        return self._stacks

    @property
    def partial_utf8(self) -> Partial:
        """``(value, n_remain)`` of a UTF-8 sequence left incomplete by the last token."""
        return self._partial

    def allows(self, token: int) -> bool:
        """Whether ``token`` is allowed now (as llama-server checks a single candidate)."""
        return self.compiled.allows_in(self._stacks, self._partial, self._check(token))

    def mask(self) -> np.ndarray:
        """The allowed tokens over the whole vocabulary (True = allowed); a read-only array.

        Raises:
            GrammarLimitError: computing it would exceed ``compiled.limits`` (an extremely ambiguous grammar).
        """
        return self.compiled.mask_for(self._stacks, self._partial)

    def dead_end(self) -> str | None:
        """Why no token can follow (the grammar can never match from here), or None when some token can."""
        return self.compiled.dead_end(self._stacks, self._partial)

    def can_end(self) -> bool:
        """Whether the grammar may end here (some stack is empty): end-of-generation tokens are allowed."""
        return any(not s for s in self._stacks)

    def is_terminated(self) -> bool:
        """Whether an end-of-generation token has been accepted (it leaves llama.cpp's state unchanged)."""
        return self._terminated

    def accept_token(self, token: int) -> bool:
        """Advance over ``token`` (``llama_grammar_accept_impl``); False and no change if it is not allowed.

        Raises:
            TokenIdError: ``token`` is not an int (floats and strings are refused, not truncated) or out of range.
            GrammarLimitError: the new state would hold more than ``compiled.limits.max_stacks`` stacks, or
                getting there would take more than ``compiled.limits.max_accept_work`` stack steps.
        """
        token = self._check(token)
        c = self.compiled
        if not c.allows_in(self._stacks, self._partial, token):
            return False
        if c.index.eog[token]:
            self._history.append((self._stacks, self._partial, self._terminated))
            self._terminated = True
            return True
        cps, val, rem = c.index.decode(token, *self._partial)
        res = c.rules.accept_token(self._stacks, self._partial, token, cps, _norm(val, rem))
        if res is None:    # llama.cpp: "Unexpected empty grammar stack after accepting piece"
            return False
        self._push(*res)
        return True

    def accept_piece(self, token: int, piece: bytes) -> bool:
        """``llama_grammar_accept_token(grammar, token, piece)`` alone: no apply-time check (no EOG rule, no mask).

        Stacks that cannot take the piece are dropped as in llama.cpp's loop; False and no change where llama.cpp
        throws "Unexpected empty grammar stack". Undoable with :meth:`rollback`. Used to replay lazy grammars.
        """
        token = self._check(token)
        if not isinstance(piece, (bytes, bytearray)):
            raise TokenIdError(f"a piece must be bytes, got {type(piece).__name__}")
        cps, val, rem = decode_utf8(bytes(piece), *self._partial)
        if rem < 0:
            return False
        res = self.compiled.rules.accept_token(self._stacks, self._partial, token, cps, _norm(val, rem))
        if res is None:
            return False
        self._push(*res)
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance over raw text (``llama_grammar_accept_str``); False and no change if the grammar rejects it.

        Token elements (``<[id]>``) never match text. Invalid UTF-8 is rejected.

        Raises:
            TypeError: ``data`` is not bytes-like (an int is not taken as a count of NUL bytes).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TokenIdError(f"accept_bytes takes bytes, got {type(data).__name__}")
        data = bytes(data)
        cps, val, rem = decode_utf8(data, *self._partial)
        if rem < 0:
            return False
        stacks = self._stacks
        g = self.compiled.rules
        budget = [g.max_accept_work]
        for cp in cps:
            stacks = g.accept_char(stacks, cp, budget)
            if not stacks:
                return False
        if rem > 0 and not any(s and s[-1] in g.classes and g.match_partial(s[-1], val, rem) for s in stacks):
            return False
        self._push(stacks, _norm(val, rem) if data else self._partial)
        return True

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens (or byte strings)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TokenIdError(f"rollback takes an int count, got {type(n).__name__}")
        if not 0 <= n <= len(self._history):
            raise TokenIdError(f"cannot roll back {n} steps: {len(self._history)} accepted")
        stacks = self._stacks
        for _ in range(n):
            packed, partial, terminated = self._history.pop()
            stacks = _unpack_state(packed, stacks)
            self._stacks, self._partial, self._terminated = stacks, partial, terminated

    def fork(self) -> GrammarMatcher:
        """An independent copy of this matcher (same compiled grammar, same state and history)."""
        m = GrammarMatcher(self.compiled)
        m._stacks, m._partial, m._terminated = self._stacks, self._partial, self._terminated
        m._history = list(self._history)
        return m

    def reset(self) -> None:
        """Back to the start of the grammar, with no history (all per-matcher state released)."""
        self._stacks = self.compiled.initial_stacks
        self._partial = _NO_PARTIAL
        self._terminated = False
        self._history = []

    @property
    def num_accepted(self) -> int:
        """How many steps ``rollback`` can undo."""
        return len(self._history)

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0, *, vocab_size: int | None = None) -> bool:
        """Write :meth:`mask` as packed int32 bits into row ``index`` of ``bitmask`` (xgrammar's verb).

        See :func:`constrained.grammar.bitmask.fill_next_token_bitmask`; returns whether any token is masked.
        """
        from .bitmask import fill_next_token_bitmask

        return fill_next_token_bitmask(self, bitmask, index, vocab_size=vocab_size)


_COMPILED: weakref.WeakKeyDictionary[Vocabulary, _LRU] = weakref.WeakKeyDictionary()
_COMPILED_LOCK = threading.Lock()


def _parsed(grammar: Any, vocab: Vocabulary) -> ParsedGrammar:
    if isinstance(grammar, ParsedGrammar):
        return grammar
    if hasattr(grammar, "parsed"):
        return grammar.parsed(vocab)
    raise TypeError(f"expected a Grammar or ParsedGrammar, got {type(grammar).__name__}")


class _RulesKey:
    """A grammar's rules and root as a cache key whose hash is computed once (a 4M-element grammar's rules take
    0.1-0.3 s to hash)."""

    __slots__ = ("h", "root", "rules")

    def __init__(self, rules: tuple, root: int) -> None:
        self.rules, self.root, self.h = rules, root, hash((rules, root))

    def __hash__(self) -> int:
        return self.h

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _RulesKey) and self.h == other.h and self.root == other.root
                and (self.rules is other.rules or self.rules == other.rules))


def compile_grammar(grammar: Any, vocab: Vocabulary) -> CompiledGrammar:
    """Bind ``grammar`` (a ``Grammar`` or a :class:`ParsedGrammar`) to ``vocab``; cached per (grammar, vocab).

    Example:
        >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
        >>> v = Vocabulary([b"a"])
        >>> g = ParsedGrammar((((T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0)
        >>> compile_grammar(g, v) is compile_grammar(g, v)
        True
    """
    parsed = _parsed(grammar, vocab)
    key = parsed.__dict__.get("_compile_key") if hasattr(parsed, "__dict__") else None
    if key is None:
        rules = parsed.rules
        if not isinstance(rules, tuple) or not all(type(r) is tuple for r in rules):
            rules = tuple(map(tuple, rules))
        key = _RulesKey(rules, parsed.root_id)     # IntEnum elements hash and compare as their ints
        if hasattr(parsed, "__dict__"):
            object.__setattr__(parsed, "_compile_key", key)
    with _COMPILED_LOCK:
        per_vocab = _COMPILED.get(vocab)
        if per_vocab is None:
            per_vocab = _COMPILED[vocab] = _LRU(32)
        cg = per_vocab.get_lru(key)
        if cg is None:
            cg = CompiledGrammar(parsed, vocab)
            per_vocab.put(key, cg)
        return cg
