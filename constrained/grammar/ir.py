"""The compiled rule representation: llama.cpp's own (``llama_grammar_element`` vectors).

Each rule is a flat tuple of ``(type, value)`` elements: alternatives are separated by ``ALT`` and the rule ends
with ``END``, exactly as ``llama_grammar_parser`` lays them out, so that the matcher can follow llama.cpp's runtime
step for step and ``test-grammar-parser.cpp``'s expectations can be compared element for element.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from operator import itemgetter
from typing import Any

import numpy as np


class ElementType(IntEnum):
    """``llama_gretype`` values."""

    END = 0             # end of rule definition
    ALT = 1             # start of alternate definition for rule
    RULE_REF = 2        # non-terminal element: reference to rule (value = rule id)
    CHAR = 3            # terminal: character (code point)
    CHAR_NOT = 4        # inverse char(s) ([^a], [^a-b] [^abc])
    CHAR_RNG_UPPER = 5  # modifies a preceding CHAR or CHAR_ALT to be an inclusive range ([a-z])
    CHAR_ALT = 6        # modifies a preceding CHAR or CHAR_RNG_UPPER to add an alternate char ([ab], [a-zA])
    CHAR_ANY = 7        # any character (.)
    TOKEN = 8           # a specific token id (<[id]>)
    TOKEN_NOT = 9       # any token but this id (!<[id]>)


Element = tuple[int, int]
"""``(ElementType, value)``."""


@dataclass(frozen=True)
class ParsedGrammar:
    """Rules as llama.cpp lays them out, with token references resolved to ids.

    Attributes:
        rules: ``rules[i]`` is the element vector of rule id ``i`` (ALT-separated, END-terminated).
        symbol_ids: rule name → id, including the generated helper rules (``root_2``...).
        root_id: the id of the start rule.
    """

    rules: tuple[tuple[Element, ...], ...]
    symbol_ids: Mapping[str, int] = field(default_factory=dict)
    root_id: int = 0


TEXT_TOKEN = 100
"""Element type of an unresolved ``<text>`` token reference (value: index into ``Grammar.token_texts``).

Never part of a :class:`ParsedGrammar`: :meth:`constrained.grammar.Grammar.parsed` resolves it to ``TOKEN``
with the vocabulary's tokenizer, as llama.cpp's ``parse_token`` does while parsing."""

TEXT_TOKEN_NOT = 101
"""Unresolved ``!<text>`` (resolves to ``TOKEN_NOT``)."""


# ---------------------------------------------------------------------------------------------- analyses

def _plain(rule: Sequence[Element]) -> bool:
    """A rule without references or alternatives (checked at C speed: a long literal costs no Python loop)."""
    if not rule:
        return True
    kinds = set(map(itemgetter(0), rule))
    return int(ElementType.RULE_REF) not in kinds and int(ElementType.ALT) not in kinds


def _leftmost_edges(rules: Sequence[Sequence[Element]],
                    may_be_empty: Sequence[bool]) -> list[list[tuple[int, bool]]]:
    """For each rule, the rules its alternatives can start with: the leftmost reference, and the next one as
    long as the previous reference may be empty (the edges llama_grammar_detect_left_recursion follows).
    Each edge carries whether the reference is followed by more elements in its alternative (expanding it
    then leaves that continuation on the stack)."""
    graph: list[list[tuple[int, bool]]] = []
    ref, end, alt = int(ElementType.RULE_REF), int(ElementType.END), int(ElementType.ALT)
    for rule in rules:
        edges: list[tuple[int, bool]] = []
        if _plain(rule):
            graph.append(edges)
            continue
        recurse = True
        for i, (kind, value) in enumerate(rule):
            if kind == ref and recurse:
                nxt = rule[i + 1][0] if i + 1 < len(rule) else end
                edges.append((value, nxt != end and nxt != alt))
                if not may_be_empty[value]:
                    recurse = False
            elif kind == end or kind == alt:
                recurse = True
            else:
                recurse = False
        graph.append(edges)
    return graph


def _components(graph: list[list[int]]) -> tuple[list[int], list[bool]]:
    """Strongly connected components (iterative Tarjan): component id per node, and whether the node lies on a
    cycle (a component of two or more nodes, or a self-loop)."""
    n = len(graph)
    index = [-1] * n
    low = [0] * n
    comp = [-1] * n
    on_stack = [False] * n
    stack: list[int] = []
    cyclic = [False] * n
    counter = n_comp = 0
    for start in range(n):
        if index[start] != -1:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            edges = graph[v]
            while i < len(edges):
                w = edges[i]
                i += 1
                if index[w] == -1:
                    work.append((v, i))
                    work.append((w, 0))
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            else:
                if low[v] == index[v]:
                    members = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        comp[w] = n_comp
                        members.append(w)
                        if w == v:
                            break
                    n_comp += 1
                    if len(members) > 1 or v in graph[v]:
                        for w in members:
                            cyclic[w] = True
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
    return comp, cyclic


def _reaching(graph: list[list[int]], targets: Sequence[bool]) -> list[bool]:
    """Which nodes can reach a node marked in ``targets`` (themselves included)."""
    reverse: list[list[int]] = [[] for _ in graph]
    for v, edges in enumerate(graph):
        for w in edges:
            reverse[w].append(v)
    reaches = list(targets)
    todo = [v for v, t in enumerate(targets) if t]
    while todo:
        w = todo.pop()
        for v in reverse[w]:
            if not reaches[v]:
                reaches[v] = True
                todo.append(v)
    return reaches


def _literally_empty(rules: Sequence[Sequence[Element]]) -> list[bool]:
    end, alt = int(ElementType.END), int(ElementType.ALT)
    out = []
    for rule in rules:
        if _plain(rule):
            out.append(not rule or rule[0][0] == end)
            continue
        at_start, empty = True, False
        for kind, _ in rule:
            if kind == end or kind == alt:
                if at_start:
                    empty = True
                    break
                at_start = True
            else:
                at_start = False
        out.append(empty)
    return out


_CHECKED: dict[tuple[str, int], tuple[object, object]] = {}
_CHECKED_LOCK = threading.Lock()


def _memo(kind: str, rules: Sequence[Sequence[Element]], compute: Callable[[], object]) -> Any:
    """One result per rules object for the last few grammars (the parser and the matcher check the same rules)."""
    key = (kind, id(rules))
    with _CHECKED_LOCK:
        hit = _CHECKED.get(key)
    if hit is not None and hit[0] is rules:
        return hit[1]
    res = compute()
    if isinstance(rules, tuple):            # immutable: safe to key on identity while we hold it
        with _CHECKED_LOCK:
            if len(_CHECKED) >= 16:
                _CHECKED.clear()
            _CHECKED[key] = (rules, res)
    return res


def _no_leftmost_cycle(rules: Sequence[Sequence[Element]], rounds: int = 64) -> bool:
    """True if provably no rule can reach itself through leftmost references, even counting as "may be empty"
    every rule that might (an over-approximation of :func:`nullable_rules`): then neither llama.cpp's left-recursion
    check nor :func:`endless_expansion_index` can find anything. Vectorised over the flat elements (a grammar of
    800,000 elements in 200,000 rules costs no Python loop per element); False means "look exactly"."""
    n_rules = len(rules)
    lens = np.fromiter(map(len, rules), dtype=np.int64, count=n_rules)
    n_el = int(lens.sum())
    if not n_el:
        return True
    if n_el > 16 * n_rules:       # few long rules: the exact checks' per-rule scans run at C speed already
        return False
    kinds = np.fromiter(map(itemgetter(0), itertools.chain.from_iterable(rules)), dtype=np.int64, count=n_el)
    vals = np.fromiter(map(itemgetter(1), itertools.chain.from_iterable(rules)), dtype=np.int64, count=n_el)
    rid = np.repeat(np.arange(n_rules), lens)
    end, alt, ref = int(ElementType.END), int(ElementType.ALT), int(ElementType.RULE_REF)
    sep = (kinds == end) | (kinds == alt)
    is_ref = kinds == ref
    if not is_ref.any():
        return True
    target = np.where(is_ref, vals, 0)
    if ((target < 0) | (target >= n_rules)).any():
        return False
    first = np.ones(n_el, dtype=bool)
    first[1:] = sep[:-1] | (rid[1:] != rid[:-1])
    alt_of = np.cumsum(first) - 1
    n_alts = int(alt_of[-1]) + 1
    alt_rule = rid[first]
    terminal = ~sep & ~is_ref
    open_alt = np.bincount(alt_of[terminal], minlength=n_alts) == 0      # no terminal: may match empty
    may_empty = lens == 0                # a rule without elements matches the empty string
    may_empty[alt_rule[open_alt]] = True
    for _ in range(2):        # refine from above (every step stays a superset of the nullable rules)
        blocked = np.bincount(alt_of[is_ref & ~may_empty[target]], minlength=n_alts) > 0
        may_empty = lens == 0
        may_empty[alt_rule[open_alt & ~blocked]] = True
    leftmost = is_ref & first
    cur = leftmost
    for _ in range(rounds):       # the next reference counts while every one before it may be empty
        nxt = np.zeros(n_el, dtype=bool)
        nxt[1:] = cur[:-1] & may_empty[target[:-1]]
        nxt &= is_ref & ~first
        if not nxt.any():
            break
        leftmost = leftmost | nxt
        cur = nxt
    else:
        return False
    src, dst = rid[leftmost], target[leftmost]
    outdeg = np.bincount(src, minlength=n_rules)
    budget = 8 * len(src) + 100_000   # edges looked at in all: a long chain of few edges peels cheaply
    while len(src):               # peel the rules with no outgoing edge left: a cycle never peels
        budget -= len(src)
        gone = outdeg[dst] == 0
        if budget < 0 or not gone.any():
            return False
        outdeg -= np.bincount(src[gone], minlength=n_rules)
        src, dst = src[~gone], dst[~gone]
    return True


def left_recursion_index(rules: Sequence[Sequence[Element]]) -> int | None:
    """The index llama.cpp reports in "left recursion detected for nonterminal at index N", or None.

    As the loop over ``llama_grammar_detect_left_recursion`` in ``llama_grammar_init_impl``: a rule "may be
    empty" only if one of its alternatives is literally empty, and the first rule (in id order) whose depth-first
    walk meets a cycle is reported (not necessarily a rule of the cycle).

    Example:
        >>> T = ElementType
        >>> left_recursion_index([[(T.CHAR, 97), (T.ALT, 0), (T.RULE_REF, 0), (T.END, 0)]])
        0
    """
    return _memo("left", rules, lambda: _left_recursion_index(rules))


def _left_recursion_index(rules: Sequence[Sequence[Element]]) -> int | None:
    if _memo("acyclic", rules, lambda: _no_leftmost_cycle(rules)):
        return None
    return _left_recursion_exact(rules)


def _left_recursion_exact(rules: Sequence[Sequence[Element]]) -> int | None:
    graph = [[w for w, _ in edges] for edges in _leftmost_edges(rules, _literally_empty(rules))]
    reaches = _reaching(graph, _components(graph)[1])
    return next((v for v, r in enumerate(reaches) if r), None)


def nullable_rules(rules: Sequence[Sequence[Element]]) -> list[bool]:
    """Which rules can match the empty string (token and character elements never can).

    Linear: each all-reference alternative counts its references not yet known to be nullable; a rule becoming
    nullable decrements the alternatives that refer to it.
    """
    end, alt, ref = int(ElementType.END), int(ElementType.ALT), int(ElementType.RULE_REF)
    nullable = [False] * len(rules)
    waiting: list[int] = []            # per candidate alternative: references still unknown
    owner: list[int] = []              # per candidate alternative: its rule
    users: dict[int, list[int]] = {}   # rule -> candidate alternatives referring to it (once per reference)
    todo: list[int] = []
    for r, rule in enumerate(rules):
        if _plain(rule):
            if (not rule or rule[0][0] == end) and not nullable[r]:
                nullable[r] = True
                todo.append(r)
            continue
        refs: list[int] = []
        terminal = False
        for kind, value in rule:
            if kind == end or kind == alt:
                if not terminal:
                    if not refs:
                        if not nullable[r]:
                            nullable[r] = True
                            todo.append(r)
                    else:
                        a = len(waiting)
                        waiting.append(len(refs))
                        owner.append(r)
                        for target in refs:
                            users.setdefault(target, []).append(a)
                refs, terminal = [], False
            elif kind == ref:
                refs.append(value)
            else:
                terminal = True
    while todo:
        r = todo.pop()
        for a in users.get(r, ()):
            waiting[a] -= 1
            if waiting[a] == 0 and not nullable[owner[a]]:
                nullable[owner[a]] = True
                todo.append(owner[a])
    return nullable


def endless_expansion_index(rules: Sequence[Sequence[Element]], root_id: int) -> int | None:
    """A rule on which llama.cpp's ``llama_grammar_advance_stack`` would never finish, or None.

    Left recursion that llama.cpp's check misses (through a rule that can match the empty string without a
    literally empty alternative, e.g. ``e ::= ()``) is expanded by ``advance_stack`` over and over. Where every
    reference of the cycle ends its alternative the stacks repeat and its seen-set stops the loop (llama.cpp
    works); where one is followed by more elements each turn leaves one more element on the stack and the
    expansion never ends. This returns a rule of such a growing cycle that is reachable from ``root_id``.

    Example:
        >>> T = ElementType   # root ::= e root "x" | "b" ; e ::= () ; e_2 ::= ""
        >>> rules = [[(T.RULE_REF, 1), (T.RULE_REF, 0), (T.CHAR, 120), (T.ALT, 0), (T.CHAR, 98), (T.END, 0)],
        ...          [(T.RULE_REF, 2), (T.END, 0)], [(T.END, 0)]]
        >>> endless_expansion_index(rules, 0)
        0
    """
    return _memo(f"endless{root_id}", rules, lambda: _endless_expansion_index(rules, root_id))


def _endless_expansion_index(rules: Sequence[Sequence[Element]], root_id: int) -> int | None:
    if _memo("acyclic", rules, lambda: _no_leftmost_cycle(rules)):
        return None
    return _endless_expansion_exact(rules, root_id)


def _endless_expansion_exact(rules: Sequence[Sequence[Element]], root_id: int) -> int | None:
    edges = _leftmost_edges(rules, nullable_rules(rules))
    graph = [[w for w, _ in e] for e in edges]
    comp, cyclic = _components(graph)
    growing = [False] * len(rules)
    for v, e in enumerate(edges):
        for w, grows in e:
            if grows and cyclic[v] and comp[v] == comp[w]:
                growing[v] = True
    if not any(growing):
        return None
    ref = int(ElementType.RULE_REF)
    seen = {root_id}
    todo = [root_id]
    while todo:
        v = todo.pop()
        if growing[v]:
            return v
        for kind, value in rules[v]:
            if kind == ref and value not in seen:
                seen.add(value)
                todo.append(value)
    return None
