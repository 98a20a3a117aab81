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

from ..vocab import Vocabulary
from .ir import ParsedGrammar
from .mask import LocalInfo, by_id, local_info, walk
from .stacks import TOKEN, TOKEN_NOT, GrammarRules, Partial, Stack, Stacks
from .tokenindex import apply_view, decode_utf8, vocab_index

__all__ = ["CompiledGrammar", "GrammarMatcher", "compile_grammar"]

_NO_PARTIAL: Partial = (0, 0)


def _norm(value: int, n_remain: int) -> Partial:
    return (value, n_remain) if n_remain > 0 else _NO_PARTIAL


class _LRU(OrderedDict):
    """A small thread-safe LRU mapping."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.lock = threading.Lock()

    def get_lru(self, key: Any) -> Any:
        with self.lock:
            v = self.get(key)
            if v is not None:
                self.move_to_end(key)
            return v

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self[key] = value
            if len(self) > self.size:
                self.popitem(last=False)


_SERIAL = itertools.count()
_MASK_CACHE_BYTES = 64 << 20        # per vocabulary, over all its grammars


def _vocab_caches(index: Any) -> tuple[_LRU, _LRU]:
    """The per-vocabulary LRUs of full masks and of uncertain-token answers (bounded whatever the grammars)."""
    with index._lock:
        caches = getattr(index, "matcher_caches", None)
        if caches is None:
            caches = index.matcher_caches = (_LRU(max(16, _MASK_CACHE_BYTES // max(index.n_vocab, 1))),
                                             _LRU(8192))
        return caches


class CompiledGrammar:
    """A grammar bound to a vocabulary: the stack machine plus the mask caches, shared by its matchers.

    Build it with :func:`compile_grammar`. ``precompute()`` fills the per-position caches eagerly.
    """

    def __init__(self, parsed: ParsedGrammar, vocab: Vocabulary) -> None:
        self.parsed = parsed
        self.vocab = vocab
        self.index = vocab_index(vocab)
        self.n_vocab = self.index.n_vocab
        self.rules = GrammarRules(parsed)
        self.initial_stacks: Stacks = self.rules.initial_stacks()
        self._local: dict[Stack, LocalInfo] = {}
        self._token_top: dict[int, np.ndarray] = {}
        self._empty: np.ndarray | None = None
        self._serial = next(_SERIAL)
        self._masks, self._unc = _vocab_caches(self.index)

    def matcher(self) -> GrammarMatcher:
        """A fresh matcher at the start of the grammar."""
        return GrammarMatcher(self)

    # ---- per-position caches -------------------------------------------------------------------------------
    def local(self, suffix: Stack) -> LocalInfo:
        """The cached walk of the stack suffix (shared with other grammars of the same vocabulary)."""
        li = self._local.get(suffix)
        if li is None:
            key = self.rules.canonical_key(suffix)
            shared = self.index.shared_local
            with self.index._lock:
                li = shared.get(key)
                if li is not None:
                    shared.move_to_end(key)
            if li is None:
                li = local_info(self.rules, self.index.table, suffix)
                with self.index._lock:
                    shared[key] = li
                    if len(shared) > self.index.shared_local_size:
                        shared.popitem(last=False)
            self._local[suffix] = li
        return li

    def _token_bits(self, p: int) -> np.ndarray:
        m = self._token_top.get(p)
        if m is None:
            t = self.index.table
            m = self._token_top[p] = np.packbits(by_id(t, walk(self.rules, t, ((p,),))))
        return m

    def _empty_bits(self) -> np.ndarray:
        if self._empty is None:
            t = self.index.table
            self._empty = np.packbits(by_id(t, walk(self.rules, t, ((),))))
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

    def _uncertain(self, suffix: Stack, below: Stack, li: LocalInfo) -> np.ndarray:
        """The token ids among the suffix's uncertain ones that the rest of the stack accepts (cached)."""
        key = (self._serial, suffix, below)
        ids = self._unc.get_lru(key)
        if ids is None:
            ids = li.unc_ids[walk(self.rules, li.keys, self.rules.advance(below))]
            self._unc.put(key, ids)
        return ids

    # ---- the mask ------------------------------------------------------------------------------------------
    def mask_for(self, stacks: Stacks, partial: Partial, *, state_cache: bool = True) -> np.ndarray:
        """The read-only mask ``llama_grammar_apply_impl`` gives in state ``(stacks, partial)``.

        Masks are kept per state (LRU); ``state_cache=False`` bypasses that cache (the per-suffix caches still
        apply), which the benchmark uses to time the computation itself.
        """
        key = (self._serial, stacks, partial)
        if state_cache:
            m = self._masks.get_lru(key)
            if m is not None:
                return m
        n = self.n_vocab
        g = self.rules
        if partial[1] > 0:
            t = self.index.partial_table(*partial)
            acc = walk(g, t, stacks)
            m = np.zeros(n, dtype=bool)
            m[t.ids[acc]] = True
        else:
            bits = np.zeros((n + 7) // 8, dtype=np.uint8)
            unc = []
            for s in stacks:
                if not s:
                    bits |= self._empty_bits()
                    continue
                top = s[-1]
                if g.types[top] in (TOKEN, TOKEN_NOT):
                    bits |= self._token_bits(top)
                    continue
                below, suffix = g.split(s)
                li = self.local(suffix)
                bits |= li.bits
                if li.keys is not None:
                    unc.append(self._uncertain(suffix, below, li))
            m = np.unpackbits(bits, count=n).view(bool)
            for rows in unc:
                m[rows] = True
        m[self.index.eog_ids] = any(not s for s in stacks)
        m.setflags(write=False)
        if state_cache:
            self._masks.put(key, m)
        return m

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


class GrammarMatcher:
    """The state of one generation under a compiled grammar (llama.cpp's ``llama_grammar`` stacks + partial UTF-8).

    ``accept_token`` returns False, and changes nothing, for a token llama.cpp's grammar sampler would mask, and
    where llama.cpp would throw "Unexpected empty grammar stack". Every accepted token (or byte string) can be
    undone with ``rollback``.
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._stacks: Stacks = compiled.initial_stacks
        self._partial: Partial = _NO_PARTIAL
        self._terminated = False
        self._history: list[tuple[Stacks, Partial, bool]] = []

    def _check(self, token: int) -> int:
        t = int(token)
        if not 0 <= t < self.compiled.n_vocab:
            raise ValueError(f"token id {token} out of range (vocabulary of {self.compiled.n_vocab})")
        return t

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
        """The allowed tokens over the whole vocabulary (True = allowed); a read-only array."""
        return self.compiled.mask_for(self._stacks, self._partial)

    def can_end(self) -> bool:
        """Whether the grammar may end here (some stack is empty): end-of-generation tokens are allowed."""
        return any(not s for s in self._stacks)

    def is_terminated(self) -> bool:
        """Whether an end-of-generation token has been accepted (it leaves llama.cpp's state unchanged)."""
        return self._terminated

    def accept_token(self, token: int) -> bool:
        """Advance over ``token`` (``llama_grammar_accept_impl``); False and no change if it is not allowed."""
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
        self._history.append((self._stacks, self._partial, self._terminated))
        self._stacks, self._partial = res
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance over raw text (``llama_grammar_accept_str``); False and no change if the grammar rejects it.

        Token elements (``<[id]>``) never match text. Invalid UTF-8 is rejected.
        """
        data = bytes(data)
        cps, val, rem = decode_utf8(data, *self._partial)
        if rem < 0:
            return False
        stacks = self._stacks
        g = self.compiled.rules
        for cp in cps:
            stacks = g.accept_char(stacks, cp)
            if not stacks:
                return False
        if rem > 0 and not any(s and s[-1] in g.classes and g.match_partial(s[-1], val, rem) for s in stacks):
            return False
        self._history.append((self._stacks, self._partial, self._terminated))
        self._stacks, self._partial = stacks, _norm(val, rem) if data else self._partial
        return True

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens (or byte strings)."""
        if not 0 <= n <= len(self._history):
            raise ValueError(f"cannot roll back {n} steps: {len(self._history)} accepted")
        if n:
            self._stacks, self._partial, self._terminated = self._history[-n]
            del self._history[-n:]

    def fork(self) -> GrammarMatcher:
        """An independent copy of this matcher (same compiled grammar, same state and history)."""
        m = GrammarMatcher(self.compiled)
        m._stacks, m._partial, m._terminated = self._stacks, self._partial, self._terminated
        m._history = list(self._history)
        return m

    def reset(self) -> None:
        """Back to the start of the grammar, with no history."""
        self._stacks = self.compiled.initial_stacks
        self._partial = _NO_PARTIAL
        self._terminated = False
        self._history.clear()

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
    key = (tuple(tuple((int(t), int(v)) for t, v in rule) for rule in parsed.rules), parsed.root_id)
    with _COMPILED_LOCK:
        per_vocab = _COMPILED.get(vocab)
        if per_vocab is None:
            per_vocab = _COMPILED[vocab] = _LRU(32)
        cg = per_vocab.get_lru(key)
        if cg is None:
            cg = CompiledGrammar(parsed, vocab)
            per_vocab.put(key, cg)
        return cg
