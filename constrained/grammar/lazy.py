"""Lazy grammars: unconstrained until a trigger appears, then the grammar, as llama.cpp's lazy grammar sampler.

``Grammar.matcher(vocab, trigger_patterns=[...], trigger_tokens=[...])`` gives a :class:`LazyMatcher` with the
verbs of :class:`~constrained.grammar.matcher.GrammarMatcher`. Its semantics are those of
``llama_sampler_init_grammar_lazy_patterns`` (``src/llama-sampler.cpp:2843``, ``llama_grammar_accept_impl`` in
``src/llama-grammar.cpp:1402-1459``):

- while waiting nothing is masked (end-of-generation included) and every accepted piece (``special=True`` text) is
  appended to a byte buffer, remembering which token wrote which bytes;
- a token in ``trigger_tokens`` triggers at once: earlier text is discarded and only that token enters the grammar;
- otherwise the patterns (ECMAScript, see :mod:`constrained.grammar.lazy_regex`) are searched in list order over
  the buffer; the first that matches wins; the replay starts at its first non-empty capture group (else the match)
  and every buffered token ending after that point is fed to the grammar (``llama_grammar_accept_token``) with its
  piece cut at the start, the last token's text past the trigger included.

**One deliberate difference**: where llama.cpp throws ("Unexpected empty grammar stack after accepting piece",
which fails that request of llama-server with a 500), that is where the grammar rejects the replayed text, the token
is *refused* here: ``allows`` says False, ``mask`` leaves it out, ``accept_token`` returns False. With
``Sampler.sample_constrained`` the token is redrawn, so a run is identical to llama-server's in every run where
llama-server does not fail.

**Cost**: llama.cpp searches the whole buffer with every pattern on every token (quadratic over the waiting text).
Here a pattern of bounded reach (literal words, which is what llama-server's WORD triggers are, and most patterns)
is searched only over the tail a new token can complete, so the cost per token stays flat; a pattern with an
unbounded repetition is searched over the whole buffer, as llama.cpp does. ``mask()`` while waiting checks only the
tokens that can complete a literal trigger (an index per vocabulary); other patterns try every token.

Example:
    >>> from constrained.grammar import Grammar
    >>> from constrained.vocab import Vocabulary
    >>> v = Vocabulary([b"hi", b" <", b"call", b">", b"{", b"}", b"</s>", b"x"], eog_ids=[6])
    >>> m = Grammar.from_gbnf('root ::= "<call>{}"').matcher(v, trigger_patterns=["<call>"])
    >>> [m.accept_token(t) for t in (0, 1, 2)], m.triggered
    ([True, True, True], False)
    >>> m.allows(7), m.allows(3), m.accept_token(3), m.triggered, m.mask().tolist()
    (True, True, True, True, [False, False, False, False, True, False, False, False])
"""

from __future__ import annotations

import re
import re._constants as _sre_c
import re._parser as _sre_p
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..vocab import Vocabulary
from .lazy_regex import TriggerPattern
from .matcher import CompiledGrammar, GrammarMatcher
from .stacks import Stacks
from .tokenindex import decode_utf8

__all__ = ["LazyMatcher", "accept_piece"]

#: literal trigger indexes kept per vocabulary (least recently used dropped beyond this)
LITERAL_CACHE = 64
#: byte-class groupings of the vocabulary kept per vocabulary (least recently used dropped beyond this)
CLASS_CACHE = 16

_PLACEHOLDER: Stacks = ((-1,),)   # a non-empty stack shown while waiting when the grammar's own stacks are all empty


def accept_piece(m: GrammarMatcher, token: int, piece: bytes) -> bool:
    """``llama_grammar_accept_token(grammar, token, piece)`` on ``m``: no apply-time check (no end-of-generation
    rule, no partial UTF-8 check); False and no change where llama.cpp throws. Undone by ``m.rollback(1)``."""
    native = getattr(m, "accept_piece", None)
    if native is not None:
        return bool(native(token, piece))
    c = m.compiled
    partial = m.partial_utf8
    cps, val, rem = decode_utf8(bytes(piece), *partial)
    res = c.rules.accept_token(m.stacks, partial, int(token), cps, (val, rem) if rem > 0 else (0, 0))
    if res is None:
        return False
    m._history.append((m._stacks, m._partial, m._terminated))   # noqa: SLF001 (until the matcher has the verb)
    m._stacks, m._partial = res                                   # noqa: SLF001
    return True


class _VocabFacts:
    """Per-vocabulary facts the waiting mask needs: which tokens a plain mask answers exactly, and literal indexes."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.pieces = vocab.pieces
        n = len(self.pieces)
        clean = np.zeros(n, dtype=bool)
        eog = set(int(t) for t in getattr(vocab, "eog_ids", ()) or ())
        for i, p in enumerate(self.pieces):
            if p and b"\0" not in p and i not in eog:
                try:
                    p.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                clean[i] = True
        self.clean = clean     # accept_piece of the whole piece succeeds iff the grammar's mask allows it
        self._literal: OrderedDict[bytes, tuple[np.ndarray, list[np.ndarray]]] = OrderedDict()
        self._classes: OrderedDict[bytes, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._by_piece: dict[bytes, int] | None = None
        self._lock = threading.Lock()
        self.max_piece = max((len(p) for p in self.pieces), default=0)

    def literal_index(self, lit: bytes) -> tuple[np.ndarray, list[np.ndarray]]:
        """Tokens containing ``lit``, and for each k in 1..len-1 the tokens starting with ``lit[k:]``."""
        with self._lock:
            got = self._literal.get(lit)
            if got is not None:
                self._literal.move_to_end(lit)
        if got is None:
            pieces = self.pieces
            empty = np.zeros(0, dtype=np.int64)
            contains = (np.fromiter((i for i, p in enumerate(pieces) if lit in p), dtype=np.int64)
                        if len(lit) <= self.max_piece else empty)
            starts = [empty]
            for k in range(1, len(lit)):
                suffix = lit[k:]
                if len(suffix) > self.max_piece:    # no piece is that long: none starts with it
                    starts.append(empty)
                    continue
                starts.append(np.fromiter((i for i, p in enumerate(pieces) if p.startswith(suffix)),
                                          dtype=np.int64))
            got = (contains, starts)
            with self._lock:
                self._literal[lit] = got
                while len(self._literal) > LITERAL_CACHE:
                    self._literal.popitem(last=False)
        return got


    def clean_by_piece(self) -> dict[bytes, int]:
        """A clean token for each clean piece (built once)."""
        with self._lock:
            if self._by_piece is None:
                self._by_piece = {p: i for i, p in enumerate(self.pieces) if self.clean[i]}
            return self._by_piece

    def class_groups(self, table: bytes) -> tuple[np.ndarray, np.ndarray]:
        """The tokens grouped by their piece read through ``table`` (each byte to its class representative):
        ``(representative token per group, group of every token)``."""
        with self._lock:
            got = self._classes.get(table)
            if got is not None:
                self._classes.move_to_end(table)
        if got is None:
            seen: dict[bytes, int] = {}
            reps: list[int] = []
            inverse = np.empty(len(self.pieces), dtype=np.int64)
            for i, piece in enumerate(self.pieces):
                k = piece.translate(table)
                g = seen.get(k)
                if g is None:
                    g = seen[k] = len(reps)
                    reps.append(i)
                inverse[i] = g
            got = (np.array(reps, dtype=np.int64), inverse)
            with self._lock:
                self._classes[table] = got
                while len(self._classes) > CLASS_CACHE:
                    self._classes.popitem(last=False)
        return got


_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_CATEGORY = {
    _sre_c.CATEGORY_DIGIT: frozenset(b"0123456789"), _sre_c.CATEGORY_SPACE: frozenset(b" \t\n\r\f\v"),
    _sre_c.CATEGORY_WORD: _WORD_BYTES, _sre_c.CATEGORY_LINEBREAK: frozenset(b"\n"),
}
_CATEGORY.update({_sre_c.CATEGORY_NOT_DIGIT: _CATEGORY[_sre_c.CATEGORY_DIGIT],
                  _sre_c.CATEGORY_NOT_SPACE: _CATEGORY[_sre_c.CATEGORY_SPACE],
                  _sre_c.CATEGORY_NOT_WORD: _WORD_BYTES, _sre_c.CATEGORY_NOT_LINEBREAK: frozenset(b"\n")})


def _byte_sets(pattern: re.Pattern, out: list[frozenset[int]]) -> bool:
    """Every byte set ``pattern`` tests (a literal: its byte alone; a class, a category, a word boundary), added
    to ``out``; False where its behaviour may depend on more than which of those sets each byte is in (back
    references, flags that change matching)."""
    if pattern.flags & ~(re.DOTALL | re.ASCII):
        return False
    try:
        tree = _sre_p.parse(pattern.pattern, pattern.flags)
    except re.error:  # pragma: no cover - it compiled
        return False

    def walk(items: Any) -> bool:
        for op, av in items:
            if op in (_sre_c.LITERAL, _sre_c.NOT_LITERAL):
                out.append(frozenset((av,)))
            elif op is _sre_c.IN:              # one test: is the byte in the class (negated or not)
                members: set[int] = set()
                for iop, iav in av:
                    if iop is _sre_c.LITERAL:
                        members.add(iav)
                    elif iop is _sre_c.RANGE:
                        members.update(range(iav[0], iav[1] + 1))
                    elif iop is _sre_c.CATEGORY:
                        members.update(_CATEGORY[iav])
                    elif iop is not _sre_c.NEGATE:
                        return False
                out.append(frozenset(members))
            elif op is _sre_c.ANY:
                out.append(frozenset(b"\n"))
            elif op is _sre_c.CATEGORY:
                out.append(_CATEGORY[av])
            elif op is _sre_c.AT:
                if av in (_sre_c.AT_BOUNDARY, _sre_c.AT_NON_BOUNDARY):
                    out.append(_WORD_BYTES)
                elif av in (_sre_c.AT_BEGINNING_LINE, _sre_c.AT_END_LINE, _sre_c.AT_END):
                    out.append(frozenset(b"\n"))
            elif op is _sre_c.BRANCH:
                if not all(walk(b) for b in av[1]):
                    return False
            elif op is _sre_c.SUBPATTERN:
                if av[1] or av[2]:
                    return False
                if not walk(av[3]):
                    return False
            elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, _sre_c.POSSESSIVE_REPEAT):
                if not walk(av[2]):
                    return False
            elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
                if not walk(av[1]):
                    return False
            elif op is _sre_c.ATOMIC_GROUP:
                if not walk(av):
                    return False
            else:
                return False              # back references and anything else: no grouping
        return True

    return walk(tree)


def _class_table(patterns: Sequence[TriggerPattern]) -> bytes | None:
    """A byte translation table mapping each byte to the smallest byte no pattern can tell from it (the
    coarsest partition of the 256 bytes that every tested set is a union of), or None (no exact grouping)."""
    sets: list[frozenset[int]] = []
    for p in patterns:
        if p.literal is not None:
            sets.extend(frozenset((b,)) for b in set(p.literal))
        elif not _byte_sets(p.regex, sets):
            return None
    uniq = list(dict.fromkeys(sets))
    sig: dict[tuple[bool, ...], int] = {}
    table = bytearray(256)
    for b in range(256):
        key = tuple(b in st for st in uniq)
        table[b] = sig.setdefault(key, b)
    return bytes(table)


_FACTS: weakref.WeakKeyDictionary[Vocabulary, _VocabFacts] = weakref.WeakKeyDictionary()
_FACTS_LOCK = threading.Lock()


def _facts(vocab: Vocabulary) -> _VocabFacts:
    with _FACTS_LOCK:
        f = _FACTS.get(vocab)
        if f is None:
            f = _FACTS[vocab] = _VocabFacts(vocab)
        return f


class LazyMatcher:
    """A grammar matcher that waits for a trigger (``llama_sampler_init_grammar_lazy_patterns``).

    Same verbs as :class:`GrammarMatcher`; ``triggered`` says whether the grammar is active. Build it with
    ``Grammar.matcher(vocab, trigger_patterns=..., trigger_tokens=...)``.

    Raises (at construction):
        TriggerPatternError: a pattern std::regex refuses (llama-server: HTTP 400 "Failed to initialize samplers"),
            one whose libstdc++ behaviour is not reproduced, or one beyond the backtracking budget
            (TriggerPatternBudgetError).
        ValueError: a trigger token out of the vocabulary's range.
    """

    def __init__(self, compiled: CompiledGrammar, trigger_patterns: Sequence[str] = (),
                 trigger_tokens: Sequence[int] = (), *, fresh: GrammarMatcher | None = None) -> None:
        if isinstance(trigger_patterns, (str, bytes)):
            raise TypeError("trigger_patterns must be a sequence of patterns, not one string")
        self.compiled = compiled
        self.vocab = compiled.vocab
        n = compiled.n_vocab
        toks = []
        for t in trigger_tokens:
            t = int(t)
            if not 0 <= t < n:
                raise ValueError(f"trigger token {t} out of range (vocabulary of {n})")
            toks.append(t)
        self.trigger_tokens: frozenset[int] = frozenset(toks)
        self.patterns: tuple[TriggerPattern, ...] = tuple(TriggerPattern.compile(p) for p in trigger_patterns)
        self._facts = _facts(self.vocab)
        self._pieces = self._facts.pieces
        self._eog = compiled.index.eog
        # the grammar's matcher at its start (``fresh``: one with checks of its own, e.g. a UniqueItemsMatcher);
        # the triggered grammar is a fork of it
        self._fresh = fresh if fresh is not None else compiled.matcher()
        self._inner: GrammarMatcher | None = None
        self._buf = bytearray()
        self._pos: list[tuple[int, int, int]] = []     # (token, start, end) of each buffered piece
        self._history: list[tuple[str, Any]] = []
        self._eog_seen = False
        self._probe_cache: tuple[int, int, GrammarMatcher | None, bool] | None = None
        self._version = 0
        self._token_refusals: np.ndarray | None = None
        self._table: bytes | None | bool = False          # the byte-class table, computed on first need
        self.searches = 0                                  # trigger searches run (a work counter)
        self.scanned = 0       # bytes searched by RE2 (a work counter: RE2's work is at most this times the pattern)
        self.backtracked = 0   # searches by Python's backtracking re alone (lookahead patterns, within the budget)

    # ---- state ---------------------------------------------------------------------------------------------
    @property
    def triggered(self) -> bool:
        """Whether the grammar is active (llama.cpp's ``!awaiting_trigger``)."""
        return self._inner is not None

    @property
    def buffer(self) -> bytes:
        """The text buffered while waiting (llama.cpp's ``trigger_buffer``); empty once triggered."""
        return bytes(self._buf) if self._inner is None else b""

    @property
    def stacks(self) -> Stacks:
        """The grammar's stacks (the initial ones while waiting, never all empty then)."""
        if self._inner is not None:
            return self._inner.stacks
        s = self._fresh.stacks
        return s if any(s) else _PLACEHOLDER

    @property
    def partial_utf8(self) -> tuple[int, int]:
        return self._inner.partial_utf8 if self._inner is not None else (0, 0)

    @property
    def num_accepted(self) -> int:
        """How many steps ``rollback`` can undo."""
        return len(self._history)

    def can_end(self) -> bool:
        """Whether end-of-generation is allowed now (always, while waiting)."""
        return True if self._inner is None else self._inner.can_end()

    def is_terminated(self) -> bool:
        """Whether an end-of-generation token has been accepted."""
        return self._inner.is_terminated() if self._inner is not None else self._eog_seen

    # ---- the trigger search ----------------------------------------------------------------------------------
    def _search(self, piece: bytes) -> tuple[int, int]:
        """(pattern index, replay start in buffer coordinates) for the buffer plus ``piece``, or (-1, -1)."""
        buf = self._buf
        n = len(buf)
        self.searches += 1
        for k, p in enumerate(self.patterns):
            lit = p.literal
            if lit is not None:   # no occurrence in the buffer yet: any is in its tail + the piece
                cut = max(0, n - len(lit) + 1)
                tail = bytes(buf[cut:]) + piece
                where = tail.rfind(lit) if p.last else tail.find(lit)
                if where >= 0:
                    return k, cut + where
                continue
            if p.reach is None or n - p.reach <= 0:
                text, pos, off = bytes(buf) + piece, 0, 0
            else:   # one byte before the window keeps \b right and ^ off
                off = n - p.reach - 1
                text, pos = bytes(buf[off:]) + piece, 1
            if p.engine == "backtrack":
                self.backtracked += 1
            else:
                self.scanned += len(text) - pos
            s = p.find(text, pos)
            if s >= 0:
                return k, s + off
        return -1, -1

    def _replay(self, token: int, piece: bytes, start: int) -> GrammarMatcher | None:
        """The grammar after llama.cpp's replay from ``start`` (token ``token`` appended), or None where it throws."""
        m = self._fresh.fork()
        n = len(self._buf)
        for tok, ts, te in self._pos:
            if te <= start:
                continue
            if not accept_piece(m, tok, bytes(self._buf[max(ts, start):te])):
                return None
        if not accept_piece(m, token, piece[max(0, start - n):]):
            return None
        return m

    def _probe(self, token: int) -> tuple[GrammarMatcher | None, bool]:
        """(grammar after the trigger or None, triggers) for ``token`` in the waiting state (cached once)."""
        c = self._probe_cache
        if c is not None and c[0] == self._version and c[1] == token:
            return c[2], c[3]
        piece = self._pieces[token]
        if token in self.trigger_tokens:
            m = self._fresh.fork()
            res = (m if accept_piece(m, token, piece) else None), True
        else:
            k, start = self._search(piece)
            res = (None, False) if k < 0 else (self._replay(token, piece, start), True)
        self._probe_cache = (self._version, token, res[0], res[1])
        return res

    # ---- the verbs -------------------------------------------------------------------------------------------
    def _check(self, token: int) -> int:
        t = int(token)
        if not 0 <= t < self.compiled.n_vocab:
            raise ValueError(f"token id {token} out of range (vocabulary of {self.compiled.n_vocab})")
        return t

    def allows(self, token: int) -> bool:
        """Whether ``token`` is allowed now: always while waiting, except a token whose trigger replay the grammar
        rejects (where llama.cpp would throw)."""
        t = self._check(token)
        if self._inner is not None:
            return self._inner.allows(t)
        m, hit = self._probe(t)
        return not hit or m is not None

    def accept_token(self, token: int) -> bool:
        """``llama_grammar_accept_impl``; False and no change for a token ``allows`` refuses."""
        t = self._check(token)
        if self._inner is not None:
            if not self._inner.accept_token(t):
                return False
            self._history.append(("inner", None))
            return True
        m, hit = self._probe(t)
        if hit:
            if m is None:
                return False
            self._inner = m
            self._history.append(("trigger", None))
        else:
            piece = self._pieces[t]
            n = len(self._buf)
            self._buf += piece
            self._pos.append((t, n, n + len(piece)))
            self._history.append(("wait", self._eog_seen))
            if self._eog[t]:
                self._eog_seen = True
        self._version += 1
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """``llama_grammar_accept_str``: text straight into the grammar (llama.cpp does not look at the trigger
        state there); if still waiting, the grammar is then active."""
        m = self._inner if self._inner is not None else self._fresh.fork()
        if not m.accept_bytes(data):
            return False
        if self._inner is None:
            self._inner = m
            self._history.append(("trigger", None))
        else:
            self._history.append(("inner", None))
        self._version += 1
        return True

    def mask(self) -> np.ndarray:
        """The allowed tokens (True = allowed), a read-only array: everything but the refused triggering tokens while
        waiting; the grammar's mask after the trigger."""
        if self._inner is not None:
            return self._inner.mask()
        out = np.ones(self.compiled.n_vocab, dtype=bool)
        refused = self._refused()
        if len(refused):
            out[refused] = False
        out.setflags(write=False)
        return out

    def _refused(self) -> np.ndarray:
        """The token ids that complete a trigger now but whose replay the grammar rejects."""
        bad: list[int] = []
        if self.trigger_tokens:
            if self._token_refusals is None:
                self._token_refusals = np.array(
                    sorted(t for t in self.trigger_tokens if not accept_piece(self._fresh.fork(), t, self._pieces[t])),
                    dtype=np.int64)
            bad.extend(self._token_refusals.tolist())
        n_buf = len(self._buf)
        taken = set(self.trigger_tokens)
        by_start: dict[int, list[int]] = {}
        table = self._class_table()
        if table is not None:
            # every token whose piece reads the same through the patterns' byte classes searches alike: one
            # search per group (exact: the patterns only ever test which class a byte is in)
            reps, inverse = self._facts.class_groups(table)
            starts = np.full(len(reps), -1, dtype=np.int64)
            for g, r in enumerate(reps.tolist()):
                kk, start = self._search(self._pieces[r])
                if kk >= 0:
                    starts[g] = start
            tok_start = starts[inverse]
            if taken:
                tok_start[np.fromiter(taken, dtype=np.int64)] = -1
            hit = np.nonzero(tok_start >= 0)[0]
            if len(hit):
                order = np.argsort(tok_start[hit], kind="stable")
                hit, hs = hit[order], tok_start[hit][order]
                cuts = np.nonzero(np.diff(hs))[0] + 1
                for toks_arr, st in zip(np.split(hit, cuts), hs[np.concatenate(([0], cuts))].tolist(), strict=True):
                    by_start[int(st)] = toks_arr.tolist()
        else:
            for k, p in enumerate(self.patterns):
                cands = self._candidates(p)
                for t in cands:
                    t = int(t)
                    if t in taken:
                        continue
                    kk, start = self._search(self._pieces[t])
                    if kk != k:
                        continue   # an earlier pattern wins (it was or will be handled), or none matches here
                    taken.add(t)
                    by_start.setdefault(start, []).append(t)
        clean = self._facts.clean
        for start, toks in by_start.items():
            if start > n_buf:                # the replay starts inside the piece: each its own cut
                cut, fresh_mask = start - n_buf, None
                by_piece = self._facts.clean_by_piece()
                for t in toks:
                    u = by_piece.get(self._pieces[t][cut:]) if clean[t] else None
                    if u is not None:        # the cut piece is a clean token's: the grammar's first mask says
                        if fresh_mask is None:
                            fresh_mask = self._fresh.mask()
                        if not fresh_mask[u]:
                            bad.append(t)
                    elif self._replay(t, self._pieces[t], start) is None:
                        bad.append(t)
                continue
            pre = self._fresh.fork()    # the buffered part of the replay, shared by these tokens
            ok = True
            for tok, ts, te in self._pos:
                if te > start and not accept_piece(pre, tok, bytes(self._buf[max(ts, start):te])):
                    ok = False
                    break
            if not ok:
                bad.extend(toks)
                continue
            arr = np.array(toks, dtype=np.int64)
            if pre.partial_utf8[1] <= 0:
                allowed = pre.mask()
                simple = clean[arr]
                bad.extend(arr[simple & ~allowed[arr]].tolist())
                rest = arr[~simple]
            else:
                rest = arr
            for t in rest.tolist():
                m = pre.fork()
                if not accept_piece(m, t, self._pieces[t]):
                    bad.append(t)
        return np.array(sorted(set(bad)), dtype=np.int64)

    def _class_table(self) -> bytes | None:
        """The patterns' byte-class table (None: all literal, indexed instead; or no exact grouping)."""
        if self._table is False:
            self._table = (None if all(p.literal is not None for p in self.patterns)
                           else _class_table(self.patterns))
        return self._table          # type: ignore[return-value]

    def _candidates(self, p: TriggerPattern) -> Any:
        """Tokens that may complete ``p`` from the current buffer (a superset; exact for literals)."""
        lit = p.literal
        if lit is None:
            return range(self.compiled.n_vocab)
        contains, starts = self._facts.literal_index(lit)
        tail = bytes(self._buf[-(len(lit) - 1):]) if len(lit) > 1 else b""
        parts = [contains]
        # starts[k] (pieces starting with lit[k:]) is empty while lit[k:] is longer than every piece
        for k in range(max(1, len(lit) - self._facts.max_piece), len(lit)):
            if tail.endswith(lit[:k]):
                parts.append(starts[k])
        return np.unique(np.concatenate(parts)) if len(parts) > 1 else contains

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens (or byte strings), across the trigger too."""
        if not 0 <= n <= len(self._history):
            raise ValueError(f"cannot roll back {n} steps: {len(self._history)} accepted")
        for _ in range(n):
            kind, data = self._history.pop()
            if kind == "inner":
                assert self._inner is not None
                self._inner.rollback(1)
            elif kind == "trigger":
                self._inner = None
            else:
                t, s, e = self._pos.pop()
                del self._buf[s:]
                self._eog_seen = data
        self._version += 1

    def fork(self) -> LazyMatcher:
        """An independent copy (same state and history)."""
        m = object.__new__(LazyMatcher)
        m.__dict__.update(self.__dict__)
        m._buf = bytearray(self._buf)
        m._pos = list(self._pos)
        m._history = list(self._history)
        m._inner = self._inner.fork() if self._inner is not None else None
        m._probe_cache = None
        return m

    def reset(self) -> None:
        """Back to waiting, with an empty buffer and no history (``llama_sampler_reset`` of a lazy grammar)."""
        self._inner = None
        self._buf = bytearray()
        self._pos = []
        self._history = []
        self._eog_seen = False
        self._probe_cache = None
        self._version += 1
