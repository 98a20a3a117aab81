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
from ._json import u
from .converter import Converter


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


class _Reporter:
    def __init__(self, root_schema: Any) -> None:
        self.root = root_schema  # Unicode JSON, for jsonschema
        self.out: dict[tuple[str, str], UnenforcedKeyword] = {}
        self._validator: Any = None

    def add(self, path: str, keyword: str, reason: str) -> None:
        key = (u(path), keyword)
        if key not in self.out:
            self.out[key] = UnenforcedKeyword(key[0], keyword, reason)

    def leftovers(self, node: N.Node, path: str, why: str, everything: bool = False) -> None:
        """Report each constraining keyword of the node's schema that it does not read."""
        for raw in node.schema:
            kw = u(raw)
            if kw in node.consumed or kw not in N.KEYWORDS:
                continue
            if everything or N.applies(node.kind, kw):
                spec = N.KEYWORDS[kw]
                self.add(path, kw, why or (spec.note if spec.support == "ignored" else f"ignored for {node.kind}"))

    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema

            try:
                cls = jsonschema.validators.validator_for(self.root, default=jsonschema.Draft202012Validator)
                self._validator = cls(self.root)
            except Exception:  # not a usable schema for jsonschema: skip the const/enum sibling checks
                self._validator = False
        return self._validator

    def check_values(self, node: N.Node, path: str) -> None:
        """const / enum: the siblings are ignored, which matters only if some listed value violates them."""
        siblings = {u(k): from_bytes_tree(v) for k, v in node.schema.items()
                    if u(k) in N.KEYWORDS and u(k) not in ("const", "enum")}
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
            if "oneOf" in node.consumed:
                self.add(path, "oneOf", N.KEYWORDS["oneOf"].note)
            self.leftovers(node, path, "ignored next to oneOf/anyOf", True)
        elif kind == N.ANY_OF:
            pass  # a type array: its one-type copies report for it
        elif kind in (N.CONST, N.ENUM):
            self.check_values(node, path)
        elif kind == N.ALL_OF:
            self.leftovers(node, path, "ignored next to allOf", True)
        else:
            self.leftovers(node, path, "")
            getattr(self, f"extra_{kind}", lambda n, p, s: None)(node, path, s)

    def extra_object(self, node: N.Node, path: str, s: dict) -> None:
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
            for kw in ("format", "minLength", "maxLength"):
                if kw in s:
                    self.add(path, kw, "ignored: the pattern takes precedence")
        elif node.format != N.FORMAT_NONE:
            for kw in ("minLength", "maxLength"):
                if kw in s:
                    self.add(path, kw, f"ignored: the format {node.format} takes precedence")
        if "format" in s and node.format == N.FORMAT_NONE and isinstance(s["format"], str) and not node.pattern:
            self.add(path, "format", f"format {u(s['format'])} is not supported (date, time, date-time, uuid only)")
        if node.max_length >= 0 and node.min_length > node.max_length and not node.pattern:
            self.add(path, "minLength", "minLength > maxLength: no string satisfies both")

    def extra_any(self, node: N.Node, path: str, s: dict) -> None:
        if "format" in s and isinstance(s["format"], str):
            self.add(path, "format", f"format {u(s['format'])} is not supported (date, time, date-time, uuid only)")

    def extra_integer(self, node: N.Node, path: str, s: dict) -> None:
        for inc, exc, up in (("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", False)):
            if inc in s and exc in s and isinstance(s[exc], (int, float)) and isinstance(s[inc], (int, float)):
                e, i = s[exc], s[inc]
                tighter = (math.floor(e) + 1 > math.ceil(i)) if up else (math.ceil(e) - 1 < math.floor(i))
                if tighter:
                    self.add(path, exc, f"ignored: {inc} is given too")
        if node.minimum > node.maximum:
            self.add(path, "minimum", "minimum > maximum: no integer satisfies both, the grammar does not say so")

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


def collect(doc: N.Document, conv: Converter, root_schema: Any) -> tuple[UnenforcedKeyword, ...]:
    """The unenforced keywords of a converted document, in schema build order."""
    r = _Reporter(root_schema)
    for node in doc.nodes:
        r.node(node)
    for d in conv.warnings:
        r.add(d.path, d.keyword or "pattern", d.message)
    for d in conv.ignored:
        r.add(d.path, d.keyword, d.message)
    return tuple(r.out.values())
