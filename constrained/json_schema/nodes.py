"""JSON schema → a typed tree, as llama.cpp's ``common_chat_schema_from_json`` (common/json-schema.cpp).

The tree is what the converter turns into GBNF. Every keyword the builder reads is listed once in ``KEYWORDS``
(what it does and whether it is enforced), and the keywords that decide a node's kind are tried in the order of
``SELECTORS``, each by its own function: the first that applies wins, as in ``build_node``. Whatever constraining
keyword a node leaves unread is reported as an ``UnenforcedKeyword`` (see ``report.py``).

Strings here are bytes held in ``str`` (see ``json_text.b``): paths, names and patterns, as in the C++.

Example:
    >>> doc = build_document({"type": "integer", "minimum": 2.5})
    >>> doc.root.kind, doc.root.minimum
    ('integer', 3)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sampler.cconv import stoull

from ..errors import SchemaError
from .json_text import INT64_MAX, INT64_MIN, b, double_to_int64, is_integer, is_number, u, wrap_int

MAX_SCHEMA_DEPTH = 200
"""Deepest nesting of subschemas accepted (llama.cpp has no limit but its stack)."""
MAX_NODES = 200_000
"""Most schema nodes built (a ``type`` array copies its schema once per type, so nesting them multiplies)."""

ANY, REF, ANY_OF, ALL_OF, CONST, ENUM = "any", "ref", "anyOf", "allOf", "const", "enum"
NULL, BOOLEAN, NUMBER, INTEGER, STRING, ARRAY, TUPLE, OBJECT = (
    "null", "boolean", "number", "integer", "string", "array", "tuple", "object")

FORMAT_NONE, FORMAT_UUID, FORMAT_DATE, FORMAT_TIME, FORMAT_DATE_TIME = "", "uuid", "date", "time", "date-time"


@dataclass(eq=False)
class Node:
    """One schema node. Only the fields of its ``kind`` are used (as the C++ subclasses)."""

    kind: str
    path: str                                   # where it was built from (bytes in str), for reports and errors
    schema: Any = None                          # the JSON object it was built from (bytes in str)
    consumed: frozenset[str] = frozenset()      # the keywords this node enforces
    origin: str = ""                            # the schema's own path when this is a one-type copy of it
    # REF
    ref: str = ""
    target: Node | None = None
    # ANY_OF / ALL_OF
    children: list[Node] = field(default_factory=list)
    # CONST / ENUM
    values: list[Any] = field(default_factory=list)
    # INTEGER
    minimum: int = INT64_MIN
    maximum: int = INT64_MAX
    # STRING
    pattern: str = ""
    format: str = FORMAT_NONE
    min_length: int = 0
    max_length: int = -1
    # ARRAY (items) / TUPLE (children)
    items: Node | None = None
    min_items: int = 0
    max_items: int = -1
    # OBJECT
    properties: list[tuple[str, Node, bool]] = field(default_factory=list)  # (name, schema, required)
    additional: Node | None = None                                          # None: no extra keys allowed


@dataclass
class Document:
    """``common_chat_schema_document``: the root node and the built ``$ref`` targets (keyed by the ref string)."""

    root: Node
    refs: dict[str, Node | None]
    nodes: list[Node]


@dataclass(frozen=True)
class Keyword:
    """One JSON schema keyword: which instances it applies to, and what llama.cpp's converter does with it."""

    applies_to: str        # "any", "string", "number", "array" or "object"
    support: str           # "enforced", "partial" or "ignored"
    note: str


def _k(applies_to: str, support: str, note: str) -> Keyword:
    return Keyword(applies_to, support, note)


KEYWORDS: dict[str, Keyword] = {
    # selectors, in precedence order (SELECTORS below)
    "$ref": _k("any", "partial", "only '#/...' references into the same document; sibling keywords are ignored"),
    "oneOf": _k("any", "partial", "treated as anyOf: 'exactly one' is not enforced"),
    "anyOf": _k("any", "enforced", "alternatives; ignored when oneOf is present"),
    "const": _k("any", "enforced", "the compact JSON dump as a literal; sibling keywords are ignored"),
    "enum": _k("any", "enforced", "the values' compact JSON dumps as alternatives; sibling keywords are ignored"),
    "type": _k("any", "enforced", "a type array becomes anyOf over one-type copies of the schema"),
    "allOf": _k("any", "partial", "only object properties (direct members required) and enum intersections"),
    # objects
    "properties": _k("object", "enforced", "in schema order, required ones first"),
    "required": _k("object", "enforced", "only names listed in properties"),
    "additionalProperties": _k("object", "enforced", "absent means closed when properties are given"),
    "patternProperties": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "propertyNames": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "minProperties": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "maxProperties": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "dependentRequired": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "dependentSchemas": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "dependencies": _k("object", "ignored", "not supported by llama.cpp's converter"),
    "unevaluatedProperties": _k("object", "ignored", "not supported by llama.cpp's converter"),
    # arrays
    "items": _k("array", "enforced", "a schema, or an array of schemas for a (closed) tuple; beats prefixItems"),
    "prefixItems": _k("array", "enforced", "a (closed) tuple"),
    "minItems": _k("array", "enforced", "ignored for tuples"),
    "maxItems": _k("array", "enforced", "ignored for tuples"),
    "additionalItems": _k("array", "ignored", "not supported by llama.cpp's converter"),
    "uniqueItems": _k("array", "ignored", "not supported by llama.cpp's converter"),
    "contains": _k("array", "ignored", "not supported by llama.cpp's converter"),
    "minContains": _k("array", "ignored", "not supported by llama.cpp's converter"),
    "maxContains": _k("array", "ignored", "not supported by llama.cpp's converter"),
    "unevaluatedItems": _k("array", "ignored", "not supported by llama.cpp's converter"),
    # strings
    "pattern": _k("string", "partial", "only anchored ^...$ patterns of a regex subset; beats format and lengths"),
    "format": _k("string", "partial", "date, time, date-time, uuid, uuid1-5; beats lengths"),
    "minLength": _k("string", "enforced", "ignored when a pattern or a known format is given"),
    "maxLength": _k("string", "enforced", "ignored when a pattern or a known format is given"),
    # numbers
    "minimum": _k("number", "partial", "integers only (rounded up); ignored for type number"),
    "maximum": _k("number", "partial", "integers only (rounded down); ignored for type number"),
    "exclusiveMinimum": _k("number", "partial", "integers only, and only without minimum"),
    "exclusiveMaximum": _k("number", "partial", "integers only, and only without maximum"),
    "multipleOf": _k("number", "ignored", "not supported by llama.cpp's converter"),
    # any instance
    "not": _k("any", "ignored", "not supported by llama.cpp's converter"),
    "if": _k("any", "ignored", "not supported by llama.cpp's converter"),
    "then": _k("any", "ignored", "not supported by llama.cpp's converter"),
    "else": _k("any", "ignored", "not supported by llama.cpp's converter"),
    "$dynamicRef": _k("any", "ignored", "not supported by llama.cpp's converter"),
}
"""Every validation keyword. Anything else (title, description, $defs, default, examples, x-...) is an annotation:
it constrains nothing, so it is never reported."""

_APPLIES = {  # instance kinds a node of each kind can produce → keyword groups that matter for it
    NULL: {"any"}, BOOLEAN: {"any"}, NUMBER: {"any", "number"}, INTEGER: {"any", "number"},
    STRING: {"any", "string"}, ARRAY: {"any", "array"}, TUPLE: {"any", "array"}, OBJECT: {"any", "object"},
}


def _fail(path: str, msg: str) -> SchemaError:
    # as common_chat_schema_builder::fail, rethrown by json_schema_to_grammar
    return SchemaError(u(f"JSON schema conversion failed:\nJSON schema error at {path}: {msg}"), path=u(path))


def _get_count(schema: dict, key: str, path: str, default: int) -> int:
    # as common_chat_schema_builder::get_count: get<int>() truncates to 32 bits
    if key not in schema:
        return default
    value = schema[key]
    if not is_integer(value) or wrap_int(value, 32) < 0:
        raise _fail(path, f"{key} must be a non-negative integer")
    return wrap_int(value, 32)


def _get_bound(schema: dict, key: str, path: str, round_up: bool) -> int:
    # as common_chat_schema_builder::get_bound: a fractional bound is rounded inwards
    value = schema[key]
    if is_integer(value):
        return wrap_int(value, 64)
    if not is_number(value):
        raise _fail(path, f"{key} must be a number")
    return double_to_int64(math.ceil(value) if round_up else math.floor(value))


def get_format(schema: dict, path: str) -> str:
    # as common_chat_schema_builder::get_format
    if "format" not in schema:
        return FORMAT_NONE
    value = schema["format"]
    if not isinstance(value, str):
        raise _fail(path, "format must be a string")
    if value in ("date", "time", "date-time"):
        return value
    if value == "uuid" or (len(value) == 5 and value.startswith("uuid") and "1" <= value[4] <= "5"):
        return FORMAT_UUID
    return FORMAT_NONE


class Builder:
    """``common_chat_schema_builder``: one pass over the JSON, $ref targets built once and linked at the end."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Node | None] = {}
        self.pending: list[Node] = []
        self.nodes: list[Node] = []

    def node(self, kind: str, path: str, schema: Any, consumed: tuple[str, ...] = (), **kw: Any) -> Node:
        if len(self.nodes) >= MAX_NODES:
            raise SchemaError(u(f"JSON schema is too large (more than {MAX_NODES} schema nodes)"), path=u(path))
        n = Node(kind, path, schema, frozenset(consumed), **kw)
        self.nodes.append(n)
        return n

    def build(self) -> Document:
        root = self.build_node(self.root, "#", 0)
        for ref in self.pending:
            ref.target = self.refs[ref.ref]
        return Document(root, self.refs, self.nodes)

    def build_node(self, schema: Any, path: str, depth: int) -> Node:
        # as common_chat_schema_builder::build_node: the first selector that applies decides the node
        if not isinstance(schema, dict):
            raise _fail(path, "schema must be an object")
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaError(u(f"JSON schema nesting is deeper than {MAX_SCHEMA_DEPTH} levels at {path}"),
                              path=u(path))
        for _name, select in SELECTORS:
            node = select(self, schema, path, depth)
            if node is not None:
                return node
        raise AssertionError("the last selector always applies")  # pragma: no cover

    def resolve_ref(self, ref: str, path: str) -> Any:
        # as common_chat_schema_builder::resolve_ref: no ~0/~1 decoding, numeric segments index arrays
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                try:
                    idx = stoull(sel)
                except ValueError:              # std::stoull threw
                    idx = None
                if idx is None or idx >= len(target):
                    raise _fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                raise _fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def alternatives(self, kind: str, alts: Any, path: str, depth: int, schema: dict, key: str) -> Node:
        # as build_alternatives<T>
        if not isinstance(alts, list):
            raise _fail(path, "must be an array of schemas")
        if not alts:
            raise _fail(path, "must not be empty")
        node = self.node(kind, path[: len(path) - len(key) - 1], schema, (key,))
        node.children = [self.build_node(alt, f"{path}/{i}", depth + 1) for i, alt in enumerate(alts)]
        return node

    def build_object(self, schema: dict, path: str, depth: int) -> Node:
        # as common_chat_schema_builder::build_object
        node = self.node(OBJECT, path, schema, ("type", "properties", "required", "additionalProperties"))
        required = set()
        if isinstance(schema.get("required"), list):
            required = {name for name in schema["required"] if isinstance(name, str)}
        if "properties" in schema:
            props = schema["properties"]
            if not isinstance(props, dict):
                raise _fail(path, "properties must be an object")
            for name, prop in props.items():
                node.properties.append((name, self.build_node(prop, f"{path}/properties/{name}", depth + 1),
                                        name in required))
        if "additionalProperties" in schema:
            additional = schema["additionalProperties"]
            if isinstance(additional, bool):
                if additional:
                    node.additional = self.node(ANY, f"{path}/additionalProperties", {})
            elif isinstance(additional, dict):
                node.additional = self.build_node(additional, f"{path}/additionalProperties", depth + 1)
            else:
                raise _fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = self.node(ANY, path, {})  # {"type": "object"} on its own accepts any object
        return node

    def build_array(self, schema: dict, path: str, depth: int) -> Node:
        # as common_chat_schema_builder::build_array: "items" beats "prefixItems", an array of schemas is a tuple
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                node = self.node(TUPLE, path, schema, ("type", key))
                node.children = [self.build_node(item, f"{path}/{key}/{i}", depth + 1)
                                 for i, item in enumerate(items)]
                return node
            node = self.node(ARRAY, path, schema, ("type", key, "minItems", "maxItems"))
            node.items = self.build_node(items, f"{path}/{key}", depth + 1)
        else:
            node = self.node(ARRAY, path, schema, ("type", "minItems", "maxItems"))
            node.items = self.node(ANY, path, {})
        node.min_items = _get_count(schema, "minItems", path, 0)
        node.max_items = _get_count(schema, "maxItems", path, -1)
        return node

    def build_string(self, schema: dict, path: str) -> Node:
        # as common_chat_schema_builder::build_string
        node = self.node(STRING, path, schema, ("type", "pattern", "format", "minLength", "maxLength"))
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise _fail(path, "pattern must be a string")
            node.pattern = schema["pattern"]
        node.format = get_format(schema, path)
        node.min_length = _get_count(schema, "minLength", path, 0)
        node.max_length = _get_count(schema, "maxLength", path, -1)
        return node

    def build_integer(self, schema: dict, path: str) -> Node:
        # as common_chat_schema_builder::build_integer: exclusive bounds only without the inclusive ones
        node = self.node(INTEGER, path, schema, ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
        if "minimum" in schema:
            node.minimum = _get_bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = wrap_int(_get_bound(schema, "exclusiveMinimum", path, False) + 1, 64)
        if "maximum" in schema:
            node.maximum = _get_bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = wrap_int(_get_bound(schema, "exclusiveMaximum", path, True) - 1, 64)
        return node


# ---- kind selectors, one per keyword, in build_node's order --------------------------------------------------------

Selector = Callable[[Builder, dict, str, int], "Node | None"]


def select_ref(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``$ref``: only into the same document; the target is built once, its errors are reported at the ref."""
    if "$ref" not in schema:
        return None
    value = schema["$ref"]
    if not isinstance(value, str):
        raise _fail(path, "$ref must be a string")
    if not value.startswith("#/"):
        raise _fail(path, f"unsupported $ref {value}, only references into the same document are supported")
    if value not in bd.refs:
        bd.refs[value] = None  # reserved first, so that a cycle back to this $ref stops here
        bd.refs[value] = bd.build_node(bd.resolve_ref(value, path), value, depth + 1)
    node = bd.node(REF, path, schema, ("$ref",), ref=value)
    bd.pending.append(node)
    return node


def select_one_of(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``oneOf``: exactly like anyOf, and it wins over a sibling anyOf."""
    if "oneOf" not in schema:
        return None
    return bd.alternatives(ANY_OF, schema["oneOf"], f"{path}/oneOf", depth, schema, "oneOf")


def select_any_of(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``anyOf``: one alternative per schema."""
    if "anyOf" not in schema:
        return None
    return bd.alternatives(ANY_OF, schema["anyOf"], f"{path}/anyOf", depth, schema, "anyOf")


def select_type_array(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``type`` as an array: anyOf over copies of the schema with one type each."""
    types = schema.get("type")
    if not isinstance(types, list):
        return None
    if not types:
        raise _fail(path, "type must not be empty")
    node = bd.node(ANY_OF, path, schema, ("type",))
    for i, t in enumerate(types):
        alt = dict(schema)
        alt["type"] = t
        child = bd.build_node(alt, f"{path}/type/{i}", depth + 1)
        if child.schema is alt:
            child.origin = node.origin or path
        node.children.append(child)
    return node


def select_const(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``const``: the value's compact dump, whatever the sibling keywords say."""
    if "const" not in schema:
        return None
    return bd.node(CONST, path, schema, ("const",), values=[schema["const"]])


def select_enum(bd: Builder, schema: dict, path: str, depth: int) -> Node | None:
    """``enum``: a non-empty array of values."""
    if "enum" not in schema:
        return None
    values = schema["enum"]
    if not isinstance(values, list) or not values:
        raise _fail(path, "enum must be a non-empty array")
    return bd.node(ENUM, path, schema, ("enum",), values=list(values))


def select_type(bd: Builder, schema: dict, path: str, depth: int) -> Node:
    """``type`` as a string, or no type at all (then the structural keywords decide)."""
    t = schema.get("type")
    if t is not None and not isinstance(t, str):
        raise _fail(path, "type must be a string or an array of strings")
    t = t or ""
    has_properties = "properties" in schema or (
        "additionalProperties" in schema and schema["additionalProperties"] is not True)
    if t == "":
        if has_properties:
            return bd.build_object(schema, path, depth)
        if "allOf" in schema:
            return bd.alternatives(ALL_OF, schema["allOf"], f"{path}/allOf", depth, schema, "allOf")
        if "items" in schema or "prefixItems" in schema:
            return bd.build_array(schema, path, depth)
        if ("pattern" in schema or "minLength" in schema or "maxLength" in schema
                or get_format(schema, path) != FORMAT_NONE):
            return bd.build_string(schema, path)
        return bd.node(ANY, path, schema)
    if t == "object":
        if not has_properties and "allOf" in schema:
            return _all_of_typed(bd, schema, path, depth)
        return bd.build_object(schema, path, depth)
    if t == "string":
        if "allOf" in schema:
            return _all_of_typed(bd, schema, path, depth)
        return bd.build_string(schema, path)
    if t == "array":
        return bd.build_array(schema, path, depth)
    if t == "integer":
        return bd.build_integer(schema, path)
    simple = {"number": NUMBER, "boolean": BOOLEAN, "null": NULL}.get(t)
    if simple is None:
        raise _fail(path, f"unrecognized type {t}")
    return bd.node(simple, path, schema, ("type",))


def _all_of_typed(bd: Builder, schema: dict, path: str, depth: int) -> Node:
    node = bd.alternatives(ALL_OF, schema["allOf"], f"{path}/allOf", depth, schema, "allOf")
    node.consumed = frozenset(("allOf", "type"))
    return node


SELECTORS: tuple[tuple[str, Selector], ...] = (
    ("$ref", select_ref),
    ("oneOf", select_one_of),
    ("anyOf", select_any_of),
    ("type (array)", select_type_array),
    ("const", select_const),
    ("enum", select_enum),
    ("type", select_type),
)
"""The keywords that decide a node's kind, in llama.cpp's precedence order."""


def to_bytes_tree(value: Any) -> Any:
    """The JSON value with every string and key as UTF-8 bytes in ``str`` (see ``json_text.b``)."""
    if isinstance(value, str):
        return b(value)
    if isinstance(value, list):
        return [to_bytes_tree(v) for v in value]
    if isinstance(value, dict):
        return {b(k): to_bytes_tree(v) for k, v in value.items()}
    return value


def build_document(schema: Any) -> Document:
    """``common_chat_schema_from_json`` over a normalised JSON value (see ``_json.load``)."""
    return Builder(to_bytes_tree(schema)).build()


def applies(kind: str, keyword: str) -> bool:
    """Whether a keyword can matter for the values a node of this kind produces."""
    spec = KEYWORDS.get(keyword)
    if spec is None:
        return False
    groups = _APPLIES.get(kind)
    return groups is None or spec.applies_to in groups
