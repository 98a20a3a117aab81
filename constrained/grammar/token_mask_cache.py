"""The token-mask cache of a compiled grammar: XGrammar's adaptive token mask cache on llama.cpp's stack machine.

A state's mask is put together from cached parts instead of walking the vocabulary: each stack's *position* (the
suffix of its top elements, see ``GrammarRules.split``) has its walk cached (:func:`~constrained.grammar.mask.local_info`:
the tokens it accepts for sure, and the uncertain ones with what they need of the rest of the stack); the union of
the sure tokens of each set of positions, the uncertain tokens' answers per rest of stack, each stack's plan and
each state's finished mask are kept in bounded LRUs (:class:`_LRU`, bounded in bytes; the per-state masks and the
uncertain answers are shared by every grammar of a vocabulary). :class:`TokenMaskCache` holds the methods:
``mask_for`` (what ``llama_grammar_apply_impl`` leaves unmasked), ``fill_bits_for`` (the same as a packed bitmask
row), ``allows_in`` (one candidate) and ``dead_end``; it is the base of
:class:`~constrained.grammar.matcher.CompiledGrammar`, whose constructor sets up the caches.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> from constrained.grammar.matcher import compile_grammar
    >>> g = ParsedGrammar((((T.CHAR, 104), (T.CHAR, 105), (T.END, 0)),), {"root": 0}, 0)  # root ::= "hi"
    >>> cg = compile_grammar(g, Vocabulary([b"h", b"i", b"hi", b"x"]))
    >>> isinstance(cg, TokenMaskCache), cg.mask_for(cg.initial_stacks, (0, 0)).tolist()
    (True, [True, False, True, False])
    >>> out = np.zeros(1, dtype=np.uint8); cg.fill_bits_for(cg.initial_stacks, (0, 0), out); int(out[0])
    5
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .limits import VISIT_COST, WorkBudget
from .mask import LocalInfo, local_info, walk
from .packing import pack_by_id, rows_of, set_bits, set_rows
from .stacks import TOKEN, TOKEN_NOT, GrammarRules, Partial, Stack, Stacks
from .tokenindex import apply_view


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


_MASK_CACHE_BYTES = 64 << 20        # per vocabulary, over all its grammars
_LOCAL_BYTES = 32 << 20             # per compiled grammar: its per-suffix walks (the shared cache holds more)
_TOKEN_TOP_BYTES = 8 << 20          # per compiled grammar: masks of token-topped stacks
_UNION_BYTES = 32 << 20             # per compiled grammar: unions of the sure tokens of sets of positions
#                                     (128 at 262,144 tokens; the users schema of the benchmark needs more than 64)
_PLAN_BYTES = 32 << 20              # per compiled grammar: each stack's position, walk and uncertain answer
_UNION_ROW_BYTES = 4 << 20          # per compiled grammar: packed rows of those unions (fill_bits_for)
_MAX_CACHED_STATE = 4096            # states holding more stack positions are not kept in the state cache
_MAX_CACHED_BELOW = 1024            # nor uncertain-token answers for a longer rest of stack
_NEW_SUFFIXES_PER_MASK = 16         # more new suffixes in one state: the rest are walked directly (a JSON
#                                     value opens 11; gemma-4: chat 2.1 -> 1.6 ms, the ambiguous grammar 6.1 -> 3.5)


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


class TokenMaskCache:
    """The mask of a state from the per-position caches (the base of
    :class:`~constrained.grammar.matcher.CompiledGrammar`, whose ``__init__`` sets the attributes below)."""

    rules: GrammarRules
    index: Any                  # the vocabulary's TokenIndex
    n_vocab: int
    initial_stacks: Stacks

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
            li = self._walk_local(suffix, work or self._work())
        return li

    def _walk_local(self, suffix: Stack, work: WorkBudget) -> LocalInfo:
        """The walk of a suffix :meth:`_cached_local` has just missed, put in both caches."""
        li = local_info(self.rules, self.index.table, suffix, work)
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
                    li = self._walk_local(suffix, work)
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
                ukey = tuple(parts)
                row = self._union_rows.get_lru(ukey)      # looked up first: the bool union may be gone
                if row is None:
                    _, um = self._union(parts, work)
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
