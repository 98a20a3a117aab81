"""``enforce="all"``, objects: properties in llama.cpp's order, required, additional and pattern properties, propertyNames, property counts, dependentRequired: the ``ObjectMixin`` part of ``enforce._Enforcer``."""

from __future__ import annotations

import itertools
from typing import Any

from .enforce_base import (
    Sub,
    _literal,
    _Merged,
)
from .enforce_scalars import safe_strings, user_pattern, uses_class_escapes
from .regex import (
    DFA,
    Unsupported,
    complement,
    intersect,
    literal_dfa,
)

MAX_PATTERNS = 8
"""Most patternProperties patterns of one object enforced."""
MAX_KEY_REGIONS = 64
"""Most non-empty key languages (pattern regions) of one object."""


class ObjectMixin:
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
        if len(pattern_members) > 1 or len(patterns) > MAX_PATTERNS:
            self.unenforced(path, "patternProperties", "more than one member with patternProperties, or more than "
                                                       f"{MAX_PATTERNS} patterns, is not enforced")
            patterns = []
        pat_dfas = []
        for pt, sch, pp in patterns:
            try:
                pat_dfas.append((user_pattern(pt), sch, pp))
            except Unsupported as e:
                # the key partition is lost: every key keyword of this object (additionalProperties, counts...)
                self.unenforced(path, "patternProperties", f"{pt}: {e}; the object's other key keywords with it")
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
        if not pat_dfas and not self.gen(value_subs(None, ()) or [(True, path)], f"{name}-extra"):
            base = None  # no undeclared key can have a value (additionalProperties false): no key language
        else:
            base = self.other_keys(declared)
        if base is not None and keys_ok is not None:
            base = intersect(base, keys_ok)
        if base is None:
            pass
        elif pat_dfas:
            # undeclared keys only where both regex dialects agree on every pattern
            base = intersect(base, safe_strings(any(uses_class_escapes(pt) for pt, _s, _p in patterns)))
        try:
            regions = self.key_regions(base, [pd for pd, _s, _p in pat_dfas]) if base is not None else []
        except Unsupported as e:
            self.unenforced(path, "patternProperties", str(e))
            return self.gen_object_fallback(m, name)
        for region, d in regions:
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

    @staticmethod
    def key_regions(base: DFA, pats: list[DFA]) -> list[tuple[tuple[int, ...], DFA]]:
        """The non-empty key languages ``base`` ∩ (each pattern in or out), with the patterns each one is in: a
        depth-first split, one pattern at a time, pruned where a part is already empty (disjoint patterns: k + 1
        regions, not 2^k)."""
        out: list[tuple[tuple[int, ...], DFA]] = []

        def split(j: int, d: DFA, region: tuple[int, ...]) -> None:
            if d.is_empty():
                return
            if j == len(pats):
                out.append((region, d))
                if len(out) > MAX_KEY_REGIONS:
                    raise Unsupported(f"the patterns split the keys into more than {MAX_KEY_REGIONS} regions")
                return
            split(j + 1, intersect(d, pats[j]), (*region, j))
            split(j + 1, intersect(d, complement(pats[j])), region)

        split(0, base, ())
        return sorted(out, key=lambda r: (len(r[0]), r[0]))

    def other_keys(self, declared: list[str]) -> DFA:
        """The keys other than ``declared`` (one automaton per set of names: objects of one shape repeat)."""
        cache = self.__dict__.setdefault("_other_keys", {})
        key = frozenset(declared)
        if key not in cache:
            cache[key] = complement(literal_dfa(sorted(key)))
        return cache[key]

    def gen_object_fallback(self, m: _Merged, name: str) -> str:
        return self.primitive("object")

    def object_body(self, name: str, entries: list, extras: list[str], modes: dict[str, str], cmin: int,
                    cmax: int | None) -> str | None:
        """``{ required..., optional..., extra... }`` with the key count in [cmin, cmax]."""
        items = []  # (kv rule, mode: "must" / "may")
        for k, r, req in entries:
            mode = modes.get(k, "must" if req else "may")
            if req and mode == "never":
                return None  # required, but this dependentRequired variant has it absent: no such object
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
