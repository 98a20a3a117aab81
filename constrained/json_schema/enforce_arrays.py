"""``enforce="all"``, arrays: prefixItems/items, item counts, contains with its bounds, uniqueItems over small domains: the ``ArrayMixin`` part of ``enforce._Enforcer``."""

from __future__ import annotations

import itertools

from .enforce_base import (
    TYPES,
    Sub,
    _json_equal,
    _literal,
    _Merged,
    _negatable,
)
from .regex import DFA

MAX_ENDLESS_STATES = 2000
"""Largest item automaton checked for endless completions (larger ones: uniqueItems stays reported)."""
MAX_ORDERED_STATES = 4000
"""Most rules for unique items over a listed domain in the listing's order (values times count positions)."""


def _endless_dfa(d: DFA) -> bool:
    """Whether from every string that can still be completed there are endlessly many completions: every live
    state reached from the start reaches a cycle of live states."""
    n = len(d.edges)
    if n > MAX_ENDLESS_STATES:
        return False
    succ = [[t for _cs, t in d.edges[q]] for q in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for q in range(n):
        for t in succ[q]:
            pred[t].append(q)

    def closure(start: list[int], nxt: list[list[int]], within: set[int] | None = None) -> set[int]:
        seen, todo = set(start), list(start)
        while todo:
            for t in nxt[todo.pop()]:
                if t not in seen and (within is None or t in within):
                    seen.add(t)
                    todo.append(t)
        return seen

    live = closure([q for q in range(n) if d.accepting[q]], pred)
    if 0 not in live:
        return False
    reach = closure([0], succ, live)
    # states on a cycle of live states: q reaches itself in one step or more within the live states
    cyclic = {q for q in reach if q in closure([t for t in succ[q] if t in live], succ, live)}
    return reach <= closure(list(cyclic), pred, live)


class ArrayMixin:
    def endless_items(self, im: _Merged, path: str) -> bool:
        """Whether a repeated item refused by the matcher's check (at its closing quote or brace) can always be
        avoided by going on: strings whose language is endless from every prefix (no maxLength; patterns and
        formats by their automaton), or objects open to more keys (no additionalProperties false, no
        patternProperties, propertyNames, maxProperties, dependentRequired). So the check never strands a
        generation."""
        if im.empty or im.types is None or im.values is not None or im.anyofs or im.nots:
            return False
        if set(im.types) == {"string"}:
            if im.max_len is not None:
                return False
            return not (im.patterns or im.formats) or _endless_dfa(self.string_dfa(im, path, lengths=False))
        if set(im.types) == {"object"}:
            return not (im.names or im.dep_required or im.max_props is not None) and all(
                not mem["patterns"] and (mem["additional"] is None or mem["additional"][0] in (True, {}))
                for mem in im.members)
        return False
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
        im = None
        if not npre:
            im = self.merge(item_subs(0))
            if im.values is not None and not im.anyofs:
                dom = []
                for v in self.kept_values(im, set(TYPES), path):
                    if not any(_json_equal(v, w) for w in dom):
                        dom.append(v)
            elif im.types is not None and im.types <= {"boolean", "null"} and not im.nots and not im.anyofs:
                dom = ([True, False] if "boolean" in im.types else []) + ([None] if "null" in im.types else [])
        hi_all = len(dom) if dom is not None and max_items is None else None if dom is None else min(max_items,
                                                                                                     len(dom))
        if dom is None or (len(dom) > 5 and len(dom) * (hi_all + 1) > MAX_ORDERED_STATES):
            if im is not None and self.endless_items(im, path):
                return self.gen_checked_unique(m, name)
            self.unenforced(path, "uniqueItems", "enforced only for arrays whose items have a finite list of "
                                                 f"possible values (at most {MAX_ORDERED_STATES} positions)")
            m.unique = False
            return self.gen_array(m, name)
        if len(dom) > 5:
            return self.gen_ordered_unique(dom, name, m.min_items, hi_all)
        seqs = []
        hi = len(dom) if max_items is None else min(max_items, len(dom))
        for k in range(m.min_items, hi + 1):
            for perm in itertools.permutations(dom, k):
                seqs.append('"[" space ' + ' "," space '.join(_literal(v) for v in perm) + (" " if perm else "")
                            + 'space "]"')
        return " | ".join(f"( {s} )" for s in seqs) if seqs else None

    def gen_checked_unique(self, m: _Merged, name: str) -> str | None:
        """A unique array whose distinct items the matcher checks (``constrained.grammar.unique_items``): the
        plain array in a rule of its own, ``"[" space ... space "]"``, named in ``unique_rules``."""
        m.unique = False
        body = self.gen_array(m, name)
        if body is None or not body.startswith('"[" space '):
            return body
        rule = self.reserve(f"{name}-unique")
        self.rules[rule] = body
        self.unique_rules.append(rule)
        return rule

    def gen_ordered_unique(self, dom: list, name: str, lo: int, hi: int) -> str | None:
        """Arrays of distinct values of ``dom`` (more than 5: too many orders to list) as the subsequences of the
        schema's own listing: items appear in the order the schema lists them, each at most once, lo..hi of them.
        A subset of the arrays ``uniqueItems`` allows (as declared properties come in one order): sound, and linear
        in len(dom) * (hi + 1) rules. ``E(i, c)``: the next item has index >= i, c items so far."""
        n = len(dom)
        if lo > hi:
            return None
        lits = [_literal(v) for v in dom]
        memo: dict[tuple[int, int], str | None] = {}

        def cap(c: int) -> int:
            return c if hi < n else min(c, lo)  # without an upper bound below n, counts past lo are all alike

        def elem(i: int, c: int) -> str | None:
            key = (i, cap(c))
            if key in memo:
                return memo[key]
            memo[key] = None
            if i >= n or c >= hi or n - i < lo - c:
                return None
            rule = self.reserve(f"{name}-u{i}-{key[1]}")
            memo[key] = rule
            alts = []
            after = []
            if c + 1 >= lo:
                after.append('""')
            nxt = elem(i + 1, c + 1)
            if nxt is not None:
                after.append(f'"," space {nxt}')
            if after:
                alts.append(f"{lits[i]} ( {' | '.join(after)} )" if len(after) > 1 else f"{lits[i]} {after[0]}")
            skip = elem(i + 1, c)
            if skip is not None:
                alts.append(skip)
            if not alts:
                del self.rules[rule]
                memo[key] = None
                return None
            self.rules[rule] = " | ".join(f"( {a} )" for a in alts)
            return rule

        first = elem(0, 0)
        if first is None:
            return '"[" space "]"' if lo == 0 else None
        body = f"( {first} )?" if lo == 0 else first
        return f'"[" space {body} space "]"'
