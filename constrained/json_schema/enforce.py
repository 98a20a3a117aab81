"""``enforce="all"``: our own grammar for a JSON schema, enforcing every keyword a context-free grammar can.

llama.cpp's converter (``converter.py``) is kept text for text; this module is the other mode. A schema is read as
a conjunction: ``allOf`` members, ``$ref`` targets (with their siblings, as in 2020-12) and ``if``/``then``/``else``
where ``if`` names types (or scalar values: split into two branches) are merged into one set of constraints (``_Merged``), then one grammar branch is built
per JSON type it admits:

- numbers: bounds of any kind on integers and decimals, integer ``multipleOf`` (``numbers.py``);
- strings: every ``pattern`` (ECMA-262, all regular features), ``format`` (``formats.py``), ``minLength`` and
  ``maxLength``, intersected as automata (``regex.py``);
- arrays: ``prefixItems``/``items``/``additionalItems``, ``minItems``/``maxItems``, ``contains`` with
  ``minContains`` (no ``maxContains``), ``uniqueItems`` over listed item values (up to 5: any order; more: the
  listing's order);
- objects: ``properties``, ``required``, ``additionalProperties``, ``patternProperties`` (up to 8 patterns, split
  into disjoint key languages), ``propertyNames``, ``minProperties``/``maxProperties``, ``dependentRequired``
  (up to 4 keys); declared properties in llama.cpp's order (required first, then optional, each in definition order),
  other keys after them in any order;
- ``const``/``enum``: the listed values that validate against the whole conjunction (jsonschema), as literals;
- ``anyOf``, and ``oneOf`` where its branches are disjoint (or made so: structural branches with the others'
  negations); ``not`` of types, values and structural conditions (required keys, properties with types/values).

What is not enforced is reported (``UnenforcedKeyword``), with the path and the reason.

This module holds the conversion itself (``_Enforcer``: rules, report, the dispatch per type); its generators are
mixins, one job each: ``enforce_merge`` (the conjunction), ``enforce_combinators`` (anyOf/oneOf/not, const/enum),
``enforce_scalars`` (null, booleans, numbers, strings), ``enforce_arrays``, ``enforce_objects``; ``enforce_base``
has ``_Merged`` and the keyword tables.

Example:
    >>> gbnf, report = convert_enforced({"type": "string", "pattern": "^\\\\d{5}$"})
    >>> report
    ()
    >>> gbnf, report = convert_enforced({"type": "number", "minimum": 0.5, "not": {"multipleOf": 2}})
    >>> [(k.path, k.keyword) for k in report]
    [('#', 'not')]
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaError
from ._rules import INVALID_RULE_CHARS, PRIMITIVE_RULES, SPACE_RULE
from .dialect import dialect_of, fraction_integers, normalized, ref_overrides_siblings
from .enforce_arrays import ArrayMixin
from .enforce_base import (
    TYPES,
    Sub,
    _no_constraints,
)
from .enforce_combinators import CombinatorMixin
from .enforce_merge import MergeMixin
from .enforce_objects import ObjectMixin
from .enforce_scalars import ScalarMixin
from .regex import (
    DFA,
    emit,
    signature,
)
from .report import UnenforcedKeyword
from .resources import Resources, lookup_of

MAX_CONJUNCTIONS = 4500
"""Most conjunctions (a schema with the alternatives chosen around it: one rule body each) built for one schema;
past it, ``SchemaError`` names the limit (the combinations of nested anyOf/oneOf/if multiply)."""
MAX_RULES = 16000
"""Most grammar rules built for one schema; past it, ``SchemaError`` names the limit."""
MAX_NAME = 48
"""Longest rule name built from the nesting (longer ones keep their head and tail)."""


class _Enforcer(MergeMixin, CombinatorMixin, ScalarMixin, ArrayMixin, ObjectMixin):
    """One conversion: the rules built so far, the report, and the generators of the mixins."""

    def __init__(self, root: Any, resources: Resources | None = None) -> None:
        self.original = root  # for jsonschema (the declared dialect)
        self.resources = resources  # remote documents by URI (json_schema.resources), never fetched
        self.lookup = lookup_of(resources)
        self.remote: dict[str, Any] = {}  # URI -> the normalised remote document read
        self.dialect = dialect_of(root)
        self.root = normalized(root, self.dialect)
        self.strict_integer = not fraction_integers(self.dialect)
        self.annotations: dict[tuple[str, str], UnenforcedKeyword] = {}
        self._made: dict[tuple, Any] = {}  # schemas built here (if/then splits...), kept alive: memo keys are ids
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.by_body: dict[str, str] = {}
        self.report: dict[tuple[str, str], UnenforcedKeyword] = {}
        self.memo: dict[tuple, str] = {}
        self.dfa_rules: dict[tuple, str] = {}
        self._emitted: dict[int, tuple[DFA, str]] = {}
        # up to draft 7, "$ref" replaces its siblings; from 2019-09 on they apply beside it
        self.ref_alone = ref_overrides_siblings(self.dialect)
        self._validator: Any = None
        self.conjunctions = 0  # rule bodies built (MAX_CONJUNCTIONS)
        self.unique_rules: list[str] = []  # arrays whose distinct items the matcher checks (uniqueItems)

    def over_limit(self, path: str) -> None:
        """``SchemaError`` for a schema past :data:`MAX_CONJUNCTIONS` or :data:`MAX_RULES` (named, with the path
        being converted when it was reached): never seconds of silent work."""
        what = (f"more than {MAX_CONJUNCTIONS} conjunctions (MAX_CONJUNCTIONS: combinations of the anyOf/oneOf/if "
                f"alternatives around each subschema)" if self.conjunctions > MAX_CONJUNCTIONS else
                f"more than {MAX_RULES} grammar rules (MAX_RULES)")
        raise SchemaError(f"JSON schema error at {path}: enforce='all' would need {what} for this schema; "
                          "enforce='llama.cpp' converts it (with its report of what is not enforced)", path=path)

    def unenforced(self, path: str, keyword: str, reason: str) -> None:
        self.report.setdefault((path, keyword), UnenforcedKeyword(path, keyword, reason))

    def annotation(self, path: str, keyword: str, reason: str) -> None:
        """A keyword that is an annotation in this dialect (validators do not check it either)."""
        self.annotations.setdefault((path, keyword), UnenforcedKeyword(path, keyword, reason))

    def made(self, key: tuple, build: Any) -> Any:
        """A schema built from parts of the document, once per key (memo keys hold ids: it must stay alive)."""
        if key not in self._made:
            self._made[key] = build()
        return self._made[key]

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
        seen = self._emitted.get(id(d))
        if seen is not None and seen[0] is d:
            return seen[1]  # this very automaton (a cached key language...): no signature to compute
        sig = signature(d)  # before minimising: equal inputs, equal rules
        if sig not in self.dfa_rules:
            self.dfa_rules[sig] = emit(d, name, self.reserve, self.rules.__setitem__)
        self._emitted[id(d)] = (d, self.dfa_rules[sig])  # d kept alive with its id
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

    def gen(self, subs: list[Sub], name: str, types: frozenset[str] | None = None) -> str | None:
        """The rule for the values satisfying every schema in ``subs`` (and of ``types``), or None if there is none."""
        key = (tuple(id(s) for s, _p in subs), types)
        if key in self.memo:
            return self.memo[key] or None
        if len(name) > MAX_NAME:
            # names grow with the nesting (root-a-b-c...): past MAX_NAME, the head and the tail (names are only
            # labels; a long one made each reference to a rule cost its whole path, megabytes of text)
            name = f"{name[:MAX_NAME // 2 - 1]}--{name[-(MAX_NAME // 2 - 1):]}"
        rule = self.reserve(name)
        self.memo[key] = rule
        self.conjunctions += 1
        if self.conjunctions > MAX_CONJUNCTIONS or len(self.rules) > MAX_RULES:
            self.over_limit(subs[0][1])
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


def convert_enforced(value: Any, resources: Resources | None = None) -> tuple[str, tuple[UnenforcedKeyword, ...]]:
    """GBNF text enforcing ``value`` (a normalised JSON schema) as fully as a grammar can, and what it does not.
    ``resources``: the documents of remote ``$ref``s by URI (``json_schema.resources``; never fetched)."""
    gbnf, report, _annotations, _unique = convert_enforced_annotated(value, resources)
    return gbnf, report


def convert_enforced_annotated(value: Any, resources: Resources | None = None) -> tuple[
        str, tuple[UnenforcedKeyword, ...], tuple[UnenforcedKeyword, ...], tuple[str, ...]]:
    """``convert_enforced`` plus the keywords that are annotations in the schema's dialect (``format: color``) and
    the rules of the arrays whose distinct items the matcher checks (``SchemaConversion.unique_rules``)."""
    e = _Enforcer(value, resources)
    try:
        root = e.gen([(e.root, "#")], "root")
    except RecursionError:
        raise SchemaError("JSON schema error at #: nested too deeply for enforce='all'", path="#") from None
    if root is None:
        raise SchemaError("JSON schema error at #: no JSON value satisfies this schema", path="#")
    if root != "root":
        e.rules["root"] = root
    return e.text(), tuple(e.report.values()), tuple(e.annotations.values()), tuple(e.unique_rules)
