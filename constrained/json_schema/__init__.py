"""JSON Schema → GBNF, text for text as llama.cpp's ``json_schema_to_grammar`` (commit 0c1e57098), plus JSON mode
and a report of every keyword the grammar does not enforce.

Where llama.cpp returns a grammar that cannot work, we raise ``SchemaError`` instead (with ``.path``): a grammar
that accepts nothing (a ``$ref`` cycle with no way out), a ``{m,n}`` with n < m that llama.cpp's grammar parser
never finishes loading (minLength > maxLength, integer bounds of more than 16 digits), and an ``allOf`` that refers
back to itself through ``$ref`` (llama.cpp overflows its stack). Limits: 200 levels of subschemas, 200 000 schema
nodes, 400 levels / 500 000 values of JSON. Everything else is llama.cpp's text, including its own mistakes, which
the report names (e.g. ``minimum: 100`` also accepting 10).

Example:
    >>> print(json_schema_to_gbnf({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
    ...                            "required": ["n"]}), end="")
    n ::= ([1-9] [0-9]{0,15})
    n-kv ::= "\\"n\\"" space ":" space n
    root ::= "{" space n-kv space "}"
    space ::= | " " | "\\n"{1,2} [ \\t]{0,20}
    >>> [(k.path, k.keyword) for k in json_schema_report({"type": "array", "uniqueItems": True})]
    [('#', 'uniqueItems')]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SchemaError
from . import nodes as _nodes
from ._gbnf import load_checks, productive_rules, read_gbnf
from .converter import Converter
from .dialect import dialect_of
from .json_text import load, path_of, u
from .nodes import KEYWORDS, SELECTORS, Keyword
from .report import UnenforcedKeyword, collect, dialect_report
from .resources import Resources

__all__ = [
    "ENFORCE_MODES", "JSON_OBJECT_SCHEMA", "KEYWORDS", "SELECTORS", "Keyword", "SchemaConversion", "UnenforcedKeyword",
    "convert_json_schema", "json_mode_gbnf", "json_schema_report",
    "json_schema_to_gbnf", "keyword_table", "schema_from_response_format", "server_json_schema",
]

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
"""What llama-server converts for ``response_format: {"type": "json_object"}`` and for an empty schema ``{}``."""


@dataclass(frozen=True)
class SchemaConversion:
    """The result of one conversion.

    ``gbnf`` is llama.cpp's grammar text; ``unenforced`` lists the keywords it does not enforce; ``warnings`` are the
    lines llama.cpp prints to stderr (``WARNING: JSON schema conversion was incomplete: ...``), without the prefix.
    """

    gbnf: str
    unenforced: tuple[UnenforcedKeyword, ...]
    warnings: tuple[str, ...]
    rule_paths: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    annotations: tuple[UnenforcedKeyword, ...] = ()
    """Keywords that are annotations, not assertions, in the schema's dialect, so validators do not check them
    either: ``format`` values outside the dialect's list (e.g. ``"color"``). Kept apart from ``unenforced``."""
    dialect: str = "2020-12"
    """The dialect the schema was read in (``dialect_of``): ``$schema``, else 2020-12 as jsonschema's
    ``validator_for`` defaults."""
    unique_rules: tuple[str, ...] = ()
    """``enforce="all"``: the rules of arrays whose items must be distinct (``uniqueItems`` beyond what a grammar
    can list). The grammar text alone does not forbid a repeated item: ``Grammar.from_json_schema`` carries these
    names and its matcher refuses a repeat (``constrained.grammar.unique_items``). A caller giving ``gbnf`` to
    another engine (llama.cpp) loses that check: ``uniqueItems`` at these arrays is then not enforced."""

    def path_of_rule(self, name: str) -> str:
        """The JSON pointer of the schema node a rule was built for (``#`` when unknown).

        >>> convert_json_schema({"properties": {"a": {"type": "integer", "minimum": 0}}}).path_of_rule("a-kv")
        '#/properties/a'
        """
        for suffix in ("", "-kv", "-rest"):
            if name.endswith(suffix) and name[:len(name) - len(suffix)] in self.rule_paths:
                return u(self.rule_paths[name[:len(name) - len(suffix)]])  # paths are kept as bytes in str
        return "#"


@contextlib.contextmanager
def _recursion_headroom(limit: int = 20000) -> Iterator[None]:
    old = sys.getrecursionlimit()
    if old < limit:
        sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        if old < limit:
            sys.setrecursionlimit(old)


def _leaf_productive(n: _nodes.Node) -> bool:
    """Whether an integer range or a string pattern's own rules derive anything (e.g. not for min > max)."""
    conv = Converter()
    try:
        name = conv.visit(n, "x")
        rules = read_gbnf(u("".join(f"{k} ::= {v}\n" for k, v in conv.rules.items())))
    except (SchemaError, ValueError, IndexError):
        return True
    return name in productive_rules(rules)


def _unproductive_ref_path(doc: _nodes.Document) -> str:
    """The path of the first node that cannot end (a $ref cycle, an empty range; node-level least fixpoint), or
    '#'."""
    good: set[int] = set()

    def ok(n: _nodes.Node | None) -> bool:
        if n is None:
            return False
        k = n.kind
        if k == _nodes.REF:
            return id(n.target) in good if n.target is not None else False
        if k == _nodes.ANY_OF:
            return any(id(c) in good for c in n.children)
        if k in (_nodes.ALL_OF, _nodes.TUPLE):
            return all(id(c) in good for c in n.children)
        if k == _nodes.OBJECT:
            return all(id(s) in good for _p, s, req in n.properties if req)
        if k == _nodes.ARRAY:
            return n.min_items == 0 or id(n.items) in good
        if k in (_nodes.INTEGER, _nodes.STRING):
            return _leaf_productive(n)
        return True

    changed = True
    while changed:
        changed = False
        for n in doc.nodes:
            if id(n) not in good and ok(n):
                good.add(id(n))
                changed = True
    for n in doc.nodes:
        if n.kind in (_nodes.REF, _nodes.INTEGER, _nodes.STRING) and id(n) not in good:
            return u(n.origin or n.path)
    return "#"


def _inverted_path(doc: _nodes.Document) -> str:
    """The string or integer node whose lengths, pattern or bounds give a {m,n} with n < m, or '#'."""
    import re

    from ._rules import int_range_body

    def inverted(text: str) -> bool:
        return any(int(b_) < int(a_) for a_, b_ in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text))

    for n in doc.nodes:
        if n.kind == _nodes.INTEGER and (n.minimum, n.maximum) != (_nodes.INT64_MIN, _nodes.INT64_MAX):
            try:
                if inverted(int_range_body(n.minimum, n.maximum, n.path)):
                    return u(n.path)
            except SchemaError:
                pass
        if n.kind != _nodes.STRING:
            continue
        if n.pattern:
            if inverted(n.pattern):
                return u(n.path)
        elif n.format == _nodes.FORMAT_NONE and 0 <= n.max_length < n.min_length:
            return u(n.path)
    return "#"


ENFORCE_MODES = ("llama.cpp", "all")
"""``enforce=``: ``"llama.cpp"`` is llama.cpp's exact grammar text; ``"all"`` enforces every keyword a grammar can."""


def convert_json_schema(schema: Any, enforce: str = "llama.cpp", *,
                        resources: Resources | None = None) -> SchemaConversion:
    """Convert a schema (dict, JSON text or bytes, or a pydantic model class) and report what is not enforced.

    ``enforce="all"`` builds our own grammar instead of llama.cpp's (see ``json_schema.enforce``): every keyword a
    context-free grammar can express is enforced, the rest is reported. ``resources`` (``enforce="all"`` only): the
    documents remote ``$ref``s name, a mapping URI -> schema or a function (``json_schema.resources``); nothing is
    ever fetched, a URI they lack stays a reported ``$ref``. llama.cpp mode ignores them (llama-server resolves no
    remote reference either).

    Raises SchemaError (with llama.cpp's message and ``.path``) where llama.cpp refuses the schema, and also where
    the grammar would accept nothing (a ``$ref`` cycle with no way out).

    >>> convert_json_schema({"type": "string", "pattern": "[0-9]+"}).warnings
    ("pattern [0-9]+ is not supported (not anchored with '^' and '$'), accepting any string",)
    """
    if enforce not in ENFORCE_MODES:
        raise SchemaError(f"enforce must be one of {ENFORCE_MODES}, got {enforce!r}", path="#")
    if enforce == "all":
        from .enforce import convert_enforced_annotated

        value = load(schema, exact=True)
        with _recursion_headroom():
            gbnf, report, annotations, unique = convert_enforced_annotated(value, resources)
        return SchemaConversion(gbnf, report, (), annotations=annotations, dialect=dialect_of(value),
                                unique_rules=unique)
    widened: list[int] = []
    value = load(schema, widened=widened)
    with _recursion_headroom():
        try:
            doc = _nodes.build_document(value)
            conv = Converter()
            top = conv.visit(doc.root, "")
        except RecursionError:
            raise SchemaError("JSON schema is nested too deeply to convert", path="#") from None
    conv.check_errors()
    text = u(conv.format_grammar())
    try:
        # bytes in str: the structure is what matters here, not the characters
        inverted, productive = load_checks(conv.rules)
        checked = True
    except (ValueError, IndexError):
        checked = False  # text outside the reader's subset (a user pattern): llama.cpp's parser will judge it
    if checked and inverted:
        name, m, n = inverted
        path = _inverted_path(doc)
        raise SchemaError(f"JSON schema error at {path}: the grammar has the repetition {{{m},{n}}} (rule {name}), "
                          "which llama.cpp's grammar parser never finishes loading (a minimum above its maximum, "
                          "or an integer bound of more than 16 digits)", path=path)
    if checked and not productive:
        path = _unproductive_ref_path(doc)
        raise SchemaError(f"JSON schema error at {path}: the grammar accepts nothing (a $ref cycle with no way out, "
                          "contradictory bounds, or an empty character class)", path=path)
    unenforced = collect(doc, conv, value) + _widened_values(schema, widened)
    dialect = dialect_of(value)
    unenforced, annotations = dialect_report(unenforced, value, dialect)
    if top != "root":
        # a property named "" at the top level is also named "root" and takes the rule first
        unenforced = (UnenforcedKeyword("#", "properties", f"the root rule is not this schema: a sub-schema took the "
                                        f"name root first, the schema itself became {u(top)}"),) + unenforced
    return SchemaConversion(text, unenforced, tuple(u(w.message) for w in conv.warnings),
                            conv.rule_paths, annotations=annotations, dialect=dialect)


def _widened_values(schema: Any, widened: list[int]) -> tuple[UnenforcedKeyword, ...]:
    """const/enum values holding integers beyond 64 bits: nlohmann reads them as doubles, the literal changes."""
    out: dict[tuple[str, str], UnenforcedKeyword] = {}
    for v in widened:
        where = (path_of(schema, v) or "#") if isinstance(schema, (dict, list)) else "#"
        parts = where.split("/")
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] in ("const", "enum"):
                at = "/".join(parts[:i]) or "#"
                out.setdefault((at, parts[i]), UnenforcedKeyword(at, parts[i], f"the integer {v} is read as the "
                                                                 f"double {float(v)!r}: the grammar writes that"))
                break
        else:
            text = schema.decode("utf-8", "replace") if isinstance(schema, (bytes, bytearray)) else str(schema)
            if where == "#" and not isinstance(schema, (dict, list)) and ('"const"' in text or '"enum"' in text):
                out.setdefault(("#", "const"), UnenforcedKeyword("#", "const", f"the integer {v} is read as a "
                                                                 "double: a const or enum holding it changes"))
    return tuple(out.values())


def json_schema_to_gbnf(schema: Any) -> str:
    """The GBNF text llama.cpp's ``json_schema_to_grammar`` produces for this schema.

    >>> json_schema_to_gbnf('{"enum": ["a", 1]}').splitlines()[0]
    'root ::= ("\\\\"a\\\\"" | "1")'
    """
    return convert_json_schema(schema).gbnf


def json_schema_report(schema: Any) -> tuple[UnenforcedKeyword, ...]:
    """The keywords of ``schema`` that its grammar does not enforce (empty when it enforces everything).

    >>> json_schema_report({"type": "integer", "minimum": 0})
    ()
    """
    return convert_json_schema(schema).unenforced


def server_json_schema(schema: Any) -> Any:
    """The schema llama-server converts: an empty object means any object (``{"type": "object"}``), as both
    ``/completion`` (json_schema) and ``/v1/chat/completions`` (response_format) do.

    >>> server_json_schema({})
    {'type': 'object'}
    """
    value = load(schema)
    if isinstance(value, dict) and not value:
        return dict(JSON_OBJECT_SCHEMA)
    return value


def schema_from_response_format(response_format: Any) -> Any:
    """The schema /v1/chat/completions converts for an OpenAI ``response_format`` (None: no constraint), as
    ``oaicompat_chat_params_parse`` picks it: ``json_object`` uses its ``schema`` (or any object), ``json_schema``
    uses ``json_schema.schema``, ``text`` or no type means none; an empty schema means any object.

    >>> schema_from_response_format({"type": "json_object"})
    {'type': 'object'}
    >>> schema_from_response_format({"type": "json_schema", "json_schema": {"schema": {"type": "integer"}}})
    {'type': 'integer'}
    >>> schema_from_response_format({"type": "text"}) is None
    True
    """
    rf = response_format if isinstance(response_format, dict) else {}
    kind = rf.get("type", "")
    if not isinstance(kind, str):
        kind = ""
    if kind == "json_object":
        schema = rf.get("schema", {})
    elif kind == "json_schema":
        wrapper = rf.get("json_schema", {})
        schema = wrapper.get("schema", {}) if isinstance(wrapper, dict) else {}
    elif kind in ("", "text"):
        return None
    else:
        raise SchemaError(f'response_format type must be one of "text" or "json_object", but got: {kind}',
                          path="#/type")
    return server_json_schema(schema)


def json_mode_gbnf() -> str:
    """The grammar of llama-server's JSON mode (``response_format: {"type": "json_object"}`` without a schema).

    >>> [line for line in json_mode_gbnf().splitlines() if line.startswith("root")]
    ['root ::= object']
    """
    return json_schema_to_gbnf(JSON_OBJECT_SCHEMA)


def keyword_table() -> str:
    """What llama.cpp's converter does with each JSON schema keyword, as a Markdown table (from ``KEYWORDS``).

    >>> print(keyword_table().splitlines()[0])
    | keyword | applies to | support | note |
    """
    rows = ["| keyword | applies to | support | note |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {k.applies_to} | {k.support} | {k.note} |" for name, k in KEYWORDS.items()]
    return "\n".join(rows)


def __getattr__(name: str) -> Any:
    if name == "grammar_from_json_schema":  # moved up a layer: this converter produces text, not engine objects
        raise AttributeError("constrained.json_schema.grammar_from_json_schema is now "
                             "constrained.Grammar.from_json_schema(schema, strict=...)")
    raise AttributeError(f"module 'constrained.json_schema' has no attribute {name!r}")
