"""llama.cpp's conversions that the sampling parameters go through: C ``strtol``/``strtof``, float32 rounding, and
the sampler names and letters of ``common_sampler_types_from_names`` / ``_from_chars``.

The lowest module of the parameter side: :mod:`.params`, :mod:`.request` and :mod:`.gguf_sampling` all read through it.

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



def strtol(s: str) -> tuple[int, int]:
    """C ``strtol(s, &end, 10)``: ``(value, end)``, the value clamped to a 64-bit long and ``end`` the index where
    parsing stopped (0 when no digits were read, as C leaves ``end == s``)."""
    i = 0
    while i < len(s) and s[i] in " \t\n\v\f\r":
        i += 1
    j = i
    if j < len(s) and s[j] in "+-":
        j += 1
    k = j
    while k < len(s) and s[k] in "0123456789":
        k += 1
    if k == j:
        return 0, 0
    return max(-(2**63), min(2**63 - 1, int(s[i:k]))), k


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
