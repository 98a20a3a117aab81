"""``enforce="all"``, null, booleans, numbers (bounds, multipleOf) and strings (patterns, formats, lengths as automata): the ``ScalarMixin`` part of ``enforce._Enforcer``."""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from ..errors import SchemaError
from .dialect import is_assertion
from .enforce_base import (
    Sub,
    _Merged,
)
from .formats import FORMATS, NOT_CHECKED, format_dfa
from .numbers import number_dfas
from .regex import (
    DFA,
    Charset,
    Unsupported,
    any_dfa,
    compile_pattern,
    complement,
    intersect,
    json_chars,
    literal_dfa,
    minimise,
    with_length,
)

_CLASS_ESCAPES = re.compile(r"\\\\|\\[wWdDbB]")


_SAFE = r"\x00-\x09\x0b\x0c\x0e-\x1b\x20-\x7f"
_SAFE_WIDE = _SAFE + r"\x80-\x84\x86-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\uffff"


@functools.cache
def safe_strings(ascii_only: bool) -> DFA:
    r"""The strings on which ECMA-262 (the spec's regex dialect) and Python's ``re`` (jsonschema's) agree for any
    pattern: without ``\n`` (Python's ``$`` matches before a final one), ``\r``, U+2028, U+2029 (ECMA's ``.``
    does not match them), U+001C-U+001F, U+0085 (Python's ``\s`` only), U+FEFF (ECMA's only), surrogates and
    characters past U+FFFF (two units for ECMA's ``.``, one for Python's); and ASCII only for a pattern with
    ``\w``, ``\d`` or ``\b`` (Unicode-aware in Python, ASCII in ECMA)."""
    return compile_pattern(f"^[{_SAFE if ascii_only else _SAFE_WIDE}]*$")


def uses_class_escapes(pt: str) -> bool:
    return any(m.group(0) != "\\\\" for m in _CLASS_ESCAPES.finditer(pt))


def user_pattern(pt: str) -> DFA:
    """A schema's pattern as an automaton, limited to ``safe_strings`` (both regex dialects agree there)."""
    return intersect(compile_pattern(pt), safe_strings(uses_class_escapes(pt)))


class ScalarMixin:
    def string_ok(self, val: str, item: Sub) -> bool:
        spec, _p = item
        if isinstance(spec, tuple):
            return val not in spec[1]
        if spec in FORMATS:
            return format_dfa(spec).accepts(val)
        return True

    def gen_null(self, m: _Merged, name: str) -> str:
        return '"null"'

    def gen_boolean(self, m: _Merged, name: str) -> str | None:
        alts = [f'"{x}"' for x, v in (("true", True), ("false", False)) if v not in m.excluded_bools]
        return "(" + " | ".join(alts) + ")" if alts else None

    def gen_integer(self, m: _Merged, name: str) -> str | None:
        return self.gen_numeric(m, name, True)

    def gen_number(self, m: _Merged, name: str) -> str | None:
        return self.gen_numeric(m, name, False)

    def gen_numeric(self, m: _Merged, name: str, integer: bool) -> str | None:
        path = m.subs[0][1]
        mult = None
        if m.multiples:
            mult = m.multiples[0]
            for x in m.multiples[1:]:
                if x.denominator == 1 and mult.denominator == 1:
                    mult = mult * x // math.gcd(int(mult), int(x))
                else:
                    self.unenforced(path, "multipleOf", "several non-integer multipleOf are not combined")
        try:
            dfas = number_dfas(integer, m.lo[0] if m.lo else None, bool(m.lo and m.lo[1]),
                               m.hi[0] if m.hi else None, bool(m.hi and m.hi[1]), mult)
        except Unsupported as e:
            self.unenforced(path, "multipleOf" if "multipleOf" in str(e) else "minimum", str(e))
            dfas = number_dfas(integer, m.lo[0] if m.lo else None, bool(m.lo and m.lo[1]),
                               m.hi[0] if m.hi else None, bool(m.hi and m.hi[1]), None) \
                if "multipleOf" in str(e) else number_dfas(integer, None, False, None, False, None)
        if integer and self.strict_integer:
            # drafts 3 and 4: an integer has no fraction part in its text (1.0 is a number only)
            whole = compile_pattern("^-?(?:0|[1-9][0-9]*)$")
            dfas = [intersect(d, whole) for d in dfas]
        if m.non_integer:
            if integer:
                return None
            frac = compile_pattern("^-?(?:0|[1-9][0-9]*)\\.[0-9]*[1-9][0-9]*$")
            dfas = [intersect(d, frac) for d in dfas]
        for v in m.excluded:
            f = Fraction(v)
            for ex in number_dfas(False, f, False, f, False, None):
                dfas = [intersect(d, complement(ex)) for d in dfas]
        alts = [self.emit(d, f"{name}-num") for d in dfas if not d.is_empty()]
        return " | ".join(alts) if alts else None

    def string_dfa(self, m: _Merged, path: str, lengths: bool = True) -> DFA:
        """The strings satisfying ``m``'s patterns, formats and (``lengths``) minLength/maxLength."""
        d: DFA | None = None
        for spec, p in m.patterns:
            try:
                if isinstance(spec, tuple):
                    part = complement(literal_dfa(list(spec[1])))
                elif not isinstance(spec, str):
                    raise SchemaError(f"JSON schema error at {p}: pattern must be a string", path=p)
                else:
                    part = user_pattern(spec)
                d = part if d is None else intersect(d, part)
            except Unsupported as e:
                if isinstance(spec, str) and _invalid_regex(spec):
                    raise SchemaError(f"JSON schema error at {p}: pattern {spec!r} is not a valid regular "
                                      f"expression: {e}", path=p) from None
                self.unenforced(p, "pattern" if not isinstance(spec, tuple) else "not", f"{spec}: {e}")
        for fmt, p in m.formats:
            if fmt not in FORMATS:
                if not is_assertion(fmt, self.dialect):
                    self.annotation(p, "format", f"format {fmt} is not one of draft {self.dialect}'s formats: an "
                                                 "annotation, which validators do not check")
                else:
                    self.unenforced(p, "format", f"format {fmt} is not enforced")
                continue
            if fmt in NOT_CHECKED:
                self.unenforced(p, "format", f"{fmt}: {NOT_CHECKED[fmt]}")
            try:
                part = format_dfa(fmt)
                d = part if d is None else intersect(d, part)
            except Unsupported as e:
                self.unenforced(p, "format", f"{fmt} with the other string constraints: {e}")
        if lengths and (m.min_len or m.max_len is not None):
            try:
                d = with_length(d if d is not None else any_dfa(), m.min_len, m.max_len)
            except Unsupported as e:
                self.unenforced(path, "maxLength" if m.max_len is not None else "minLength", str(e))
        return d if d is not None else any_dfa()

    def gen_string(self, m: _Merged, name: str) -> str | None:
        path = m.subs[0][1]
        if not m.patterns and not m.formats:
            if not m.min_len and m.max_len is None:
                return self.primitive("string")
            if m.max_len is not None and m.min_len > m.max_len:
                return None
            if not m.min_len:
                # llama.cpp's char counts an escaped surrogate pair as two: only an upper bound stays sound
                char = self.primitive("char")
                return f'"\\"" {char}{{0,{m.max_len}}} "\\""'
        if m.max_len is not None and m.min_len > m.max_len:
            return None
        d = self.string_dfa(m, path, lengths=False)
        if m.min_len or m.max_len is not None:
            rep = uniform_repeat(d)
            if rep is not None:
                # c1 .. ck cs{lo,hi} within the length bounds: a repetition, not a counter automaton (maxLength 10,000
                # would be 10,000 rules of text)
                prefix, cs = rep
                k = len(prefix)
                lo, hi = max(k, m.min_len) - k, None if m.max_len is None else m.max_len - k
                if hi is not None and hi < lo:
                    return None
                char = self.add(f"{name}-char", json_chars(cs))
                head = "".join(f"{json_chars(c)} " for c in prefix)
                return f'"\\"" {head}{char}{{{lo},{"" if hi is None else hi}}} "\\""'
            try:
                d = with_length(d, m.min_len, m.max_len)
            except Unsupported as e:
                self.unenforced(path, "maxLength" if m.max_len is not None else "minLength", str(e))
        if d.is_empty():
            return None
        return f'"\\"" {self.emit(d, f"{name}-str")} "\\""'


def uniform_repeat(d: DFA) -> tuple[list[Charset], Charset] | None:
    """``(prefix, cs)`` when ``d``'s strings are exactly one character of each set of ``prefix``, then any number of
    ``cs`` (``^ab+$``: [a], [b] then [b]*).
    """
    d = minimise(d)
    prefix: list[Charset] = []
    k = 0
    while True:
        es = d.edges[k]
        if len(es) != 1:
            return None
        cs, t = es[0]
        if t == k:
            return (prefix, cs) if d.accepting[k] and len(d.edges) == k + 1 else None
        if d.accepting[k] or t != k + 1:
            return None
        prefix.append(cs)
        k += 1


def _invalid_regex(spec: str) -> bool:
    """True when ``spec`` is not a regular expression at all (unbalanced groups, a dangling quantifier): our
    translator and Python's ``re`` both refuse it, as opposed to a valid construct we do not translate."""
    import re

    try:
        re.compile(spec)
    except (re.error, RecursionError, OverflowError):
        return True
    return False
