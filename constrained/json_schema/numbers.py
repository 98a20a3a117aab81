"""Numbers for ``enforce="all"``: bounds on any number and ``multipleOf`` on integers, as automata over the JSON text.

Bounds are exact on the text's decimal value, and safe under the rounding of the validator: ``jsonschema`` compares
a JSON integer exactly and a JSON fraction as the nearest double, so an integer text is held to the exact bound and
a fraction text to the nearest double on the right side of it (rounding is monotone: a decimal above that double
rounds to a double at least as large). Exponent notation is accepted only when no bound or ``multipleOf`` applies
(a bound on ``m e k`` is not a regular language); ``multipleOf`` a positive integer (up to ``MAX_MODULUS``) admits
integer texts only. ``number_dfas`` returns the automata; ``Unsupported`` says what cannot be enforced.

Example:
    >>> from fractions import Fraction
    >>> [d.accepts("1.5") for d in number_dfas(False, Fraction(1), True, None, False, None)]
    [False, True]
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from .regex import DFA, Unsupported, intersect
from .regex import compile_pattern as _compile


def compile_pattern(pattern: str) -> DFA:
    return _compile(pattern, max_depth=1000)  # the bound languages nest one group per digit

MAX_MODULUS = 1000
"""Largest integer ``multipleOf`` enforced (its automaton has that many states)."""

_MAG = "(?:0|[1-9][0-9]*)"
DECIMAL_CAP = Fraction(10) ** 40
"""Number texts stay within +-DECIMAL_CAP when a bound lies past it (a subset of what the bound allows: sound; a
bound of 300 digits would cost an alternative per digit)."""


def _int_ge(n: int) -> str:
    """Canonical digit strings of the integers >= n (n >= 0)."""
    if n == 0:
        return _MAG
    d = str(n)
    k = len(d)
    alts = [f"[1-9][0-9]{{{k},}}", d]
    for i in range(k):
        dig = int(d[i])
        if dig < 9:
            alts.append(f"{d[:i]}[{dig + 1}-9][0-9]{{{k - i - 1}}}")
    return "(?:" + "|".join(alts) + ")"


def _int_le(n: int) -> str:
    """Canonical digit strings of the integers 0..n (n >= 0)."""
    d = str(n)
    k = len(d)
    alts = [d]
    if k >= 2:
        alts.append("0")
        if k >= 3:
            alts.append(f"[1-9][0-9]{{0,{k - 2}}}")
        else:
            alts.append("[1-9]")
    for i in range(k):
        dig = int(d[i])
        low = 1 if i == 0 and k > 1 else 0
        if dig - 1 >= low:
            alts.append(f"{d[:i]}[{low}-{dig - 1}][0-9]{{{k - i - 1}}}")
    return "(?:" + "|".join(alts) + ")"


def _int_gt(n: int) -> str:
    """Canonical digit strings of the integers > n (n >= 0): ``_int_ge(n + 1)`` without its carries (n + 1 of
    1799...9 is 18 then 300 zeros, but n - 1 of 1800...0 would be 300 nines: each nine an alternative)."""
    alts = _int_ge(n)[3:-1].split("|")
    rest = [a for a in alts if a != str(n)] if n else ["[1-9][0-9]*"]
    return "(?:" + "|".join(rest) + ")" if rest else "(?!)"


def _int_lt(n: int) -> str:
    """Canonical digit strings of the integers 0..n-1 (n >= 1), as ``_int_le(n - 1)`` without the borrow."""
    alts = _int_le(n)[3:-1].split("|")
    rest = [a for a in alts if a != str(n)]
    return "(?:" + "|".join(rest) + ")"


def _frac_ge(f: str) -> str:
    """Fraction digit strings s (non-empty) with 0.s >= 0.f (f without trailing zeros, non-empty); nested so that
    its size is linear in len(f)."""
    r = "[0-9]*"
    for ch in reversed(f):
        r = f"(?:{ch}{r}|[{int(ch) + 1}-9][0-9]*)" if ch != "9" else f"9{r}"
    return r


def _frac_le(f: str) -> str:
    """Fraction digit strings s (non-empty) with 0.s <= 0.f."""
    r = "0*"
    for i in range(len(f) - 1, -1, -1):
        ch = f[i]
        lower = f"|[0-{int(ch) - 1}][0-9]*" if ch != "0" else ""
        r = f"(?:{ch}{r}{lower})" + ("?" if i else "")
    return r


def _split(x: Fraction) -> tuple[int, str]:
    """A non-negative terminating decimal as (integer part, fraction digits without trailing zeros)."""
    ip = x.numerator // x.denominator
    rest = x - ip
    digits = ""
    while rest:
        rest *= 10
        dgt = rest.numerator // rest.denominator
        digits += str(dgt)
        rest -= dgt
        if len(digits) > 400:
            raise Unsupported("a bound with more than 400 fraction digits")
    return ip, digits


def _dec_ge(x: Fraction) -> str:
    """Magnitudes I.F (F non-empty) with value >= x >= 0."""
    ip, f = _split(x)
    if not f:
        return f"{_int_ge(ip)}\\.[0-9]+"
    return f"(?:{_int_gt(ip)}\\.[0-9]+|{ip}\\.{_frac_ge(f)})"


def _dec_le(x: Fraction) -> str:
    """Magnitudes I.F (F non-empty) with value <= x >= 0."""
    ip, f = _split(x)
    if not f:
        low = f"{_int_lt(ip)}\\.[0-9]+|" if ip > 0 else ""
        return f"(?:{low}{ip}\\.0+)"
    low = f"{_int_lt(ip)}\\.[0-9]+|" if ip > 0 else ""
    return f"(?:{low}{ip}\\.{_frac_le(f)})"


def _signed(lo: Fraction | None, hi: Fraction | None, ge, le, any_mag: str) -> str:  # noqa: ANN001
    """The texts ``-?magnitude`` with lo <= value <= hi, from the magnitude languages ``ge``/``le``."""
    parts = []
    if lo is None:
        parts.append(f"^(?:-{any_mag}|{any_mag})$")
    elif lo <= 0:
        parts.append(f"^(?:{any_mag}|-{le(-lo)})$")
    else:
        parts.append(f"^{ge(lo)}$")
    if hi is None:
        parts.append(f"^(?:-{any_mag}|{any_mag})$")
    elif hi >= 0:
        parts.append(f"^(?:-{any_mag}|{le(hi)})$")
    else:
        parts.append(f"^-{ge(-hi)}$")
    return parts  # type: ignore[return-value]


def _double_bound(x: Fraction, lower: bool, exclusive: bool) -> Fraction:
    """The double nearest to x on the admissible side (>= x, or > x when exclusive, for a lower bound)."""
    try:
        d = float(x)
    except OverflowError:
        raise Unsupported("a bound beyond a double") from None
    fd = Fraction(d)
    if lower:
        if fd < x or (exclusive and fd == x):
            d = math.nextafter(d, math.inf)
    elif fd > x or (exclusive and fd == x):
        d = math.nextafter(d, -math.inf)
    if math.isinf(d):
        raise Unsupported("a bound beyond a double")
    return Fraction(repr(d))  # the shortest decimal that reads back as d


def _mod_dfa(k: int) -> DFA:
    """Canonical integer texts ``-?magnitude`` whose value is a multiple of k."""
    # states: 0 start, 1 after '-', 2 zero, 3 + r: non-zero magnitude with remainder r
    digits = [(((48 + d, 48 + d),), d) for d in range(10)]
    edges: list[list] = [[] for _ in range(3 + k)]
    edges[0].append((((45, 45),), 1))
    for s in (0, 1):
        edges[s].append((((48, 48),), 2))
        for cs, d in digits[1:]:
            edges[s].append((cs, 3 + d % k))
    for r in range(k):
        for cs, d in digits:
            edges[3 + r].append((cs, 3 + (10 * r + d) % k))
    accepting = [False, False, True, True] + [False] * (k - 1)
    return DFA(edges, accepting)


def number_dfas(integer: bool, lo: Fraction | None, lo_excl: bool, hi: Fraction | None, hi_excl: bool,
                multiple: Fraction | None) -> list[DFA]:
    """Automata whose union is the JSON number texts within the bounds (and multiples of ``multiple``)."""
    return list(_number_dfas(integer, lo, lo_excl, hi, hi_excl, multiple))


@functools.lru_cache(maxsize=1024)
def _number_dfas(integer: bool, lo: Fraction | None, lo_excl: bool, hi: Fraction | None, hi_excl: bool,
                 multiple: Fraction | None) -> tuple[DFA, ...]:
    """``number_dfas``, memoised: a schema repeats its bounds (``maximum: 1.79769e+308`` on every property), and a
    bound of 300 digits costs a pattern of 300 alternatives."""
    return tuple(_build_number_dfas(integer, lo, lo_excl, hi, hi_excl, multiple))


def _build_number_dfas(integer: bool, lo: Fraction | None, lo_excl: bool, hi: Fraction | None, hi_excl: bool,
                       multiple: Fraction | None) -> list[DFA]:
    if multiple is not None:
        if multiple <= 0:
            raise Unsupported(f"multipleOf {float(multiple)!r} is not positive")
        if multiple.denominator != 1:
            # the decimal multiples of a finite step are a regular language, but validators divide doubles:
            # jsonschema refuses 0.07 for multipleOf 0.01 (0.07 / 0.01 = 7.000000000000001), so no grammar is both
            raise Unsupported(f"multipleOf {float(multiple)!r} is not an integer: validators test it on doubles "
                              f"(jsonschema refuses 0.07 for multipleOf 0.01), not on the decimal value")
        if multiple > MAX_MODULUS:
            raise Unsupported(f"multipleOf {int(multiple)} is above {MAX_MODULUS}")
    if lo is not None and lo == hi and not lo_excl and not hi_excl and multiple is None:
        return _point_dfas(lo, integer)
    if lo is None and hi is None and multiple is None:
        tail = "(?:\\.0+)?" if integer else "(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
        return [compile_pattern(f"^-?{_MAG}{tail}$")]
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
    # likewise integer texts within +-DECIMAL_CAP when a bound lies past it (the double 1.79769e308 read exactly
    # is 309 digits, most of them non-zero: an alternative per digit)
    if ihi is not None and ihi > DECIMAL_CAP:
        ihi = int(DECIMAL_CAP)
    if ilo is not None and ilo < -DECIMAL_CAP:
        ilo = -int(DECIMAL_CAP)
    if (ilo is not None and ilo > DECIMAL_CAP) or (ihi is not None and ihi < -DECIMAL_CAP):
        # every allowed number lies past the cap: nothing to clamp to (reported, not refused)
        raise Unsupported("a lower bound above 1e40 (or an upper bound below -1e40) is not enforced")
    out = []
    if ilo is None or ihi is None or ilo <= ihi:
        a, b = _signed(None if ilo is None else Fraction(ilo), None if ihi is None else Fraction(ihi),
                       lambda x: _int_ge(int(x)), lambda x: _int_le(int(x)), _MAG)
        d = intersect(compile_pattern(a), compile_pattern(b))
        if multiple is not None:
            d = intersect(d, _mod_dfa(int(multiple)))
        out.append(d)
    if not integer and multiple is None:
        flo = None if lo is None else _double_bound(lo, True, lo_excl)
        fhi = None if hi is None else _double_bound(hi, False, hi_excl)
        # a decimal bound past 1e40 (such as 1.79769e308, the largest double) is the double next to it, whose 300
        # digits make 300 alternatives: fractions are kept within +-1e40 instead (fewer texts, never one out of
        # bounds); integer texts keep the exact bound
        if fhi is not None and fhi > DECIMAL_CAP:
            fhi = DECIMAL_CAP
        if flo is not None and flo < -DECIMAL_CAP:
            flo = -DECIMAL_CAP
        if flo is None or fhi is None or flo <= fhi:
            a, b = _signed(flo, fhi, _dec_ge, _dec_le, f"{_MAG}\\.[0-9]+")
            out.append(intersect(compile_pattern(a), compile_pattern(b)))
    return out


def _point_dfas(x: Fraction, integer: bool) -> list[DFA]:
    """``number_dfas`` for the single value x (lo = hi, inclusive), from one short pattern per part instead of the
    intersection of two bound languages: the same languages, so the same minimal automata."""
    out = []
    if x.denominator == 1:
        n = int(x)
        out.append(compile_pattern("^-?0$" if n == 0 else f"^{n}$"))  # as _signed: "-0" is 0 too
    if not integer:
        flo, fhi = _double_bound(x, True, False), _double_bound(x, False, False)
        if flo <= fhi:  # then flo == fhi: the decimal texts of exactly that value
            ip, f = _split(abs(flo))
            sign = "-?" if flo == 0 else "-" if flo < 0 else ""
            out.append(compile_pattern(f"^{sign}{ip}\\.{f + '0*' if f else '0+'}$"))
    return out
