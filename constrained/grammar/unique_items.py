"""``uniqueItems`` checked by the matcher: a grammar cannot say "no two items are equal", so the matcher does.

``enforce="all"`` names the rules of the JSON arrays whose items must be distinct
(``SchemaConversion.unique_rules``, carried by ``Grammar.unique_rules``); :class:`UniqueItemsMatcher` is a
:class:`~constrained.grammar.matcher.GrammarMatcher` that also reads the JSON text it accepts and refuses a token
that completes an item equal (as JSON Schema compares: ``1 == 1.0``, ``true != 1``, objects by members) to an
earlier item of the same array. Every verb checks it: ``mask``/``allows`` (and so the bitmask fill, the server's
sampler, the integrations), ``accept_token``/``accept_bytes``/``accept_piece``, ``rollback``, ``fork``, ``reset``.

Which array is unique is read from the grammar stacks just after its ``[``: a unique array's rule is
``"[" space ... space "]"``, its own rule, so every stack inside it holds one position of that rule; the array is
unique when some stack holds more such positions than the unique arrays already open (a ``[`` of a unique array not
yet entered, at the top, is not counted). An ambiguous grammar where one reading is unique and another is not gets
the check (more refused, never less: sound).

An item completes at its closing ``"``, ``}`` or ``]``, or, for a number or a literal, at the delimiter after it.
``enforce="all"`` uses the check only for items where a refusal always leaves a way on (strings with an endless
language from every prefix: the item can grow instead of closing), so the check never strands the matcher.

Example:
    >>> from constrained.grammar import Grammar
    >>> from constrained.vocab import Vocabulary
    >>> g = Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    ...                              enforce="all")
    >>> g.unique_rules, g.unenforced
    (('root-unique',), ())
    >>> m = g.matcher(Vocabulary([bytes([i]) for i in range(128)] + [b"</s>"], eog_ids=[128]))
    >>> m.accept_bytes(b'["a","b",'), m.accept_bytes(b'"a"'), m.accept_bytes(b'"ab"]')
    (True, False, True)
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

import numpy as np

from .matcher import CompiledGrammar, GrammarMatcher
from .stacks import Partial, Stacks
from .tokenindex import decode_utf8

__all__ = ["UniqueArrays", "UniqueItemsMatcher", "canonical", "unique_arrays"]

_WS = frozenset(b" \t\n\r")
_STRUCT = frozenset(b'"{}[],:') | _WS
_OUT, _STR, _ESC = 0, 1, 2


def canonical(value: Any) -> Any:
    """A hashable key equal for values JSON Schema's equality calls equal (``1`` and ``1.0``; not ``true`` and
    ``1``; objects regardless of member order).

    >>> canonical(1) == canonical(1.0), canonical(True) == canonical(1), canonical({"a": [1]}) == canonical({"a": [1.0]})
    (True, False, True)
    """
    if isinstance(value, bool):
        return ("b", value)
    if value is None:
        return ("z",)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, list):
        return ("l", tuple(canonical(v) for v in value))
    return ("d", frozenset((k, canonical(v)) for k, v in value.items()))


class UniqueArrays:
    """The grammar positions of the unique arrays' rules (per compiled grammar and set of rule names), and the
    vocabulary's tokens that may complete an item (those holding a ``"``; those holding a JSON delimiter)."""

    def __init__(self, compiled: CompiledGrammar, rule_ids: tuple[int, ...]) -> None:
        g = compiled.rules
        rules = compiled.parsed.rules
        inside: set[int] = set()
        opens: set[int] = set()
        for r in rule_ids:
            start = g.rule_start[r]
            inside.update(range(start, start + len(rules[r])))
            opens.add(start)
        self.compiled = compiled
        self.inside = frozenset(inside)
        self.opens = frozenset(opens)
        self.pieces = compiled.vocab.pieces
        self.quote, self.struct, self.bracket = _token_classes(compiled)

    def unique_after(self, stacks: Stacks, open_unique: int) -> bool:
        """Whether the array whose ``[`` was just accepted (reaching ``stacks``) is unique, ``open_unique`` unique
        arrays being open around it."""
        inside, opens = self.inside, self.opens
        for s in stacks:
            n = sum(1 for p in s if p in inside)
            if s and s[-1] in opens:
                n -= 1
            if n > open_unique:
                return True
        return False


_CLASSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CLASSES_LOCK = threading.Lock()


def _token_classes(compiled: CompiledGrammar) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per vocabulary (computed once): the tokens holding a ``"``, a JSON delimiter, a ``[`` (end of generation
    tokens: none)."""
    vocab = compiled.vocab
    with _CLASSES_LOCK:
        hit = _CLASSES.get(vocab)
        if hit is None:
            eog = np.asarray(compiled.index.eog, dtype=bool)
            pieces = vocab.pieces
            quote = np.fromiter((34 in p for p in pieces), dtype=bool, count=len(pieces)) & ~eog
            bracket = np.fromiter((91 in p for p in pieces), dtype=bool, count=len(pieces)) & ~eog
            struct = np.fromiter((not _STRUCT.isdisjoint(p) for p in pieces), dtype=bool, count=len(pieces)) & ~eog
            hit = _CLASSES[vocab] = (quote, struct, bracket)
        return hit


def unique_arrays(compiled: CompiledGrammar, rule_ids: tuple[int, ...]) -> UniqueArrays:
    """The :class:`UniqueArrays` of ``compiled`` for the unique arrays' rule ids (kept with the compiled grammar)."""
    memo = compiled.__dict__.setdefault("_unique_arrays", {})
    hit = memo.get(rule_ids)
    if hit is None:
        hit = memo[rule_ids] = UniqueArrays(compiled, rule_ids)
    return hit


class _Text:
    """The JSON text read so far: open containers (an array: whether unique, its items' keys, where its current
    item started, whether that item is a number/literal), the lexer state, the length. Immutable: a step returns
    a new one (history and forks share them)."""

    __slots__ = ("frames", "lex", "n")

    def __init__(self, frames: tuple = (), lex: int = _OUT, n: int = 0) -> None:
        self.frames, self.lex, self.n = frames, lex, n


def _open_unique(frames: tuple) -> int:
    return sum(1 for f in frames if f is not None and f[0])


def _feed(arrays: UniqueArrays, state: _Text, text: bytearray, data: bytes, stacks: Stacks, partial: Partial,
          ) -> _Text | None:
    """``state`` after ``data`` (``text`` holds the bytes before it and gets them appended; ``stacks``/``partial``:
    the grammar state before ``data``, to find which arrays it opens are unique); None if ``data`` completes an
    item equal to an earlier one of its unique array (``text`` is then left with a partial append: the caller
    truncates)."""
    frames = list(state.frames)   # an object: None; an array: [unique, keys, start, scalar]
    lex = state.lex
    base = len(text)
    text += data
    for j, c in enumerate(data):
        i = base + j
        if lex == _STR:
            if c == 92:
                lex = _ESC
            elif c == 34:
                lex = _OUT
                top = frames[-1] if frames else None
                if top is not None and top[2] >= 0 and not top[3] and not _complete(top, text, i + 1):
                    return None     # a string item of the array on top ends
            continue
        if lex == _ESC:
            lex = _STR
            continue
        top = frames[-1] if frames else None
        if top is not None and top[2] >= 0 and top[3] and (c in _WS or c in (44, 93)):
            if not _complete(top, text, i):     # a number or literal ends at its delimiter
                return None
        if c in _WS or c == 58:
            continue
        if c == 44:
            if top is not None:
                top[2] = -1
            continue
        if c in (93, 125):                      # ] or }
            if frames:
                frames.pop()
            top = frames[-1] if frames else None
            if top is not None and top[2] >= 0 and not top[3]:
                if not _complete(top, text, i + 1):
                    return None
            continue
        if top is not None and top[2] < 0:      # a value starts in an array: its next item
            top[2] = i
            top[3] = c not in (34, 91, 123)
        if c == 34:
            lex = _STR
        elif c == 123:
            frames.append(None)
        elif c == 91:
            after = _stacks_after(arrays, stacks, partial, bytes(text[base:i + 1]))
            frames.append([arrays.unique_after(after, _open_unique(frames)), frozenset(), -1, False])
    return _Text(tuple(f if f is None else tuple(f) for f in frames), lex, len(text))


def _complete(frame: list, text: bytearray, end: int) -> bool:
    """Record the item ``text[frame.start:end]`` of an array; False if it is unique and the item is a repeat."""
    start = frame[2]
    frame[2] = -1
    if not frame[0]:
        return True
    try:
        key = canonical(json.loads(bytes(text[start:end]).decode("utf-8", "surrogateescape")))
    except ValueError:
        return True      # not JSON (the grammar's business): nothing to compare
    if key in frame[1]:
        return False
    frame[1] = frame[1] | {key}
    return True


def _stacks_after(arrays: UniqueArrays, stacks: Stacks, partial: Partial, data: bytes) -> Stacks:
    """The grammar stacks after ``data`` from ``(stacks, partial)`` (character by character, as ``accept_bytes``)."""
    g = arrays.compiled.rules
    cps, _val, rem = decode_utf8(data, *partial)
    budget = [g.max_accept_work]
    for cp in cps:
        stacks = g.accept_char(stacks, cp, budget)
        if not stacks:
            break
    return stacks


def _thaw(state: _Text) -> _Text:
    return _Text(tuple(f if f is None else list(f) for f in state.frames), state.lex, state.n)


class UniqueItemsMatcher(GrammarMatcher):
    """A :class:`GrammarMatcher` that also refuses a repeated item in the arrays of ``arrays`` (see the module).

    Build it with ``Grammar.matcher(vocab)`` on a grammar with ``unique_rules``.
    """

    def __init__(self, compiled: CompiledGrammar, arrays: UniqueArrays) -> None:
        super().__init__(compiled)
        self.arrays = arrays
        self._text = bytearray()
        self._state = _Text()
        self._states: list[_Text] = []
        self._mask_memo: np.ndarray | None = None

    # ------------------------------------------------------------------ the check

    def _after(self, data: bytes) -> _Text | None:
        """The text state after ``data``, or None if it repeats an item (no change either way)."""
        n = len(self._text)
        try:
            return _feed(self.arrays, _thaw(self._state), self._text, data, self.stacks, self.partial_utf8)
        finally:
            del self._text[n:]

    def _refused(self, token: int) -> bool:
        a, st = self.arrays, self._state
        if not (a.quote if st.lex != _OUT else a.struct)[token] if _open_unique(st.frames) else \
                not a.bracket[token]:
            return False     # cannot complete an item of a unique array (nor open one and repeat in it)
        return self._after(a.pieces[token]) is None

    def _advance(self, data: bytes, before: tuple[Stacks, Partial]) -> None:
        n = len(self._text)
        st = _feed(self.arrays, _thaw(self._state), self._text, data, *before)
        if st is None:                      # not reached: callers check first
            del self._text[n:]
            st = self._state
        self._states.append(self._state)
        self._state = st
        self._mask_memo = None

    # ------------------------------------------------------------------ GrammarMatcher's verbs

    def allows(self, token: int) -> bool:
        """Whether ``token`` is allowed now: by the grammar, and it repeats no item of a unique array."""
        return super().allows(token) and not self._refused(self._check(token))

    def mask(self) -> np.ndarray:
        """The allowed tokens (the grammar's mask without the tokens that would repeat an item); read-only."""
        if self._mask_memo is not None:
            return self._mask_memo
        base = super().mask()
        a, st = self.arrays, self._state
        cand = (a.quote if st.lex != _OUT else a.struct) if _open_unique(st.frames) else a.bracket
        ids = np.flatnonzero(base & cand)
        refused = [t for t in ids.tolist() if self._after(a.pieces[t]) is None]
        if refused:
            out = base.copy()
            out[refused] = False
            out.flags.writeable = False
        else:
            out = base
        self._mask_memo = out
        return out

    def accept_token(self, token: int) -> bool:
        """``GrammarMatcher.accept_token``, refusing (False, no change) a token that repeats an item."""
        t = self._check(token)
        if self._refused(t):
            return False
        before = (self.stacks, self.partial_utf8)
        if not super().accept_token(t):
            return False
        self._advance(b"" if self.compiled.index.eog[t] else self.arrays.pieces[t], before)
        return True

    def accept_piece(self, token: int, piece: bytes) -> bool:
        """``GrammarMatcher.accept_piece``, refusing a piece that repeats an item."""
        if isinstance(piece, (bytes, bytearray)) and self._after(bytes(piece)) is None:
            return False
        before = (self.stacks, self.partial_utf8)
        if not super().accept_piece(token, piece):
            return False
        self._advance(bytes(piece), before)
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """``GrammarMatcher.accept_bytes``, refusing text that repeats an item."""
        if isinstance(data, (bytes, bytearray, memoryview)) and self._after(bytes(data)) is None:
            return False
        before = (self.stacks, self.partial_utf8)
        if not super().accept_bytes(data):
            return False
        self._advance(bytes(data), before)
        return True

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted steps (the text read with them)."""
        super().rollback(n)
        for _ in range(n):
            self._state = self._states.pop()
        del self._text[self._state.n:]
        self._mask_memo = None

    def fork(self) -> UniqueItemsMatcher:
        """An independent copy (same state, history and text)."""
        m = UniqueItemsMatcher(self.compiled, self.arrays)
        m._stacks, m._partial, m._terminated = self._stacks, self._partial, self._terminated
        m._history = list(self._history)
        m._text, m._state, m._states = bytearray(self._text), self._state, list(self._states)
        return m

    def reset(self) -> None:
        """Back to the start (no history, no text)."""
        super().reset()
        self._text = bytearray()
        self._state = _Text()
        self._states = []
        self._mask_memo = None
