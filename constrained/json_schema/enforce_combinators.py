"""``enforce="all"``, anyOf/oneOf alternatives (oneOf where disjoint), not, and const/enum values kept when they validate: the ``CombinatorMixin`` part of ``enforce._Enforcer``."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

from .enforce_base import (
    ANNOTATIONS,
    MAX_BRANCHES,
    TYPES,
    Sub,
    _json_equal,
    _literal,
    _Merged,
    _type_of,
)
from .numbers import number_dfas
from .regex import (
    Unsupported,
)
from .resources import registry

#: enums with more values than this spell each number one way only (the alternative spellings' automata made a
#: 5,000-value enum take minutes)
MAX_SPELLED_VALUES = 64
#: an overlapping oneOf branch made exclusive by "one of my keys the other branch forbids is present" lists at
#: most this many keys (each is an alternative rule; fewer keys = a smaller subset of the branch: sound)
MAX_KEY_ALTERNATIVES = 8
_VALUE_FREE = frozenset(("const", "enum", "allOf", "$ref"))


def _spellings(x: Any) -> list[Any]:
    """The values a listed value may be read back as: an integral number both as an int (``7``) and as a float
    (``7.0``, ``7e0``), which draft 4's integer type tells apart."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf") \
            and float(x).is_integer():
        out: list[Any] = [int(x)]
        try:
            out.append(float(x))
        except OverflowError:
            pass
        return out
    return [x]


class CombinatorMixin:
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
        groups = self.not_groups(sch)
        if groups is not None:
            # not of a structural condition (required keys, properties with types/values), or of an anyOf of them:
            # for each condition, one of its negations (a missing key, a property failing its schema)
            for k, negs in enumerate(groups):
                alts = self.made(("not", id(sch), k), lambda negs=negs: [(n, path) for n in negs])
                m.anyofs.append((alts, "not", path.rsplit("/", 1)[0]))
            return allowed
        self.unenforced(path.rsplit("/", 1)[0], "not", "not is enforced only for types, values and structural "
                                                       "conditions (required keys, properties with types/values)")
        return allowed

    def not_groups(self, sch: Any) -> list[list] | None:
        """``not sch`` as a conjunction of alternatives lists, for a structural ``sch`` (or an anyOf of them)."""
        if not isinstance(sch, dict):
            return None
        keys = set(sch) - ANNOTATIONS
        if keys == {"anyOf"} and isinstance(sch["anyOf"], list) and sch["anyOf"]:
            parts = [self.structural_negation(c) if isinstance(c, dict) else None for c in sch["anyOf"]]
            return None if any(p is None for p in parts) else parts
        negs = self.structural_negation(sch)
        return None if negs is None else [negs]

    def gen_alternatives(self, m: _Merged, subs: list[Sub], name: str, types: frozenset[str]) -> str | None:
        groups = m.anyofs
        n = 1
        for alts, _kw, _p in groups:
            n *= len(alts)
        if n > MAX_BRANCHES:
            # keep the groups that fit, in order; every group left out is reported (each one, not only the last)
            kept, n = [], 1
            for g in groups:
                if n * len(g[0]) <= MAX_BRANCHES or not kept:
                    kept.append(g)
                    n *= len(g[0])
                else:
                    self.unenforced(g[2], g[1], f"more than {MAX_BRANCHES} combinations of alternatives")
            groups = kept
        groups = list(groups)
        for gi, (alts, kw, p) in enumerate(groups):
            if kw == "oneOf" and len(alts) > 1 and not self.disjoint(alts, types):
                excl = self.exclusive_branches(alts, types)
                if excl is not None:
                    groups[gi] = (excl, kw, p)  # each branch with the negations of the others
                    continue
                self.unenforced(p, "oneOf", "the alternatives may overlap: 'exactly one' is not enforced")
        base = [(self.strip_alternatives(s), p) for s, p in self.flatten(subs)]
        out = []
        # disjoint alternatives stay disjoint whatever else a branch leaves unenforced: their types, listed values
        # or discriminator values are always enforced exactly
        for k, combo in enumerate(itertools.product(*[alts for alts, _kw, _p in groups])):
            r = self.gen(base + list(combo), f"{name}-{k}", types)
            if r is not None:
                out.append(r)
        return " | ".join(out) if out else None

    def exclusive_branches(self, alts: list[Sub], types: frozenset[str] = frozenset(TYPES)) -> list[Sub] | None:
        """oneOf branches made disjoint: branch i holds, besides its own schema, the negation of every branch j it
        may overlap with: ``not_groups`` for a structural branch j; otherwise, for an object branch i (or an untyped
        one, then limited to objects: a subset, sound) and a branch j requiring keys that i does not, "one of those keys
        is missing" (stronger than not-j: a subset again). None when some pair has neither."""
        ms = [self.merge([a]) for a in alts]
        plans: list[list[Any] | None] = []
        for i in range(len(alts)):
            extra: list[Any] = []
            for j in range(len(alts)):
                if j == i or self.disjoint([alts[i], alts[j]], types):
                    continue
                if ms[i].values is not None:
                    # listed values: those branch j refuses (jsonschema decides, as for const/enum siblings)
                    kept = self.refused_by(ms[i].values, alts[j])
                    if kept is None:
                        return None
                    extra.append({"enum": kept})
                    continue
                if ms[j].values is not None and all(not isinstance(v, (list, dict)) for v in ms[j].values):
                    extra.append({"not": {"enum": ms[j].values}})  # not one of j's values: a subset of "not j"
                    continue
                groups = self.not_groups(alts[j][0])
                if groups is not None:
                    if any(not g for g in groups):
                        extra = None  # branch j holds for every value: branch i is never the only one
                        break
                    extra += [{"anyOf": g} for g in groups]
                elif (ms[i].types is None or ms[i].types <= {"object"}) and (alternatives := [
                        # a key branch j requires is missing (only keys branch i does not require itself, else
                        # the negation would empty branch i)
                        *({"properties": {k: False}} for k in ms[j].required if k not in ms[i].required),
                        # or a key of branch i that branch j forbids is present (additionalProperties: false
                        # without it, or a false property); the first MAX_KEY_ALTERNATIVES only (each one is a
                        # rule of its own: fewer of them is a smaller subset of "not j", still sound)
                        *({"required": [k]} for k in [k for k in self.declared_keys(ms[i])
                                                       if self.forbids(ms[j], k)][:MAX_KEY_ALTERNATIVES])]):
                    extra += [{"type": "object"}, {"anyOf": alternatives}]
                else:
                    return None
            plans.append(extra)

        def build() -> list[Sub]:
            return [({"allOf": [a, *extra]}, p) for (a, p), extra in zip(alts, plans, strict=True)
                    if extra is not None]

        made = self.made(("oneOf-exclusive", types, *(id(a) for a, _p in alts)), build)
        return made if made else None

    def strip_alternatives(self, s: Any) -> Any:
        """``s`` without the keywords that became alternative groups (each branch holds its part)."""
        if isinstance(s, dict) and any(k in s for k in ("anyOf", "oneOf", "if", "allOf", "$ref", "dependentSchemas",
                                                        "not")):
            key = id(s)
            cache = self.__dict__.setdefault("_stripped", {})
            if key not in cache:
                drop = {"anyOf", "oneOf", "if", "then", "else", "allOf", "$ref", "dependentSchemas"}
                if "not" in s and self.not_groups(s["not"]) is not None:
                    drop.add("not")  # a structural not: its negations are alternative groups
                cache[key] = (s, {k: v for k, v in s.items() if k not in drop})
            return cache[key][1]
        return s

    def disjoint(self, alts: list[Sub], allowed: frozenset[str] = frozenset(TYPES)) -> bool:
        """Whether no value of the ``allowed`` types can satisfy two of the alternatives: their types differ, their
        listed values differ, or (objects only) a property both require has different values in each."""
        ms = [self.merge([a]) for a in alts]

        def types(x: _Merged) -> set[str]:
            t = set(TYPES) if x.types is None else set(x.types)
            if x.values is not None:
                t = {_type_of(v) for v in x.values}
                if "integer" in t:
                    t.add("number")
            if "number" in t:
                t.add("integer")
            return t & allowed

        for i in range(len(ms)):
            for j in range(i + 1, len(ms)):
                a, b = ms[i], ms[j]
                common = types(a) & types(b)
                if not common:
                    continue
                if a.values is not None and b.values is not None and not any(
                        _json_equal(x, y) for x in a.values for y in b.values):
                    continue
                if common == {"object"} and self.discriminated(a, b):
                    continue  # required/properties say nothing about the values of other types
                return False
        return True

    def refused_by(self, values: list[Any], alt: Sub) -> list[Any] | None:
        """The ``values`` that the schema ``alt`` refuses (jsonschema, the declared dialect's types and formats);
        None when it cannot judge them."""
        v = self.validator()
        if not v:
            return None
        s, p = alt
        try:
            check = v.evolve(schema=s) if p.startswith("#") else \
                v.evolve(schema=s, _resolver=self._registry.resolver(base_uri=p.split("#", 1)[0]))
            return [x for x in values if not any(check.is_valid(y) for y in _spellings(x))]
        except Exception:  # noqa: BLE001 - an unresolvable reference, a pattern Python cannot read
            return None

    @staticmethod
    def declared_keys(x: _Merged) -> list[str]:
        """The keys ``x`` may hold by name: its required keys, then the ``properties`` not ``false``, in order."""
        out: list[str] = [k for k in x.required if isinstance(k, str)]
        for mem in x.members:
            for k, sub in mem["props"].items():
                if sub[0] is not False and k not in out:
                    out.append(k)
        return out

    @staticmethod
    def forbids(x: _Merged, key: str) -> bool:
        """Whether no object of ``x`` has ``key``: a member whose properties give it ``false``, or that does not
        declare it, has no patternProperties and has ``additionalProperties: false``."""
        for mem in x.members:
            if key in mem["props"]:
                if mem["props"][key][0] is False:
                    return True
                continue
            if not mem["patterns"] and mem["additional"] is not None and mem["additional"][0] is False:
                return True
        return False

    def discriminated(self, a: _Merged, b: _Merged) -> bool:
        # a key one requires and the other forbids
        if any(self.forbids(b, k) for k in a.required) or any(self.forbids(a, k) for k in b.required):
            return True
        for k in set(a.required) & set(b.required):
            va = [self.merge([mem["props"][k]]).values for mem in a.members if k in mem["props"]]
            vb = [self.merge([mem["props"][k]]).values for mem in b.members if k in mem["props"]]
            va = [v for v in va if v is not None]
            vb = [v for v in vb if v is not None]
            if va and vb and not any(_json_equal(x, y) for x in va[0] for y in vb[0]):
                return True
        return False

    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema

            try:
                # the document as normalised (2020-12 spelling) judged with the declared dialect's types and formats
                cls = jsonschema.validators.validator_for(self.original, default=jsonschema.Draft202012Validator)
                base = jsonschema.Draft202012Validator
                if self.strict_integer:
                    base = jsonschema.validators.extend(base, type_checker=jsonschema.Draft4Validator.TYPE_CHECKER)
                # remote $refs from the resources given, normalised as read here (never the network)
                self._registry = registry(lambda uri: self.remote[uri] if self.load_ok(uri) else None)
                self._validator = base(self.root, format_checker=cls.FORMAT_CHECKER, registry=self._registry)
            except Exception:  # noqa: BLE001 - not a schema jsonschema can use
                self._validator = False
        return self._validator

    def load_ok(self, uri: str) -> bool:
        """Whether the remote document ``uri`` can be read (and is now in ``self.remote``)."""
        ids = self.id_index()
        try:
            if ids is not None:
                self.load_remote(uri, uri, ids)
        except Unsupported:
            return False
        return uri in self.remote

    def value_check(self, v: Any, s: Any, p: str) -> Any:
        """A validator for one schema of a flattened conjunction without its const/enum/allOf/$ref; one inside a
        remote document (its path is ``<uri>#/...``) resolves its own references in that document."""
        schema = {k: x for k, x in s.items() if k not in _VALUE_FREE} if isinstance(s, dict) else s
        if p.startswith("#"):
            return v.evolve(schema=schema)
        # jsonschema's own descent into a reference hands the target's resolver the same way
        return v.evolve(schema=schema, _resolver=self._registry.resolver(base_uri=p.split("#", 1)[0]))

    def kept_values(self, m: _Merged, allowed: set[str], path: str) -> list[Any]:
        """The listed values of ``m`` that are of the ``allowed`` types and satisfy the whole conjunction."""
        v = self.validator()
        kept = []
        checks = None
        for val in m.values or []:
            t = _type_of(val)
            if t not in allowed and not (t == "integer" and "number" in allowed and not m.non_integer):
                continue
            if (isinstance(val, bool) and val in m.excluded_bools) or (
                    t in ("integer", "number") and any(_json_equal(val, x) for x in m.excluded)):
                continue
            if v:
                try:
                    if checks is None:
                        # without const/enum: the values are already their intersection (and checking each value
                        # against its own enum costs n^2)
                        # each schema of the flattened conjunction without its allOf/$ref (their targets are in
                        # the list): a $ref to an enum would check every value against every value again
                        checks = [self.value_check(v, s, p) for s, p in self.flatten(m.subs)]
                    ok = all(c.is_valid(val) for c in checks)
                except Exception:  # noqa: BLE001 - an unresolvable sibling
                    ok = True
                    self.unenforced(path, "enum", "the values could not be checked against their siblings")
                if not ok:
                    continue
                if isinstance(val, str) and not all(self.string_ok(val, pat) for pat in m.patterns + m.formats):
                    continue
            kept.append(val)
        return kept

    def gen_values(self, m: _Merged, allowed: set[str], path: str) -> str | None:
        lits = []
        # every spelling of a number (1, 1.0, 1e0) is an automaton per value: past 32 values, the canonical one only
        # (fewer texts, the same values; keeps {"enum": list(range(5000))} in milliseconds)
        canonical = len(m.values or []) > 32
        for val in self.kept_values(m, allowed, path):
            t = _type_of(val)
            strict = self.strict_integer and t == "integer" and isinstance(val, int) and (
                m.types is not None and "number" not in m.types)
            lits.append(_literal(val) if strict or (canonical and isinstance(val, (int, float))) else
                        self.value_rule(val, plain=len(m.values or ()) > MAX_SPELLED_VALUES))
        if not lits:
            return None
        return "(" + " | ".join(f"( {x} )" for x in dict.fromkeys(lits)) + ")"

    def value_rule(self, val: Any, plain: bool = False) -> str:
        """The texts of a JSON value: any spelling of its numbers (1 = 1.0), the grammar's spaces, its key order.
        ``plain`` (an enum above :data:`MAX_SPELLED_VALUES` values): each number in its own spelling only, which
        keeps big enums linear."""
        if isinstance(val, bool) or val is None or isinstance(val, str):
            return _literal(val)
        if isinstance(val, (int, float)):
            if plain or len(repr(val)) > 24:
                return _literal(val)  # its own spelling only (the other spellings' automata grow with the digits)
            f = Fraction(val)
            try:
                dfas = number_dfas(False, f, False, f, False, None)
            except Unsupported:
                return _literal(val)
            return "( " + (" | ".join(self.emit(d, "const-num") for d in dfas if not d.is_empty())
                           or _literal(val)) + " )"
        if isinstance(val, list):
            inner = ' "," space '.join(self.value_rule(v, plain) for v in val)
            return f'"[" space {inner} space "]"' if val else '"[" space "]"'
        inner = ' "," space '.join(f'{_literal(k)} space ":" space ( {self.value_rule(v, plain)} )'
                                   for k, v in val.items())
        return f'"{{" space {inner} space "}}"' if val else '"{" space "}"'
