"""llama-server's sampling parameters: defaults, GGUF defaults, request fields and their refusals.

:class:`Params` mirrors ``common_params_sampling`` (``common/common.h``). Floats are stored as the float32 values
llama.cpp holds. :meth:`Params.from_request` reads a ``/completion`` or ``/v1/chat/completions`` body as
``server_schema::eval_llama_cmpl_schema`` does (aliases, clamps, and the same error texts as ``ValueError``).

Example:
    >>> p = Params.from_request({"temperature": -1, "top_k": -5, "seed": -1, "samplers": "kt"})
    >>> p.temp, p.top_k, p.seed, p.samplers
    (0.0, 0, 4294967295, ('top_k', 'temperature'))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import Any

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


@dataclass(frozen=True)
class Params:
    """llama-server's sampling parameters (``common_params_sampling``) with its defaults.

    ``logit_bias`` is a tuple of ``(token, bias)``; a token may also be a string, tokenized (no specials) when the
    sampler is built with a vocabulary. ``ignore_eos`` adds a -inf bias for every end-of-generation token.
    """

    seed: int = 0xFFFFFFFF
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    temp: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")
    top_n_sigma: float = -1.0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    min_keep: int = 0
    n_probs: int = 0
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS
    logit_bias: tuple[tuple[int | str, float], ...] = field(default=())
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "float":
                object.__setattr__(self, f.name, f32(v))
            elif f.type == "int":
                object.__setattr__(self, f.name, int(v))
        object.__setattr__(self, "seed", self.seed & 0xFFFFFFFF)
        object.__setattr__(self, "samplers", tuple(self.samplers))
        object.__setattr__(self, "dry_sequence_breakers", tuple(self.dry_sequence_breakers))
        object.__setattr__(self, "logit_bias", tuple((t, f32(b)) for t, b in self.logit_bias))
        bad = [s for s in self.samplers if s not in _CANONICAL]
        if bad:
            raise ValueError(f"unknown sampler name(s) {bad}; use one of {list(_CANONICAL)}")

    def replace(self, **kw: Any) -> Params:
        """A copy with some fields changed."""
        return replace(self, **kw)

    # ------------------------------------------------------------------ GGUF
    @classmethod
    def from_gguf(cls, path: str, base: Params | None = None, *, user_set: frozenset[str] = frozenset()) -> Params:
        """Apply a GGUF's ``general.sampling.*`` keys over ``base`` as ``common_init_sampler_from_model`` does.

        ``user_set`` names fields the user gave on the command line (those win over the GGUF).
        Values go through llama.cpp's metadata string (``std::to_string``) and ``strtol``/``strtof``.
        """
        from .gguf_sampling import read_sampling_kv
        return read_sampling_kv(path, base or cls(), user_set)

    # ------------------------------------------------------------------ requests
    @classmethod
    def from_request(cls, body: dict[str, Any], vocab: Any = None, base: Params | None = None, *,
                     chat: bool | None = None) -> Params:
        """Read a llama-server request body (``/completion``, or ``/v1/chat/completions`` when ``chat``).

        ``chat`` defaults to True when the body has ``messages``. ``vocab`` (a ``constrained.Vocabulary``) is
        needed for string ``logit_bias`` keys and the id range check.

        Raises:
            ValueError: with llama-server's message, e.g.
                ``Field 'repeat_last_n': Value must be between 0 <= value <= 2147483647, but got -1``.
        """
        from .request import eval_request
        return eval_request(cls, body, vocab, base or cls(), chat)

    @classmethod
    def from_ollama(cls, options: dict[str, Any], base: Params | None = None) -> Params:
        """Read Ollama's ``options`` names (``temperature``, ``top_k``, ``repeat_penalty``, ...).

        Raises:
            ValueError: unknown option names (all of them, sorted).
        """
        from .request import eval_ollama
        return eval_ollama(cls, options, base or cls())


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
    import re
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
