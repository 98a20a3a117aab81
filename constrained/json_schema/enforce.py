"""``enforce="all"``: our own grammar for a JSON schema, enforcing every keyword a context-free grammar can.

llama.cpp's converter (``converter.py``) is kept text for text; this module is the other mode. A schema is read as
a conjunction: ``allOf`` members, ``$ref`` targets (with their siblings, as in 2020-12) and ``if``/``then``/``else``
where ``if`` only names types are merged into one set of constraints (``_Merged``), then one grammar branch is built
per JSON type it admits:

- numbers: bounds of any kind on integers and decimals, integer ``multipleOf`` (``numbers.py``);
- strings: every ``pattern`` (ECMA-262, all regular features), ``format`` (``formats.py``), ``minLength`` and
  ``maxLength``, intersected as automata (``regex.py``);
- arrays: ``prefixItems``/``items``/``additionalItems``, ``minItems``/``maxItems``, ``contains`` with
  ``minContains`` (no ``maxContains``), ``uniqueItems`` over small finite item domains;
- objects: ``properties``, ``required``, ``additionalProperties``, ``patternProperties`` (up to 3 patterns, split
  into disjoint key languages), ``propertyNames``, ``minProperties``/``maxProperties``, ``dependentRequired``
  (up to 4 keys); declared properties in llama.cpp's order (required first, then optional, each in definition order),
  other keys after them in any order;
- ``const``/``enum``: the listed values that validate against the whole conjunction (jsonschema), as literals;
- ``anyOf``, and ``oneOf`` where its branches are disjoint; ``not`` of types or of string values.

What is not enforced is reported (``UnenforcedKeyword``), with the path and the reason.

Example:
    >>> gbnf, report = convert_enforced({"type": "string", "pattern": "^\\\\d{5}$"})
    >>> report
    ()
    >>> gbnf, report = convert_enforced({"type": "number", "minimum": 0.5, "not": {"required": ["a"]}})
    >>> [(k.path, k.keyword) for k in report]
    [('#', 'not')]
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..errors import SchemaError
from ._rules import INVALID_RULE_CHARS, PRIMITIVE_RULES, SPACE_RULE
from .formats import FORMATS, NOT_CHECKED, format_dfa
from .numbers import number_dfas
from .regex import (
    DFA,
    Unsupported,
    any_dfa,
    compile_pattern,
    complement,
    emit,
    intersect,
    literal_dfa,
    signature,
    with_length,
)
from .report import UnenforcedKeyword

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
    "minProperties", "maxProperties", "dependentRequired",
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


class _Enforcer:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.by_body: dict[str, str] = {}
        self.report: dict[tuple[str, str], UnenforcedKeyword] = {}
        self.memo: dict[tuple, str] = {}
        self.dfa_rules: dict[tuple, str] = {}
        dialect = root.get("$schema") if isinstance(root, dict) else None
        # up to draft 7, "$ref" replaces its siblings; from 2019-09 on they apply beside it
        self.ref_alone = isinstance(dialect, str) and any(f"draft-0{n}" in dialect for n in (3, 4, 6, 7))
        self._validator: Any = None

    # ---- output ------------------------------------------------------------------------------------------------

    def unenforced(self, path: str, keyword: str, reason: str) -> None:
        self.report.setdefault((path, keyword), UnenforcedKeyword(path, keyword, reason))

    def add(self, name: str, body: str) -> str:
        if body in self.by_body:
            return self.by_body[body]
        base = INVALID_RULE_CHARS.sub("-", name).strip("-") or "r"
        cand, i = base, 0
        while cand in self.rules or cand in PRIMITIVE_RULES:
            i += 1
            cand = f"{base}-{i}"
        self.rules[cand] = body
        self.by_body[body] = cand
        return cand

    def reserve(self, name: str) -> str:
        base = INVALID_RULE_CHARS.sub("-", name).strip("-") or "r"
        cand, i = base, 0
        while cand in self.rules or cand in PRIMITIVE_RULES:
            i += 1
            cand = f"{base}-{i}"
        self.rules[cand] = ""
        return cand

    def emit(self, d: DFA, name: str) -> str:
        """The start rule of an automaton's rules (equal automata share their rules)."""
        sig = signature(d)  # before minimising: equal inputs, equal rules
        if sig not in self.dfa_rules:
            self.dfa_rules[sig] = emit(d, name, self.reserve, self.rules.__setitem__)
        return self.dfa_rules[sig]

    def primitive(self, name: str) -> str:
        body, deps = PRIMITIVE_RULES[name]
        if name not in self.rules:
            self.rules[name] = body
            for d in deps:
                self.primitive(d)
        return name

    def text(self) -> str:
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items()))

    # ---- schema reading ----------------------------------------------------------------------------------------

    def resolve(self, ref: str, path: str) -> Sub:
        if ref == "#":
            return self.root, "#"
        if not ref.startswith("#/"):
            raise Unsupported(f"$ref {ref} is not a reference into this document")
        target = self.root
        for raw in ref[2:].split("/"):
            seg = raw.replace("~1", "/").replace("~0", "~")
            from urllib.parse import unquote

            seg = unquote(seg)
            if isinstance(target, dict) and seg in target:
                target = target[seg]
            elif isinstance(target, list) and seg.isdigit() and int(seg) < len(target):
                target = target[int(seg)]
            else:
                raise SchemaError(f"JSON schema error at {path}: cannot resolve $ref {ref}", path=path)
        return target, ref

    def flatten(self, subs: list[Sub]) -> list[Sub]:
        """The conjunction: allOf members and $ref targets inlined (each schema once)."""
        out: list[Sub] = []
        seen: set[int] = set()
        stack = list(reversed(subs))
        while stack:
            s, p = stack.pop()
            if id(s) in seen:
                continue
            seen.add(id(s))
            if isinstance(s, dict) and self.ref_alone and isinstance(s.get("$ref"), str):
                try:
                    stack.append(self.resolve(s["$ref"], p))
                except Unsupported as e:
                    self.unenforced(p, "$ref", str(e))
                continue
            out.append((s, p))
            if not isinstance(s, dict):
                continue
            more: list[Sub] = []
            if "$ref" in s and isinstance(s["$ref"], str):
                try:
                    more.append(self.resolve(s["$ref"], p))
                except Unsupported as e:
                    self.unenforced(p, "$ref", str(e))
            if isinstance(s.get("allOf"), list):
                more += [(m, f"{p}/allOf/{i}") for i, m in enumerate(s["allOf"])]
            stack.extend(reversed(more))
        if len(out) > 2000:
            raise SchemaError(f"JSON schema error at {subs[0][1]}: allOf/$ref expand to more than 2000 schemas",
                              path=subs[0][1])
        return out

    def merge(self, subs: list[Sub]) -> _Merged:
        m = _Merged(subs=subs)
        for s, p in self.flatten(subs):
            if s is True or s == {}:
                continue
            if s is False:
                m.empty = True
                continue
            if not isinstance(s, dict):
                raise SchemaError(f"JSON schema error at {p}: schema must be an object or a boolean", path=p)
            self.merge_one(m, s, p)
        return m

    def merge_one(self, m: _Merged, s: dict, p: str) -> None:  # noqa: C901 - one keyword per branch
        for kw in s:
            if kw not in HANDLED and kw not in ANNOTATIONS and not kw.startswith("x-"):
                from .nodes import KEYWORDS

                if kw in KEYWORDS or kw in ("dependentSchemas", "dependencies", "unevaluatedProperties",
                                            "unevaluatedItems", "$dynamicRef", "$recursiveRef"):
                    self.unenforced(p, kw, "not supported by enforce='all'")
        t = s.get("type")
        if t is not None:
            names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) and all(
                isinstance(x, str) for x in t) else None
            if names is None or not names <= set(TYPES):
                raise SchemaError(f"JSON schema error at {p}: type must be a type name or a list of them", path=p)
            if "number" in names:
                names.add("integer")
            m.types = names if m.types is None else m.types & names
        for kw in ("const", "enum"):
            if kw in s:
                vals = [s["const"]] if kw == "const" else s["enum"]
                if not isinstance(vals, list):
                    raise SchemaError(f"JSON schema error at {p}: enum must be an array", path=p)
                if m.values is None:
                    m.values = list(vals)
                else:
                    m.values = [v for v in m.values if any(_json_equal(v, w) for w in vals)]
        for kw in ("anyOf", "oneOf"):
            if kw in s:
                alts = s[kw]
                if not isinstance(alts, list) or not alts:
                    raise SchemaError(f"JSON schema error at {p}/{kw}: must be a non-empty array of schemas",
                                      path=f"{p}/{kw}")
                m.anyofs.append(([(a, f"{p}/{kw}/{i}") for i, a in enumerate(alts)], kw, p))
        if "not" in s:
            m.nots.append((s["not"], f"{p}/not"))
        if "if" in s:
            self.merge_if(m, s, p)
        self.merge_number(m, s, p)
        if "pattern" in s:
            m.patterns.append((s["pattern"], p))
        if "format" in s and isinstance(s["format"], str):
            m.formats.append((s["format"], p))
        if "minLength" in s:
            m.min_len = max(m.min_len, _count(s, "minLength", p))
        if "maxLength" in s:
            v = _count(s, "maxLength", p)
            m.max_len = v if m.max_len is None else min(m.max_len, v)
        self.merge_array(m, s, p)
        self.merge_object(m, s, p)

    def merge_if(self, m: _Merged, s: dict, p: str) -> None:
        cond = s["if"]
        if cond is True or cond == {}:
            if "then" in s:
                m.anyofs.append(([(s["then"], f"{p}/then")], "then", p))
            return
        if cond is False:
            if "else" in s:
                m.anyofs.append(([(s["else"], f"{p}/else")], "else", p))
            return
        if isinstance(cond, dict) and set(cond) - ANNOTATIONS == {"type"}:
            t = cond["type"]
            names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
            if "number" in names:
                names.add("integer")
            if "integer" in names and "number" not in names:
                self.unenforced(p, "if", "an if on integer alone is not split (integer vs number)")
                return
            yes: dict = {"type": sorted(names)}
            no: dict = {"type": sorted(set(TYPES) - names)}
            then = [({"allOf": [yes, s.get("then", True)]}, f"{p}/then"),
                    ({"allOf": [no, s.get("else", True)]}, f"{p}/else")]
            m.anyofs.append((then, "if", p))
            return
        if "then" in s or "else" in s:
            self.unenforced(p, "if", "if/then/else is enforced only when 'if' names types")

    def merge_number(self, m: _Merged, s: dict, p: str) -> None:
        for kw, lower, excl in (("minimum", True, False), ("exclusiveMinimum", True, True),
                                ("maximum", False, False), ("exclusiveMaximum", False, True)):
            if kw not in s:
                continue
            v = s[kw]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                if isinstance(v, bool) and kw.startswith("exclusive"):
                    self.unenforced(p, kw, "draft-4 boolean exclusive bounds are not supported")
                    continue
                raise SchemaError(f"JSON schema error at {p}: {kw} must be a number", path=p)
            b = (_frac(v), excl)
            if lower:
                if m.lo is None or b[0] > m.lo[0] or (b[0] == m.lo[0] and excl):
                    m.lo = b
            elif m.hi is None or b[0] < m.hi[0] or (b[0] == m.hi[0] and excl):
                m.hi = b
        if "multipleOf" in s:
            v = s["multipleOf"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise SchemaError(f"JSON schema error at {p}: multipleOf must be a positive number", path=p)
            m.multiples.append(_frac(v))

    def merge_array(self, m: _Merged, s: dict, p: str) -> None:
        items = s.get("items")
        prefix = s.get("prefixItems")
        tup: list | None = prefix if isinstance(prefix, list) else items if isinstance(items, list) else None
        tkey = "prefixItems" if isinstance(prefix, list) else "items"
        if tup is not None:
            for i, it in enumerate(tup):
                while len(m.prefix) <= i:
                    m.prefix.append([])
                m.prefix[i].append((it, f"{p}/{tkey}/{i}"))
            after = s.get("additionalItems") if tkey == "items" else items
            if after is not None:
                m.rest.append((after, f"{p}/{'additionalItems' if tkey == 'items' else 'items'}"))
                m.rest_after.append(len(tup))
            else:
                m.rest_after.append(-1)  # a tuple without a rest schema: nothing more to say
        elif items is not None:
            m.rest.append((items, f"{p}/items"))
            m.rest_after.append(0)
        if "minItems" in s:
            m.min_items = max(m.min_items, _count(s, "minItems", p))
        if "maxItems" in s:
            v = _count(s, "maxItems", p)
            m.max_items = v if m.max_items is None else min(m.max_items, v)
        if "contains" in s:
            lo = _count(s, "minContains", p) if "minContains" in s else 1
            hi = _count(s, "maxContains", p) if "maxContains" in s else None
            m.contains.append(((s["contains"], f"{p}/contains"), lo, hi))
        if s.get("uniqueItems") is True:
            m.unique = True

    def merge_object(self, m: _Merged, s: dict, p: str) -> None:
        props = s.get("properties")
        pats = s.get("patternProperties")
        add = s.get("additionalProperties")
        if props is not None and not isinstance(props, dict):
            raise SchemaError(f"JSON schema error at {p}: properties must be an object", path=p)
        if props or pats or add is not None:
            m.members.append({"props": {k: (v, f"{p}/properties/{k}") for k, v in (props or {}).items()},
                              "patterns": [(k, v, f"{p}/patternProperties/{k}") for k, v in (pats or {}).items()],
                              "additional": None if add is None else (add, f"{p}/additionalProperties")})
            for k in props or {}:
                if k not in m.prop_order:
                    m.prop_order.append(k)
        req = s.get("required")
        if isinstance(req, list):
            for k in req:
                if isinstance(k, str) and k not in m.required:
                    m.required.append(k)
        if "minProperties" in s:
            m.min_props = max(m.min_props, _count(s, "minProperties", p))
        if "maxProperties" in s:
            v = _count(s, "maxProperties", p)
            m.max_props = v if m.max_props is None else min(m.max_props, v)
        if "propertyNames" in s:
            m.names.append((s["propertyNames"], f"{p}/propertyNames"))
        dr = s.get("dependentRequired")
        if dr is None and isinstance(s.get("dependencies"), dict) and all(
                isinstance(v, list) for v in s["dependencies"].values()):
            dr = s["dependencies"]
            self.report.pop((p, "dependencies"), None)
        if isinstance(dr, dict):
            for k, v in dr.items():
                m.dep_required.setdefault(k, [])
                m.dep_required[k] += [x for x in v if x not in m.dep_required[k]]

    # ---- generation --------------------------------------------------------------------------------------------

    def gen(self, subs: list[Sub], name: str, types: frozenset[str] | None = None) -> str | None:
        """The rule for the values satisfying every schema in ``subs`` (and of ``types``), or None if there is none."""
        key = (tuple(id(s) for s, _p in subs), types)
        if key in self.memo:
            return self.memo[key] or None
        rule = self.reserve(name)
        self.memo[key] = rule
        body = self.gen_body(subs, name, types)
        if body is None:
            del self.rules[rule]
            self.memo[key] = ""
            return None
        self.rules[rule] = body
        return rule

    def gen_body(self, subs: list[Sub], name: str, types: frozenset[str] | None) -> str | None:
        m = self.merge(subs)
        if m.empty:
            return None
        allowed = set(TYPES) if m.types is None else set(m.types)
        if types is not None:
            allowed &= types
        path = subs[0][1]
        for sch, npath in m.nots:
            allowed = self.apply_not(m, sch, npath, allowed)
        if not allowed:
            return None
        if m.anyofs:
            return self.gen_alternatives(m, subs, name, frozenset(allowed))
        if allowed == set(TYPES) and m.values is None and _no_constraints(m):
            return self.primitive("value")
        if m.values is not None:
            return self.gen_values(m, allowed, path)
        alts = []
        for t in TYPES:
            if t in allowed and not (t == "integer" and "number" in allowed):
                body = getattr(self, f"gen_{t}")(m, name)
                if body is not None:
                    alts.append(body)
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else " | ".join(f"( {a} )" for a in alts)

    def apply_not(self, m: _Merged, sch: Any, path: str, allowed: set[str]) -> set[str]:
        if sch is True or sch == {}:
            return set()
        if sch is False:
            return allowed
        if isinstance(sch, dict) and set(sch) - ANNOTATIONS <= {"type"} and "type" in sch:
            t = sch["type"]
            names = {t} if isinstance(t, str) else set(t)
            if "number" in names:
                names |= {"integer"}
            if "integer" in names and "number" not in names and "number" in allowed:
                m.non_integer = True  # numbers that are not integers
                return allowed - names
            return allowed - names
        if isinstance(sch, dict) and set(sch) - ANNOTATIONS in ({"const"}, {"enum"}):
            vals = [sch["const"]] if "const" in sch else sch["enum"]
            if m.values is not None:
                m.values = [v for v in m.values if not any(_json_equal(v, w) for w in vals)]
                return allowed
            if all(not isinstance(v, (list, dict)) for v in vals):
                strs = tuple(v for v in vals if isinstance(v, str))
                if strs:
                    m.patterns.append((("__not__", strs), path))
                m.excluded += [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
                m.excluded_bools |= {v for v in vals if isinstance(v, bool)}
                return allowed - ({"null"} if None in vals else set())
        self.unenforced(path.rsplit("/", 1)[0], "not", "not is enforced only for types and values")
        return allowed

    def gen_alternatives(self, m: _Merged, subs: list[Sub], name: str, types: frozenset[str]) -> str | None:
        groups = m.anyofs
        n = 1
        for alts, _kw, _p in groups:
            n *= len(alts)
        if n > MAX_BRANCHES:
            alts, kw, p = groups[-1]
            self.unenforced(p, kw, f"more than {MAX_BRANCHES} combinations of alternatives")
            groups = groups[:1]
        for alts, kw, p in groups:
            if kw == "oneOf" and len(alts) > 1 and not self.disjoint(alts):
                self.unenforced(p, "oneOf", "the alternatives may overlap: 'exactly one' is not enforced")
        base = [(self.strip_alternatives(s), p) for s, p in self.flatten(subs)]
        out = []
        for k, combo in enumerate(itertools.product(*[alts for alts, _kw, _p in groups])):
            r = self.gen(base + list(combo), f"{name}-{k}", types)
            if r is not None:
                out.append(r)
        return " | ".join(out) if out else None

    def strip_alternatives(self, s: Any) -> Any:
        if isinstance(s, dict) and any(k in s for k in ("anyOf", "oneOf", "if", "allOf", "$ref")):
            key = id(s)
            cache = self.__dict__.setdefault("_stripped", {})
            if key not in cache:
                cache[key] = (s, {k: v for k, v in s.items() if k not in ("anyOf", "oneOf", "if", "then", "else",
                                                                          "allOf", "$ref")})
            return cache[key][1]
        return s

    def disjoint(self, alts: list[Sub]) -> bool:
        ms = [self.merge([a]) for a in alts]

        def types(x: _Merged) -> set[str]:
            t = set(TYPES) if x.types is None else set(x.types)
            if x.values is not None:
                t = {_type_of(v) for v in x.values}
            return t

        for i in range(len(ms)):
            for j in range(i + 1, len(ms)):
                a, b = ms[i], ms[j]
                if not (types(a) & types(b)):
                    continue
                if a.values is not None and b.values is not None and not any(
                        _json_equal(x, y) for x in a.values for y in b.values):
                    continue
                if not self.discriminated(a, b):
                    return False
        return True

    def discriminated(self, a: _Merged, b: _Merged) -> bool:
        for k in set(a.required) & set(b.required):
            va = [self.merge([mem["props"][k]]).values for mem in a.members if k in mem["props"]]
            vb = [self.merge([mem["props"][k]]).values for mem in b.members if k in mem["props"]]
            va = [v for v in va if v is not None]
            vb = [v for v in vb if v is not None]
            if va and vb and not any(_json_equal(x, y) for x in va[0] for y in vb[0]):
                return True
        return False

    # ---- values ------------------------------------------------------------------------------------------------

    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema

            try:
                cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
                self._validator = cls(self.root, format_checker=cls.FORMAT_CHECKER)
            except Exception:  # noqa: BLE001 - not a schema jsonschema can use
                self._validator = False
        return self._validator

    def gen_values(self, m: _Merged, allowed: set[str], path: str) -> str | None:
        v = self.validator()
        lits = []
        for val in m.values or []:
            t = _type_of(val)
            if t not in allowed and not (t == "integer" and "number" in allowed and not m.non_integer):
                continue
            if (isinstance(val, bool) and val in m.excluded_bools) or (
                    t in ("integer", "number") and any(_json_equal(val, x) for x in m.excluded)):
                continue
            if v:
                try:
                    ok = all(v.evolve(schema=s).is_valid(val) for s, _p in m.subs)
                except Exception:  # noqa: BLE001 - an unresolvable sibling
                    ok = True
                    self.unenforced(path, "enum", "the values could not be checked against their siblings")
                if not ok:
                    continue
                if isinstance(val, str) and not all(self.string_ok(val, pat) for pat in m.patterns + m.formats):
                    continue
            lits.append(self.value_rule(val))
        if not lits:
            return None
        return "(" + " | ".join(f"( {x} )" for x in dict.fromkeys(lits)) + ")"

    def value_rule(self, val: Any) -> str:
        """The texts of a JSON value: any spelling of its numbers (1 = 1.0), the grammar's spaces, its key order."""
        if isinstance(val, bool) or val is None or isinstance(val, str):
            return _literal(val)
        if isinstance(val, (int, float)):
            if len(repr(val)) > 24:
                return _literal(val)  # its own spelling only (the other spellings' automata grow with the digits)
            f = Fraction(val)
            try:
                dfas = number_dfas(False, f, False, f, False, None)
            except Unsupported:
                return _literal(val)
            return "( " + (" | ".join(self.emit(d, "const-num") for d in dfas if not d.is_empty())
                           or _literal(val)) + " )"
        if isinstance(val, list):
            inner = ' "," space '.join(self.value_rule(v) for v in val)
            return f'"[" space {inner} space "]"' if val else '"[" space "]"'
        inner = ' "," space '.join(f'{_literal(k)} space ":" space ( {self.value_rule(v)} )' for k, v in val.items())
        return f'"{{" space {inner} space "}}"' if val else '"{" space "}"'

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

    def string_dfa(self, m: _Merged, path: str) -> DFA:
        d: DFA | None = None
        for spec, p in m.patterns:
            try:
                if isinstance(spec, tuple):
                    part = complement(literal_dfa(list(spec[1])))
                elif not isinstance(spec, str):
                    raise SchemaError(f"JSON schema error at {p}: pattern must be a string", path=p)
                else:
                    part = compile_pattern(spec)
                d = part if d is None else intersect(d, part)
            except Unsupported as e:
                self.unenforced(p, "pattern" if not isinstance(spec, tuple) else "not", f"{spec}: {e}")
        for fmt, p in m.formats:
            if fmt not in FORMATS:
                if fmt not in ("regex", "unknown"):
                    self.unenforced(p, "format", f"format {fmt} is not enforced")
                continue
            if fmt in NOT_CHECKED:
                self.unenforced(p, "format", f"{fmt}: {NOT_CHECKED[fmt]}")
            try:
                part = format_dfa(fmt)
                d = part if d is None else intersect(d, part)
            except Unsupported as e:
                self.unenforced(p, "format", f"{fmt} with the other string constraints: {e}")
        if m.min_len or m.max_len is not None:
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
            char = self.primitive("char")
            rep = f"{char}{{{m.min_len},{'' if m.max_len is None else m.max_len}}}"
            return f'"\\"" {rep} "\\""'
        d = self.string_dfa(m, path)
        if d.is_empty():
            return None
        return f'"\\"" {self.emit(d, f"{name}-str")} "\\""'

    def gen_array(self, m: _Merged, name: str) -> str | None:
        path = m.subs[0][1]
        if not (m.prefix or m.rest or m.min_items or m.max_items is not None or m.contains or m.unique):
            return self.primitive("array")
        max_items = m.max_items
        if max_items is not None and len(m.prefix) > max_items:
            m.prefix = m.prefix[:max_items]  # the positions past maxItems never exist
        npre = len(m.prefix)

        def item_subs(i: int) -> list[Sub]:
            subs = list(m.prefix[i]) if i < npre else []
            subs += [r for r, after in zip(m.rest, [a for a in m.rest_after if a != -1], strict=False) if i >= after]
            return subs

        if max_items is not None and m.min_items > max_items:
            return None
        if m.contains:
            return self.gen_contains(m, name, npre, max_items, item_subs)
        if m.unique and not (max_items is not None and max_items <= 1):
            return self.gen_unique(m, name, npre, max_items, item_subs)
        elems = []
        for i in range(npre):
            r = self.gen(item_subs(i) or [(True, path)], f"{name}-{i}")
            elems.append(r)
        rest_rule = self.gen(item_subs(npre) or [(True, path)], f"{name}-item") if (
            max_items is None or max_items > npre) else None
        # build from the end: tail(i) = what may follow after i elements
        lo_rest = max(0, m.min_items - npre)
        hi_rest = None if max_items is None else max(0, max_items - npre)
        if rest_rule is None or hi_rest == 0:
            tail = ""
            if m.min_items > npre:
                return None
        else:
            sep = '"," space ' if npre else ""
            if npre == 0:
                if hi_rest is None:
                    rep = f'( "," space {rest_rule} )*' if lo_rest <= 1 else \
                        f'( "," space {rest_rule} ){{{lo_rest - 1},}}'
                else:
                    rep = f'( "," space {rest_rule} ){{{max(lo_rest - 1, 0)},{hi_rest - 1}}}'
                tail = f"{rest_rule} {rep}"
                if lo_rest == 0:
                    tail = f"( {tail} )?"
            else:
                hi = "" if hi_rest is None else str(hi_rest)
                tail = f'( {sep}{rest_rule} ){{{lo_rest},{hi}}}'
        for i in range(npre - 1, -1, -1):
            if elems[i] is None:
                if i < m.min_items:
                    return None
                tail = ""
                continue
            sep = '"," space ' if i else ""
            part = f"{sep}{elems[i]} {tail}".strip()
            tail = part if i < m.min_items else f"( {part} )?"
        return f'"[" space {tail} space "]"'.replace("space  space", "space space")

    def gen_contains(self, m: _Merged, name: str, npre: int, max_items: int | None, item_subs) -> str | None:  # noqa: ANN001
        """Arrays whose number of items matching ``contains`` is in [minContains, maxContains]."""
        path = m.subs[0][1]
        (csch, cpath), lo, hi = m.contains[0]
        if len(m.contains) > 1 or npre or max_items is not None or m.unique or m.min_items > max(lo, 1):
            self.unenforced(cpath.rsplit("/", 1)[0], "contains", "contains is enforced without prefixItems, "
                            "maxItems, uniqueItems and a minItems above minContains")
            m.contains = []
            return self.gen_array(m, name)
        item = item_subs(0) or [(True, path)]
        y = self.gen(item + [(csch, cpath)], f"{name}-contains")
        if hi is None:
            if lo == 0:
                m.contains = []
                return self.gen_array(m, name)
            x = self.gen(item, f"{name}-item")
        else:
            if not _negatable(csch):
                self.unenforced(cpath.rsplit("/", 1)[0], "maxContains",
                                "maxContains needs the items that do not match contains: enforced only when "
                                "contains is a type, const or enum")
                m.contains = [((csch, cpath), lo, None)]
                return self.gen_array(m, name)
            x = self.gen(item + [({"not": csch}, cpath)], f"{name}-other")
        if hi is not None and hi < lo:
            return None
        cap = hi if hi is not None else lo
        names = {c: (self.reserve(f"{name}-e{c}"), self.reserve(f"{name}-t{c}")) for c in range(cap + 1)}
        for c, (e_rule, t_rule) in names.items():
            alts = []
            if x is not None:
                alts.append(f"{x} {t_rule}")
            if y is not None and (hi is None or c < hi):
                alts.append(f"{y} {names[min(c + 1, cap)][1]}")
            self.rules[e_rule] = " | ".join(alts) if alts else '[^\\x00-\\U0010FFFF]'
            ends = ['""'] if c >= lo else []
            self.rules[t_rule] = " | ".join([f'"," space {e_rule}'] + ends)
        first = names[0][0]
        body = f"( {first} )?" if lo == 0 else first
        return f'"[" space {body} space "]"'

    def gen_unique(self, m: _Merged, name: str, npre: int, max_items: int | None, item_subs) -> str | None:  # noqa: ANN001
        path = m.subs[0][1]
        dom = None
        if not npre:
            im = self.merge(item_subs(0))
            if im.values is not None and not im.anyofs:
                dom = []
                for v in im.values:
                    if not any(_json_equal(v, w) for w in dom):
                        dom.append(v)
                r = self.gen_values(im, set(TYPES), path)
                dom = [v for v in dom if _literal(v) in (r or "")]
            elif im.types is not None and im.types <= {"boolean", "null"} and not im.nots and not im.anyofs:
                dom = ([True, False] if "boolean" in im.types else []) + ([None] if "null" in im.types else [])
        if dom is None or len(dom) > 5:
            self.unenforced(path, "uniqueItems", "enforced only for arrays of at most 5 possible item values")
            m.unique = False
            return self.gen_array(m, name)
        seqs = []
        hi = len(dom) if max_items is None else min(max_items, len(dom))
        for k in range(m.min_items, hi + 1):
            for perm in itertools.permutations(dom, k):
                seqs.append('"[" space ' + ' "," space '.join(_literal(v) for v in perm) + (" " if perm else "")
                            + 'space "]"')
        return " | ".join(f"( {s} )" for s in seqs) if seqs else None

    # ---- objects -----------------------------------------------------------------------------------------------

    def key_dfa(self, m: _Merged) -> DFA | None:
        """The keys propertyNames allows (None: any)."""
        d: DFA | None = None
        for sch, p in m.names:
            if sch is True:
                continue
            nm = self.merge([(sch, p)])
            if nm.empty or (nm.types is not None and "string" not in nm.types):
                return literal_dfa([])
            if nm.values is not None:
                part = literal_dfa([v for v in nm.values if isinstance(v, str)])
            else:
                for _kw in ("anyOf", "oneOf", "not"):
                    if nm.anyofs or nm.nots:
                        self.unenforced(p, "propertyNames", "propertyNames with anyOf/oneOf/not is not enforced")
                        break
                part = self.string_dfa(nm, p)
            d = part if d is None else intersect(d, part)
        return d

    def gen_object(self, m: _Merged, name: str) -> str | None:  # noqa: C901
        path = m.subs[0][1]
        if not (m.members or m.required or m.min_props or m.max_props is not None or m.names or m.dep_required):
            return self.primitive("object")
        keys_ok = self.key_dfa(m)
        declared = list(m.prop_order) + [k for k in m.required if k not in m.prop_order]
        for k, needs in m.dep_required.items():
            declared += [x for x in (k, *needs) if x not in declared]
        pattern_members = [mem for mem in m.members if mem["patterns"]]
        patterns: list[tuple[str, Any, str]] = [pt for mem in pattern_members for pt in mem["patterns"]]
        if len(pattern_members) > 1 or len(patterns) > 3:
            self.unenforced(path, "patternProperties", "more than one member with patternProperties, or more than "
                                                       "3 patterns, is not enforced")
            patterns = []
        pat_dfas = []
        for pt, sch, pp in patterns:
            try:
                pat_dfas.append((compile_pattern(pt), sch, pp))
            except Unsupported as e:
                self.unenforced(pp.rsplit("/", 1)[0], "patternProperties", f"{pt}: {e}")
                return self.gen_object_fallback(m, name)

        def value_subs(key: str | None, region: tuple[int, ...] = ()) -> list[Sub] | None:
            """Schemas a key's value must satisfy (key None: an undeclared key in the pattern region)."""
            out: list[Sub] = []
            for mem in m.members:
                hit = False
                if key is not None and key in mem["props"]:
                    out.append(mem["props"][key])
                    hit = True
                if mem["patterns"] and (mem is pattern_members[0] if pattern_members else False):
                    for j, (d, sch, pp) in enumerate(pat_dfas):
                        if (key is not None and d.accepts(key)) or (key is None and j in region):
                            out.append((sch, pp))
                            hit = True
                if not hit and mem["additional"] is not None:
                    out.append(mem["additional"])
            return out

        entries = []  # (key, rule or None (forbidden), required)
        for k in declared:
            req = k in m.required
            allowed = keys_ok is None or keys_ok.accepts(k)
            r = self.gen(value_subs(k) or [(True, path)], f"{name}-{k}") if allowed else None
            if r is None and req:
                return None
            entries.append((k, r, req))
        # extra keys: one key language per pattern region
        extras = []
        base = complement(literal_dfa(declared))
        if keys_ok is not None:
            base = intersect(base, keys_ok)
        regions = [()] + [c for n in range(1, len(pat_dfas) + 1) for c in itertools.combinations(range(len(pat_dfas)),
                                                                                                    n)]
        for region in regions:
            d = base
            try:
                for j, (pd, _s, _p) in enumerate(pat_dfas):
                    d = intersect(d, pd if j in region else complement(pd))
            except Unsupported as e:
                self.unenforced(path, "patternProperties", str(e))
                return self.gen_object_fallback(m, name)
            if d.is_empty():
                continue
            vs = value_subs(None, region)
            r = self.gen(vs or [(True, path)], f"{name}-extra")
            if r is None:
                continue
            key_rule = self.add(f"{name}-key", f'"\\"" {self.emit(d, f"{name}-key")} "\\""')
            extras.append(f'{key_rule} space ":" space {r}')
        deps = {k: v for k, v in m.dep_required.items() if k in declared or extras}
        if len(deps) > 4:
            self.unenforced(path, "dependentRequired", "enforced only for up to 4 declared properties")
            deps = {k: v for k, v in deps.items() if k in declared} if len(deps) <= 4 else {}
        variants = []
        for present in itertools.product((False, True), repeat=len(deps)):
            modes = {}
            ok = True
            for k, on in zip(deps, present, strict=False):
                modes[k] = "must" if on else "never"
            for needs, on in zip(deps.values(), present, strict=False):
                if on:
                    for nk in needs:
                        if modes.get(nk) == "never":
                            ok = False
                        modes[nk] = "must"
            if not ok:
                continue
            body = self.object_body(name, entries, extras, modes, m.min_props, m.max_props)
            if body is not None:
                variants.append(body)
        if not variants:
            return None
        return " | ".join(f"( {v} )" for v in variants) if len(variants) > 1 else variants[0]

    def gen_object_fallback(self, m: _Merged, name: str) -> str:
        return self.primitive("object")

    def object_body(self, name: str, entries: list, extras: list[str], modes: dict[str, str], cmin: int,
                    cmax: int | None) -> str | None:
        """``{ required..., optional..., extra... }`` with the key count in [cmin, cmax]."""
        items = []  # (kv rule, mode: "must" / "may")
        for k, r, req in entries:
            mode = modes.get(k, "must" if req else "may")
            if r is None:
                if mode == "must":
                    return None
                continue
            if mode == "never":
                continue
            kv = self.add(f"{name}-{k}-kv", f'{_literal(k)} space ":" space {r}')
            items.append((kv, mode))
        # items that must appear, in order, keep their place; count the mandatory ones
        cap = cmax if cmax is not None else cmin
        extra = self.add(f"{name}-extra-kv", " | ".join(extras)) if extras else None
        memo: dict[tuple[int, int, bool], str | None] = {}

        def tail(i: int, c: int, first: bool) -> str | None:
            key = (i, min(c, cap + 1), first)
            if key in memo:
                return memo[key]
            sep = "" if first else '"," space '
            if i == len(items):
                lo = max(0, cmin - c)
                hi = None if cmax is None else cmax - c
                if hi is not None and hi < 0:
                    out = None
                elif extra is None or hi == 0:
                    out = "" if lo == 0 else None
                elif first:
                    rep_lo, rep_hi = max(lo - 1, 0), None if hi is None else hi - 1
                    inner = f'{extra} ( "," space {extra} ){{{rep_lo},{"" if rep_hi is None else rep_hi}}}'
                    out = inner if lo > 0 else f"( {inner} )?"
                else:
                    out = f'( "," space {extra} ){{{lo},{"" if hi is None else hi}}}'
                memo[key] = out
                return out
            kv, mode = items[i]
            with_it = tail(i + 1, c + 1, False)
            alts = []
            if with_it is not None and (cmax is None or c + 1 <= cmax):
                alts.append(f"{sep}{kv} {with_it}".strip())
            if mode == "may":
                without = tail(i + 1, c, first)
                if without is not None:
                    alts.append(without)
            if not alts:
                out = None
            elif len(alts) == 1:
                out = alts[0]
            else:
                out = "( " + " | ".join(f"( {a} )" if a else '""' for a in alts) + " )"
            if out is not None and len(out) > 200:
                out = self.add(f"{name}-t{i}", out)
            memo[key] = out
            return out

        body = tail(0, 0, True)
        if body is None:
            return None
        return f'"{{" space {body} space "}}"'.replace("space  space", "space space")


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
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    return "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object"


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


def convert_enforced(value: Any) -> tuple[str, tuple[UnenforcedKeyword, ...]]:
    """GBNF text enforcing ``value`` (a normalised JSON schema) as fully as a grammar can, and what it does not."""
    e = _Enforcer(value)
    try:
        root = e.gen([(value, "#")], "root")
    except RecursionError:
        raise SchemaError("JSON schema error at #: nested too deeply for enforce='all'", path="#") from None
    if root is None:
        raise SchemaError("JSON schema error at #: no JSON value satisfies this schema", path="#")
    if root != "root":
        e.rules["root"] = root
    return e.text(), tuple(e.report.values())
