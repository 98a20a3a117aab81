"""JSON-Schema ``pattern`` as a finite automaton, and automata as GBNF rules over JSON string text (``enforce="all"``).

A pattern (ECMA-262 syntax, searched anywhere in the string unless anchored) becomes a DFA over Unicode code points:
classes and escapes (``\\d \\w \\s \\D \\W \\S``, ``\\xHH``, ``\\uHHHH`` with surrogate pairs, ``\\cX``), groups,
alternation, every quantifier (lazy ones match the same strings), ``^`` and ``$``. Where ECMA-262 and Python's ``re``
(which ``jsonschema`` validates with) disagree on a class, the automaton takes what both accept (``\\d`` is
``[0-9]``, ``\\D`` excludes every Unicode digit; ``.`` excludes ``\\n \\r \\u2028 \\u2029``), so whatever it accepts
matches under both. Lookarounds, back-references and word boundaries are not regular: ``Unsupported``.

DFAs intersect, complement and take length bounds (``minLength``/``maxLength`` with a pattern or a format); ``emit``
writes one GBNF rule per state, each character as the JSON text that spells it (raw, or ``\\"`` ``\\\\`` and the
escapes of control characters).

Example:
    >>> d = compile_pattern("^\\\\d{2}$")
    >>> d.accepts("42"), d.accepts("4"), d.accepts("٤٢")
    (True, False, False)
    >>> compile_pattern("b+").accepts("abba")
    True
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import SchemaError

MAX_DFA_STATES = 4000
"""Largest automaton built for one string (more: the keyword is reported as unenforced)."""
MAX_NFA_STATES = 60000
"""Largest expansion of a pattern's repetitions before determinisation."""
MAX_UNICODE = 0x10FFFF

Charset = tuple[tuple[int, int], ...]
UNIVERSE: Charset = ((0, 0xD7FF), (0xE000, MAX_UNICODE))  # scalar values: a JSON text is UTF-8


class Unsupported(Exception):
    """A pattern (or a combination) with no finite automaton here; the message says why."""


# ---- character sets: sorted disjoint inclusive ranges ---------------------------------------------------------------

def cs_norm(ranges: list[tuple[int, int]] | Charset) -> Charset:
    """Sorted, merged, disjoint ranges within the scalar values (surrogates and past U+10FFFF cut out)."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    res: list[tuple[int, int]] = []
    for lo, hi in out:
        if hi > MAX_UNICODE:
            hi = MAX_UNICODE
        if lo <= 0xDFFF and hi >= 0xD800:
            if lo < 0xD800:
                res.append((lo, 0xD7FF))
            if hi > 0xDFFF:
                res.append((0xE000, hi))
        elif lo <= hi:
            res.append((lo, hi))
    return tuple(res)


def _and(a: Charset, b: Charset) -> Charset:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def cs_and(a: Charset, b: Charset) -> Charset:
    return _and(a, b)


def cs_or(a: Charset, b: Charset) -> Charset:
    return cs_norm(list(a) + list(b))


def cs_not(a: Charset) -> Charset:
    out, lo = [], 0
    for x, y in a:
        if x > lo:
            out.append((lo, x - 1))
        lo = y + 1
    if lo <= MAX_UNICODE:
        out.append((lo, MAX_UNICODE))
    return _and(tuple(out), UNIVERSE)


def cs_chars(text: str) -> Charset:
    return cs_norm([(ord(c), ord(c)) for c in text])


@functools.cache
def _all_scalars() -> str:
    """Every Unicode scalar value once, in order (surrogates left out)."""
    return "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, MAX_UNICODE + 1)))


@functools.cache
def unicode_class(name: str) -> Charset:
    """Python ``re``'s Unicode classes (``\\w``: alphanumeric or ``_``; ``\\d``: decimal; ``\\s``: space), read from
    ``re`` itself (jsonschema's regex engine) over every scalar value: one C-speed scan, no per-character calls."""
    import re

    text = _all_scalars()
    gap = 0xE000 - 0xD800  # the code points of the text's second part sit this far past their index

    def cp(i: int) -> int:
        return i if i < 0xD800 else i + gap

    out: list[tuple[int, int]] = []
    for m in re.finditer(f"\\{name}+", text):
        lo, hi = m.start(), m.end() - 1
        if lo < 0xD800 <= hi:  # a run across the surrogate gap: two ranges
            out += [(lo, 0xD7FF), (0xE000, cp(hi))]
        else:
            out.append((cp(lo), cp(hi)))
    return cs_norm(out)


ASCII_DIGIT = cs_chars("0123456789")
ASCII_WORD = cs_norm([(48, 57), (65, 90), (97, 122), (95, 95)])
ECMA_SPACE = cs_norm([(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                      (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
DOT = cs_not(cs_chars("\n\r\u2028\u2029"))


def class_escape(letter: str) -> Charset:
    """``\\d \\w \\s`` and their negations: what ECMA-262 and Python's ``re`` both match."""
    if letter == "d":
        return ASCII_DIGIT
    if letter == "w":
        return ASCII_WORD
    if letter == "s":
        return cs_and(ECMA_SPACE, unicode_class("s"))
    if letter == "D":
        return cs_not(unicode_class("d"))
    if letter == "W":
        return cs_not(unicode_class("w"))
    return cs_not(cs_or(ECMA_SPACE, unicode_class("s")))


# ---- ECMA-262 pattern parser -> AST ----------------------------------------------------------------------------------
# ("set", charset) | ("cat", [..]) | ("alt", [..]) | ("rep", node, min, max|None) | ("bol",) | ("eol",)

_SIMPLE_ESCAPES = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13, "0": 0}


class _Parser:
    def __init__(self, text: str, max_depth: int = 200) -> None:
        self.s = text
        self.i = 0
        self.depth = 0
        self.max_depth = max_depth

    def error(self, msg: str) -> Unsupported:
        return Unsupported(f"{msg} at offset {self.i}")

    def peek(self, k: int = 0) -> str:
        return self.s[self.i + k] if self.i + k < len(self.s) else ""

    def parse(self) -> tuple:
        node = self.alt()
        if self.i < len(self.s):
            raise self.error("unbalanced ')'")
        return node

    def alt(self) -> tuple:
        branches = [self.cat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.cat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def cat(self) -> tuple:
        items: list[tuple] = []
        while self.i < len(self.s) and self.peek() not in "|)":
            atom = self.atom()
            items.append(self.quantified(atom))
        return ("cat", items)

    def quantified(self, atom: tuple) -> tuple:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and self._curly() is not None:
            lo, hi, n = self._curly()  # type: ignore[misc]
            self.i += n
        else:
            return atom
        if atom[0] in ("bol", "eol"):
            raise self.error("a quantified anchor")
        if self.peek() == "?":
            self.i += 1  # lazy: the same strings
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._curly() is not None):
            raise self.error("nothing to repeat")
        if hi is not None and hi < lo:
            raise self.error("numbers out of order in {} quantifier")
        return ("rep", atom, lo, hi)

    def _curly(self) -> tuple[int, int | None, int] | None:
        j = self.i + 1
        s = self.s
        k = j
        while k < len(s) and s[k].isdigit() and s[k].isascii():
            k += 1
        if k == j:
            m = k + 1
            while m < len(s) and s[m].isdigit() and s[m].isascii():
                m += 1
            if k < len(s) and s[k] == "," and m < len(s) and s[m] == "}":
                # "{,3}" is text in ECMA-262 but a quantifier {0,3} in Python's re, which jsonschema uses
                raise Unsupported(f"{s[self.i:m + 1]} is text in ECMA-262 but a repetition in Python's re "
                                  "(jsonschema): validators disagree")
            return None
        lo = int(s[j:k])
        if k < len(s) and s[k] == "}":
            return lo, lo, k + 1 - self.i
        if k >= len(s) or s[k] != ",":
            return None
        m = k + 1
        while m < len(s) and s[m].isdigit() and s[m].isascii():
            m += 1
        if m >= len(s) or s[m] != "}":
            return None
        return lo, (int(s[k + 1:m]) if m > k + 1 else None), m + 1 - self.i

    def atom(self) -> tuple:
        c = self.peek()
        self.i += 1
        if c == "(":
            if self.peek() == "?":
                nxt = self.peek(1)
                if nxt == ":":
                    self.i += 2
                elif nxt == "<" and self.peek(2) not in ("=", "!"):
                    end = self.s.find(">", self.i)
                    if end < 0:
                        raise self.error("unterminated group name")
                    self.i = end + 1
                else:
                    raise self.error("lookaround (not a regular language)")
            self.depth += 1
            if self.depth > self.max_depth:
                raise self.error(f"groups nested deeper than {self.max_depth}")
            node = self.alt()
            if self.peek() != ")":
                raise self.error("missing ')'")
            self.i += 1
            self.depth -= 1
            return node
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            return ("set", DOT)
        if c == "^":
            return ("bol",)
        if c == "$":
            return ("eol",)
        if c == "\\":
            return ("set", self.escape(in_class=False))
        if c in "*+?":
            raise self.error("nothing to repeat")
        if 0xD800 <= ord(c) <= 0xDBFF and 0xDC00 <= ord(self.peek() or "\0") <= 0xDFFF:
            c2 = self.peek()
            self.i += 1
            return ("set", cs_chars(chr(0x10000 + ((ord(c) - 0xD800) << 10) + ord(c2) - 0xDC00)))
        return ("set", cs_chars(c))

    def escape(self, in_class: bool) -> Charset:
        c = self.peek()
        if not c:
            raise self.error("trailing backslash")
        self.i += 1
        if c in "dDwWsS":
            return class_escape(c)
        if c == "b":
            if in_class:
                return cs_chars("\b")
            raise self.error("word boundary \\b (not a regular language here)")
        if c == "B":
            raise self.error("word boundary \\B")
        if c in _SIMPLE_ESCAPES and not (c == "0" and self.peek().isdigit()):
            return cs_chars(chr(_SIMPLE_ESCAPES[c]))
        if c.isdigit():
            raise self.error("back-reference")
        if c == "c" and self.peek().isascii() and self.peek().isalpha():
            self.i += 1
            return cs_chars(chr(ord(self.s[self.i - 1]) % 32))
        if c == "x":
            h = self.s[self.i:self.i + 2]
            if len(h) == 2 and all(x in "0123456789abcdefABCDEF" for x in h):
                self.i += 2
                return cs_chars(chr(int(h, 16)))
            raise self.error("incomplete \\x escape")
        if c == "u":
            h = self.s[self.i:self.i + 4]
            if len(h) == 4 and all(x in "0123456789abcdefABCDEF" for x in h):
                self.i += 4
                cp = int(h, 16)
                if 0xD800 <= cp <= 0xDBFF and self.s[self.i:self.i + 2] == "\\u":
                    h2 = self.s[self.i + 2:self.i + 6]
                    if len(h2) == 4 and all(x in "0123456789abcdefABCDEF" for x in h2) and \
                            0xDC00 <= int(h2, 16) <= 0xDFFF:
                        self.i += 6
                        return cs_chars(chr(0x10000 + ((cp - 0xD800) << 10) + int(h2, 16) - 0xDC00))
                return cs_chars(chr(cp)) if not 0xD800 <= cp <= 0xDFFF else ()  # a lone surrogate: no text
            raise self.error("\\u{...} or an incomplete \\u escape")
        if c in "pPk":
            raise self.error(f"\\{c} escape")
        if c.isalnum():
            raise self.error(f"unknown escape \\{c}")
        return cs_chars(c)

    def char_class(self) -> Charset:
        neg = self.peek() == "^"
        if neg:
            self.i += 1
        if self.peek() == "]":
            raise self.error("a class starting with ']' (ECMA-262 and Python read it differently)")
        acc: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class")
            if c == "]":
                self.i += 1
                break
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if len(lo) == 1 and lo[0][0] == lo[0][1] and len(hi) == 1 and hi[0][0] == hi[0][1]:
                    if hi[0][0] < lo[0][0]:
                        raise self.error("range out of order in character class")
                    acc.append((lo[0][0], hi[0][0]))
                    continue
                raise self.error("a class escape as a range bound")
            acc.extend(lo)
        cs = cs_norm(acc)
        return cs_not(cs) if neg else cs

    def class_atom(self) -> Charset:
        c = self.peek()
        self.i += 1
        if c == "\\":
            return self.escape(in_class=True)
        if c == "[" and self.peek() in (":", "=", "."):
            raise self.error("a POSIX class (Python warns, ECMA-262 reads it literally)")
        if 0xD800 <= ord(c) <= 0xDBFF and 0xDC00 <= ord(self.peek() or "\0") <= 0xDFFF:
            c2 = self.peek()
            self.i += 1
            return cs_chars(chr(0x10000 + ((ord(c) - 0xD800) << 10) + ord(c2) - 0xDC00))
        return cs_chars(c)


# ---- NFA (Thompson) and DFA ------------------------------------------------------------------------------------------

BOL, EOL = "^", "$"


class _NFA:
    def __init__(self) -> None:
        self.edges: list[list[tuple[object, int]]] = []  # label: Charset, BOL, EOL or None (epsilon)
        self.eps: dict[int, frozenset[int]] = {}  # each state's epsilon closure, filled once the NFA is built

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise Unsupported(f"the pattern expands to more than {MAX_NFA_STATES} automaton states")
        self.edges.append([])
        return len(self.edges) - 1

    def build(self, node: tuple, start: int) -> int:
        """Add ``node`` from ``start``; returns its end state."""
        kind = node[0]
        if kind == "set":
            end = self.state()
            if node[1]:
                self.edges[start].append((node[1], end))
            return end
        if kind in ("bol", "eol"):
            end = self.state()
            self.edges[start].append((BOL if kind == "bol" else EOL, end))
            return end
        if kind == "cat":
            cur = start
            for item in node[1]:
                cur = self.build(item, cur)
            return cur
        if kind == "alt":
            end = self.state()
            for branch in node[1]:
                s = self.state()
                self.edges[start].append((None, s))
                self.edges[self.build(branch, s)].append((None, end))
            return end
        _rep, inner, lo, hi = node
        cur = start
        for _ in range(lo):
            cur = self.build(inner, cur)
        if hi is None:
            loop = self.state()
            self.edges[cur].append((None, loop))
            self.edges[self.build(inner, loop)].append((None, loop))
            return loop
        end = self.state()
        self.edges[cur].append((None, end))
        for _ in range(hi - lo):
            cur = self.build(inner, cur)
            self.edges[cur].append((None, end))
        return end


@dataclass
class DFA:
    """A deterministic automaton over code points: ``edges[q]`` lists (charset, target); state 0 is the start."""

    edges: list[list[tuple[Charset, int]]]
    accepting: list[bool]

    def accepts(self, text: str) -> bool:
        q = 0
        for ch in text:
            cp = ord(ch)
            for cs, t in self.edges[q]:
                k = bisect_right(cs, (cp, MAX_UNICODE + 1)) - 1
                if k >= 0 and cs[k][0] <= cp <= cs[k][1]:
                    q = t
                    break
            else:
                return False
        return self.accepting[q]

    def is_empty(self) -> bool:
        return not any(self.accepting)


def _closure(nfa: _NFA, states: frozenset[int]) -> frozenset[int]:
    """The states reached by epsilon moves: the union of each state's own closure (``_eps_closure``, once each)."""
    memo = nfa.eps
    out: set[int] = set()
    for s in states:
        c = memo.get(s)
        out |= c if c is not None else _eps_closure(nfa, s)
    return frozenset(out)


def _eps_closure(nfa: _NFA, root: int) -> frozenset[int]:
    """Epsilon closures of ``root`` and of every state it reaches, into ``nfa.eps``: Tarjan's strongly connected
    components over the epsilon edges (iterative), each component's closure the union of its successors' ones."""
    memo = nfa.eps
    edges = nfa.edges

    def succ(q: int) -> list[int]:
        return [t for label, t in edges[q] if label is None]

    index = {root: 0}
    low = {root: 0}
    on_stack = {root}
    stack = [root]
    work = [(root, iter(succ(root)))]
    while work:
        v, it = work[-1]
        for w in it:
            if w in memo:
                continue
            if w not in index:
                index[w] = low[w] = len(index)
                on_stack.add(w)
                stack.append(w)
                work.append((w, iter(succ(w))))
                break
            if w in on_stack:
                low[v] = min(low[v], index[w])
        else:
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                acc = set(comp)
                for x in comp:
                    for w in succ(x):
                        if w not in acc:
                            acc |= memo[w]
                closed = frozenset(acc)
                for x in comp:
                    memo[x] = closed
    return memo[root]


def _step(nfa: _NFA, states: frozenset[int], symbol: str) -> frozenset[int]:
    return _closure(nfa, frozenset(t for q in states for label, t in nfa.edges[q] if label == symbol))


def _partition(labels: list[tuple[Charset, int]]) -> list[tuple[Charset, frozenset[int]]]:
    """Split overlapping labelled charsets into disjoint pieces, each with the set of targets it leads to."""
    events: dict[int, list[tuple[int, int]]] = {}   # a sweep over the range ends: targets entering, leaving
    for cs, t in labels:
        for lo, hi in cs:
            events.setdefault(lo, []).append((t, 1))
            events.setdefault(hi + 1, []).append((t, -1))
    points = sorted(events)
    active: dict[int, int] = {}
    groups: dict[frozenset[int], list[tuple[int, int]]] = {}
    for a, b in zip(points, points[1:], strict=False):
        for t, step in events[a]:
            c = active.get(t, 0) + step
            if c:
                active[t] = c
            else:
                del active[t]
        if active:
            groups.setdefault(frozenset(active), []).append((a, b - 1))
    return [(cs_norm(r), ts) for ts, r in groups.items()]


def _contains(cs: Charset, cp: int) -> bool:
    k = bisect_right(cs, (cp, MAX_UNICODE + 1)) - 1
    return k >= 0 and cs[k][0] <= cp <= cs[k][1]


def _determinise(nfa: _NFA, pre: int, final: frozenset[int]) -> DFA:
    start = _closure(nfa, _step(nfa, _closure(nfa, frozenset((pre,))), BOL))
    index = {start: 0}
    order = [start]
    edges: list[list[tuple[Charset, int]]] = []
    accepting: list[bool] = []
    k = 0
    while k < len(order):
        cur = order[k]
        k += 1
        accepting.append(bool(final & _step(nfa, cur, EOL)))  # the end, read by '$' or by the suffix loop
        labels = [(lab, t) for q in cur for lab, t in nfa.edges[q] if isinstance(lab, tuple)]
        out = []
        for cs, targets in _partition(labels):
            nxt = _closure(nfa, targets)
            if nxt not in index:
                if len(order) >= MAX_DFA_STATES:
                    raise Unsupported(f"the automaton has more than {MAX_DFA_STATES} states")
                index[nxt] = len(order)
                order.append(nxt)
            out.append((cs, index[nxt]))
        edges.append(out)
    return trim(DFA(edges, accepting))


def trim(d: DFA) -> DFA:
    """Drop the states that cannot reach acceptance, merge parallel edges, renumber from the start."""
    n = len(d.edges)
    rev: list[list[int]] = [[] for _ in range(n)]
    for q, es in enumerate(d.edges):
        for _cs, t in es:
            rev[t].append(q)
    live = {q for q in range(n) if d.accepting[q]}
    stack = list(live)
    while stack:
        q = stack.pop()
        for p in rev[q]:
            if p not in live:
                live.add(p)
                stack.append(p)
    if 0 not in live:
        return DFA([[]], [False])
    index = {0: 0}
    order = [0]
    edges: list[list[tuple[Charset, int]]] = []
    k = 0
    while k < len(order):
        q = order[k]
        k += 1
        merged: dict[int, list[Charset]] = {}
        for cs, t in d.edges[q]:
            if t in live and cs:
                if t not in index:
                    index[t] = len(order)
                    order.append(t)
                merged.setdefault(index[t], []).append(cs)
        edges.append([(r[0] if len(r) == 1 else cs_norm([x for cs in r for x in cs]), t) for t, r in merged.items()])
    return DFA(edges, [d.accepting[q] for q in order])


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str, max_depth: int = 200) -> DFA:
    """The DFA of the strings in which ``pattern`` finds a match (``Unsupported`` where there is none here)."""
    ast = _Parser(pattern, max_depth).parse()
    nfa = _NFA()
    pre = nfa.state()
    universe = UNIVERSE
    nfa.edges[pre].append((universe, pre))
    nfa.edges[pre].append((BOL, pre))
    body = nfa.state()
    nfa.edges[pre].append((None, body))
    end = nfa.build(ast, body)
    post = nfa.state()
    nfa.edges[end].append((None, post))
    nfa.edges[post].append((universe, post))
    final = nfa.state()
    nfa.edges[post].append((EOL, final))
    return _determinise(nfa, pre, frozenset((post, final)))


def literal_dfa(words: list[str]) -> DFA:
    """The DFA of exactly these strings (a trie)."""
    edges: list[dict[int, int]] = [{}]
    accepting = [False]
    for w in words:
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in w):
            continue  # a lone surrogate: not a scalar value, never in a UTF-8 text
        q = 0
        for ch in w:
            cp = ord(ch)
            if cp not in edges[q]:
                edges.append({})
                accepting.append(False)
                edges[q][cp] = len(edges) - 1
            q = edges[q][cp]
        accepting[q] = True
    return DFA([[(((cp, cp),), t) for cp, t in e.items()] for e in edges], accepting)


def any_dfa() -> DFA:
    return DFA([[(UNIVERSE, 0)]], [True])


def intersect(a: DFA, b: DFA) -> DFA:
    index = {(0, 0): 0}
    order = [(0, 0)]
    edges: list[list[tuple[Charset, int]]] = []
    k = 0
    while k < len(order):
        p, q = order[k]
        k += 1
        out = []
        for c1, t1 in a.edges[p]:
            for c2, t2 in b.edges[q]:
                c = _and(c1, c2)
                if c:
                    key = (t1, t2)
                    if key not in index:
                        if len(order) >= MAX_DFA_STATES:
                            raise Unsupported(f"the intersection has more than {MAX_DFA_STATES} states")
                        index[key] = len(order)
                        order.append(key)
                    out.append((c, index[key]))
        edges.append(out)
    return trim(DFA(edges, [a.accepting[p] and b.accepting[q] for p, q in order]))


def complement(a: DFA) -> DFA:
    n = len(a.edges)
    edges = []
    for es in a.edges:
        rest = cs_not(cs_norm([r for cs, _t in es for r in cs]))
        edges.append(list(es) + ([(rest, n)] if rest else []))
    edges.append([(UNIVERSE, n)])
    return trim(DFA(edges, [not x for x in a.accepting] + [True]))


def with_length(a: DFA, min_len: int, max_len: int | None) -> DFA:
    """Strings of ``a`` with min_len <= length (in code points) <= max_len."""
    cap = max_len if max_len is not None else min_len
    if (cap + 1) * len(a.edges) > MAX_DFA_STATES * 4:
        raise Unsupported(f"the length bounds times the pattern's automaton exceed {MAX_DFA_STATES * 4} states")
    index = {(0, 0): 0}
    order = [(0, 0)]
    edges: list[list[tuple[Charset, int]]] = []
    k = 0
    while k < len(order):
        q, n = order[k]
        k += 1
        out = []
        m = n + 1 if max_len is not None else min(n + 1, cap)
        if max_len is None or n < max_len:
            for cs, t in a.edges[q]:
                key = (t, m)
                if key not in index:
                    index[key] = len(order)
                    order.append(key)
                out.append((cs, index[key]))
        edges.append(out)
    return trim(DFA(edges, [a.accepting[q] and n >= min_len for q, n in order]))


# ---- GBNF emission over JSON string text ----------------------------------------------------------------------------

_SHORT = {8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}


def _cp(cp: int) -> str:
    if cp < 0x80 and (chr(cp).isalnum()):
        return chr(cp)
    return f"\\x{cp:02X}" if cp < 0x100 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def gbnf_class(cs: Charset) -> str:
    return "[" + "".join(_cp(lo) if lo == hi else f"{_cp(lo)}-{_cp(hi)}" for lo, hi in cs) + "]"


_RAW = cs_norm([(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_UNICODE)])


@functools.lru_cache(maxsize=4096)
def json_chars(cs: Charset) -> str:
    """GBNF alternatives spelling, inside a JSON string, any character of ``cs`` (raw, or escaped where JSON must)."""
    alts = []
    raw = _and(cs, _RAW)
    if raw:
        alts.append(gbnf_class(raw))
    if _contains(cs, 0x22):
        alts.append('"\\\\\\""')
    if _contains(cs, 0x5C):
        alts.append('"\\\\\\\\"')
    ctrl = [cp for lo, hi in _and(cs, ((0, 0x1F),)) for cp in range(lo, hi + 1)]
    short = "".join(_SHORT[cp] for cp in ctrl if cp in _SHORT)
    if short:
        alts.append(f'"\\\\" [{short}]')
    uhex = []
    for high in (0, 1):
        lows = [cp & 15 for cp in ctrl if cp >> 4 == high and cp not in _SHORT]
        if lows:
            uhex.append(f"[{high}] [" + "".join(_hexcase(d) for d in lows) + "]")
    if uhex:
        alts.append('"\\\\u00" ' + (uhex[0] if len(uhex) == 1 else "(" + " | ".join(uhex) + ")"))
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _hexcase(d: int) -> str:
    h = f"{d:x}"
    return h if h.isdigit() else h + h.upper()


def signature(d: DFA) -> tuple:
    """A hashable description of the automaton (equal automata, equal rules)."""
    return tuple((tuple(es), acc) for es, acc in zip(d.edges, d.accepting, strict=False))


def minimise(d: DFA) -> DFA:
    """Merge equivalent states: partition refinement from accepting / not accepting (the coarsest stable partition,
    as Moore's rounds give). A round re-reads only the states with a successor that changed block: the others of a
    block keep the block's signature, so a block splits into its dirty states' new groups and the rest, and only the
    dirty ones move (a chain of n states, such as a length counter, takes n rounds of O(1), not O(n) each)."""
    n = len(d.edges)
    block = [1 if a else 0 for a in d.accepting]
    size: dict[int, int] = {}
    for q in range(n):
        size[block[q]] = size.get(block[q], 0) + 1
    # each state's edges once as (charsets, targets); a signature looks up the targets' blocks and merges the
    # charsets of edges that land in one block (normalised, so that equal moves give equal signatures)
    labels = [tuple(cs for cs, _t in es) for es in d.edges]  # normalised by whoever built d
    targets = [tuple(t for _cs, t in es) for es in d.edges]
    preds: list[set[int]] = [set() for _ in range(n)]
    for q in range(n):
        for t in targets[q]:
            preds[t].add(q)

    def signature_of(q: int) -> tuple:
        bs = [block[t] for t in targets[q]]
        if len(set(bs)) == len(bs):
            return tuple(sorted(zip(bs, labels[q], strict=True)))
        by_block: dict[int, list[tuple[int, int]]] = {}
        for b, cs in zip(bs, labels[q], strict=True):
            by_block.setdefault(b, []).extend(cs)
        return tuple(sorted((b, cs_norm(r)) for b, r in by_block.items()))

    block_sig: dict[int, tuple] = {}  # the signature every member of a block had at the end of the last round
    dirty: set[int] = set(range(n))
    next_id = 2
    while dirty:
        by_block: dict[int, dict[tuple, list[int]]] = {}
        for q in dirty:
            by_block.setdefault(block[q], {}).setdefault(signature_of(q), []).append(q)
        moved: list[int] = []
        for b, groups in by_block.items():
            clean = size[b] - sum(len(g) for g in groups.values())
            if clean:
                old = block_sig[b]
                stay = groups.pop(old, [])
                keep_sig, kept = old, clean + len(stay)
            else:
                keep_sig = max(groups, key=lambda s: len(groups[s]))
                kept = len(groups.pop(keep_sig))
            block_sig[b] = keep_sig
            size[b] = kept
            for s, g in groups.items():
                size[next_id] = len(g)
                block_sig[next_id] = s
                for q in g:
                    block[q] = next_id
                moved += g
                next_id += 1
        dirty = {p for q in moved for p in preds[q]}
    count = len({block[q] for q in range(n)})
    if count == n:
        return d
    first: dict[int, int] = {}
    for q in range(n):
        first.setdefault(block[q], q)
    order = sorted(first, key=lambda b: (b != block[0], first[b]))
    index = {b: i for i, b in enumerate(order)}
    edges = []
    for b in order:
        q = first[b]
        merged: dict[int, list[tuple[int, int]]] = {}
        for cs, t in d.edges[q]:
            merged.setdefault(index[block[t]], []).extend(cs)
        edges.append([(cs_norm(r), t) for t, r in merged.items()])
    return DFA(edges, [d.accepting[first[b]] for b in order])


def emit(d: DFA, name: str, reserve: Callable[[str], str], define: Callable[[str, str], None]) -> str:
    """Rules for the JSON string text (quotes excluded) of the DFA's strings, one per state, named by ``reserve``
    and given their bodies by ``define``; returns the start rule's name."""
    if d.is_empty():
        raise SchemaError(f"no string satisfies the constraints of {name}", path="#")
    d = minimise(d)
    names = [reserve(f"{name}-s{q}" if q else name) for q in range(len(d.edges))]
    for q in range(len(d.edges)):
        alts = [f"{json_chars(cs)} {names[t]}" for cs, t in d.edges[q] if cs]
        if d.accepting[q]:
            alts.append('""')
        define(names[q], " | ".join(alts))
    return names[0]
