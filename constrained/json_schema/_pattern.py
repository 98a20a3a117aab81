"""A string ``pattern`` → GBNF, as llama.cpp's ``_pattern_to_rule`` (common/json-schema-to-grammar.cpp).

The pattern is read byte by byte (bytes held in ``str``). Only anchored ``^...$`` patterns of a subset are
converted; ``UnsupportedPattern`` makes the caller fall back to any string (with a warning), ``InvalidPattern`` is an
error.

Example:
    >>> rules = {}
    >>> def add_rule(name, body):
    ...     rules[name] = body
    ...     return name
    >>> pattern_to_rule("^[a-z]+(-[0-9]{2})?$", "root", add_rule)
    'root'
    >>> rules["root"]
    '"\\\\"" ([a-z]+ ("-" root-1{2,2})?) "\\\\""'
    >>> rules["root-1"]
    '[0-9]'
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sampler.cconv import stoi

from ._rules import build_repetition
from .json_text import INT_MAX

MAX_PATTERN_DEPTH = 100
NON_LITERAL = frozenset("|.()[]{}*+?^$")
ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = frozenset("^$.[]()|{}*+?")
_HEX = frozenset("0123456789abcdefABCDEF")


class UnsupportedPattern(Exception):
    """A valid regex with no grammar equivalent (the rule falls back to any string)."""


class InvalidPattern(Exception):
    """Not a valid regex (a conversion error)."""


def gbnf_escape_length(pattern: str, pos: int) -> int:
    # as gbnf_escape_length: the escapes llama.cpp's GBNF parser understands, else 0
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    nxt = pattern[pos + 1]
    n_hex = {"x": 2, "u": 4, "U": 8}.get(nxt)
    if n_hex is None:
        return 2 if nxt in 'trn\\"[]-' else 0
    if pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in _HEX for h in pattern[pos + 2:pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


def pattern_to_rule(pattern: str, name: str, add_rule: Callable[[str, str], str], dotall: bool = False,
                    quirks: list[str] | None = None) -> str:
    """Add the rule for ``pattern`` under ``name`` (sub-rules ``name-N``); returns the rule name.

    ``quirks`` (if given) receives a note for each place where llama.cpp's grammar means something else than the
    regex: a quantifier that applies to a whole run of literal characters, or to the last byte of a UTF-8 character.
    """
    notes = quirks if quirks is not None else []
    if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
        raise UnsupportedPattern("not anchored with '^' and '$'")
    sub = pattern[1:-1]
    length = len(sub)
    sub_rule_ids: dict[str, str] = {}
    state = {"i": 0, "depth": 0, "atoms": 0}
    quantified: dict[int, tuple[int, object]] = {}  # id of a seq entry made by a quantifier -> (its minimum, it)

    def requantify(entry: tuple[str, bool], op: str) -> None:
        # a quantifier right after a quantifier: the regex reads "x+?" / "x{2}?" as lazy (the same strings), GBNF
        # reads "("x"+)?", which also matches nothing; "x**" is not a regex at all
        prev = quantified.get(id(entry))
        if prev is None:
            return
        if op == "?":
            if prev[0] > 0:
                notes.append(f"the lazy quantifier '?' after a repetition of at least {prev[0]} is read by GBNF as "
                             "'optional': the repetition may also match nothing")
        else:
            notes.append(f"the quantifier {op} follows another quantifier: not a valid regex, GBNF repeats the "
                         "repetition")

    def check_escape(text: str) -> None:
        # \uD800-\uDFFF (a lone surrogate) and \U beyond 0x10FFFF have no UTF-8: GBNF writes invalid bytes
        if len(text) >= 6 and text[1] in "uU":
            cp = int(text[2:], 16)
            if 0xD800 <= cp <= 0xDFFF or cp > 0x10FFFF:
                notes.append(f"the escape {text} is not a Unicode scalar value: GBNF accepts its invalid UTF-8 bytes")

    def check_quantifier(item: tuple[str, bool], op: str) -> None:
        if not item[1]:
            return
        if state["atoms"] > 1:
            notes.append(f"the quantifier {op} applies to the whole literal {item[0]!r}, not to its last character")
        elif item[0] and 0x80 <= ord(item[0][0]) < 0xC0:
            notes.append(f"the quantifier {op} applies to the last byte of a UTF-8 character only")

    def to_rule(item: tuple[str, bool]) -> str:
        return f'"{item[0]}"' if item[1] else item[0]

    def transform() -> tuple[str, bool]:
        seq: list[tuple[str, bool]] = []

        def join_seq() -> tuple[str, bool]:
            ret: list[tuple[str, bool]] = []
            literal = ""
            for text, is_lit in seq:
                if is_lit:
                    literal += text
                else:
                    if literal:
                        ret.append((literal, True))
                        literal = ""
                    ret.append((text, False))
            if literal:
                ret.append((literal, True))
            return " ".join(to_rule(x) for x in ret), False

        while state["i"] < length:
            i = state["i"]
            c = sub[i]
            if c == ".":
                seq.append((add_rule("dot", "[\\U00000000-\\U0010FFFF]" if dotall else "[^\\x0A\\x0D]"), False))
                state["i"] += 1
            elif c == "(":
                i += 1
                if i < length and sub[i] == "?":
                    if i + 1 < length and sub[i + 1] == ":":
                        i += 2
                    else:
                        raise UnsupportedPattern("unsupported group syntax")
                state["i"] = i
                state["depth"] += 1
                if state["depth"] > MAX_PATTERN_DEPTH:
                    raise UnsupportedPattern("pattern nesting too deep")
                seq.append(("(" + to_rule(transform()) + ")", False))
            elif c == ")":
                state["i"] += 1
                if state["depth"] == 0:
                    raise InvalidPattern("unbalanced parentheses")
                state["depth"] -= 1
                return join_seq()
            elif c in "^$":
                raise UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                cls = "["
                i += 1
                while i < length and sub[i] != "]":
                    if sub[i] == "\\":
                        n = gbnf_escape_length(sub, i)
                        if n == 0:
                            raise UnsupportedPattern("unsupported escape in character class: " + sub[i:i + 2])
                        check_escape(sub[i:i + n])
                        cls += sub[i:i + n]
                        i += n
                    else:
                        cls += sub[i]
                        i += 1
                if i >= length:
                    raise InvalidPattern("unterminated character class")
                state["i"] = i + 1
                seq.append((cls + "]", False))
            elif c == "|":
                seq.append(("|", False))
                state["i"] += 1
            elif c in "*+?":
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                check_quantifier(seq[-1], c)
                requantify(seq[-1], c)
                seq[-1] = (to_rule(seq[-1]) + c, False)
                quantified[id(seq[-1])] = (1 if c == "+" else 0, seq[-1])
                state["i"] += 1
            elif c == "{":
                curly = "{"
                i += 1
                while i < length and sub[i] != "}":
                    curly += sub[i]
                    i += 1
                if i >= length:
                    raise UnsupportedPattern("unterminated curly brackets")
                state["i"] = i + 1
                nums = curly[1:].split(",")
                min_times, max_times = 0, INT_MAX
                if len(nums) not in (1, 2):
                    raise UnsupportedPattern("wrong number of values in curly brackets")
                try:
                    if len(nums) == 1:
                        min_times = max_times = stoi(nums[0])
                    else:
                        if nums[0]:
                            min_times = stoi(nums[0])
                        if nums[1]:
                            max_times = stoi(nums[1])
                except ValueError:
                    raise UnsupportedPattern("invalid number in curly brackets") from None
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                text, is_lit = seq[-1]
                check_quantifier(seq[-1], curly + "}")
                requantify(seq[-1], curly + "}")
                if not re.fullmatch(r"[0-9]+(,[0-9]*)?", curly[1:]):
                    notes.append(f"{curly}}} is read as a repetition, where a regex (ECMA-262) reads it literally")
                if not is_lit:
                    sub_id = sub_rule_ids.get(text)
                    if sub_id is None:
                        sub_rule_ids[text] = ""
                        sub_id = add_rule(f"{name}-{len(sub_rule_ids)}", text)
                        sub_rule_ids[text] = sub_id
                    text = sub_id
                seq[-1] = (build_repetition(f'"{text}"' if is_lit else text, min_times, max_times, ""), False)
                quantified[id(seq[-1])] = (min_times if max_times != 0 else 0, seq[-1])
            else:
                literal = ""
                atoms = 0
                while i < length:
                    atoms += 1
                    ch = sub[i]
                    if ch == "\\":
                        if i == length - 1:
                            raise InvalidPattern("trailing backslash")
                        nxt = sub[i + 1]
                        if nxt in ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                            literal += nxt
                            i += 2
                        else:
                            n = gbnf_escape_length(sub, i)
                            if n == 0:
                                raise UnsupportedPattern("unsupported escape: " + sub[i:i + 2])
                            check_escape(sub[i:i + n])
                            literal += sub[i:i + n]
                            i += n
                    elif ch == '"':
                        literal += '\\"'
                        i += 1
                    elif ch not in NON_LITERAL and (i == length - 1 or not literal or sub[i + 1] == "."
                                                    or sub[i + 1] not in NON_LITERAL):
                        literal += ch
                        i += 1
                    else:
                        atoms -= 1
                        break
                state["i"] = i
                state["atoms"] = atoms
                if not literal:
                    raise UnsupportedPattern("unsupported character: " + c)
                seq.append((literal, True))
        return join_seq()

    rule = to_rule(transform())
    if state["depth"] != 0:
        raise InvalidPattern("unbalanced parentheses")
    return add_rule(name, '"\\"" (' + rule + ') "\\""')
