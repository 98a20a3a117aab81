"""constrained.json_schema and constrained.json_schema.validation without the oracle: inputs, refusals with paths, limits, the
unenforced-keyword report, strict mode, JSON mode, pydantic, and validation results.

(The parity with llama.cpp's converter is proven in test_json_schema_oracle.py.)
"""

from __future__ import annotations

import json

import pytest

from constrained.errors import SchemaError
from constrained.grammar import Grammar
from constrained.json_schema import (
    JSON_OBJECT_SCHEMA,
    KEYWORDS,
    SELECTORS,
    UnenforcedKeyword,
    convert_json_schema,
    json_mode_gbnf,
    json_schema_report,
    json_schema_to_gbnf,
    server_json_schema,
)
from constrained.json_schema.json_text import dump, load
from constrained.json_schema.validation import ValidationIssue, validate

OBJ = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
       "required": ["name"]}


# ---- inputs -------------------------------------------------------------------------------------------------------

def test_dict_text_and_bytes_give_the_same_grammar() -> None:
    text = json.dumps(OBJ)
    assert json_schema_to_gbnf(OBJ) == json_schema_to_gbnf(text) == json_schema_to_gbnf(text.encode())


def test_pydantic_type_adapter() -> None:
    pydantic = pytest.importorskip("pydantic")
    adapter = pydantic.TypeAdapter(list[int])
    assert json_schema_to_gbnf(adapter) == json_schema_to_gbnf({"type": "array", "items": {"type": "integer"}})


def test_keyword_table_text() -> None:
    from constrained.json_schema import keyword_table

    text = keyword_table()
    assert "| `uniqueItems` | array | ignored |" in text and text.count("\n") == len(KEYWORDS) + 1


def test_pydantic_model_class() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        y: int = 0
        label: str | None = None

    assert json_schema_to_gbnf(Point) == json_schema_to_gbnf(Point.model_json_schema())
    g = json_schema_to_gbnf(Point)
    assert 'root ::= "{" space x-kv' in g


@pytest.mark.parametrize("bad, fragment", [
    ("{not json", "not valid JSON"), ('{"a": NaN}', "not valid JSON"), ("[1,]", "not valid JSON"),
    ('{"a": 1e999}', "not valid JSON"), (b"\xff\xfe", "not valid UTF-8"), ('"\\ud800"', "not valid JSON"),
    ({"a": float("nan")}, "not JSON"), ({1: "x"}, "keys must be strings"), ({"a": {1, 2}}, "not JSON"),
])
def test_not_json_is_a_schema_error_at_the_root(bad, fragment) -> None:  # noqa: ANN001
    with pytest.raises(SchemaError) as e:
        json_schema_to_gbnf(bad)
    assert fragment in str(e.value) and e.value.path == "#"


@pytest.mark.parametrize("schema, path, message", [
    ([], "#", "schema must be an object"),
    ({"type": "object", "properties": {"a": {"type": "nope"}}}, "#/properties/a", "unrecognized type nope"),
    ({"items": {"minLength": -1}}, "#/items", "minLength must be a non-negative integer"),
    ({"anyOf": [{"type": "string"}, 3]}, "#/anyOf/1", "schema must be an object"),
    ({"$ref": "#/$defs/x", "$defs": {}}, "#", "cannot resolve $ref #/$defs/x, x not found"),
    ({"$ref": "#/a/3", "a": [{}]}, "#", "cannot resolve $ref #/a/3, 3 is out of range"),
    ({"$ref": "other.json"}, "#", "unsupported $ref other.json, only references into the same document"),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"type": 1}}}, "#/$defs/a", "type must be a string or an array"),
    ({"type": "object", "properties": {"é": {"enum": []}}}, "#/properties/é", "enum must be a non-empty array"),
])
def test_refusals_name_the_path(schema, path, message) -> None:  # noqa: ANN001
    with pytest.raises(SchemaError) as e:
        json_schema_to_gbnf(schema)
    assert e.value.path == path
    assert str(e.value) == f"JSON schema conversion failed:\nJSON schema error at {path}: {message}" or \
        message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_invalid_patterns_are_all_reported_at_once() -> None:
    with pytest.raises(SchemaError) as e:
        json_schema_to_gbnf({"type": "object", "properties": {"p": {"pattern": "^(a$"}, "q": {"pattern": "^[b$"}}})
    assert str(e.value) == ("JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses\n"
                            "Invalid pattern ^[b$: unterminated character class")
    assert e.value.path == "#/properties/p"


@pytest.mark.parametrize("schema, path", [
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}, "#/$defs/a"),
    ({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                                           "required": ["next"]}}}, "#/$defs/n/properties/next"),
    ({"type": "array", "items": {"$ref": "#"}, "minItems": 1}, None),
])
def test_cycle_with_no_way_out_is_refused(schema, path) -> None:  # noqa: ANN001
    with pytest.raises(SchemaError) as e:
        json_schema_to_gbnf(schema)
    if path is not None:
        assert e.value.path == path
        assert "accepts nothing" in str(e.value)


def test_cycle_with_a_way_out_is_fine() -> None:
    g = json_schema_to_gbnf({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"$ref": "#/$defs/n"}}, "required": ["v"]}}})
    assert "ref-defs-n ::=" in g


def test_allof_recursing_through_ref_is_refused_not_a_crash() -> None:
    # llama.cpp overflows its stack on this one
    d0 = {"type": "object", "properties": {"item": {"allOf": [{"$ref": "#/$defs/d0"}]}}}
    with pytest.raises(SchemaError, match="recurse forever") as e:
        json_schema_to_gbnf({"$ref": "#/$defs/d0", "$defs": {"d0": d0}})
    assert e.value.path == "#/$defs/d0/properties/item"


def test_repetitions_llama_cpp_cannot_load_are_refused() -> None:
    with pytest.raises(SchemaError, match="never finishes loading") as e:
        json_schema_to_gbnf({"type": "object", "properties": {"s": {"type": "string", "minLength": 5,
                                                                     "maxLength": 2}}})
    assert e.value.path == "#/properties/s"
    with pytest.raises(SchemaError, match="never finishes loading"):
        json_schema_to_gbnf({"type": "integer", "maximum": -915092524113747911})


def test_limits_deep_and_wide_schemas_fail_fast() -> None:
    deep: dict = {"type": "string"}
    for _ in range(5000):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError):
        json_schema_to_gbnf(deep)
    with pytest.raises(SchemaError):
        json_schema_to_gbnf("[" * 100000 + "]" * 100000)
    # a type array copies the schema per type: nesting them multiplies
    boom: dict = {"type": "string"}
    for _ in range(20):
        boom = {"type": ["array", "object", "null"], "items": boom, "properties": {"a": boom}}
    with pytest.raises(SchemaError, match="too large"):
        json_schema_to_gbnf(boom)


def test_many_optional_properties_is_linear() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(2000)}}
    g = json_schema_to_gbnf(schema)      # llama.cpp's builder is cubic here (50 s); ours memoises (benchmarks/)
    assert g.count("-rest ::=") == 1999


# ---- output details -----------------------------------------------------------------------------------------------

def test_nlohmann_dump() -> None:
    assert dump({"a": [1, 2.0, 1e15, 1e16, -0.0, 0.1, None, True, "é\n\u0001"]}) == \
        '{"a":[1,2.0,1e+15,1e+16,-0.0,0.1,null,true,"é\\n\\u0001"]}'
    assert load('{"n": 123456789012345678901234567890, "u": 18446744073709551615}') == \
        {"n": 1.2345678901234568e29, "u": 18446744073709551615}


def test_space_rule_always_present_and_rules_sorted() -> None:
    for schema in ({}, OBJ, {"type": "boolean"}):
        lines = json_schema_to_gbnf(schema).splitlines()
        assert 'space ::= | " " | "\\n"{1,2} [ \\t]{0,20}' in lines
        names = [line.split(" ::= ")[0] for line in lines]
        assert names == sorted(names)


def test_response_format_like_the_server() -> None:
    from constrained.json_schema import schema_from_response_format as rf

    assert rf({"type": "json_object"}) == {"type": "object"}
    assert rf({"type": "json_object", "schema": {}}) == {"type": "object"}
    assert rf({"type": "json_object", "schema": {"type": "array"}}) == {"type": "array"}
    assert rf({"type": "json_schema", "json_schema": {"name": "x"}}) == {"type": "object"}
    assert rf({"type": "json_schema", "json_schema": {"schema": {"const": 1}}}) == {"const": 1}
    assert rf({"type": "text"}) is None and rf({}) is None
    with pytest.raises(SchemaError, match='must be one of "text" or "json_object", but got: xml'):
        rf({"type": "xml"})


def test_json_mode() -> None:
    assert server_json_schema({}) == JSON_OBJECT_SCHEMA == {"type": "object"}
    assert server_json_schema('{"type": "array"}') == {"type": "array"}
    assert json_mode_gbnf() == json_schema_to_gbnf({"type": "object"})
    assert "root ::= object\n" in json_mode_gbnf()
    assert "root ::= value\n" in json_schema_to_gbnf({})  # the library call itself keeps {} as any value


# ---- the keyword table ----------------------------------------------------------------------------------------------

def test_keyword_table_covers_the_selectors_and_the_ignored_keywords() -> None:
    assert [name for name, _ in SELECTORS] == ["$ref", "oneOf", "anyOf", "type (array)", "const", "enum", "type"]
    for kw in ("not", "if", "uniqueItems", "multipleOf", "patternProperties", "contains", "minProperties"):
        assert KEYWORDS[kw].support == "ignored"
    for kw in ("properties", "required", "items", "minItems", "anyOf", "enum", "const"):
        assert KEYWORDS[kw].support == "enforced"


# ---- unenforced keywords -------------------------------------------------------------------------------------------

def _kw(schema: object) -> set[tuple[str, str]]:
    return {(k.path, k.keyword) for k in json_schema_report(schema)}


@pytest.mark.parametrize("schema, expected", [
    (OBJ, set()),
    ({"type": "number", "minimum": 0, "exclusiveMaximum": 5}, {("#", "minimum"), ("#", "exclusiveMaximum")}),
    ({"type": "integer", "minimum": 0, "maximum": 99}, set()),
    ({"type": "integer", "multipleOf": 3}, {("#", "multipleOf")}),
    ({"type": "array", "items": {"not": {"type": "null"}}, "uniqueItems": True},
     {("#", "uniqueItems"), ("#/items", "not")}),
    ({"type": "string", "format": "email"}, {("#", "format")}),
    ({"type": "string", "format": "date", "maxLength": 3}, {("#", "maxLength"), ("#", "format")}),
    ({"type": "string", "format": "time"}, set()),
    ({"type": "string", "format": "uuid"}, set()),
    ({"type": "string", "format": "uuid4"}, set()),  # not a 2020-12 format: an annotation (conv.annotations)
    ({"type": "string", "pattern": "[a-z]+"}, {("#", "pattern")}),
    ({"type": "string", "pattern": "^[a-z]+$", "minLength": 2}, {("#", "minLength")}),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, set()),   # disjoint types: exactly one holds anyway
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, {("#", "oneOf")}),
    ({"oneOf": [{"properties": {"k": {"const": 1}}, "required": ["k"]},
                {"properties": {"k": {"const": 2}}, "required": ["k"]}]}, set()),  # a discriminator
    ({"$ref": "#/$defs/a", "minLength": 3, "$defs": {"a": {"type": "string"}}}, {("#", "minLength")}),
    # an escaped surrogate pair is two of llama.cpp's chars, one character for validators
    ({"type": ["string", "integer"], "minLength": 2, "minimum": 1}, {("#", "minLength")}),
    ({"type": ["number", "integer"], "minimum": 1}, {("#", "minimum")}),
    ({"enum": ["a", "bb"], "type": "string", "minLength": 2}, {("#", "minLength")}),
    ({"enum": ["aa", "bb"], "type": "string", "minLength": 2}, set()),
    ({"type": "object", "required": ["a"]}, {("#", "required")}),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, {("#", "required")}),
    ({"type": "array", "prefixItems": [{}, {}], "minItems": 2}, set()),
    ({"type": "array", "prefixItems": [{}, {}], "minItems": 3}, {("#", "minItems")}),
    ({"if": {"type": "string"}, "then": {"minLength": 1}}, {("#", "if"), ("#", "then")}),
    ({"type": "integer", "minimum": 100}, {("#", "minimum")}),        # llama.cpp's range also accepts 10
    ({"type": "integer", "maximum": -1}, {("#", "maximum")}),         # ... and "-00"
    ({"type": "string", "minLength": 4294967299}, {("#", "minLength")}),
    ({"type": "string", "pattern": "^a.b$"}, {("#", "pattern")}),     # "." lets a raw '"' through
    ({"type": "string", "pattern": "^a\\.*$"}, {("#", "pattern")}),   # the * applies to "a."
    ({"title": "t", "description": "d", "examples": [1], "default": 2, "x-custom": 1}, set()),
])
def test_report(schema, expected) -> None:  # noqa: ANN001
    assert _kw(schema) == expected


def test_report_items_are_small_frozen_dataclasses() -> None:
    (k,) = json_schema_report({"type": "array", "contains": {"type": "string"}})
    assert k == UnenforcedKeyword("#", "contains", k.reason) and "not supported" in k.reason
    with pytest.raises(AttributeError):
        k.path = "x"  # type: ignore[misc]
    assert str(k).startswith("#: contains: ")


def test_warnings_are_llama_cpp_s() -> None:
    conv = convert_json_schema({"type": "string", "pattern": "^\\w+$"})
    assert conv.warnings == ("pattern ^\\w+$ is not supported (unsupported escape: \\w), accepting any string",)
    assert any(k.keyword == "pattern" for k in conv.unenforced)


# ---- Grammar ------------------------------------------------------------------------------------------------------

def test_grammar_from_json_schema_strict_and_not() -> None:
    g = Grammar.from_json_schema({"type": "number", "maximum": 3})
    assert g.source == json_schema_to_gbnf({"type": "number", "maximum": 3})
    assert [k.keyword for k in g.unenforced] == ["maximum"]
    with pytest.raises(SchemaError) as e:
        Grammar.from_json_schema({"type": "number", "maximum": 3}, strict=True)
    assert e.value.path == "#" and "maximum" in str(e.value)
    assert Grammar.from_json_schema(OBJ, strict=True).unenforced == ()


def test_grammar_from_json_schema_via_grammar_class() -> None:
    g = Grammar.from_json_schema(OBJ)
    assert g.root == "root" and g.unenforced == ()


def test_grammar_from_json_schema_moved_with_a_clear_error() -> None:
    import constrained.json_schema as js

    with pytest.raises(AttributeError, match="Grammar.from_json_schema"):
        js.grammar_from_json_schema  # noqa: B018


# ---- validate -------------------------------------------------------------------------------------------------------

def test_validate_reports_paths() -> None:
    issues = validate('{"age": -1, "extra": []}', OBJ)
    assert [(i.path, i.keyword) for i in issues] == [("$", "required"), ("$.age", "minimum")]
    assert all(isinstance(i, ValidationIssue) for i in issues)
    assert validate({"name": "x"}, OBJ) == []
    assert validate(b'{"name": "x"}', json.dumps(OBJ)) == []


def test_validate_bad_text_is_an_issue_not_an_exception() -> None:
    for text in ('{"name": ', "NaN", b"\xff", "[1] [2]"):
        (issue,) = validate(text, OBJ)
        assert issue.path == "$" and issue.message.startswith("not valid JSON")


def test_validate_string_value_when_asked() -> None:
    assert validate("abc", {"type": "string"}, parse=False) == []
    assert validate("abc", {"type": "string"})[0].message.startswith("not valid JSON")


def test_validate_bad_schema_raises_schema_error() -> None:
    with pytest.raises(SchemaError):
        validate("1", {"type": 12})
    with pytest.raises(SchemaError):
        validate("1", {"$ref": "#/nowhere"})


def test_constrained_validate_is_the_function_after_the_submodule_import() -> None:
    import constrained
    import constrained.json_schema.validation  # noqa: F401

    assert constrained.validate("1", {"type": "string"})[0].keyword == "type"
    assert constrained.json_schema_to_gbnf({"type": "null"}).startswith('root ::= "null"')
