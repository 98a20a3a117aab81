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
from typing import Any

import numpy as np

from ..errors import TokenIdError
from ..vocab import Vocabulary
from .charclass import _first_count, _loop_parts
from .ir import ParsedGrammar
from .limits import DEFAULT_MATCHER_LIMITS, MatcherLimits
from .stacks import (
    CHAIN_MAX,
    CHAR,
    CHAR_ALT,
    CHAR_ANY,
    CHAR_NOT,
    CHAR_RNG_UPPER,
    BoundedMemo,
    GrammarRules,
    Partial,
    Stack,
    Stacks,
)
from .token_mask_cache import (
    _LOCAL_BYTES,
    _LRU,
    _PLAN_BYTES,
    _TOKEN_TOP_BYTES,
    _UNION_BYTES,
    _UNION_ROW_BYTES,
    TokenMaskCache,
    _vocab_caches,
)
from .tokenindex import decode_utf8, vocab_index
from .walk_python import LOOP_MIN_ROWS

__all__ = ["CompiledGrammar", "GrammarMatcher", "MatcherLimits", "TokenIdError", "compile_grammar"]

_NO_PARTIAL: Partial = (0, 0)


def _norm(value: int, n_remain: int) -> Partial:
    return (value, n_remain) if n_remain > 0 else _NO_PARTIAL


_SERIAL = itertools.count()
_TRANSITION_BUDGET = 1 << 19      # accept_token's transition memo per compiled grammar: stack positions it may hold
_MAX_CACHED_STATE = 4096          # states holding more stack positions than this are not cached

_PREPARE_MAX_ELEMENTS = 20_000      # grammars up to this size get their wide classes' table parts at compile time
_PREPARE_MAX_CLASSES = 4            # at most this many wide classes per grammar
_WIDE_SHARE = 16                    # a class is wide if it starts at least 1/16 of the tokens


class CompiledGrammar(TokenMaskCache):
    """A grammar bound to a vocabulary: the stack machine plus the mask caches, shared by its matchers (the mask
    methods, ``mask_for``, ``fill_bits_for``, ``allows_in``..., are its base's:
    :class:`~constrained.grammar.token_mask_cache.TokenMaskCache`).

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
        # a bounded repetition's chain followed as far as the longest token reaches (TokenTable.longer has one
        # entry per code point depth), not CHAIN_MAX: gemma-4's longest token has 32 code points
        self.rules.chain_max = max(1, min(CHAIN_MAX, len(self.index.table.longer)))
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
        # accept_token's transitions: (id(stacks), partial, token) -> (stacks, new stacks | None, new partial,
        # history entry, allowed, end of generation); the stacks object is checked by identity, so an id reused by
        # another object never hits. New states are interned in the same memo (key ("state", stacks)), so a state
        # reached again is the same object. Bounded by the positions of the states it holds; the rules' clear_memos
        # empties it.
        self._trans = BoundedMemo(f"transitions#{self._serial}", budget=_TRANSITION_BUDGET)
        self.rules.attach_memo(self._trans)
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
        self._trans.clear()        # transitions were computed under the old limits
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
        stacks = self._stacks
        hit = self.compiled._trans.get((id(stacks), self._partial, token)) if type(token) is int else None
        if hit is not None and hit[0] is stacks:
            return hit[4]
        return self.compiled.allows_in(stacks, self._partial, self._check(token))

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

        A transition met before (same state, same token) is a dictionary hit (about 0.3 us).

        Raises:
            TokenIdError: ``token`` is not an int (floats and strings are refused, not truncated) or out of range.
            GrammarLimitError: the new state would hold more than ``compiled.limits.max_stacks`` stacks, or
                getting there would take more than ``compiled.limits.max_accept_work`` stack steps.
        """
        stacks = self._stacks
        hit = self.compiled._trans.get((id(stacks), self._partial, token)) if type(token) is int else None
        if hit is None or hit[0] is not stacks:
            return self._accept_slow(token)
        new = hit[1]
        if new is None:
            return False
        self._history.append((hit[3], self._partial, self._terminated))
        if hit[5]:
            self._terminated = True
        else:
            self._stacks, self._partial = new, hit[2]
        return True

    def _accept_slow(self, token: Any) -> bool:
        token = self._check(token)
        c = self.compiled
        stacks, partial = self._stacks, self._partial
        key = (id(stacks), partial, token)
        trans = c._trans
        if not c.allows_in(stacks, partial, token):
            trans.put(key, (stacks, None, partial, None, False, False), 8)
            return False
        if c.index.eog[token]:
            trans.put(key, (stacks, stacks, partial, stacks, True, True), 8)
            self._history.append((stacks, partial, self._terminated))
            self._terminated = True
            return True
        cps, val, rem = c.index.decode(token, *partial)
        res = c.rules.accept_token(stacks, partial, token, cps, _norm(val, rem))
        if res is None:    # llama.cpp: "Unexpected empty grammar stack after accepting piece"
            trans.put(key, (stacks, None, partial, None, True, False), 8)
            return False
        new, new_partial = res
        size = sum(map(len, new))
        if size <= _MAX_CACHED_STATE:
            interned = trans.get(("state", new))
            if interned is None:
                trans.put(("state", new), new, 8 + size + len(new))
            else:
                new = interned
            packed = _pack_state(stacks, new)
            trans.put(key, (stacks, new, new_partial, packed, True, False), 8)
            self._history.append((packed, partial, self._terminated))
            self._stacks, self._partial = new, new_partial
        else:
            self._push(new, new_partial)
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
    _warm_vocabulary(vocab)
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


WARM_MIN_TOKENS = 32768
"""Vocabularies from this size on are warmed once (see :func:`_warm_vocabulary`)."""
_WARM_DOCUMENT = b'{"a": "bc d", "e": [1.5, -20, 3e4, true, false, null, {}], "f": {"g": ""}}'
_WARMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WARM_LOCK = threading.Lock()


def _warm_vocabulary(vocab: Vocabulary) -> None:
    """Once per large vocabulary, before its first grammar: the schema-independent work every JSON grammar meets,
    done up front and kept with the vocabulary's index (shared by all its grammars): the generic JSON value
    grammar (``from_json_schema({})``: strings, numbers, literals, objects, arrays, whitespace) compiled, its
    wide classes' table parts prepared, and its masks taken along a document that visits each kind of value, so
    the per-suffix walks of those rules are in the index's shared cache. Masks are unchanged (the caches are the
    ones a first visit fills); a failure here is ignored (the grammar that needs the work does it then)."""
    if len(vocab) < WARM_MIN_TOKENS:
        return
    with _WARM_LOCK:
        if vocab in _WARMED:
            return
        _WARMED[vocab] = True        # before the work: the compile below comes back through compile_grammar
    try:
        from ..json_schema import json_schema_to_gbnf
        from .gbnf import parse_gbnf

        layout = parse_gbnf(json_schema_to_gbnf({}))
        parsed = ParsedGrammar(layout.rules, layout.symbol_ids, layout.symbol_ids["root"])
        m = compile_grammar(parsed, vocab).matcher()
        m.mask()
        for i in range(len(_WARM_DOCUMENT)):
            if not m.accept_bytes(_WARM_DOCUMENT[i:i + 1]):
                break
            m.mask()
    except Exception:  # noqa: BLE001, S110 - a warm-up only
        pass
