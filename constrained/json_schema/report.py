"""What the grammar does not enforce: every constraining keyword llama.cpp's converter drops, with its path.

llama.cpp ignores many keywords silently (number bounds, ``not``, ``uniqueItems``...). We keep its grammar and say
out loud what it lets through. A keyword is reported when it can matter for the values the node produces and the
conversion does not enforce it (see ``nodes.KEYWORDS`` for the whole table).

Example:
    >>> from constrained.json_schema import json_schema_report
    >>> [(k.path, k.keyword) for k in json_schema_report({"type": "number", "minimum": 0})]
    [('#', 'minimum')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import nodes as N
from .converter import Converter
from .json_text import INT64_MAX, INT64_MIN, u, value_type, wrap_int
from .json_text import b as utf8_bytes
from .resources import registry


@dataclass(frozen=True)
class UnenforcedKeyword:
    """A keyword of the schema that the grammar does not enforce.

    ``path`` is the JSON pointer (``#/properties/a``) of the schema object holding ``keyword``.
    """

    path: str
    keyword: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.keyword}: {self.reason}"


def from_bytes_tree(value: Any) -> Any:
    """The inverse of ``nodes.to_bytes_tree``."""
    if isinstance(value, str):
        return u(value)
    if isinstance(value, list):
        return [from_bytes_tree(v) for v in value]
    if isinstance(value, dict):
        return {u(k): from_bytes_tree(v) for k, v in value.items()}
    return value


_CLASS_UNSAFE = '"\\]^-'


class _Reporter:
    def __init__(self, root_schema: Any) -> None:
        self.root = root_schema  # Unicode JSON, for jsonschema
        self.out: dict[tuple[str, str], UnenforcedKeyword] = {}
        self._validator: Any = None

    def add(self, path: str, keyword: str, reason: str) -> None:
        key = (u(path), keyword)
        if key not in self.out:
            self.out[key] = UnenforcedKeyword(key[0], keyword, reason)

    def leftovers(self, node: N.Node, path: str, why: str, everything: bool = False,
                  skip: tuple[str, ...] = ()) -> None:
        """Report each constraining keyword of the node's schema that it does not read."""
        for raw in node.schema:
            kw = u(raw)
            if kw in node.consumed or kw not in N.KEYWORDS or kw in skip:
                continue
            if everything or N.applies(node.kind, kw):
                spec = N.KEYWORDS[kw]
                if why:
                    reason = why
                elif spec.support == "ignored":
                    reason = spec.note
                elif node.kind == N.NUMBER and spec.applies_to == "number":
                    reason = "llama.cpp enforces bounds on integers only, not on numbers"
                else:
                    reason = f"llama.cpp's converter ignores it for a schema of kind {node.kind}"
                self.add(path, kw, reason)

    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema

            try:
                cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
                self._validator = cls(self.root, registry=registry(None))  # a remote $ref: never fetched
            except Exception:  # not a usable schema for jsonschema: skip the const/enum sibling checks
                self._validator = False
        return self._validator

    def check_values(self, node: N.Node, path: str) -> None:
        """const / enum: the siblings are ignored, which matters only if some listed value violates them."""
        siblings = {u(k): from_bytes_tree(v) for k, v in node.schema.items()
                    if u(k) in N.KEYWORDS and u(k) != node.kind}
        if not siblings:
            return
        v = self.validator()
        if not v:
            return
        try:
            sub = v.evolve(schema=siblings)
            for value in node.values:
                for err in sub.iter_errors(from_bytes_tree(value)):
                    kw = str(err.relative_schema_path[0]) if err.relative_schema_path else err.validator
                    self.add(path, str(kw), f"ignored next to {node.kind}: the listed value "
                                            f"{from_bytes_tree(value)!r} violates it")
        except Exception:  # an unresolvable or malformed sibling: jsonschema cannot tell
            return

    def node(self, node: N.Node) -> None:
        if not isinstance(node.schema, dict) or not node.schema:
            return
        path = node.origin or node.path
        s = node.schema
        kind = node.kind
        if kind == N.REF:
            self.leftovers(node, path, "ignored next to $ref (llama.cpp follows the reference only)", True)
        elif kind == N.ANY_OF and ("oneOf" in node.consumed or "anyOf" in node.consumed):
            if "oneOf" in node.consumed and not pairwise_disjoint(node.children):
                self.add(path, "oneOf", N.KEYWORDS["oneOf"].note)
            self.leftovers(node, path, "ignored next to oneOf/anyOf", True,
                           skip=("type",) if type_implied(s.get("type"), node.children) else ())
        elif kind == N.ANY_OF:
            pass  # a type array: its one-type copies report for it
        elif kind in (N.CONST, N.ENUM):
            self.check_values(node, path)
        elif kind == N.ALL_OF:
            self.leftovers(node, path, "ignored next to allOf", True)
        else:
            self.leftovers(node, path, "")
            getattr(self, f"extra_{kind}", lambda n, p, s: None)(node, path, s)
            self.truncated_counts(node, path, s)

    def truncated_counts(self, node: N.Node, path: str, s: dict) -> None:
        """llama.cpp reads counts with get<int>(): a value past 2**31 wraps around."""
        for kw in ("minLength", "maxLength", "minItems", "maxItems"):
            value = s.get(kw)
            if isinstance(value, int) and not isinstance(value, bool) and wrap_int(value, 32) != value:
                self.add(path, kw, f"{value} is read as {wrap_int(value, 32)} (llama.cpp truncates it to 32 bits)")

    def extra_object(self, node: N.Node, path: str, s: dict) -> None:
        if node.additional is not None and node.properties:
            names = [u(p) for p, _s, _r in node.properties]
            odd = [n for n in names if any(c in _CLASS_UNSAFE or ord(c) < 0x20 for c in n)]
            self.add(path, "additionalProperties",
                     "the extra-key rule starts with a raw character class that also lets a backslash or a control "
                     "character through unescaped (output that is not JSON), and it does not exclude the named "
                     "properties when their keys are spelled with escapes"
                     + (f"; the names {odd} are copied raw into its character classes" if odd else ""))
            if "*" in names:
                self.add(path, "properties", "a property named '*' shares llama.cpp's internal name for the extra "
                                             "keys: its own rule is replaced by theirs")
        req = s.get("required")
        if not isinstance(req, list):
            return
        names = {p for p, _s, _r in node.properties}
        missing = [u(r) for r in req if isinstance(r, str) and r not in names]
        if missing:
            if node.additional is None:
                self.add(path, "required", f"{missing} are not among the properties of a closed object "
                                           "(no value satisfies the schema, the grammar produces objects without them)")
            else:
                self.add(path, "required", f"{missing} are not among the properties: extra keys stay optional")

    def extra_string(self, node: N.Node, path: str, s: dict) -> None:
        if node.pattern:
            self.pattern_escapes(node, path)
            for kw in ("format", "minLength", "maxLength"):
                if kw in s:
                    self.add(path, kw, "ignored: the pattern takes precedence")
        elif node.format != N.FORMAT_NONE:
            for kw in ("minLength", "maxLength"):
                if kw in s:
                    self.add(path, kw, f"ignored: the format {node.format} takes precedence")
            if node.format in (N.FORMAT_DATE, N.FORMAT_DATE_TIME):
                self.add(path, "format", "the day is not checked against the month and year (2023-02-31 passes)")
            elif node.format == N.FORMAT_UUID and s.get("format") != "uuid":
                self.add(path, "format", f"{u(s['format'])}: any UUID passes, the version digit is not checked")
        if "format" in s and node.format == N.FORMAT_NONE and isinstance(s["format"], str) and not node.pattern:
            self.add(path, "format", f"format {u(s['format'])} is not supported (date, time, date-time, uuid only)")
        if node.max_length >= 0 and node.min_length > node.max_length and not node.pattern:
            self.add(path, "minLength", "minLength > maxLength: no string satisfies both")
        elif node.min_length > 0 and not node.pattern and node.format == N.FORMAT_NONE:
            self.add(path, "minLength", "an escaped surrogate pair (\\ud83d\\ude00) is two characters for "
                                        "llama.cpp's grammar, one for validators: a string may fall short by one per pair")

    def pattern_escapes(self, node: N.Node, path: str) -> None:
        """A converted pattern is matched on the raw text between the quotes: a '"', a backslash or a control
        character it allows is written unescaped, so the output may not even be JSON."""
        from ._gbnf import Item, read_gbnf
        from ._pattern import InvalidPattern, UnsupportedPattern, pattern_to_rule

        rules: dict[str, str] = {}

        def add_rule(name: str, body: str) -> str:
            rules[name] = body
            return name

        try:
            top = pattern_to_rule(node.pattern, "p", add_rule)
            parsed = read_gbnf("".join(f"{k} ::= {v}\n" for k, v in rules.items()))
        except (UnsupportedPattern, InvalidPattern, ValueError, IndexError):
            return
        bad = {34, 92, *range(0x20)}

        def risky(it: Item) -> bool:
            if it.kind == "lit":
                return any(ord(c) in bad for c in it.value)  # type: ignore[union-attr]
            if it.kind == "cls":
                ranges, neg = it.value  # type: ignore[misc]
                inside = [any(lo <= c <= hi for lo, hi in ranges) for c in bad]
                return not all(inside) if neg else any(inside)
            if it.kind == "group":
                return any(risky(x) for seq in it.value for x in seq)  # type: ignore[union-attr]
            return False

        for name, alts in parsed.items():
            for seq in alts:
                items = seq[1:-1] if name == top else seq  # the rule's own opening and closing quotes
                if any(risky(x) for x in items):
                    self.add(path, "pattern", "the pattern allows '\"', '\\' or control characters, which llama.cpp "
                                              "writes unescaped inside the JSON string: the output may not be JSON")
                    return

    def extra_any(self, node: N.Node, path: str, s: dict) -> None:
        if "format" in s and isinstance(s["format"], str):
            self.add(path, "format", f"format {u(s['format'])} is not supported (date, time, date-time, uuid only)")

    def extra_array(self, node: N.Node, path: str, s: dict) -> None:
        if 0 <= node.max_items < node.min_items:
            self.add(path, "minItems", "minItems > maxItems: no array satisfies both, the grammar does not say so")

    def extra_integer(self, node: N.Node, path: str, s: dict) -> None:
        for inc, exc, up in (("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", False)):
            if inc in s and exc in s and isinstance(s[exc], (int, float)) and isinstance(s[inc], (int, float)):
                e, i = s[exc], s[inc]
                tighter = (math.floor(e) + 1 > math.ceil(i)) if up else (math.ceil(e) - 1 < math.floor(i))
                if tighter:
                    self.add(path, exc, f"ignored: {inc} is given too")
        for inc, exc, got, up in (("minimum", "exclusiveMinimum", node.minimum, True),
                                  ("maximum", "exclusiveMaximum", node.maximum, False)):
            key = inc if inc in s else exc if exc in s else None
            raw = s.get(key) if key else None
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                want = (math.ceil(raw) if up else math.floor(raw)) if key == inc else \
                    (math.floor(raw) + 1 if up else math.ceil(raw) - 1)
                if want != got:
                    shown = {INT64_MIN: "no bound", INT64_MAX: "no bound"}.get(got, str(got))
                    self.add(path, key, f"{raw} is read as {shown} (llama.cpp converts it to a 64-bit integer)")
        if node.minimum > node.maximum:
            self.add(path, "minimum", "minimum > maximum: no integer satisfies both, the grammar does not say so")
            return
        if (node.minimum, node.maximum) != (INT64_MIN, INT64_MAX):
            bad = integer_range_leaks(node.minimum, node.maximum)
            if bad is not None:
                low = bad.startswith("-") if bad.lstrip("-").startswith("0") else int(bad) < node.minimum
                order = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
                for k in (order if low else order[2:] + order[:2]):
                    if k in s:
                        self.add(path, k, f"llama.cpp's digit-by-digit range also accepts {bad}")
                        break

    def extra_tuple(self, node: N.Node, path: str, s: dict) -> None:
        n = len(node.children)
        for kw, violated in (("minItems", lambda m: n < m), ("maxItems", lambda m: n > m)):
            value = s.get(kw)
            key = (u(path), kw)
            if key in self.out:
                if isinstance(value, int) and violated(value):
                    self.out[key] = UnenforcedKeyword(key[0], kw, f"ignored for a tuple (it always has {n} items)")
                else:
                    del self.out[key]  # the tuple's fixed length satisfies it anyway


def _probes(bound: int) -> set[int]:
    digits = str(abs(bound))
    out = {bound - 1, bound, bound + 1}
    for p in range(1, len(digits) + 1):
        head = int(digits[:p])
        for v in (head - 1, head, head + 1):
            for shift in range(0, len(digits) - p + 2):
                out.update((v * 10**shift, -v * 10**shift))
    for k in range(0, 19):
        out.update((10**k - 1, 10**k, 10**k + 1, -(10**k - 1), -(10**k), -(10**k + 1)))
    return out


def integer_range_leaks(minimum: int, maximum: int) -> str | None:
    """Text that llama.cpp's range grammar accepts although it is an integer outside [minimum, maximum], or not a
    JSON number at all (a leading zero); probed around the bounds' digit prefixes and the powers of ten. None if no
    probe leaks."""
    import re

    from ._rules import int_range_body

    try:
        body = int_range_body(minimum, maximum, "#")
    except Exception:
        return None
    rx = []
    for tok in re.findall(r'"[^"]*"|\[[^\]]*\]|\{[^}]*\}|[()|]', body):
        rx.append(re.escape(tok[1:-1]) if tok.startswith('"') else tok)
    try:
        lines = re.compile(f"^(?:{''.join(rx)})$", re.MULTILINE)
    except re.error:
        return None
    probes = set()
    for b in (minimum, maximum):
        if b not in (INT64_MIN, INT64_MAX):
            probes |= _probes(b)
    ordered = sorted(probes, key=abs)
    mags = [str(abs(v)) for v in ordered]
    outside = [("-" + m if v < 0 else m) for v, m in zip(ordered, mags, strict=True) if not (minimum <= v <= maximum)
               and len(m) <= 16]
    zeros = [t for m in dict.fromkeys(mags) for t in ("0" + m, "-0" + m) if len(t) <= 17]
    # one scan of all probes, one per line, in the order above (the body's classes are digit ranges: no newline)
    for texts in (outside, zeros):
        m = lines.search("\n".join(texts))
        if m is not None:
            return m.group(0)
    return None


_ALL_TYPES = frozenset(("null", "boolean", "number", "string", "array", "object"))
_JSON_TYPES = frozenset(("null", "boolean", "integer", "fraction", "string", "array", "object"))
_TYPE_SETS = {"null": {"null"}, "boolean": {"boolean"}, "integer": {"integer"}, "number": {"integer", "fraction"},
              "string": {"string"}, "array": {"array"}, "object": {"object"}}


def _grammar_types(n: N.Node | None, depth: int = 0) -> frozenset[str]:
    """The JSON types of the values a node's grammar produces ("fraction": a number that is not an integer)."""
    n = _resolve(n)
    if n is None or depth > 32:
        return _JSON_TYPES
    simple = {N.NULL: ("null",), N.BOOLEAN: ("boolean",), N.NUMBER: ("integer", "fraction"),
              N.INTEGER: ("integer",), N.STRING: ("string",), N.ARRAY: ("array",), N.TUPLE: ("array",),
              N.OBJECT: ("object",)}
    if n.kind in simple:
        return frozenset(simple[n.kind])
    if n.kind in (N.CONST, N.ENUM):
        return frozenset(value_type(v, "fraction") for v in n.values)
    if n.kind == N.ANY_OF:
        return frozenset().union(*(_grammar_types(c, depth + 1) for c in n.children))
    return _JSON_TYPES


def type_implied(t: Any, children: list[N.Node]) -> bool:
    """Whether every alternative of a oneOf/anyOf produces only values of the sibling ``type`` (then it is enforced)."""
    names = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if not names or not all(isinstance(x, str) and x in _TYPE_SETS for x in names):
        return False
    allowed = set().union(*(_TYPE_SETS[x] for x in names))
    return all(_grammar_types(c) <= allowed for c in children)


def _resolve(n: N.Node | None) -> N.Node | None:
    seen = 0
    while n is not None and n.kind == N.REF and seen < 64:
        n, seen = n.target, seen + 1
    return None if n is not None and n.kind == N.REF else n


def _value_types(n: N.Node | None, depth: int = 0) -> frozenset[str]:
    """The JSON types a node's values can have (integer counted as number), as common_chat_schema::value_types."""
    n = _resolve(n)
    if n is None or depth > 32:
        return _ALL_TYPES
    simple = {N.NULL: "null", N.BOOLEAN: "boolean", N.NUMBER: "number", N.INTEGER: "number", N.STRING: "string",
              N.ARRAY: "array", N.TUPLE: "array", N.OBJECT: "object"}
    if n.kind in simple:
        if not (isinstance(n.schema, dict) and isinstance(n.schema.get("type"), str)):
            # a kind read from structural keywords (minLength, properties...): the schema itself admits any type
            return _ALL_TYPES
        return frozenset((simple[n.kind],))
    if n.kind in (N.CONST, N.ENUM):
        def t(v: Any) -> str:
            return ("null" if v is None else "boolean" if isinstance(v, bool) else "number"
                    if isinstance(v, (int, float)) else "string" if isinstance(v, str) else "array"
                    if isinstance(v, list) else "object")
        return frozenset(t(v) for v in n.values)
    if n.kind == N.ANY_OF:
        return frozenset().union(*(_value_types(c, depth + 1) for c in n.children))
    return _ALL_TYPES


def _literals(n: N.Node | None) -> frozenset[str] | None:
    n = _resolve(n)
    if n is not None and n.kind in (N.CONST, N.ENUM):
        from .json_text import dump

        return frozenset(dump(v) for v in n.values)
    return None


def _disjoint(a: N.Node, b: N.Node) -> bool:
    if not (_value_types(a) & _value_types(b)):
        return True
    la, lb = _literals(a), _literals(b)
    if la is not None and lb is not None:
        return not (la & lb)
    ra, rb = _resolve(a), _resolve(b)
    if ra is not None and rb is not None and ra.kind == rb.kind == N.OBJECT:
        props_b = {p: (s_, req) for p, s_, req in rb.properties}
        for p, s_, req in ra.properties:
            if req and p in props_b and props_b[p][1]:
                la, lb = _literals(s_), _literals(props_b[p][0])
                if la is not None and lb is not None and not (la & lb):
                    return True  # a discriminator: a required property with different constants
    return False


def pairwise_disjoint(children: list[N.Node]) -> bool:
    """Whether no value can match two alternatives (then oneOf = anyOf)."""
    return all(_disjoint(children[i], children[j]) for i in range(len(children)) for j in range(i + 1, len(children)))


def collect(doc: N.Document, conv: Converter, root_schema: Any) -> tuple[UnenforcedKeyword, ...]:
    """The unenforced keywords of a converted document, in schema build order."""
    r = _Reporter(root_schema)
    for node in doc.nodes:
        r.node(node)
    for d in conv.warnings:
        r.add(d.path, d.keyword or "pattern", u(d.message))
    for d in conv.ignored:
        r.add(d.path, d.keyword, u(d.message))
    return tuple(r.out.values())


def _at(root: Any, path: str) -> Any:
    node = root
    for raw in path.split("/")[1:]:
        seg = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, dict) and utf8_bytes(seg) in node:
            node = node[utf8_bytes(seg)]  # keys kept as UTF-8 bytes in str
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            return None
    return node


def dialect_report(report: tuple[UnenforcedKeyword, ...], root: Any, dialect: str
                   ) -> tuple[tuple[UnenforcedKeyword, ...], tuple[UnenforcedKeyword, ...]]:
    """llama.cpp mode's report read under the schema's dialect: ``format`` values the dialect does not define move
    to the annotations (validators do not check them), and in drafts 3 and 4 a boolean ``exclusiveMinimum`` /
    ``exclusiveMaximum`` (which llama.cpp's converter does not read, enforcing the inclusive bound) is reported.

    >>> r, a = dialect_report((UnenforcedKeyword("#", "format", "x"),), {"format": "color"}, "7")
    >>> r, [k.keyword for k in a]
    ((), ['format'])
    """
    from .dialect import is_assertion

    def uni(p: str) -> str:
        try:
            return u(p)
        except UnicodeError:
            return p  # already Unicode

    kept, annotations = [], []
    for k in report:
        node = _at(root, k.path) if k.keyword == "format" else None
        fmt = node.get("format") if isinstance(node, dict) else None
        if isinstance(fmt, str) and not is_assertion(fmt, dialect):
            annotations.append(UnenforcedKeyword(k.path, "format", f"format {fmt} is not one of draft {dialect}'s "
                                                 "formats: an annotation, which validators do not check"))
        else:
            kept.append(k)
    if dialect in ("3", "4"):
        seen = {(k.path, k.keyword) for k in kept}
        stack: list[tuple[Any, str]] = [(root, "#")]
        while stack:
            node, p = stack.pop()
            if isinstance(node, list):
                stack.extend((v, f"{p}/{i}") for i, v in enumerate(node))
                continue
            if not isinstance(node, dict):
                continue
            for excl, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                flag = node.get(excl)
                if flag and not isinstance(flag, (dict, list)) and bound in node and (uni(p), excl) not in seen:
                    kept.append(UnenforcedKeyword(uni(p), excl, f"draft {dialect}: {excl} makes {bound} exclusive, "
                                                  f"which llama.cpp's converter does not read (the bound itself passes)"))
            for key, v in node.items():
                if key not in ("const", "enum", "default", "examples"):
                    stack.append((v, f"{p}/{key.replace('~', '~0').replace('/', '~1')}"))
    return tuple(kept), tuple(annotations)
