"""``enforce="all"``: the constraints of a conjunction (``_Merged``), the keyword tables and small helpers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..errors import SchemaError
from .json_text import value_type

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
MAX_BRANCHES = 64
"""Most combinations of anyOf/oneOf alternatives expanded for one schema."""

ANNOTATIONS = frozenset((
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "$defs", "definitions",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema", "$anchor",
    "$vocabulary", "$dynamicAnchor", "$recursiveAnchor",
))
HANDLED = frozenset((
    "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "$ref", "if", "then", "else",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "pattern", "format", "minLength", "maxLength",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains", "maxContains",
    "uniqueItems", "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
))

Sub = tuple[Any, str]  # (schema, path)


def _frac(x: Any) -> Fraction:
    return Fraction(x)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return Fraction(a) == Fraction(b) if math.isfinite(a) and math.isfinite(b) else a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@dataclass
class _Merged:
    """The constraints of a conjunction of schemas."""

    subs: list[Sub] = field(default_factory=list)
    empty: bool = False
    types: set[str] | None = None
    values: list[Any] | None = None          # const / enum candidates
    anyofs: list[tuple[list[Sub], str, str]] = field(default_factory=list)  # (alternatives, keyword, path)
    nots: list[Sub] = field(default_factory=list)
    lo: tuple[Fraction, bool] | None = None
    hi: tuple[Fraction, bool] | None = None
    multiples: list[Fraction] = field(default_factory=list)
    patterns: list[Sub] = field(default_factory=list)
    formats: list[Sub] = field(default_factory=list)
    min_len: int = 0
    max_len: int | None = None
    prefix: list[list[Sub]] = field(default_factory=list)
    rest: list[Sub] = field(default_factory=list)       # schemas for the items after the prefix
    rest_after: list[int] = field(default_factory=list)  # the prefix length each rest schema starts after
    min_items: int = 0
    max_items: int | None = None
    contains: list[tuple[Sub, int, int | None]] = field(default_factory=list)
    unique: bool = False
    members: list[dict] = field(default_factory=list)  # object members: properties / patterns / additional
    required: list[str] = field(default_factory=list)
    min_props: int = 0
    max_props: int | None = None
    names: list[Sub] = field(default_factory=list)
    dep_required: dict[str, list[str]] = field(default_factory=dict)
    prop_order: list[str] = field(default_factory=list)
    non_integer: bool = False                  # not {"type": "integer"} next to numbers
    excluded: list[Any] = field(default_factory=list)        # numbers a not excludes
    excluded_bools: set[bool] = field(default_factory=set)


def _negatable(s: Any) -> bool:
    """Whether ``not s`` is expressible here (types, or scalar values)."""
    if isinstance(s, bool):
        return True
    if not isinstance(s, dict):
        return False
    keys = set(s) - ANNOTATIONS
    if keys == {"type"}:
        return True
    if keys in ({"const"}, {"enum"}):
        vals = [s["const"]] if "const" in s else s["enum"]
        return isinstance(vals, list) and all(not isinstance(v, (list, dict)) for v in vals)
    return False


def _no_constraints(m: _Merged) -> bool:
    return not (m.nots or m.lo or m.hi or m.multiples or m.patterns or m.formats or m.min_len
                or m.max_len is not None or m.prefix or m.rest or m.min_items or m.max_items is not None
                or m.contains or m.unique or m.members or m.required or m.min_props or m.max_props is not None
                or m.names or m.dep_required)


def _type_of(v: Any) -> str:
    return value_type(v)


def _literal(v: Any) -> str:
    text = json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


def _count(s: dict, kw: str, p: str) -> int:
    v = s[kw]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"JSON schema error at {p}: {kw} must be a non-negative integer", path=p)
    if v > 1 << 20:
        raise SchemaError(f"JSON schema error at {p}: {kw} {v} is above the limit of {1 << 20}", path=p)
    return v


def _bounds(s: dict, lo_kw: str, hi_kw: str, p: str, lo: int, hi: int | None) -> tuple[int, int | None]:
    """``(lo, hi)`` tightened by ``s``'s count keywords ``lo_kw`` / ``hi_kw`` (allOf members intersect)."""
    if lo_kw in s:
        lo = max(lo, _count(s, lo_kw, p))
    if hi_kw in s:
        v = _count(s, hi_kw, p)
        hi = v if hi is None else min(hi, v)
    return lo, hi
