"""A small reader for the GBNF the converter emits: which rules can derive a finite string (a grammar whose root
cannot accepts nothing), and random documents drawn from a grammar (for tests and examples).

It reads the subset json_schema_to_gbnf produces (literals, character classes, rule references, groups, ``| ? * +
{m,n}``); anything else raises ``ValueError``. It is not the package's GBNF parser.

Example:
    >>> g = read_gbnf('root ::= "a" x\\nx ::= x "b"\\n')
    >>> sorted(productive_rules(g))
    []
    >>> import random
    >>> sample(read_gbnf('root ::= [a-c]{2} "!"\\n'), random.Random(1))
    'bc!'
"""

from __future__ import annotations

import functools
import random as _random
import re
from dataclasses import dataclass

MAX_CP = 0x10FFFF
_WS = re.compile(r"[ \t]*")
_WS_NL = re.compile(r"[ \t\r\n]*")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_PLAIN = re.compile(r'[^"\\]+')


@dataclass(frozen=True)
class Item:
    kind: str          # "lit" (text), "cls" (ranges, negated), "ref" (name), "group" (alts)
    value: object
    lo: int = 1
    hi: int | None = 1  # None = unbounded


Alts = tuple[tuple[Item, ...], ...]


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ws(self, newlines: bool) -> None:
        self.i = (_WS_NL if newlines else _WS).match(self.s, self.i).end()

    def name(self) -> str:
        m = _NAME.match(self.s, self.i)
        if m is None:
            raise ValueError(f"expecting a name at {self.s[self.i:self.i + 20]!r}")
        self.i = m.end()
        return m.group(0)

    def char(self) -> int:
        s, i = self.s, self.i
        if s[i] == "\\":
            c = s[i + 1]
            n = {"x": 2, "u": 4, "U": 8}.get(c)
            if n:
                self.i = i + 2 + n
                return int(s[i + 2:i + 2 + n], 16)
            simple = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
            if c not in simple:
                raise ValueError(f"unknown escape {s[i:i + 2]!r}")
            self.i = i + 2
            return simple[c]
        self.i = i + 1
        return ord(s[i])

    def alts(self, nested: bool) -> Alts:
        out = [self.seq(nested)]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            out.append(self.seq(nested))
        return tuple(out)

    def seq(self, nested: bool) -> tuple[Item, ...]:
        items: list[Item] = []
        while True:
            self.ws(nested)
            if self.i >= len(self.s):
                break
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                text = []
                while self.s[self.i] != '"':
                    m = _PLAIN.match(self.s, self.i)
                    if m is not None:
                        text.append(m.group(0))
                        self.i = m.end()
                        continue
                    text.append(chr(self.char()))
                self.i += 1
                items.append(Item("lit", "".join(text)))
            elif c == "[":
                self.i += 1
                neg = self.s[self.i] == "^"
                self.i += neg
                ranges = []
                while self.s[self.i] != "]":
                    lo = self.char()
                    hi = lo
                    if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                items.append(Item("cls", (tuple(ranges), neg)))
            elif c == "(":
                self.i += 1
                group = self.alts(True)
                self.ws(True)
                if self.s[self.i] != ")":
                    raise ValueError("expecting ')'")
                self.i += 1
                items.append(Item("group", group))
            elif c.isascii() and (c.isalnum() or c == "-"):
                items.append(Item("ref", self.name()))
            elif c in "*+?{" and items:
                last = items.pop()
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(c, (None, None))
                self.i += 1
                if c == "{":
                    j = self.s.index("}", self.i)
                    parts = self.s[self.i:j].split(",")
                    lo = int(parts[0] or 0)
                    hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1].strip() else None)
                    self.i = j + 1
                items.append(Item("group", ((last,),), lo, hi))
            else:
                break
        return tuple(items)


@functools.lru_cache(maxsize=8192)
def read_body(body: str) -> Alts:
    """One rule body (the alternatives after ``::=``); cached, as the same bodies recur in every grammar."""
    r = _Reader(body)
    alts = r.alts(False)
    r.ws(True)
    if r.i != len(r.s):
        raise ValueError(f"unexpected {r.s[r.i:r.i + 20]!r} in {body!r}")
    return alts


def read_rules(rules: dict[str, str]) -> dict[str, Alts]:
    """Rules given as name -> body text."""
    return {name: read_body(body) for name, body in rules.items()}


def read_gbnf(text: str) -> dict[str, Alts]:
    """Rules of a GBNF text (as json_schema_to_gbnf writes it) by name."""
    rules: dict[str, Alts] = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        m = _NAME.match(line)
        if m is None:
            raise ValueError(f"expecting a name at {line[:20]!r}")
        rest = line[m.end():].lstrip(" \t")
        if not rest.startswith("::="):
            raise ValueError(f"expecting '::=' in {line!r}")
        rules[m.group(0)] = read_body(rest[3:])
    return rules


def inverted_repetitions(rules: dict[str, Alts]) -> list[tuple[str, int, int]]:
    """(rule, m, n) for every ``{m,n}`` with n < m: llama.cpp's grammar parser never finishes loading those."""
    out: list[tuple[str, int, int]] = []

    def walk(name: str, alts: Alts) -> None:
        for seq in alts:
            for it in seq:
                if it.hi is not None and it.hi < it.lo:
                    out.append((name, it.lo, it.hi))
                if it.kind == "group":
                    walk(name, it.value)  # type: ignore[arg-type]

    for name, alts in rules.items():
        walk(name, alts)
    return out


def _class_nonempty(ranges: tuple[tuple[int, int], ...], neg: bool) -> bool:
    if not neg:
        return any(lo <= hi for lo, hi in ranges)
    covered = sorted((lo, hi) for lo, hi in ranges if lo <= hi)
    nxt = 0
    for lo, hi in covered:
        if lo > nxt:
            return True
        nxt = max(nxt, hi + 1)
    return nxt <= MAX_CP


def _refs(alts: Alts, out: set[str]) -> set[str]:
    for seq in alts:
        for it in seq:
            if it.kind == "ref":
                out.add(it.value)  # type: ignore[arg-type]
            elif it.kind == "group":
                _refs(it.value, out)  # type: ignore[arg-type]
    return out


def _dependents(rules: dict[str, Alts]) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {name: [] for name in rules}
    for name, alts in rules.items():
        for ref in _refs(alts, set()):
            deps.setdefault(ref, []).append(name)
    return deps


def productive_rules(rules: dict[str, Alts]) -> set[str]:
    """Names of the rules that derive at least one finite string (least fixpoint, by worklist)."""
    good: set[str] = set()

    def item_ok(it: Item) -> bool:
        if it.hi is not None and it.hi < it.lo:
            return False
        if it.lo == 0 or it.kind == "lit":
            return True
        if it.kind == "cls":
            return _class_nonempty(*it.value)  # type: ignore[misc]
        if it.kind == "ref":
            return it.value in good
        return any(all(item_ok(x) for x in seq) for seq in it.value)  # type: ignore[union-attr]

    dependents = _dependents(rules)
    work = list(rules)
    while work:
        name = work.pop()
        if name in good or name not in rules:
            continue
        if any(all(item_ok(x) for x in seq) for seq in rules[name]):
            good.add(name)
            work.extend(dependents.get(name, ()))
    return good


_MAX_CLAUSES = 64
_NEVER: tuple[frozenset[str], ...] = ()
_ALWAYS: tuple[frozenset[str], ...] = (frozenset(),)


def _or(parts: list[tuple[frozenset[str], ...]]) -> tuple[frozenset[str], ...] | None:
    out: set[frozenset[str]] = set()
    for p in parts:
        out.update(p)
    if frozenset() in out:
        return _ALWAYS
    return tuple(sorted(out, key=sorted)) if len(out) <= _MAX_CLAUSES else None


def _and(a: tuple[frozenset[str], ...], b: tuple[frozenset[str], ...]) -> tuple[frozenset[str], ...] | None:
    if not a or not b:
        return _NEVER
    if a == _ALWAYS:
        return b
    if b == _ALWAYS:
        return a
    return _or([tuple({x | y for x in a for y in b})]) if len(a) * len(b) <= _MAX_CLAUSES else None


def _needs(alts: Alts) -> tuple[frozenset[str], ...] | None:
    """When the alternatives derive a finite string, as alternatives of the rule sets that must all do so (as
    ``productive_rules``' item test reads them); None when that formula grows past ``_MAX_CLAUSES``."""
    parts = []
    for seq in alts:
        acc: tuple[frozenset[str], ...] | None = _ALWAYS
        for it in seq:
            if it.hi is not None and it.hi < it.lo:
                need: tuple[frozenset[str], ...] | None = _NEVER
            elif it.lo == 0 or it.kind == "lit":
                need = _ALWAYS
            elif it.kind == "cls":
                need = _ALWAYS if _class_nonempty(*it.value) else _NEVER  # type: ignore[misc]
            elif it.kind == "ref":
                need = (frozenset((it.value,)),)  # type: ignore[arg-type]
            else:
                need = _needs(it.value)  # type: ignore[arg-type]
            acc = None if need is None else _and(acc, need)
            if acc is None or not acc:
                break
        if acc is None:
            return None
        parts.append(acc)
    return _or(parts)


@dataclass(frozen=True)
class BodyFacts:
    """What the load checks need of one rule body, computed once per distinct body text."""

    refs: frozenset[str]
    inverted: tuple[tuple[int, int], ...]          # every {m,n} with n < m, in reading order
    needs: tuple[frozenset[str], ...] | None       # see _needs


_ESC = r'(?:[^"\\]|\\[trn\\"\[\]\-]|\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8})'
_TOKEN = re.compile(r'(?P<ws>[ \t\r\n]+)|(?P<lit>"' + _ESC + r'*")|(?P<cls>\[' + _ESC.replace('^"', '^\\]')
                    + r'*\])|(?P<name>[a-zA-Z0-9-]+)|(?P<q>[*+?])|(?P<rep>\{(\d*)(?:(,)(\d*))?\})|(?P<p>[()|])')
_QUANT = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_Fact = tuple[tuple[frozenset[str], ...] | None, tuple[tuple[int, int], ...]]


def _scan_facts(body: str) -> BodyFacts | None:
    """``BodyFacts`` from a token scan of the body, without building its items; None for anything outside the
    strictly well-formed subset (then ``read_body`` decides, raising where it raises)."""
    refs: set[str] = set()
    stack: list[tuple[list[_Fact], list[_Fact]]] = []
    parts: list[_Fact] = []     # finished sequences of the current group
    items: list[_Fact] = []     # items of the current sequence
    pos = 0

    def close(items: list[_Fact]) -> _Fact:
        acc: tuple[frozenset[str], ...] | None = _ALWAYS
        inv: tuple[tuple[int, int], ...] = ()
        for need, i in items:
            inv += i
            if acc is not None and acc:
                acc = None if need is None else _and(acc, need)
        return acc, inv

    def group(parts: list[_Fact]) -> _Fact:
        needs = [n for n, _ in parts]
        inv = tuple(x for _, i in parts for x in i)
        return (None if any(n is None for n in needs) else _or(needs)), inv  # type: ignore[arg-type]

    for m in _TOKEN.finditer(body):
        if m.start() != pos:
            return None
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            if not stack and ("\n" in m.group() or "\r" in m.group()):
                return None
        elif kind == "lit":
            items.append((_ALWAYS, ()))
        elif kind == "cls":
            ranges, neg = read_body(m.group())[0][0].value  # type: ignore[misc]
            items.append((_ALWAYS if _class_nonempty(ranges, neg) else _NEVER, ()))
        elif kind == "name":
            refs.add(m.group())
            items.append(((frozenset((m.group(),)),), ()))
        elif kind in ("q", "rep"):
            if not items:
                return None
            if kind == "q":
                lo, hi = _QUANT[m.group()]
            else:
                lo = int(m.group(7) or 0)
                hi = lo if m.group(8) is None else (int(m.group(9)) if m.group(9) else None)
            need, inv = items.pop()
            if hi is not None and hi < lo:
                items.append((_NEVER, ((lo, hi),) + inv))
            else:
                items.append((_ALWAYS if lo == 0 else need, inv))
        elif m.group() == "(":
            stack.append((parts, items))
            parts, items = [], []
        elif m.group() == "|":
            parts.append(close(items))
            items = []
        else:  # ")"
            if not stack:
                return None
            parts.append(close(items))
            inner = group(parts)
            parts, items = stack.pop()
            items.append(inner)
    if pos != len(body) or stack:
        return None
    parts.append(close(items))
    needs, inv = group(parts)
    return BodyFacts(frozenset(refs), inv, needs)


@functools.lru_cache(maxsize=8192)
def body_facts(body: str) -> BodyFacts:
    """``BodyFacts`` of a rule body (raises ValueError/IndexError as ``read_body`` does)."""
    fast = _scan_facts(body)
    if fast is not None:
        return fast
    alts = read_body(body)
    inverted = inverted_repetitions({"": alts})
    return BodyFacts(frozenset(_refs(alts, set())), tuple((m, n) for _, m, n in inverted), _needs(alts))


@functools.cache
def _fixed_facts() -> dict[str, BodyFacts]:
    """Facts of the converter's fixed rule bodies (space, the primitives, the string formats): a table built once,
    since every grammar holds some of them."""
    from ._rules import PRIMITIVE_RULES, SPACE_RULE, STRING_FORMAT_RULES

    bodies = [SPACE_RULE] + [b for b, _ in PRIMITIVE_RULES.values()] + [b for b, _ in STRING_FORMAT_RULES.values()]
    return {b: body_facts.__wrapped__(b) for b in bodies}


def load_checks(rules: dict[str, str]) -> tuple[tuple[str, int, int] | None, bool]:
    """The first inverted repetition ``(rule, m, n)`` (as ``inverted_repetitions``) and whether ``root`` is
    productive (as ``productive_rules``), from rule bodies given as text; the same answers, from cached facts.

    >>> load_checks({"root": 'x "a"', "x": '"b"{3,1}'})
    (('x', 3, 1), False)
    """
    fixed = _fixed_facts()
    facts = {name: fixed.get(body) or body_facts(body) for name, body in rules.items()}
    first = next(((name, *f.inverted[0]) for name, f in facts.items() if f.inverted), None)
    if any(f.needs is None for f in facts.values()):
        return first, "root" in productive_rules(read_rules(rules))
    dependents: dict[str, list[str]] = {}
    for name, f in facts.items():
        for ref in f.refs:
            dependents.setdefault(ref, []).append(name)
    good: set[str] = set()
    work = list(rules)
    while work:
        name = work.pop()
        if name in good or name not in facts:
            continue
        if any(c <= good for c in facts[name].needs):  # type: ignore[union-attr]
            good.add(name)
            if name == "root":
                break
            work.extend(dependents.get(name, ()))
    return first, "root" in good


def _heights(rules: dict[str, Alts]) -> dict[str, int]:
    """Shortest derivation height of each productive rule (to steer random walks towards the end)."""
    h: dict[str, int] = {}

    def item_h(it: Item) -> float:
        if it.hi is not None and it.hi < it.lo:
            return float("inf")
        if it.lo == 0 or it.kind == "lit":
            return 0
        if it.kind == "cls":
            return 0 if _class_nonempty(*it.value) else float("inf")  # type: ignore[misc]
        if it.kind == "ref":
            return h.get(it.value, float("inf")) + 1  # type: ignore[arg-type]
        return min(max((item_h(x) for x in seq), default=0) for seq in it.value)  # type: ignore[union-attr]

    dependents = _dependents(rules)
    work = list(rules)
    while work:
        name = work.pop()
        if name not in rules:
            continue
        best = min(max((item_h(x) for x in seq), default=0) for seq in rules[name])
        if best != float("inf") and (name not in h or best < h[name]):
            h[name] = int(best)
            work.extend(dependents.get(name, ()))
    return h


def sample(rules: dict[str, Alts], rng: _random.Random, root: str = "root", budget: int = 40,
           ascii_only: bool = False) -> str:
    """A random string of the grammar: random choices while ``budget`` lasts, then the shortest way out."""
    heights = _heights(rules)
    if root not in heights:
        raise ValueError("the grammar accepts nothing")
    out: list[str] = []
    steps = [0]

    def seq_h(seq: tuple[Item, ...]) -> float:
        best = 0.0
        for it in seq:
            if it.hi is not None and it.hi < it.lo:
                return float("inf")
            if it.lo == 0 or it.kind == "lit":
                continue
            if it.kind == "cls":
                if not _class_nonempty(*it.value):  # type: ignore[misc]
                    return float("inf")
                continue
            if it.kind == "ref":
                best = max(best, heights.get(it.value, float("inf")) + 1)  # type: ignore[arg-type]
            else:
                best = max(best, min(seq_h(s) for s in it.value))  # type: ignore[union-attr]
        return best

    def pick_char(ranges: tuple[tuple[int, int], ...], neg: bool) -> str:
        if not neg:
            lo, hi = rng.choice([r for r in ranges if r[0] <= r[1]])
            return chr(rng.randint(lo, hi))
        pool = [0x20, 0x7E] if ascii_only or rng.random() < 0.8 else [0xA0, 0x2FFF]
        for _ in range(1000):
            c = rng.randint(*pool)
            if not any(lo <= c <= hi for lo, hi in ranges) and not 0xD800 <= c <= 0xDFFF:
                return chr(c)
        raise ValueError("no character found for a negated class")

    def gen_alts(alts: Alts, depth: int) -> None:
        steps[0] += 1
        finite = [s for s in alts if seq_h(s) != float("inf")]
        if depth > budget or steps[0] > budget * 50:
            best = min(seq_h(s) for s in finite)
            seq = rng.choice([s for s in finite if seq_h(s) == best])
        else:
            seq = rng.choice(finite)
        for it in seq:
            gen_item(it, depth)

    def gen_item(it: Item, depth: int) -> None:
        late = depth > budget or steps[0] > budget * 50
        if seq_h((Item(it.kind, it.value),)) == float("inf"):
            n = 0  # the item cannot be produced: only reachable here when it is optional
        elif it.lo == 1 and it.hi == 1:
            n = 1
        elif late:
            n = it.lo
        else:
            hi = it.hi if it.hi is not None else it.lo + 3
            n = rng.randint(it.lo, max(it.lo, min(hi, it.lo + 3)))
        for _ in range(n):
            if it.kind == "lit":
                out.append(it.value)  # type: ignore[arg-type]
            elif it.kind == "cls":
                out.append(pick_char(*it.value))  # type: ignore[misc]
            elif it.kind == "ref":
                gen_alts(rules[it.value], depth + 1)  # type: ignore[index]
            else:
                gen_alts(it.value, depth + 1)  # type: ignore[arg-type]

    gen_alts(rules[root], 0)
    return "".join(out)
