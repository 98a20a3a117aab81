"""The report never misses what llama.cpp's grammar lets through (issue 14), and the converter never raises anything
but SchemaError (issue 16, items 5-7).

Each miss is shown with llama.cpp's own code: the converter shim gives the same text as ours, and llama.cpp's grammar
sampler (``CGrammar``) accepts a witness document that violates the schema (jsonschema); the report must then name
the keyword at the schema path. Over-reporting is checked the other way: documents drawn from the grammar validate.
Cost bounds are CPU rlimits in a subprocess, never wall-clock assertions.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import jsonschema
import pytest

from constrained import Grammar
from constrained.errors import SchemaError
from constrained.json_schema import convert_json_schema
from oracle.cases.json_schema import accepted_by_llama
from oracle.schema import oracle_convert

# (schema, witness document accepted by llama.cpp, (path, keyword) the report must hold)
MISSES = [
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"a": {}}}]},
     '{"a":"x","a":null}', ("#", "allOf")),
    ({"type": "string", "allOf": [{"pattern": "^a$"}]}, "{}", ("#", "type")),
    ({"type": "string", "allOf": [{}, {}]}, "{}", ("#", "type")),
    ({"type": "string", "pattern": "^x+?y$"}, '"y"', ("#", "pattern")),
    ({"type": "string", "pattern": "^a{2}?$"}, '""', ("#", "pattern")),
    ({"type": "string", "pattern": "^(ab){1,3}?c$"}, '"c"', ("#", "pattern")),
    ({"type": "object", "properties": {"*": {"type": "integer"}}}, '{"*":1,"*":2}', ("#", "properties")),
    ({"type": "object", "properties": {"o": {"properties": {"*": {"type": "integer"}}}}},
     '{"o":{"*":1,"*":2}}', ("#/properties/o", "properties")),
    ({"type": "string", "pattern": "^\\uD800$"}, '"\ud800"', ("#", "pattern")),
    # char{2,} takes the two escapes of one astral character (issue 25)
    ({"type": "string", "minLength": 2}, '"\\ud83d\\ude00"', ("#", "minLength")),
]


@pytest.fixture(scope="module")
def gpt2():  # noqa: ANN201
    from oracle.llama import L, vocab_model
    from oracle.sdist import vocab_gguf

    vm = vocab_model(vocab_gguf("gpt-2"))
    return vm, L.llama_vocab_eos(vm.vocab)


def _violates(schema: dict, doc: str) -> bool:
    """jsonschema's verdict on the document, with duplicate keys counted as a violation (a JSON object whose key
    repeats is not the object the schema describes: parsers keep one of the values)."""
    def pairs(items: list) -> dict:
        keys = [k for k, _v in items]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate key")
        return dict(items)
    try:
        value = json.loads(doc.encode("utf-8", "surrogatepass").decode("utf-8"), object_pairs_hook=pairs)
    except (ValueError, UnicodeDecodeError):
        return True  # not JSON (invalid UTF-8, a repeated key)
    return not jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("schema,doc,where", MISSES, ids=[str(i) for i in range(len(MISSES))])
def test_miss_is_real_and_reported(gpt2, schema, doc, where) -> None:  # noqa: ANN001
    vm, eos = gpt2
    conv = convert_json_schema(schema)
    oracle = oracle_convert(schema)
    assert oracle.ok and oracle.text == conv.gbnf  # the text is llama.cpp's, unchanged
    assert accepted_by_llama(vm, eos, oracle.text, doc) is True  # llama.cpp's sampler lets the witness through
    assert _violates(schema, doc)
    assert where in {(k.path, k.keyword) for k in conv.unenforced}, conv.unenforced


ENFORCED = [  # a type next to oneOf/anyOf that every alternative already has: nothing to report
    {"type": "string", "anyOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^a+$"}]},
    {"type": "number", "anyOf": [{"type": "integer"}, {"type": "number"}]},
    {"type": ["string", "null"], "oneOf": [{"type": "null"}, {"enum": ["a", "b"]}]},
    {"type": "integer", "anyOf": [{"const": 1}, {"enum": [2, 3.0]}]},
    {"type": "object", "oneOf": [{"properties": {"k": {"const": "a"}}, "required": ["k"]},
                                 {"properties": {"k": {"const": "b"}}, "required": ["k"]}]},
]
NOT_ENFORCED = [  # ... and the ones where it is not
    ({"type": "integer", "anyOf": [{"type": "number"}, {"type": "integer"}]}, "1.5"),
    ({"type": "string", "anyOf": [{"type": "string"}, {}]}, "1"),
    ({"type": "string", "oneOf": [{"const": "a"}, {"const": 1}]}, "1"),
]


@pytest.mark.parametrize("schema", ENFORCED)
def test_type_next_to_alternatives_not_over_reported(gpt2, schema) -> None:  # noqa: ANN001
    from constrained.json_schema._gbnf import read_gbnf, sample

    vm, eos = gpt2
    conv = convert_json_schema(schema)
    assert oracle_convert(schema).text == conv.gbnf
    assert conv.unenforced == ()
    rules, rng, checked = read_gbnf(conv.gbnf), random.Random(3), 0
    for _ in range(30):
        doc = sample(rules, rng, budget=12)
        if accepted_by_llama(vm, eos, conv.gbnf, doc):
            assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(doc)), doc
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("schema,doc", NOT_ENFORCED)
def test_type_next_to_alternatives_reported_when_lost(gpt2, schema, doc) -> None:  # noqa: ANN001
    vm, eos = gpt2
    conv = convert_json_schema(schema)
    assert accepted_by_llama(vm, eos, conv.gbnf, doc) is True and _violates(schema, doc)
    assert ("#", "type") in {(k.path, k.keyword) for k in conv.unenforced}


# ---- issue 16, items 5-7: only SchemaError, with a path ------------------------------------------------------------

def _nested(key: str, depth: int) -> dict:
    s: dict = {"type": "null"}
    for _ in range(depth):
        s = {"anyOf": [s, {"type": "boolean"}]} if key == "anyOf" else {"type": "object", "properties": {"a": s}}
    return s


HOSTILE = [
    (_nested("anyOf", 100), None),
    (_nested("properties", 100), None),
    ({"type": "string", "pattern": "^" + "(" * 1000 + "a" + ")" * 1000 + "$"}, None),
    ({"type": "string", "pattern": "^a{99999999999}$"}, None),
    ({"$schema": 5, "type": "integer"}, None),
    ({"const": 10**400}, "#/const"),
    ({"enum": [1, {"x": [-(10**400)]}]}, "#/enum/1/x/0"),
    ({"type": "integer", "minimum": 10**400}, "#/minimum"),
    ({"type": "number", "exclusiveMaximum": -(10**400)}, "#/exclusiveMaximum"),
]


@pytest.mark.parametrize("schema,error_path", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
@pytest.mark.parametrize("enforce", ["llama.cpp", "all"])
def test_hostile_schema_converts_or_raises_schema_error(schema, error_path, enforce) -> None:  # noqa: ANN001
    if error_path is None or enforce == "all":  # "all" reads integers exactly: 10**400 is a bound like any other
        try:
            Grammar.from_json_schema(schema, enforce=enforce)
        except SchemaError as e:
            assert e.path.startswith("#")
    else:
        with pytest.raises(SchemaError) as e:
            Grammar.from_json_schema(schema, enforce=enforce)
        assert e.value.path == error_path


def test_grammar_limit_refusal_names_the_limit_and_the_path() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(20000)}}
    text = convert_json_schema(schema).gbnf  # flat: no "nested too deeply" (the optional chain is built in a loop)
    assert text.count("-rest ::=") == 19999
    with pytest.raises(SchemaError) as e:
        Grammar.from_json_schema(schema)
    assert "limit" in str(e.value) and "nested" not in str(e.value) and "llama.cpp cannot" not in str(e.value)


def _run_capped(code: str, cpu_seconds: int) -> None:
    """Run ``code`` in a fresh interpreter under a CPU-time rlimit (and 2 GB of address space)."""
    prog = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_CPU, ({cpu_seconds}, {cpu_seconds}))
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    """) + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=".")
    assert r.returncode == 0, r.stderr[-2000:]


def test_many_colliding_property_names_are_linear() -> None:
    # 5,000 CJK names all sanitise to "-": the C++ scan for a free name is quadratic (13 s here before); the same
    # names are now found in linear time. The CPU cap would kill a quadratic run.
    _run_capped("""
        from constrained.json_schema import convert_json_schema
        s = {"type": "object", "properties": {chr(0x4E00 + i): {"type": "integer"} for i in range(5000)}}
        text = convert_json_schema(s).gbnf
        assert text.count('space ":" space integer') == 5000 and "--kv4998 ::=" in text
    """, cpu_seconds=20)


def test_colliding_names_match_llama_cpp() -> None:
    schema = {"type": "object", "properties": {**{chr(0x4E00 + i): {"type": "integer", "minimum": i % 3}
                                                  for i in range(40)}, "-0": {"type": "string"}, "-": {}}}
    assert convert_json_schema(schema).gbnf == oracle_convert(schema).text
