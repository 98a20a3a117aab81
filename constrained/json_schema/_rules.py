"""The GBNF building blocks of llama.cpp's converter (common/json-schema-to-grammar.cpp): primitive rules,
repetitions, integer ranges digit by digit, literal escaping and the "none of these strings" key rule.

All strings are bytes held in ``str`` (see ``json_text.b``).

Example:
    >>> build_repetition("item", 1, 3, '"," space')
    'item ("," space item){0,2}'
    >>> int_range_body(3, INT64_MAX, "")
    '([1-2] [0-9]{1,15} | [3-9] [0-9]{0,15})'
"""

from __future__ import annotations

import re

from ..errors import SchemaError
from .json_text import INT64_MAX, INT64_MIN, INT_MAX, wrap_int

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name: (body, deps), as PRIMITIVE_RULES and STRING_FORMAT_RULES
PRIMITIVE_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
               ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} '
             '"\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}
STRING_FORMAT_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) '
             '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}
RESERVED_NAMES = frozenset(("root", *PRIMITIVE_RULES, *STRING_FORMAT_RULES))

INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


def format_literal(literal: str) -> str:
    # as format_literal
    return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'


def build_repetition(item: str, min_items: int, max_items: int, separator: str = "") -> str:
    # as build_repetition; max_items == INT_MAX means unbounded
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item + "?"
    if not separator:
        if min_items == 1 and not has_max:
            return item + "+"
        if min_items == 0 and not has_max:
            return item + "*"
        return item + "{" + str(min_items) + "," + (str(max_items) if has_max else "") + "}"
    result = item + " " + build_repetition(f"({separator} {item})", 0 if min_items == 0 else min_items - 1,
                                           max_items - 1 if has_max else max_items)
    return f"({result})?" if min_items == 0 else result


class _RangeError(Exception):
    pass


def int_range_body(minimum: int, maximum: int, path: str) -> str:
    """``"(" build_min_max_int(min, max) ")"``; the C++ runtime_error becomes a SchemaError."""
    out: list[str] = ["("]
    try:
        _min_max_int(minimum, maximum, out, 16, True)
    except _RangeError:
        from .json_text import u
        raise SchemaError("JSON schema conversion failed:\nAt least one of min_value or max_value must be set",
                          path=u(path)) from None
    out.append(")")
    return "".join(out)


def _digit_range(out: list[str], lo: str, hi: str) -> None:
    out.append("[" + (lo if lo == hi else lo + "-" + hi) + "]")


def _more_digits(out: list[str], lo: int, hi: int) -> None:
    out.append("[0-9]")
    if lo == hi == 1:
        return
    out.append("{" + str(lo))
    if hi != lo:
        out.append(",")
        if hi != INT_MAX:
            out.append(str(hi))
    out.append("}")


def _uniform_range(out: list[str], frm: str, to: str) -> None:
    i = 0
    while i < len(frm) and i < len(to) and frm[i] == to[i]:
        i += 1
    if i > 0:
        out.append('"' + frm[:i] + '"')
    if i < len(frm) and i < len(to):
        if i > 0:
            out.append(" ")
        sub_len = len(frm) - i - 1
        if sub_len > 0:
            from_sub, to_sub = frm[i + 1:], to[i + 1:]
            zeros, nines = "0" * sub_len, "9" * sub_len
            to_reached = False
            out.append("(")
            if from_sub == zeros:
                _digit_range(out, frm[i], chr(ord(to[i]) - 1))
                out.append(" ")
                _more_digits(out, sub_len, sub_len)
            else:
                out.append("[" + frm[i] + "] (")
                _uniform_range(out, from_sub, nines)
                out.append(")")
                if ord(frm[i]) < ord(to[i]) - 1:
                    out.append(" | ")
                    if to_sub == nines:
                        _digit_range(out, chr(ord(frm[i]) + 1), to[i])
                        to_reached = True
                    else:
                        _digit_range(out, chr(ord(frm[i]) + 1), chr(ord(to[i]) - 1))
                    out.append(" ")
                    _more_digits(out, sub_len, sub_len)
            if not to_reached:
                out.append(" | ")
                _digit_range(out, to[i], to[i])
                out.append(" ")
                _uniform_range(out, zeros, to_sub)
            out.append(")")
        else:
            out.append("[" + frm[i] + "-" + to[i] + "]")


def _min_max_int(lo: int, hi: int, out: list[str], decimals_left: int, top_level: bool) -> None:
    # as build_min_max_int (int64 arithmetic wraps as on gcc)
    has_min = lo != INT64_MIN
    has_max = hi != INT64_MAX
    if has_min and has_max:
        if lo < 0 and hi < 0:
            out.append('"-" (')
            _min_max_int(wrap_int(-hi, 64), wrap_int(-lo, 64), out, decimals_left, True)
            out.append(")")
            return
        if lo < 0:
            out.append('"-" (')
            _min_max_int(0, wrap_int(-lo, 64), out, decimals_left, True)
            out.append(") | ")
            lo = 0
        min_s, max_s = str(lo), str(hi)
        for digits in range(len(min_s), len(max_s)):
            _uniform_range(out, min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        _uniform_range(out, min_s, max_s)
        return
    less_decimals = max(decimals_left - 1, 1)
    if has_min:
        if lo < 0:
            out.append('"-" (')
            _min_max_int(INT64_MIN, wrap_int(-lo, 64), out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            _more_digits(out, 0, decimals_left - 1)
        elif lo == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                _more_digits(out, 0, less_decimals)
            else:
                _more_digits(out, 1, decimals_left)
        elif lo <= 9:
            c = chr(ord("0") + lo)
            start = "1" if top_level else "0"
            if c > start:
                _digit_range(out, start, chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, 1, less_decimals)
                out.append(" | ")
            _digit_range(out, c, "9")
            out.append(" ")
            _more_digits(out, 0, less_decimals)
        else:
            min_s = str(lo)
            c = min_s[0]
            if c > "1":
                _digit_range(out, "1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, len(min_s), less_decimals)
                out.append(" | ")
            _digit_range(out, c, c)
            out.append(" (")
            _min_max_int(int(min_s[1:]), INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                _digit_range(out, chr(ord(c) + 1), "9")
                out.append(" ")
                _more_digits(out, len(min_s) - 1, less_decimals)
        return
    if has_max:
        if hi >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                _more_digits(out, 0, less_decimals)
                out.append(" | ")
            _min_max_int(0, hi, out, decimals_left, True)
        else:
            out.append('"-" (')
            _min_max_int(wrap_int(-hi, 64), INT64_MAX, out, decimals_left, False)
            out.append(")")
        return
    raise _RangeError()


def not_strings(strings: list[str], char_rule: str) -> str:
    """A JSON string that is none of ``strings`` (a trie over code points), as ``_not_strings``."""
    from .json_text import b, u

    root: dict = {}
    ends_at_root = False
    for word in strings:
        node = root
        cps = u(word)
        if not cps:
            ends_at_root = True
        for ch in cps:
            node = node.setdefault(ord(ch), {})
    out: list[str] = ['["] ( ']

    def visit(node: dict) -> None:
        rejects = ""
        for i, cp in enumerate(sorted(node)):
            c = b(chr(cp))
            rejects += c
            if i:
                out.append(" | ")
            out.append("[" + c + "]")
            if node[cp]:
                out.append(" (")
                visit(node[cp])
                out.append(")")
            else:
                out.append(" " + char_rule + "+")
        if node:
            out.append(' | [^"' + rejects + "] " + char_rule + "*")

    visit(root)
    out.append(" )")
    if not ends_at_root:
        out.append("?")
    out.append(' ["]')
    return "".join(out)
