"""A whole-text regular expression → GBNF: the output must match the pattern from its first character to its last.

This is the ``regex`` constraint of vLLM, SGLang and Outlines (xgrammar's ``Grammar.from_regex``): the pattern is
anchored at both ends whether or not it says ``^`` / ``$``. The syntax is ECMA-262 as a JSON Schema ``pattern``
reads it (the converter's reader, :mod:`constrained.json_schema.regex`): classes and escapes, groups, alternation,
every quantifier; lookarounds, back-references and word boundaries are refused. ``.`` is ECMA-262's (no ``\\n``,
``\\r``, U+2028, U+2029; xgrammar's ``.`` takes them).

The pattern becomes a minimal DFA over code points (one GBNF rule per state, so every step of the grammar has one
stack); a pattern whose automaton would exceed :data:`~constrained.json_schema.regex.MAX_DFA_STATES` is written
from its syntax tree instead (``x{m,n}`` repetitions, alternations), which llama.cpp's grammar matches as well.

Example:
    >>> print(regex_to_gbnf("[a-c]+x?"), end="")
    root ::= [a-c] root-s1
    root-s1 ::= [a-c] root-s1 | [x] root-s2 | ""
    root-s2 ::= ""
    >>> print(regex_to_gbnf("a|^b$"), end="")
    root ::= [a-b] root-s1
    root-s1 ::= ""
"""

from __future__ import annotations

import functools

from ..errors import GrammarSyntaxError
from .regex import (
    _NFA,
    BOL,
    DFA,
    EOL,
    Unsupported,
    _determinise,
    _Parser,
    gbnf_class,
    minimise,
)

__all__ = ["anchored_dfa", "regex_to_gbnf"]

MAX_PATTERN_LENGTH = 100_000
"""Longest pattern taken (longer: ``GrammarSyntaxError``)."""


def _parse(pattern: str) -> tuple:
    if not isinstance(pattern, str):
        raise GrammarSyntaxError(f"a regex must be a str, got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise GrammarSyntaxError(f"the regex is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return _Parser(pattern).parse()
    except Unsupported as err:
        raise GrammarSyntaxError(f"regex {pattern!r}: {err}") from err
    except RecursionError as err:
        raise GrammarSyntaxError(f"regex {pattern!r}: nested too deeply") from err


def anchored_dfa(pattern: str) -> DFA:
    """The DFA of the strings that ``pattern`` matches whole (raises ``Unsupported`` when it is too large)."""
    ast = _parse(pattern)
    nfa = _NFA()
    pre = nfa.state()
    nfa.edges[pre].append((BOL, pre))           # '^' reads the start only
    body = nfa.state()
    nfa.edges[pre].append((None, body))
    end = nfa.build(ast, body)
    post = nfa.state()
    nfa.edges[end].append((None, post))
    final = nfa.state()
    nfa.edges[post].append((EOL, final))         # '$' reads the end only
    return minimise(_determinise(nfa, pre, frozenset((post, final))))


def _dfa_rules(d: DFA) -> list[str]:
    names = ["root" if q == 0 else f"root-s{q}" for q in range(len(d.edges))]
    lines = []
    for q, es in enumerate(d.edges):
        alts = [f"{gbnf_class(cs)} {names[t]}" for cs, t in es]
        if d.accepting[q]:
            alts.append('""')
        lines.append(f"{names[q]} ::= {' | '.join(alts) if alts else _NOTHING}")
    return lines


_GBNF_MAX_REPEAT = 2000            # llama.cpp's MAX_REPETITION_THRESHOLD
_NOTHING = "[^\\x00-\\U0010FFFF]"   # a class no character is in: a rule that matches nothing


def _tree_rules(ast: tuple) -> list[str]:
    """GBNF written from the syntax tree (for automata too large to list): anchors only at the two ends."""
    items = list(ast[1]) if ast[0] == "cat" else [ast]
    while items and items[0][0] == "bol":
        items.pop(0)
    while items and items[-1][0] == "eol":
        items.pop()

    helpers: list[str] = []

    def expr(node: tuple) -> str:
        kind = node[0]
        if kind == "set":
            return gbnf_class(node[1]) if node[1] else _NOTHING
        if kind in ("bol", "eol"):
            raise GrammarSyntaxError("regex: an anchor inside a pattern too large for an automaton")
        if kind == "cat":
            return "(" + " ".join(expr(x) for x in node[1]) + ")" if node[1] else '""'
        if kind == "alt":
            return "(" + " | ".join(expr(b) for b in node[1]) + ")"
        _rep, inner, lo, hi = node
        body = expr(inner)
        if lo <= _GBNF_MAX_REPEAT and (hi is None or hi <= _GBNF_MAX_REPEAT):
            return f"{body}{{{lo},{'' if hi is None else hi}}}"
        # llama.cpp reads a bound above 2000 as "no bound" (and refuses a minimum above it): spell it out
        k = len(helpers)
        item = f"rep{k}-x"
        helpers.append(f"{item} ::= {body}")
        parts = [item] * lo
        if hi is None:
            parts.append(f"{item}*")
        elif hi > lo:
            for j in range(1, hi - lo + 1):
                helpers.append(f"rep{k}-o{j} ::= {item} {f'rep{k}-o{j - 1}' if j > 1 else chr(34) * 2} | " + chr(34) * 2)
            parts.append(f"rep{k}-o{hi - lo}")
        return "(" + " ".join(parts) + ")" if parts else '""'

    root = f"root ::= {' '.join(expr(x) for x in items) if items else chr(34) * 2}"
    return [root, *helpers]


@functools.lru_cache(maxsize=256)
def regex_to_gbnf(pattern: str) -> str:
    """GBNF whose ``root`` matches exactly the texts ``pattern`` matches whole (see the module's notes).

    Raises:
        GrammarSyntaxError: not a pattern of the supported syntax (the message says what and where), or one that
            matches no text at all.
    """
    ast = _parse(pattern)
    try:
        d = anchored_dfa(pattern)
    except Unsupported:
        return "\n".join(_tree_rules(ast)) + "\n"
    if d.is_empty():
        raise GrammarSyntaxError(f"regex {pattern!r} matches no text")
    return "\n".join(_dfa_rules(d)) + "\n"
