"""The C runtime's number conversions as llama.cpp's code meets them (the one home of them: ``strtol`` /
``strtof`` and the C++ wrappers ``std::stoi`` / ``stoul`` / ``stoull`` / ``stof``, float32 rounding), and the sampler
names and letters of ``common_sampler_types_from_names`` / ``_from_chars``.

It imports nothing of ours, so every layer reads through it: the sampling parameters (:mod:`.params`,
:mod:`.request`, :mod:`.gguf_sampling`), the command-line flags (``constrained.llama.flags``), the JSON schema
converter (``std::stoi`` in patterns, ``std::stoull`` in ``$ref`` paths) and the vocabulary loader (``strtol(...,
16)`` of byte tokens).

    >>> strtol("  42abc"), f32(0.1) == 0.10000000149011612, samplers_from_chars("kt")
    ((42, 4), True, ('top_k', 'temperature'))
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

INT32_MAX = 2**31 - 1
FLT_MAX = float(np.finfo(np.float32).max)

DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
SAMPLER_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma", "m": "min_p",
                 "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties", "a": "adaptive_p"}
_CANONICAL = ("dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc", "infill", "penalties",
              "adaptive_p")


def _name_map() -> dict[str, str]:
    m = {c: c for c in _CANONICAL}
    for c in _CANONICAL:
        if "_" in c:
            m[c.replace("_", "-")] = c
            m[c.replace("_", "")] = c
    m.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return m


SAMPLER_NAMES = _name_map()


def f32(x: float) -> float:
    """The float32 value nearest ``x`` (as ``static_cast<float>``), as a Python float."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def samplers_from_names(names: list[str]) -> tuple[str, ...]:
    """``common_sampler_types_from_names``: case-insensitive, aliases, unknown names skipped."""
    return tuple(SAMPLER_NAMES[n.lower()] for n in names if n.lower() in SAMPLER_NAMES)


def samplers_from_chars(chars: str) -> tuple[str, ...]:
    """``common_sampler_types_from_chars``: one letter per sampler, unknown letters skipped."""
    return tuple(SAMPLER_CHARS[ch] for ch in chars if ch in SAMPLER_CHARS)



_SPACE = " \t\n\v\f\r"                 # C isspace in the "C" locale
_DIGITS = {10: "0123456789", 16: "0123456789abcdefABCDEF"}
LONG_MIN, LONG_MAX, ULONG_MAX = -(2**63), 2**63 - 1, 2**64 - 1     # LP64: long and unsigned long are 64-bit


def _scan(s: str, base: int) -> tuple[int, int, int, bool]:
    """The subject sequence of ``strtol``/``strtoul``: (sign, start of the digits, end of the digits, digits read).
    Leading white space, an optional sign and, in base 16, an optional ``0x`` / ``0X`` (only when a hex digit
    follows, else the ``0`` alone is the number)."""
    i = 0
    while i < len(s) and s[i] in _SPACE:
        i += 1
    sign = 1
    if i < len(s) and s[i] in "+-":
        sign = -1 if s[i] == "-" else 1
        i += 1
    digits = _DIGITS[base]
    if base == 16 and s[i:i + 2] in ("0x", "0X") and i + 2 < len(s) and s[i + 2] in digits:
        i += 2
    k = i
    while k < len(s) and s[k] in digits:
        k += 1
    return sign, i, k, k > i


def strtol(s: str, base: int = 10) -> tuple[int, int]:
    """C ``strtol(s, &end, base)`` (base 10 or 16): ``(value, end)``, the value clamped to a 64-bit long and ``end``
    the index where parsing stopped (0 when no digits were read, as C leaves ``end == s``).

    >>> strtol(" -12x"), strtol("0x1fz", 16), strtol("x")
    ((-12, 4), (31, 4), (0, 0))
    """
    sign, i, k, ok = _scan(s, base)
    if not ok:
        return 0, 0
    return max(LONG_MIN, min(LONG_MAX, sign * int(s[i:k], base))), k


def stoi(s: str) -> int:
    """``std::stoi``: ``strtol`` whose result must fit an ``int``; ValueError("stoi") where libstdc++ throws
    (``invalid_argument`` without digits, ``out_of_range`` beyond 32 bits; ``what()`` is "stoi" for both).

    >>> stoi("  42 apples"), stoi("-2147483648")
    (42, -2147483648)
    """
    sign, i, k, ok = _scan(s, 10)
    if not ok:
        raise ValueError("stoi")
    x = sign * int(s[i:k])
    if not -(2**31) <= x < 2**31:
        raise ValueError("stoi")
    return x


def stoul(s: str, name: str = "stoul") -> int:
    """``std::stoul`` / ``std::stoull`` (64-bit): ``strtoul``, where a minus sign negates modulo 2**64; ValueError
    (``name``, libstdc++'s ``what()``) without digits or beyond 64 bits (``ERANGE``).

    >>> stoul("18446744073709551615"), stoul("-1"), stoull("7")
    (18446744073709551615, 18446744073709551615, 7)
    """
    sign, i, k, ok = _scan(s, 10)
    if not ok:
        raise ValueError(name)
    x = int(s[i:k])
    if x > ULONG_MAX:
        raise ValueError(name)
    return (-x) % 2**64 if sign < 0 else x


def stoull(s: str) -> int:
    """``std::stoull``: :func:`stoul` (``unsigned long long`` is 64-bit too), ValueError("stoull")."""
    return stoul(s, "stoull")


def stof(s: str) -> float:
    """``std::stof``: :func:`strtof`'s value; ValueError("stof") where no number was read.

    >>> stof("0.1x") == f32(0.1)
    True
    """
    x, ok = strtof(s)
    if not ok:
        raise ValueError("stof")
    return x


def strtof(s: str) -> tuple[float, bool]:
    """C ``strtof`` of a decimal prefix (correctly rounded to float32); ``(value, parsed)``."""
    m = re.match(r"\s*([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", s, re.I)
    if not m:
        return 0.0, False
    t = m.group(1)
    low = t.lower().lstrip("+-")
    if low.startswith("inf") or low.startswith("nan"):
        return float(t), True
    return _round_f32(Fraction(t)), True


def _round_f32(q: Fraction) -> float:
    """Round an exact rational to the nearest float32 (ties to even), overflowing to infinity as strtof does."""
    if q == 0:
        return 0.0
    limit = Fraction(FLT_MAX) + Fraction(2) ** 103  # half an ulp above FLT_MAX
    if abs(q) >= limit:
        return math.copysign(math.inf, q)
    c0 = np.float32(float(q))
    best: float | None = None
    best_d: Fraction | None = None
    with np.errstate(over="ignore"):
        around = (np.nextafter(c0, np.float32(-np.inf)), c0, np.nextafter(c0, np.float32(np.inf)))
    for c in around:
        if not np.isfinite(c):
            continue
        d = abs(Fraction(float(c)) - q)
        if best_d is None or d < best_d or (d == best_d and int(c.view(np.uint32)) % 2 == 0):
            best, best_d = float(c), d
    return float(best)
