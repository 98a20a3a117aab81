"""Trigger patterns: llama.cpp's ECMAScript ``std::regex`` over bytes, translated to Python's ``re``.

llama.cpp compiles each lazy-grammar trigger pattern with ``std::regex(pattern)`` (ECMAScript, libstdc++, ``char``
units: a UTF-8 character is several one-byte atoms) and searches the buffered text with
``llama_grammar_trigger_pattern::find`` (``src/llama-grammar.cpp:382-413``): a ``regex_match`` of the whole text first
when the pattern starts with ``^`` and ends with ``$``, then a ``regex_search``; the replay starts at the first capture
group that matched something, else at the match. :class:`TriggerPattern` does the same with a Python ``re`` pattern
translated construct by construct, where the two dialects differ:

- ``.`` is any byte but ``\\n`` and ``\\r``; ``$`` is the end of the text only (never before a final newline);
- ``\\d \\s \\w`` (and ``[[:alpha:]]``-style classes) are the C locale's ASCII sets; bytes >= 0x80 are in no class;
- bracket ranges compare *signed* chars, as libstdc++ does: ``[\\x80-\\xff]`` is fine, ``[a-\\xff]`` is refused;
- ``\\uXXXX`` is the byte ``XXXX & 0xFF``; any other escaped letter is the letter itself (``\\e`` is ``e``);
- a quantifier may follow a quantifier (``a**``: libstdc++ takes it);
- ``}`` and ``]`` alone are literals; ``{`` must open a valid quantifier.

Constructs libstdc++ handles in ways not reproduced here are refused with :class:`TriggerPatternError` (back
references, ``\\cX``, ``\\0`` before a digit, collating ``[[.a.]]`` / equivalence ``[[=a=]]`` classes, counts above
1000); std::regex's own refusals are refused too. ``tests/grammar/test_lazy_regex.py`` checks every construct against
std::regex itself (``oracle/lazy.py``).

**Linear time.** The same translation is also written for RE2 (bytes as Latin-1 characters) and RE2 runs the
search (:attr:`TriggerPattern.engine` ``"linear"``): work linear in the text, where a backtracking engine (std::regex,
Python's ``re``) is exponential on shapes such as ``(a+)+$``. RE2 is leftmost-first and sets the groups as
backtracking does except after the last, empty iteration of a repetition of something that can match empty
(``x(a?)*`` on ``xa``: libstdc++ and Python report the group empty, RE2 ``a``); with a capture group such a pattern
is ``"checked"`` (RE2 finds the leftmost start, which every engine agrees on; ``re`` reads the groups of that one
match); a lookahead is ``"backtrack"`` (``re`` alone). Those two are held to ``BACKTRACK_CHOICES`` and refused
beyond it (:class:`~constrained.errors.TriggerPatternBudgetError`).

:attr:`TriggerPattern.reach` bounds how far past its start a match can look (None: unbounded); it lets the lazy
matcher search only the tail of the buffer that a new token can complete.

Example:
    >>> p = TriggerPattern.compile(r"<\\|start\\|>assistant(\\s+to)")
    >>> p.find(b"hi <|start|>assistant to"), p.reach
    (21, None)
    >>> TriggerPattern.compile(r"\\[TOOL_CALLS\\]").literal
    b'[TOOL_CALLS]'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import TriggerPatternBudgetError, TriggerPatternError

__all__ = ["TriggerPattern", "TriggerPatternError", "regex_escape"]

MAX_COUNT = 1000
#: the budget of a pattern only a backtracking engine searches exactly (a lookahead; or a capture group and a
#: repetition of something that can match empty): at most this many choice points (quantifiers and ``|``), at most
#: one repetition with max > 1, and none inside a repetition; beyond it the pattern is refused
BACKTRACK_CHOICES = 8


def _re2_compile(text: bytes) -> Any:
    """The RE2 program for ``text`` (Latin-1: one character per byte), or None where RE2 cannot build it."""
    try:
        import re2
    except ImportError:   # pragma: no cover - a dependency
        return None
    opts = re2.Options()
    opts.encoding = re2.Options.Encoding.LATIN1
    opts.log_errors = False
    opts.max_mem = 4 << 20      # per pattern: the program and the DFA cache (RE2 falls back to its NFA past it)
    try:
        return re2.compile(text, opts)
    except re2.error:
        return None


def regex_escape(word: str) -> str:
    """``regex_escape`` of ``common/common.cpp``: a WORD trigger as a pattern (``.^$|()*+?[]{}\\`` escaped)."""
    return re.sub(r"[.^$|()*+?\[\]{}\\]", lambda m: "\\" + m.group(0), word)


_DIGIT = frozenset(range(0x30, 0x3A))
_UPPER = frozenset(range(0x41, 0x5B))
_LOWER = frozenset(range(0x61, 0x7B))
_ALPHA = _UPPER | _LOWER
_SPACE = frozenset(b" \t\n\r\f\v")
_WORD = _ALPHA | _DIGIT | {0x5F}
_PUNCT = frozenset(c for c in range(0x21, 0x7F) if c not in _ALPHA | _DIGIT)
_ALL = frozenset(range(256))
_POSIX = {
    "alpha": _ALPHA, "digit": _DIGIT, "d": _DIGIT, "alnum": _ALPHA | _DIGIT, "space": _SPACE, "s": _SPACE,
    "upper": _UPPER, "lower": _LOWER, "punct": _PUNCT, "xdigit": _DIGIT | frozenset(b"abcdefABCDEF"),
    "cntrl": frozenset(range(0x20)) | {0x7F}, "print": frozenset(range(0x20, 0x7F)),
    "graph": frozenset(range(0x21, 0x7F)), "blank": frozenset(b" \t"), "w": _WORD,
}
_CLASS_ESC = {ord("d"): _DIGIT, ord("D"): _ALL - _DIGIT, ord("s"): _SPACE, ord("S"): _ALL - _SPACE,
              ord("w"): _WORD, ord("W"): _ALL - _WORD}
_CONTROL = {ord("f"): 0x0C, ord("n"): 0x0A, ord("r"): 0x0D, ord("t"): 0x09, ord("v"): 0x0B}
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _signed(b: int) -> int:
    return b - 256 if b >= 0x80 else b


def _class_text(members: frozenset[int] | set[int], re2: bool = False) -> bytes:
    """A bytes character class for exactly ``members`` (none: ``(?!)`` for Python, an empty RE2 class)."""
    if not members:
        return rb"[^\x00-\xff]" if re2 else b"(?!)"
    if len(members) == 256:
        return rb"[\x00-\xff]"
    out = bytearray(b"[")
    s = sorted(members)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out += b"\\x%02x" % s[i]
        if j > i:
            out += b"-\\x%02x" % s[j]
        i = j + 1
    return bytes(out + b"]")


@dataclass
class _Node:
    text: bytes        # regex text (Python's ``re``, or RE2's when the parser writes RE2)
    cons: int | None   # most bytes consumed (None: unbounded)
    reach: int | None  # most bytes looked at from the node's start, consumed or peeked (None: unbounded)
    atom: bool = True  # can take a quantifier directly
    literal: bytes | None = None  # exactly these bytes, no group, no assertion
    nul: bool = False  # can match the empty string
    choice: bool = False  # holds a quantifier or an alternation (a backtracking choice point)


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _max(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)


class _Parser:
    def __init__(self, src: str, re2: bool = False) -> None:
        self.src = src
        self.p = src.encode("utf-8", "surrogateescape")
        self.i = 0
        self.groups = 0
        self.look = 0  # lookahead nesting
        self.re2 = re2            # write RE2 syntax (bytes as Latin-1 characters) instead of Python's
        self.lookahead = False    # a (?= or (?! group: no linear engine takes it
        self.nullable_loop = False  # a repetition (max > 1) of something that can match empty
        self.nested = False       # a repetition (max > 1) of something holding a quantifier or an alternation
        self.choices = 0          # quantifiers and alternations
        self.repeats = 0          # quantifiers with max > 1

    def error(self, what: str) -> TriggerPatternError:
        return TriggerPatternError(f"trigger pattern {self.src!r}: {what} (at byte {self.i})")

    def peek(self, k: int = 0) -> int | None:
        j = self.i + k
        return self.p[j] if j < len(self.p) else None

    def parse(self) -> _Node:
        node = self.disjunction()
        if self.i < len(self.p):
            raise self.error("unbalanced ')'")
        return node

    def disjunction(self) -> _Node:
        alts = [self.alternative()]
        while self.peek() == 0x7C:  # |
            self.i += 1
            alts.append(self.alternative())
        if len(alts) == 1:
            return alts[0]
        self.choices += len(alts) - 1
        cons: int | None = 0
        reach: int | None = 0
        for a in alts:
            cons, reach = _max(cons, a.cons), _max(reach, a.reach)
        return _Node(b"(?:" + b"|".join(a.text for a in alts) + b")", cons, reach,
                     nul=any(a.nul for a in alts), choice=True)

    def alternative(self) -> _Node:
        parts: list[_Node] = []
        while self.i < len(self.p) and self.peek() not in (0x7C, 0x29):
            parts.append(self.term())
        cons: int | None = 0
        reach: int | None = 0
        for n in parts:
            reach = _max(reach, _add(cons, n.reach))
            cons = _add(cons, n.cons)
        lit = b"".join(n.literal for n in parts) if all(n.literal is not None for n in parts) else None
        text = b"".join(n.text for n in parts)
        return _Node(text if len(parts) == 1 else b"(?:" + text + b")", cons, reach, True, lit,
                     all(n.nul for n in parts), any(n.choice for n in parts))

    def term(self) -> _Node:
        c = self.p[self.i]
        if self.look and (c == 0x5E or (c == 0x5C and self.peek(1) in (0x62, 0x42))):
            # libstdc++ runs a lookahead from a sub-executor whose begin is the lookahead's position: there ^ matches
            # and \b sees no previous character when the search started at 0
            raise self.error("^, \\b and \\B inside a lookahead are not supported (libstdc++ misplaces them)")
        end = rb"\z" if self.re2 else rb"\Z"
        if c == 0x5E:  # ^
            self.i += 1
            return self.no_quantifier(_Node(b"^", 0, 0, False, nul=True))
        if c == 0x24:  # $
            self.i += 1
            return self.no_quantifier(_Node(end, 0, 1, False, nul=True))
        if c == 0x5C and self.peek(1) in (0x62, 0x42):  # \b \B
            self.i += 2
            return self.no_quantifier(_Node(rb"\b" if self.p[self.i - 1] == 0x62 else rb"(?:\B|\A" + end + b")",
                                            0, 1, False, nul=True))
        if c == 0x28 and self.peek(1) == 0x3F and self.peek(2) in (0x3D, 0x21):  # (?= (?!
            neg = self.peek(2) == 0x21
            self.i += 3
            self.look += 1
            self.lookahead = True
            inner = self.disjunction()
            self.look -= 1
            self.expect_close()
            return self.no_quantifier(_Node((b"(?!" if neg else b"(?=") + inner.text + b")", 0, inner.reach,
                                            False, nul=True, choice=inner.choice))
        atom = self.atom()
        return self.quantifiers(atom)

    def no_quantifier(self, node: _Node) -> _Node:
        if self.peek() in (0x2A, 0x2B, 0x3F) or (self.peek() == 0x7B):
            raise self.error("a quantifier after an assertion")
        return node

    def expect_close(self) -> None:
        if self.peek() != 0x29:
            raise self.error("missing ')'")
        self.i += 1

    def atom(self) -> _Node:
        c = self.p[self.i]
        if c == 0x28:  # (
            if self.peek(1) == 0x3F:
                if self.peek(2) != 0x3A:
                    raise self.error("only (?: (?= (?! groups exist")
                self.i += 3
                inner = self.disjunction()
                self.expect_close()
                return _Node(b"(?:" + inner.text + b")", inner.cons, inner.reach, nul=inner.nul, choice=inner.choice)
            self.i += 1
            self.groups += 1
            inner = self.disjunction()
            self.expect_close()
            return _Node(b"(" + inner.text + b")", inner.cons, inner.reach, nul=inner.nul, choice=inner.choice)
        if c in (0x2A, 0x2B, 0x3F):
            raise self.error("nothing to repeat")
        if c == 0x7B:
            raise self.error("'{' must open a quantifier")
        if c == 0x29:
            raise self.error("unbalanced ')'")
        if c == 0x2E:  # .
            self.i += 1
            return _Node(_class_text(_ALL - {0x0A, 0x0D}, self.re2), 1, 1)
        if c == 0x5B:
            return self.bracket()
        if c == 0x5C:
            self.i += 1
            kind, value = self.escape(in_class=False)
            if kind == "set":
                return _Node(_class_text(value, self.re2), 1, 1)
            return self.byte(value)
        self.i += 1
        return self.byte(c)

    def byte(self, b: int) -> _Node:
        if self.re2:   # RE2 takes a backslash only before punctuation it knows: every non-alphanumeric as \xHH
            text = bytes([b]) if 0x30 <= b <= 0x39 or 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A else b"\\x%02x" % b
        else:
            text = re.escape(bytes([b]))
        return _Node(text, 1, 1, True, bytes([b]))

    def escape(self, in_class: bool) -> tuple[str, object]:
        """After a backslash: ("byte", b) or ("set", members)."""
        c = self.peek()
        if c is None:
            raise self.error("a trailing backslash")
        self.i += 1
        if c in _CLASS_ESC:
            return "set", _CLASS_ESC[c]
        if c in _CONTROL:
            return "byte", _CONTROL[c]
        if in_class and c == 0x62:
            return "byte", 0x08
        if in_class and c == 0x42:
            raise self.error(r"\B inside a bracket")
        if c == 0x30:
            if self.peek() is not None and 0x30 <= self.peek() <= 0x39:
                raise self.error(r"\0 before a digit is not supported")
            return "byte", 0
        if 0x31 <= c <= 0x39:
            raise self.error("back references are not supported")
        if c == 0x63:
            raise self.error(r"\cX is not supported")
        if c in (0x78, 0x75):  # \xHH \uHHHH
            n = 2 if c == 0x78 else 4
            digits = self.p[self.i:self.i + n]
            if len(digits) != n or any(d not in _HEX for d in digits):
                raise self.error(f"\\{chr(c)} needs {n} hex digits")
            self.i += n
            return "byte", int(digits, 16) & 0xFF
        return "byte", c

    def bracket(self) -> _Node:
        self.i += 1
        negate = self.peek() == 0x5E
        if negate:
            self.i += 1
        members: set[int] = set()
        while True:
            c = self.peek()
            if c is None:
                raise self.error("missing ']'")
            if c == 0x5D:
                self.i += 1
                break
            lo = self.class_atom()
            if self.peek() == 0x2D and self.peek(1) not in (0x5D, None):
                self.i += 1
                hi = self.class_atom()
                if not isinstance(lo, int) or not isinstance(hi, int):
                    raise self.error("a class escape in a range")
                if _signed(lo) > _signed(hi):
                    raise self.error("an invalid range (libstdc++ compares signed chars)")
                members.update(b for b in range(256) if _signed(lo) <= _signed(b) <= _signed(hi))
            elif isinstance(lo, int):
                members.add(lo)
            else:
                members.update(lo)
        if negate:
            members = set(_ALL) - members
        return _Node(_class_text(members, self.re2), 1, 1)

    def class_atom(self) -> int | frozenset[int]:
        c = self.p[self.i]
        if c == 0x5C:
            self.i += 1
            kind, value = self.escape(in_class=True)
            return value  # type: ignore[return-value]
        if c == 0x5B and self.peek(1) in (0x3A, 0x2E, 0x3D):  # [: [. [=
            kind = self.peek(1)
            if kind != 0x3A:
                raise self.error("collating and equivalence classes are not supported")
            end = self.p.find(b":]", self.i + 2)
            if end < 0:
                raise self.error("an unterminated [: class")
            name = self.p[self.i + 2:end].decode("ascii", "replace").lower()
            if name not in _POSIX:
                raise self.error(f"unknown character class [:{name}:]")
            self.i = end + 2
            return _POSIX[name]
        self.i += 1
        return c

    def count(self) -> int:
        start = self.i
        while self.peek() is not None and 0x30 <= self.peek() <= 0x39:
            self.i += 1
        if self.i == start:
            raise self.error("a bad '{n,m}' quantifier")
        n = int(self.p[start:self.i])
        if n > MAX_COUNT:
            raise self.error(f"a count above {MAX_COUNT}")
        return n

    def quantifiers(self, node: _Node) -> _Node:
        while True:
            c = self.peek()
            if c == 0x2A:
                lo, hi = 0, None
                self.i += 1
            elif c == 0x2B:
                lo, hi = 1, None
                self.i += 1
            elif c == 0x3F:
                lo, hi = 0, 1
                self.i += 1
            elif c == 0x7B:
                self.i += 1
                lo = self.count()
                hi = lo
                if self.peek() == 0x2C:
                    self.i += 1
                    hi = None if self.peek() == 0x7D else self.count()
                if self.peek() != 0x7D:
                    raise self.error("a bad '{n,m}' quantifier")
                self.i += 1
                if hi is not None and hi < lo:
                    raise self.error("'{n,m}' with m < n")
            else:
                return node
            lazy = self.peek() == 0x3F
            if lazy:
                self.i += 1
            self.choices += 1
            if hi is None or hi > 1:
                self.repeats += 1
                self.nullable_loop |= node.nul
                self.nested |= node.choice
            q = {(0, None): b"*", (1, None): b"+", (0, 1): b"?"}.get((lo, hi))
            if q is None:
                q = b"{%d}" % lo if hi == lo else b"{%d,}" % lo if hi is None else b"{%d,%d}" % (lo, hi)
            body = node.text if node.atom else b"(?:" + node.text + b")"
            if node.cons == 0:
                cons, reach = 0, node.reach
            elif hi is None or node.cons is None:
                cons, reach = None, None
            elif hi == 0:
                cons, reach = 0, 0
            else:
                cons = node.cons * hi
                reach = _add(node.cons * (hi - 1), node.reach)
            node = _Node(body + q + (b"?" if lazy else b""), cons, reach, False, nul=lo == 0 or node.nul, choice=True)


# [\s\S]*?(LITERAL)[\s\S]*, optionally anchored: matches iff LITERAL occurs; the group starts at an occurrence
_WORD_SHAPE = re.compile(r"(\^?)\[\\s\\S\]\*(\??)\(([^()]*)\)\[\\s\\S\]\*(\$?)", re.S)


@dataclass(frozen=True)
class TriggerPattern:
    """One trigger pattern, as ``llama_grammar_trigger_pattern`` (compiled once).

    Attributes:
        source: the pattern text, as given to llama.cpp.
        regex: the translated Python pattern over bytes.
        full_first: the text starts with ``^`` and ends with ``$``: a whole-text match is tried first.
        reach: the most bytes a match looks at from its start (None: unbounded).
        literal: the bytes whose occurrence in the text is exactly what the pattern matches: the pattern is a plain
            literal, or ``[\\s\\S]*?(LITERAL)[\\s\\S]*`` (optionally within ``^...$``), the shape of llama.cpp's
            word triggers; the replay then starts at that occurrence.
        last: with ``literal``, the replay starts at the last occurrence, not the first (a greedy ``[\\s\\S]*``
            before the group).
        groups: the number of capture groups.
        linear: the same pattern on RE2 (a linear-time engine: work bounded by the text's length times the
            pattern's size), or None (a lookahead, or more than RE2 builds).
        engine: ``"linear"``: RE2 answers alone (exact: leftmost-first, the capture groups as libstdc++'s
            backtracking sets them); ``"checked"``: RE2 says whether and where the leftmost match starts, Python's
            backtracking ``re`` then reads the capture groups of that one match (a repetition of something that can
            match empty: its last, empty iteration is libstdc++'s and Python's, not RE2's); ``"backtrack"``:
            Python's ``re`` alone (a lookahead), within the budget ``BACKTRACK_CHOICES``.
    """

    source: str
    regex: re.Pattern
    full_first: bool
    reach: int | None
    literal: bytes | None
    groups: int
    last: bool = False
    linear: Any = None
    engine: str = "backtrack"

    @classmethod
    def compile(cls, source: str) -> TriggerPattern:
        """Translate ``source``; raises TriggerPatternError where std::regex (or this translation) refuses it."""
        if not isinstance(source, str):
            raise TriggerPatternError(f"a trigger pattern must be a string, not {type(source).__name__}")
        parser = _Parser(source)
        node = parser.parse()
        try:
            regex = re.compile(node.text, re.DOTALL)
        except re.error as e:  # pragma: no cover - the translation only emits valid Python syntax
            raise TriggerPatternError(f"trigger pattern {source!r}: {e}") from e
        linear = None if parser.lookahead else _re2_compile(_Parser(source, re2=True).parse().text)
        if linear is not None:
            engine = "checked" if parser.groups and parser.nullable_loop else "linear"
        else:
            engine = "backtrack"
        if engine != "linear" and (parser.nested or parser.repeats > 1 or parser.choices > BACKTRACK_CHOICES):
            # the shapes whose backtracking is exponential or of high degree: std::regex takes them and may search
            # for minutes (every slot waits); refused here, a documented deviation
            why = "a lookahead" if parser.lookahead else (
                "a capture group and a repetition of something that can match empty" if linear is not None else
                "more than the linear engine builds")
            raise TriggerPatternBudgetError(
                f"trigger pattern {source!r}: needs a backtracking search ({why}) and has "
                + ("a quantifier or '|' inside a repetition" if parser.nested else
                   "more than one repetition" if parser.repeats > 1 else
                   f"more than {BACKTRACK_CHOICES} quantifiers and '|'")
                + ", whose backtracking can take exponential time: refused")
        literal = node.literal if parser.groups == 0 and node.literal else None
        last = False
        shape = _WORD_SHAPE.fullmatch(source)
        if shape is not None and literal is None:
            inner = _Parser(shape.group(3))
            try:
                lit_node = inner.parse()
            except TriggerPatternError:
                lit_node = None
            if lit_node is not None and inner.groups == 0 and lit_node.literal:
                literal, last = lit_node.literal, shape.group(2) != "?"
        return cls(source, regex, source.startswith("^") and source.endswith("$"),
                   None if node.reach is None else node.reach + 1, literal, parser.groups, last, linear, engine)

    def _start(self, m: Any) -> int:
        for i in range(1, self.groups + 1):
            s, e = m.span(i)
            if e > s:
                return s
        return m.start()

    def find(self, text: bytes, pos: int = 0) -> int:
        """``llama_grammar_trigger_pattern::find(text)``: where the replay starts, or -1.

        ``pos`` > 0 skips match starts before it (the caller knows none can be there); a whole-text match is
        still tried when the pattern allows it.
        """
        lin = self.linear
        if self.full_first and (self.reach is None or len(text) <= self.reach):
            m = self.regex.fullmatch(text) if lin is None else lin.fullmatch(text)
            if m is not None:
                return self._start(m if self.engine != "checked" else self.regex.fullmatch(text))
        if lin is None:
            m = self.regex.search(text, pos)
        else:
            m = lin.search(text, pos)
            if m is not None and self.engine == "checked":
                # the leftmost start is the same for every engine; the groups of the match there are
                # backtracking's (anchored at that start, where a match is known to exist)
                m = self.regex.match(text, m.start())
        return -1 if m is None else self._start(m)
