"""``enforce="all"``: the JSON-Schema-Test-Suite through the matcher, and the soundness of the report in both modes.

- Suite (drafts 2020-12 and 7, core keyword files and the format files of the enforced formats): for each group
  that compiles with an empty report, valid instances accepted, invalid ones rejected (``oracle/cases/json_schema_suite.py``);
  counts per file, skipped groups listed with their reasons (printed with ``-s``).
- Soundness (hypothesis): schemas drawn from ``json_schema_strategies``, documents drawn from the grammar by
  random walks; a document that jsonschema rejects must come with a report entry on the violated schema path.
- The default mode's text is untouched: ``enforce="llama.cpp"`` is ``json_schema_to_gbnf``.
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from constrained import Grammar
from constrained.errors import SchemaError
from constrained.json_schema import convert_json_schema, json_schema_to_gbnf
from constrained.json_schema._gbnf import read_gbnf, sample
from oracle.cases.json_schema_corpus import byte_vocabulary, unique_check
from oracle.cases.json_schema_strategies import schemas

COUNTS: dict[str, int] = {}


@pytest.fixture(scope="module")
def vocab():  # noqa: ANN201
    from constrained import Vocabulary
    from oracle.sdist import vocab_gguf

    return Vocabulary.from_gguf(vocab_gguf("gpt-2"))


def test_json_schema_test_suite(vocab) -> None:  # noqa: ANN001
    from oracle.cases.json_schema_suite import run_suite

    res = run_suite(vocab)
    for label in sorted(res.files):
        print(f"{label}: {res.passed[label]}/{res.files[label]} instances, {res.groups[label]} groups")
    for label, group, reason in res.skipped:
        print(f"skipped {label}: {group}: {reason}")
    for label, what, reason in res.incomplete:
        print(f"refused on purpose {label}: {what}: {reason}")
    assert not res.failures, res.failures[:10]
    assert sum(res.files.values()) >= 2000 and sum(res.groups.values()) >= 395
    # $id-relative references (embedded resources, URN bases, anchors) are resolved, not skipped
    skipped = {group for _label, group, _reason in res.skipped}
    for group in ("refs with relative uris and defs", "order of evaluation: $id and $anchor and $ref",
                  "URN base URI with URN and anchor ref", "$id must be resolved against nearest parent, not just "
                  "immediate parent", "$ref prevents a sibling $id from changing the base uri"):
        assert group not in skipped, group
    for core in ("minimum", "maximum", "exclusiveMinimum", "multipleOf", "pattern", "patternProperties",
                 "propertyNames", "minProperties", "maxProperties", "additionalProperties", "allOf", "contains",
                 "maxContains", "dependentRequired", "uniqueItems", "not"):
        assert res.groups[f"draft2020-12/{core}"] > 0, core
    for fmt in ("date", "time", "date-time", "duration", "email", "ipv4", "ipv6", "uri", "uri-reference", "uuid"):
        assert res.files[f"draft2020-12/{fmt}(format)"] > 0 or fmt == "email", fmt
    COUNTS["suite instances"] = sum(res.files.values())


def _pointer(parts: object) -> list[str]:
    return [str(p) for p in parts]  # type: ignore[union-attr]


def _named(report: tuple, err: jsonschema.ValidationError) -> bool:
    """Whether some report entry sits on the schema path of this error (or of one of its sub-errors), or names the
    violated keyword itself (through a $ref the keyword's own path is the target's, which the error path skips)."""
    paths = [_pointer(err.absolute_schema_path)]
    keywords = {err.validator}
    stack = list(err.context or ())
    while stack:
        e = stack.pop()
        paths.append(_pointer(e.absolute_schema_path))
        keywords.add(e.validator)
        stack.extend(e.context or ())
    for k in report:
        kp = [p for p in k.path.split("/")[1:]]
        if k.keyword in keywords or any(p[:len(kp)] == kp for p in paths):
            return True
    return False


def _documents(gbnf: str, n: int, seed: int) -> list[str]:
    rules = read_gbnf(gbnf)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        try:
            out.append(sample(rules, rng, budget=10))
        except (ValueError, RecursionError):
            break
    return out


def _check_sound(schema: object, enforce: str, n: int) -> int:
    try:
        conv = convert_json_schema(schema, enforce=enforce)
    except SchemaError:
        return 0
    try:
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
        validator.check_schema(schema)
    except Exception:  # noqa: BLE001 - jsonschema cannot judge this schema
        return 0
    checked = 0
    unique = unique_check(conv)     # the matcher's uniqueItems check: a document it refuses is never produced
    for doc in _documents(conv.gbnf, n, seed=len(json.dumps(schema))):
        try:
            value = json.loads(doc)
        except ValueError:
            assert conv.unenforced, (schema, doc)
            continue
        if unique is not None and not unique.matcher(byte_vocabulary()).accept_bytes(doc.encode()):
            COUNTS["refused by the uniqueItems check"] = COUNTS.get("refused by the uniqueItems check", 0) + 1
            continue
        try:
            errors = list(validator.iter_errors(value))
        except Exception:  # noqa: BLE001 - e.g. a pattern Python's re cannot compile
            continue
        checked += 1
        if errors:
            assert conv.unenforced, (enforce, schema, doc, errors[0].message)
            assert any(_named(conv.unenforced, e) for e in errors), (enforce, schema, doc, conv.unenforced,
                                                                     [list(e.absolute_schema_path) for e in errors])
    return checked


@settings(max_examples=250, deadline=None, database=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(schemas(broken=False))
# the failure seen once (drawn only in some runs): "{,3}" is text in ECMA-262, a repetition in Python's re
@example({"type": "object", "properties": {"é": {"type": "string", "pattern": "^a{2,}b{,3}$"}}, "required": ["é"]})
def test_report_is_sound_in_both_modes(schema) -> None:  # noqa: ANN001
    for enforce in ("llama.cpp", "all"):
        COUNTS[f"documents {enforce}"] = COUNTS.get(f"documents {enforce}", 0) + _check_sound(schema, enforce, 90)


HAND = [
    {"type": "string", "pattern": "^\\d{5}$"},
    {"type": "string", "pattern": "\\w+@\\w+\\.(com|org)", "maxLength": 20},
    {"type": "number", "minimum": -2.5, "exclusiveMaximum": 1e3},
    {"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 5000},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                      "at": {"type": "string", "format": "date-time"}},
     "required": ["id"], "patternProperties": {"^x-": {"type": "boolean"}}, "additionalProperties": False,
     "maxProperties": 3},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 1},
    {"type": "array", "contains": {"type": "integer"}, "minContains": 1, "maxContains": 2},
    {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
               {"properties": {"a": {"minimum": 3}, "b": {"type": "string"}}}]},
    {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"}, "minProperties": 1},
    {"not": {"type": ["string", "null"]}},
    {"oneOf": [{"type": "string", "format": "ipv4"}, {"type": "integer", "minimum": 0}]},
    {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
    {"if": {"const": "a"}, "then": {"type": "string", "maxLength": 1}, "else": {"type": "integer", "maximum": 9}},
    {"type": "array", "items": {"if": {"enum": [1, 2, "x"]}, "then": {"minimum": 2}, "else": {"type": "boolean"}}},
]


@pytest.mark.parametrize("schema", HAND, ids=[str(i) for i in range(len(HAND))])
def test_hand_schemas_fully_enforced(schema) -> None:  # noqa: ANN001
    conv = convert_json_schema(schema, enforce="all")
    assert conv.unenforced == (), conv.unenforced
    Grammar.from_gbnf(conv.gbnf.encode())
    assert _check_sound(schema, "all", 150) >= 100
    COUNTS["documents all"] = COUNTS.get("documents all", 0) + 150


def test_zip_code_pattern_enforced(vocab) -> None:  # noqa: ANN001
    g = Grammar.from_json_schema({"type": "string", "pattern": "^\\d{5}$"}, enforce="all")
    assert g.unenforced == ()
    for doc, ok in (('"12345"', True), ('"hello"', False), ('"1234"', False), ('"٣٤٥٦٧"', False)):
        m = g.matcher(vocab)
        assert (m.accept_bytes(doc.encode()) and m.can_end()) == ok, doc
    # llama.cpp's converter accepts any string there, and says so
    assert [k.keyword for k in Grammar.from_json_schema({"type": "string", "pattern": "^\\d{5}$"}).unenforced] \
        == ["pattern"]


def test_default_mode_is_llama_cpp_text() -> None:
    for schema in HAND:
        assert convert_json_schema(schema, enforce="llama.cpp").gbnf == json_schema_to_gbnf(schema)
    with pytest.raises(SchemaError):
        convert_json_schema({}, enforce="everything")


def test_unenforced_reported_with_path() -> None:
    rep = convert_json_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)x"}},
                               "required": ["a"]}, enforce="all").unenforced
    assert [(k.path, k.keyword) for k in rep] == [("#/properties/a", "pattern")]
    rep = convert_json_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                              enforce="all").unenforced
    assert [(k.path, k.keyword) for k in rep] == [("#", "uniqueItems")]


def test_every_table_schema_converts_or_is_refused() -> None:
    """Every schema of the oracle table (refusals, odd types such as ``{"type": [{}]}``) gives a grammar or a
    SchemaError in "all" mode, never another exception."""
    from oracle.cases.json_schema_table import TABLE

    outcomes = {"grammar": 0, "refused": 0}
    for schema in [*TABLE, {"type": [["a"]]}, {"type": [{}]}]:
        try:
            convert_json_schema(schema, enforce="all")
            outcomes["grammar"] += 1
        except SchemaError:
            outcomes["refused"] += 1
    assert outcomes["grammar"] > 150 and outcomes["refused"] >= 2, outcomes


def test_zz_document_counts() -> None:
    print(COUNTS)
    assert COUNTS.get("documents llama.cpp", 0) + COUNTS.get("documents all", 0) >= 20000
