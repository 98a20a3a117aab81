"""The dialect of a JSON schema (``$schema``) and what differs between dialects.

``dialect_of(schema)`` reads ``$schema`` exactly as ``jsonschema.validators.validator_for`` does: the URI is looked
up with an empty fragment dropped (``http://json-schema.org/draft-07/schema#`` = ``...schema``), and a schema
without ``$schema``, or with one that is not a known meta-schema (``https://json-schema.org/draft-07/schema``, a
custom URI), is read as **2020-12**, the default of ``validator_for``.

What changes with the dialect (``enforce="all"`` follows it; the llama.cpp-mode report too where llama.cpp's
grammar would otherwise be unsound under it):

==================  =====================================================================================
``integer``         drafts 3 and 4: a number without a fraction part *in its text* (``1.0`` is not one);
                    6 and later: any number whose value is whole (``1.0`` is one)
exclusive bounds    drafts 3 and 4: ``exclusiveMinimum: true`` makes ``minimum`` exclusive; 6 and later:
                    ``exclusiveMinimum`` is a number of its own
``id`` / ``$id``    draft 3, 4: ``id``; 6 and later: ``$id`` (drafts 6 and 7: ``"$id": "#name"`` is an anchor)
``$ref`` siblings   up to draft 7 ignored beside ``$ref``; 2019-09 and later applied beside it
dependencies        up to draft 7 ``dependencies`` (key lists or schemas); 2019-09 and later
                    ``dependentRequired`` / ``dependentSchemas`` (and ``dependencies`` is not a keyword)
tuples              up to 2019-09 ``items: [...]`` + ``additionalItems``; 2020-12 ``prefixItems`` + ``items``
formats             ``FORMATS[dialect]``: the formats of that draft's specification; any other ``format``
                    value is an annotation there (validators do not check it)
==================  =====================================================================================

Keywords a dialect does not define (``const`` in draft 4, ``if`` in draft 6, ``prefixItems`` in 2019-09...) are
annotations in it: validators ignore them, and so does ``enforce="all"``.

Example:
    >>> dialect_of({"$schema": "http://json-schema.org/draft-04/schema#"}), dialect_of({})
    ('4', '2020-12')
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

DIALECTS = ("3", "4", "6", "7", "2019-09", "2020-12")
DEFAULT_DIALECT = "2020-12"
"""The dialect of a schema without ``$schema`` (or with an unknown one): jsonschema's ``validator_for`` default."""

_URIS = {
    "http://json-schema.org/draft-03/schema": "3",
    "http://json-schema.org/draft-04/schema": "4",
    "http://json-schema.org/draft-06/schema": "6",
    "http://json-schema.org/draft-07/schema": "7",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}

_V3 = frozenset(("$ref", "additionalItems", "additionalProperties", "dependencies", "disallow", "divisibleBy", "enum",
                 "extends", "format", "items", "maxItems", "maxLength", "maximum", "minItems", "minLength", "minimum",
                 "pattern", "patternProperties", "properties", "type", "uniqueItems", "exclusiveMinimum",
                 "exclusiveMaximum", "required"))
_V4 = (_V3 - {"disallow", "divisibleBy", "extends"}) | {"allOf", "anyOf", "maxProperties", "minProperties",
                                                         "multipleOf", "not", "oneOf", "required"}
_V6 = _V4 | {"const", "contains", "propertyNames"}
_V7 = _V6 | {"if", "then", "else"}
_V2019 = (_V7 - {"dependencies"}) | {"$recursiveRef", "dependentRequired", "dependentSchemas", "unevaluatedItems",
                                     "unevaluatedProperties", "minContains", "maxContains"}
_V2020 = (_V2019 - {"$recursiveRef", "additionalItems"}) | {"$dynamicRef", "prefixItems"}
VOCABULARY: dict[str, frozenset[str]] = {"3": _V3, "4": _V4, "6": _V6, "7": _V7, "2019-09": _V2019,
                                          "2020-12": _V2020}
"""The assertion and applicator keywords of each dialect (jsonschema's validators for it)."""

# plus what jsonschema's format checker for the draft checks although that draft's text does not list it
# (idn-email and regex for drafts 3-6), so a validator may assert it
_F4 = frozenset(("date-time", "email", "hostname", "ipv4", "ipv6", "uri", "idn-email", "regex"))
_F6 = _F4 | {"uri-reference", "uri-template", "json-pointer"}
_F7 = _F6 | {"date", "time", "idn-email", "idn-hostname", "iri", "iri-reference", "relative-json-pointer", "regex"}
_F2019 = _F7 | {"duration", "uuid"}
FORMATS: dict[str, frozenset[str]] = {
    "3": frozenset(("date-time", "date", "time", "utc-millisec", "regex", "color", "style", "phone", "uri", "email",
                    "ip-address", "ipv6", "host-name", "idn-email")),
    "4": _F4, "6": _F6, "7": _F7, "2019-09": _F2019, "2020-12": _F2019,
}
"""The formats each dialect's specification defines; another ``format`` value is an annotation only."""


def dialect_of(schema: Any) -> str:
    """``"3"``, ``"4"``, ``"6"``, ``"7"``, ``"2019-09"`` or ``"2020-12"``: the dialect ``validator_for`` picks.

    >>> dialect_of({"$schema": "https://json-schema.org/draft/2019-09/schema#"})
    '2019-09'
    >>> dialect_of({"$schema": "https://json-schema.org/draft-07/schema#"})  # not a meta-schema URI: the default
    '2020-12'
    """
    if not isinstance(schema, dict):
        return DEFAULT_DIALECT
    uri = schema.get("$schema")
    if not isinstance(uri, str):
        return DEFAULT_DIALECT
    try:
        key = urlsplit(uri).geturl()
    except ValueError:
        return DEFAULT_DIALECT
    return _URIS.get(key, DEFAULT_DIALECT)


def fraction_integers(dialect: str) -> bool:
    """Whether ``1.0`` is an integer (drafts 6 and later) or only a number (drafts 3, 4)."""
    return dialect not in ("3", "4")


def ref_overrides_siblings(dialect: str) -> bool:
    """Whether ``$ref`` replaces its sibling keywords (up to draft 7)."""
    return dialect in ("3", "4", "6", "7")


def id_keyword(dialect: str) -> str:
    """``id`` (drafts 3, 4) or ``$id``."""
    return "id" if dialect in ("3", "4") else "$id"


def is_assertion(fmt: str, dialect: str) -> bool:
    """Whether the dialect's specification defines ``format: fmt`` (else it is an annotation only).

    >>> is_assertion("uuid", "7"), is_assertion("uuid", "2020-12"), is_assertion("color", "2020-12")
    (False, True, False)
    """
    return fmt in FORMATS.get(dialect, FORMATS[DEFAULT_DIALECT])


IGNORED_PREFIX = "x-ignored-"
"""``normalized`` renames a keyword its dialect does not define to this prefix + its name (pointers still find it)."""

_SCHEMA_VALUED = frozenset(("not", "if", "then", "else", "additionalItems", "additionalProperties", "contains",
                            "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema", "items",
                            "extends"))
_SCHEMA_LISTS = frozenset(("allOf", "anyOf", "oneOf", "prefixItems", "items", "extends", "disallow", "type"))
_SCHEMA_MAPS = frozenset(("properties", "patternProperties", "dependentSchemas", "dependencies", "$defs",
                          "definitions"))
_DATA = frozenset(("const", "enum", "default", "examples", "required", "dependentRequired", "$comment", "title",
                   "description", "$schema", "$id", "id", "$anchor", "$vocabulary", "format", "pattern"))
_ALL_KEYWORDS = frozenset().union(*VOCABULARY.values())
_SCHEMA_HINTS = _ALL_KEYWORDS | {"$defs", "definitions", "$id", "id", "title", "description"}


def normalized(schema: Any, dialect: str) -> Any:
    """A copy of ``schema`` in the keyword spelling of 2020-12, with the meaning it has in ``dialect``:

    - keywords the dialect does not define are renamed ``x-ignored-<name>`` (annotations there);
    - drafts 3, 4: ``"exclusiveMinimum": true`` beside ``minimum`` becomes ``"exclusiveMinimum": <minimum>``
      (``false`` is dropped), ``id`` becomes ``$id``;
    - up to draft 7: ``dependencies`` becomes ``dependentRequired`` (key lists; a string in draft 3) and
      ``dependentSchemas`` (schemas), the original kept as ``x-ignored-dependencies`` for pointers;
    - up to 2019-09: ``items: [...]`` becomes ``prefixItems`` and ``additionalItems`` becomes ``items``, each
      original kept under ``x-ignored-`` for pointers;
    - draft 3: ``divisibleBy`` is ``multipleOf``, ``extends`` is ``allOf``, ``required: true`` inside a property
      makes it required in the parent, ``type: "any"`` is no type.

    Paths of what is reported stay those of the original where the keyword is not renamed.

    >>> normalized({"minimum": 1, "exclusiveMinimum": True, "const": 2}, "4")
    {'exclusiveMinimum': 1, 'x-ignored-const': 2}
    >>> normalized({"items": [{"type": "string"}], "additionalItems": False}, "7")["prefixItems"]
    [{'type': 'string'}]
    """
    return _norm(schema, dialect, 0)


def _norm_any(v: Any, dialect: str, depth: int) -> Any:
    """A value under a keyword no dialect defines: a schema if it looks like one, else a map of schemas."""
    if isinstance(v, dict):
        if set(v) & _SCHEMA_HINTS:
            return _norm(v, dialect, depth + 1)
        return {k: _norm_any(x, dialect, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm_any(x, dialect, depth + 1) for x in v]
    return v


def _norm(s: Any, dialect: str, depth: int) -> Any:  # noqa: C901 - one rule per keyword
    if not isinstance(s, dict):
        return s
    if depth > 400:
        return s
    vocab = VOCABULARY[dialect]
    old = dialect in ("3", "4")
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k in _DATA:
            out[k] = v
        elif k in _SCHEMA_MAPS:
            out[k] = {n: _norm(x, dialect, depth + 1) for n, x in v.items()} if isinstance(v, dict) else v
        elif k in _SCHEMA_LISTS and isinstance(v, list):
            out[k] = [_norm(x, dialect, depth + 1) for x in v]
        elif k in _SCHEMA_VALUED:
            out[k] = _norm(v, dialect, depth + 1)
        elif k in _ALL_KEYWORDS:
            out[k] = v
        else:
            out[k] = _norm_any(v, dialect, depth)
    if old:
        for bound, excl in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if excl in out and not isinstance(out[excl], (dict, list)):
                flag = out.pop(excl)  # jsonschema reads it as a flag: any true value (5 too) makes the bound exclusive
                if flag and bound in out:
                    out[excl] = out.pop(bound)
        if "$id" in out:
            out[IGNORED_PREFIX + "$id"] = out.pop("$id")
        if isinstance(out.get("id"), str):
            out["$id"] = out.pop("id")
    if dialect == "3":
        if "divisibleBy" in out:
            out["multipleOf"] = out.pop("divisibleBy")
        if "extends" in out:
            ext = out.pop("extends")
            out["allOf"] = ext if isinstance(ext, list) else [ext]
        if out.get("type") == "any":
            del out["type"]
        props = out.get("properties")
        if isinstance(props, dict):
            req = [k for k, x in props.items() if isinstance(x, dict) and x.get("required") is True]
            for x in props.values():
                if isinstance(x, dict) and isinstance(x.get("required"), bool):
                    x.pop("required")
            if req:
                out["required"] = req
            elif isinstance(out.get("required"), bool):
                del out["required"]
        # a boolean "required" elsewhere is left for the parent's properties to read (merge ignores it)
    if dialect in ("3", "4", "6", "7") and isinstance(out.get("dependencies"), dict):
        deps = out["dependencies"]
        req_deps = {k: ([v] if isinstance(v, str) else v) for k, v in deps.items() if isinstance(v, (list, str))}
        sch_deps = {k: v for k, v in deps.items() if not isinstance(v, (list, str))}
        out[IGNORED_PREFIX + "dependencies"] = out.pop("dependencies")
        if req_deps:
            out["dependentRequired"] = req_deps
        if sch_deps:
            out["dependentSchemas"] = sch_deps
    if dialect != "2020-12":
        if isinstance(out.get("items"), list):
            out["prefixItems"] = out["items"]
            out[IGNORED_PREFIX + "items"] = out.pop("items")
            if "additionalItems" in out:
                out["items"] = out["additionalItems"]
                out[IGNORED_PREFIX + "additionalItems"] = out.pop("additionalItems")
        elif "additionalItems" in out:
            out[IGNORED_PREFIX + "additionalItems"] = out.pop("additionalItems")  # ignored without an items array
    for k in list(out):
        if k in _ALL_KEYWORDS and k not in vocab and k not in ("prefixItems", "dependentRequired",
                                                                "dependentSchemas", "multipleOf", "allOf",
                                                                "exclusiveMinimum", "exclusiveMaximum"):
            out[IGNORED_PREFIX + k] = out.pop(k)
        elif k in ("prefixItems",) and dialect != "2020-12" and IGNORED_PREFIX + "items" not in out:
            out[IGNORED_PREFIX + k] = out.pop(k)
    if dialect in ("3", "4") and "$ref" in out and isinstance(out.get("$id"), str):
        pass  # siblings of $ref: the enforcer ignores them up to draft 7
    return out
