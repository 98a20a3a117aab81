"""The schema tree → GBNF text, as llama.cpp's ``common_chat_schema_converter`` (common/json-schema-to-grammar.cpp).

Rules live in a dict printed in bytewise name order (the C++ ``std::map``), one ``name ::= body`` line each; the
``space`` rule is always there. Each node kind has its own ``visit_*`` method, dispatched from ``VISITORS``.

Example:
    >>> from constrained.json_schema.nodes import build_document
    >>> c = Converter()
    >>> _ = c.visit(build_document({"type": "boolean"}).root, "")
    >>> print(c.format_grammar(), end="")
    root ::= ("true" | "false")
    space ::= | " " | "\\n"{1,2} [ \\t]{0,20}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SchemaError
from . import nodes as N
from ._pattern import InvalidPattern, UnsupportedPattern, pattern_to_rule
from ._rules import (
    INVALID_RULE_CHARS,
    PRIMITIVE_RULES,
    RESERVED_NAMES,
    SPACE_RULE,
    STRING_FORMAT_RULES,
    build_repetition,
    format_literal,
    int_range_body,
    not_strings,
)
from .json_text import INT64_MAX, INT64_MIN, INT_MAX, dump, u


@dataclass
class Diagnostic:
    """A converter warning or error, with the path of the node it came from (bytes in str)."""

    path: str
    message: str
    keyword: str = ""


@dataclass
class Converter:
    dotall: bool = False
    rules: dict[str, str] = field(default_factory=lambda: {"space": SPACE_RULE})
    refs_being_resolved: set[str] = field(default_factory=set)
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    ignored: list[Diagnostic] = field(default_factory=list)  # allOf members the conversion drops
    all_of_active: set[int] = field(default_factory=set)
    rule_paths: dict[str, str] = field(default_factory=dict)                  # rule name -> path of its node
    _by_body: dict[str, list[str]] = field(default_factory=dict, repr=False)   # body -> names holding it
    _next_free: dict[str, int] = field(default_factory=dict, repr=False)       # name -> where the scan resumes

    def __post_init__(self) -> None:
        for k, v in self.rules.items():
            self._by_body.setdefault(v, []).append(k)

    # ---- rule table --------------------------------------------------------------------------------------------

    def add_rule(self, name: str, rule: str) -> str:
        # as _add_rule: a name taken by another body gets the first free number appended. The C++ scans i = 0, 1...
        # each time (quadratic for thousands of colliding names); here a rule's name is found through its body and
        # the scan resumes where the last one stopped for that name (keys are only ever added, except by
        # drop_rules, which resets the resume points): the same names, in linear time.
        esc = INVALID_RULE_CHARS.sub("-", name)
        rules = self.rules
        if esc not in rules:
            rules[esc] = rule
            self._by_body.setdefault(rule, []).append(esc)
            return esc
        if rules[esc] == rule:
            return esc
        best = -1
        for other in self._by_body.get(rule, ()):
            tail = other[len(esc):]
            if other.startswith(esc) and tail.isdigit() and tail.isascii() and (tail == "0" or tail[0] != "0"):
                j = int(tail)
                if best < 0 or j < best:
                    best = j
        i = self._next_free.get(esc, 0)
        while f"{esc}{i}" in rules and (best < 0 or i < best):
            i += 1
        self._next_free[esc] = i
        if 0 <= best <= i:
            return f"{esc}{best}"
        key = f"{esc}{i}"
        rules[key] = rule
        self._by_body.setdefault(rule, []).append(key)
        return key

    def drop_rules(self, keep: set[str]) -> None:
        """Remove every rule added since ``keep`` was taken (a failed pattern leaves no rules behind)."""
        for k in [k for k in self.rules if k not in keep]:
            body = self.rules.pop(k)
            self._by_body[body].remove(k)
        self._next_free.clear()

    def add_primitive(self, name: str, table_name: str | None = None) -> str:
        # as _add_primitive: the rule, then its missing dependencies
        body, deps = (PRIMITIVE_RULES.get(table_name or name) or STRING_FORMAT_RULES[table_name or name])
        n = self.add_rule(name, body)
        for dep in deps:
            if dep not in self.rules:
                self.add_primitive(dep)
        return n

    def visit_primitive(self, rule_name: str, type_name: str) -> str:
        # as _visit_primitive: only the root gets the primitive's body under its own name
        return self.add_primitive("root" if rule_name == "root" else type_name, type_name)

    def format_grammar(self) -> str:
        # as format_grammar (std::map order = bytewise; names are ASCII)
        return "".join(f"{name} ::= {self.rules[name]}\n" for name in sorted(self.rules))

    def check_errors(self) -> None:
        # as check_errors: every collected error at once
        if self.errors:
            raise SchemaError(u("JSON schema conversion failed:\n" + "\n".join(e.message for e in self.errors)),
                              path=u(self.errors[0].path))

    # ---- nodes -------------------------------------------------------------------------------------------------

    def visit(self, node: N.Node, name: str) -> str:
        # as visit
        rule_name = name + "-" if name in RESERVED_NAMES else (name or "root")
        out = VISITORS[node.kind](self, node, name, rule_name)
        self.rule_paths.setdefault(out, node.origin or node.path)
        return out

    def visit_ref(self, node: N.Node, name: str, rule_name: str) -> str:
        return self.add_rule(rule_name, self.resolve_ref(node))

    def resolve_ref(self, node: N.Node) -> str:
        # as _resolve_ref
        ref = node.ref
        frag = ref[ref.index("#") + 1:] if "#" in ref else ref
        ref_name = "ref" + INVALID_RULE_CHARS.sub("-", frag)
        if ref_name not in self.rules and ref not in self.refs_being_resolved:
            if node.target is None:
                self.errors.append(Diagnostic(node.path, f"Unresolved $ref {ref}"))
                return ""
            self.refs_being_resolved.add(ref)
            ref_name = self.visit(node.target, ref_name)
            self.refs_being_resolved.discard(ref)
        return ref_name

    def visit_any_of(self, node: N.Node, name: str, rule_name: str) -> str:
        # as _generate_union_rule
        alts = [self.visit(child, name + ("-" if name else "alternative-") + str(i))
                for i, child in enumerate(node.children)]
        return self.add_rule(rule_name, " | ".join(alts))

    def visit_all_of(self, node: N.Node, name: str, rule_name: str) -> str:
        # as _visit_all_of: object members merge (direct ones required), enum members intersect, the rest is dropped
        if id(node) in self.all_of_active:
            # llama.cpp recurses until its stack overflows: allOf members are followed without the $ref guard
            raise SchemaError(u(f"JSON schema error at {node.path}: allOf refers back to itself through $ref "
                                "(llama.cpp would recurse forever)"), path=u(node.path))
        self.all_of_active.add(id(node))
        try:
            return self._visit_all_of(node, name, rule_name)
        finally:
            self.all_of_active.discard(id(node))

    def _visit_all_of(self, node: N.Node, name: str, rule_name: str) -> str:
        required: set[str] = set()
        properties: list[tuple[str, N.Node]] = []
        enum_counts: dict[str, int] = {}
        seen: set[int] = set()

        def add_component(comp: N.Node, is_required: bool, where: str) -> None:
            if comp.kind == N.REF:
                if comp.target is not None:
                    if id(comp) in seen:
                        raise SchemaError(u(f"JSON schema error at {comp.path}: $ref cycle inside allOf"),
                                          path=u(comp.path))
                    seen.add(id(comp))
                    add_component(comp.target, is_required, where)
                    seen.discard(id(comp))
            elif comp.kind == N.OBJECT:
                for prop_name, prop, _req in comp.properties:
                    properties.append((prop_name, prop))
                    if is_required:
                        required.add(prop_name)
            elif comp.kind == N.ENUM:
                for v in comp.values:
                    lit = format_literal(dump(v))
                    enum_counts[lit] = enum_counts.get(lit, 0) + 1
            elif comp.kind != N.ANY:
                self.ignored.append(Diagnostic(where, f"an allOf member of kind {comp.kind} is ignored", "allOf"))

        for child in node.children:
            if child.kind == N.ANY_OF:
                self.ignored.append(Diagnostic(child.path, "inside allOf the alternatives' properties are merged as "
                                               "optional: that one alternative must match is not enforced",
                                               "oneOf" if "oneOf" in child.consumed else "anyOf"))
                for alt in child.children:
                    add_component(alt, False, alt.path)
            else:
                add_component(child, True, child.path)
        counts: dict[str, int] = {}
        for prop_name, _prop in properties:
            counts[prop_name] = counts.get(prop_name, 0) + 1
        repeated = [u(p) for p, c in counts.items() if c > 1]
        if repeated and not enum_counts:
            self.ignored.append(Diagnostic(node.path, f"the properties {repeated} are given by several members: "
                                           "llama.cpp writes the key once per member, each with that member's schema "
                                           "only (the key twice, or its value checked against one member)", "allOf"))
        t = node.schema.get("type") if isinstance(node.schema, dict) else None
        lost_type = Diagnostic(node.path, f"with allOf, llama.cpp's converter builds an object (or an enum "
                                          f"intersection): the type {u(str(t))} is not enforced", "type")
        if enum_counts:
            inter = [lit for lit in sorted(enum_counts) if enum_counts[lit] == len(node.children)]
            if inter:
                if "type" in node.consumed and not all(lit.startswith('"\\"') for lit in inter):
                    self.ignored.append(lost_type)  # only a string type comes here (typed allOf: object or string)
                return self.add_rule(rule_name, "(" + " | ".join(inter) + ")")
            self.ignored.append(Diagnostic(node.path, "the enum members have no value in common: no value satisfies "
                                           "the allOf, yet the grammar accepts an object", "allOf"))
        if "type" in node.consumed and t != "object":
            self.ignored.append(lost_type)
        return self.add_rule(rule_name, self.build_object_rule(properties, required, name, None, node.path))

    def visit_const(self, node: N.Node, name: str, rule_name: str) -> str:
        return self.add_rule(rule_name, format_literal(dump(node.values[0])))

    def visit_enum(self, node: N.Node, name: str, rule_name: str) -> str:
        return self.add_rule(rule_name, "(" + " | ".join(format_literal(dump(v)) for v in node.values) + ")")

    def visit_object(self, node: N.Node, name: str, rule_name: str) -> str:
        if not node.properties and node.additional is not None and node.additional.kind == N.ANY:
            return self.add_rule(rule_name, self.add_primitive("object"))
        required = {p for p, _s, req in node.properties if req}
        props = [(p, s) for p, s, _req in node.properties]
        return self.add_rule(rule_name, self.build_object_rule(props, required, name, node.additional, node.path))

    def build_object_rule(self, properties: list[tuple[str, N.Node]], required: set[str], name: str,
                          additional: N.Node | None, path: str = "") -> str:
        # as _build_object_rule
        if additional is None and any(p == "*" and p not in required for p, _s in properties):
            # the name "*" is the C++'s marker for the extra keys: its kv is written "( ... )*", so the key repeats
            self.ignored.append(Diagnostic(path, "an optional property named '*' is taken for llama.cpp's extra-key "
                                           "marker: its key may repeat", "properties"))
        prefix = name + "-" if name else ""
        required_props: list[str] = []
        optional_props: list[str] = []
        kv_names: dict[str, str] = {}
        prop_names: list[str] = []
        for prop_name, prop in properties:
            prop_rule = self.visit(prop, prefix + prop_name)
            kv_names[prop_name] = self.add_rule(prefix + prop_name + "-kv",
                                                format_literal(dump(prop_name)) + ' space ":" space ' + prop_rule)
            (required_props if prop_name in required else optional_props).append(prop_name)
            prop_names.append(prop_name)
        if additional is not None:
            sub_name = prefix + "additional"
            if additional.kind != N.ANY:
                value_rule = self.visit(additional, sub_name + "-value")
            else:
                value_rule = self.add_primitive("value")
            if prop_names:
                key_rule = self.add_rule(sub_name + "-k", not_strings(prop_names, self.add_primitive("char")))
            else:
                key_rule = self.add_primitive("string")
            kv_names["*"] = self.add_rule(sub_name + "-kv", key_rule + ' ":" space ' + value_rule)
            optional_props.append("*")
        if not required_props and not optional_props:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv_names[p] for p in required_props)
        if optional_props:
            rule += " ("
            if required_props:
                rule += ' "," space ( '
            # get_recursive_refs(optional_props[start:], first_is_optional=True) for every start, built from the
            # last one back (the C++ recursion adds the same rules in the same order, innermost first)
            n_opt = len(optional_props)
            memo: list[str] = [""] * (n_opt + 1)
            for start in range(n_opt - 1, 0, -1):
                k = optional_props[start]
                res = f'( "," space {kv_names[k]} )' + ("*" if k == "*" else "?")
                if start + 1 < n_opt:
                    res += " " + self.add_rule(prefix + k + "-rest", memo[start + 1])
                memo[start] = res
            alts = []
            for i, k in enumerate(optional_props):
                kv = kv_names[k]
                res = kv + (f' ( "," space {kv} )*' if k == "*" else "")
                if i + 1 < n_opt:
                    res += " " + self.add_rule(prefix + k + "-rest", memo[i + 1])
                alts.append(res)
            rule += " | ".join(alts)
            if required_props:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def visit_tuple(self, node: N.Node, name: str, rule_name: str) -> str:
        prefix = name + "-" if name else ""
        items = [self.visit(item, f"{prefix}tuple-{i}") for i, item in enumerate(node.children)]
        return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(items) + ' space "]"')

    def visit_array(self, node: N.Node, name: str, rule_name: str) -> str:
        assert node.items is not None
        if node.items.kind == N.ANY and node.min_items == 0 and node.max_items < 0:
            return self.visit_primitive(rule_name, "array")
        item = self.visit(node.items, (name + "-" if name else "") + "item")
        max_items = INT_MAX if node.max_items < 0 else node.max_items
        return self.add_rule(rule_name, '"[" space ' + build_repetition(item, node.min_items, max_items, '"," space')
                             + ' space "]"')

    def visit_string(self, node: N.Node, name: str, rule_name: str) -> str:
        if node.pattern:
            return self.visit_pattern(node, rule_name)
        if node.format == N.FORMAT_UUID:
            return self.visit_primitive(rule_name, "uuid")
        if node.format != N.FORMAT_NONE:
            return self.add_rule(rule_name, self.add_primitive(node.format + "-string"))
        if node.min_length > 0 or node.max_length >= 0:
            char = self.add_primitive("char")
            max_len = INT_MAX if node.max_length < 0 else node.max_length
            return self.add_rule(rule_name, '"\\"" ' + build_repetition(char, node.min_length, max_len) + ' "\\""')
        return self.visit_primitive(rule_name, "string")

    def visit_pattern(self, node: N.Node, rule_name: str) -> str:
        # as _visit_pattern: a failed conversion leaves no rules behind
        snapshot = set(self.rules)
        quirks: list[str] = []
        try:
            result = pattern_to_rule(node.pattern, rule_name, self.add_rule, self.dotall, quirks)
            self.ignored.extend(Diagnostic(node.origin or node.path, q, "pattern") for q in quirks)
            return result
        except UnsupportedPattern as e:
            self.drop_rules(snapshot)
            self.warnings.append(Diagnostic(node.origin or node.path, f"pattern {node.pattern} is not supported ({e}), "
                                            "accepting any string", "pattern"))
            return self.add_rule(rule_name, self.add_primitive("string"))
        except InvalidPattern as e:
            self.drop_rules(snapshot)
            self.errors.append(Diagnostic(node.path, f"Invalid pattern {node.pattern}: {e}"))
            return ""

    def visit_integer(self, node: N.Node, name: str, rule_name: str) -> str:
        if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
            return self.visit_primitive(rule_name, "integer")
        return self.add_rule(rule_name, int_range_body(node.minimum, node.maximum, node.path))

    def visit_simple(self, node: N.Node, name: str, rule_name: str) -> str:
        return self.visit_primitive(rule_name, node.kind)

    def visit_any(self, node: N.Node, name: str, rule_name: str) -> str:
        return self.add_rule(rule_name, self.add_primitive("value"))


VISITORS = {
    N.REF: Converter.visit_ref, N.ANY_OF: Converter.visit_any_of, N.ALL_OF: Converter.visit_all_of,
    N.CONST: Converter.visit_const, N.ENUM: Converter.visit_enum, N.OBJECT: Converter.visit_object,
    N.TUPLE: Converter.visit_tuple, N.ARRAY: Converter.visit_array, N.STRING: Converter.visit_string,
    N.INTEGER: Converter.visit_integer, N.NUMBER: Converter.visit_simple, N.BOOLEAN: Converter.visit_simple,
    N.NULL: Converter.visit_simple, N.ANY: Converter.visit_any,
}
"""One visitor per node kind, as the ``switch`` in ``visit``."""
