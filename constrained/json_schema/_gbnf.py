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
