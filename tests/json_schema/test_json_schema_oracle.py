"""JSON schema → GBNF against llama.cpp itself.

- all cases of llama.cpp's tests/test-json-schema-to-grammar.cpp, read from the sdist at test time;
- our table and hypothesis-generated schemas against ``json_schema_to_grammar`` called through our C++ shim over the
  wheel's libllama-common.so: the same text, or the same error message;
- random documents drawn from our grammar are accepted by llama.cpp's grammar sampler, and validate with jsonschema
  whenever the schema uses no unenforced keyword.

Where we knowingly differ from llama.cpp (a grammar that accepts nothing, an allOf that recurses until llama.cpp's
stack overflows) the test checks the reason instead: llama.cpp's grammar must be empty, and the crash case is never
sent to the shim.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings

from constrained.errors import SchemaError
from constrained.json_schema import json_mode_gbnf, server_json_schema
from oracle.cases.json_schema import (
    COUNTS,
    check_documents,
    compare_with_oracle,
    count,
    ours,
    schema_text,
    trim,
    upstream_cases,
)
from oracle.cases.json_schema_strategies import chaos, schemas
from oracle.cases.json_schema_table import TABLE
from oracle.schema import oracle_convert

CASES = upstream_cases()
# ---- llama.cpp's own test cases ---------------------------------------------------------------------------------

def test_upstream_case_count() -> None:
    assert len(CASES) == 81
    assert sum(c.success for c in CASES) == 78


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_upstream_case(case) -> None:  # noqa: ANN001
    status, result = ours(case.schema)
    if case.success:
        assert status == 0, result
        assert trim(result) == trim(case.expected)
    else:
        assert status == 1
        assert result.startswith("JSON schema conversion failed:\n")
    assert compare_with_oracle(case.schema) == "same"


# ---- our table ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema", TABLE, ids=[f"t{i}" for i in range(len(TABLE))])
def test_table_against_oracle(schema) -> None:  # noqa: ANN001
    count("table:" + compare_with_oracle(schema))


def test_table_size() -> None:
    assert len(TABLE) >= 250


# ---- integer ranges, exhaustively over small bounds and at random over large ones ------------------------------

def _int_bounds() -> list[dict]:
    rng = random.Random(6)
    out = []
    for _ in range(150):
        s: dict = {"type": "integer"}
        scale = rng.choice([10, 1000, 10**6, 10**12, 10**18])
        if rng.random() < 0.8:
            s["minimum"] = rng.randint(-scale, scale)
        if rng.random() < 0.8 or "minimum" not in s:
            s["maximum"] = rng.randint(-scale, scale)
        out.append(s)
    return out


def test_integer_ranges_against_oracle() -> None:
    results = [compare_with_oracle(s) for s in _int_bounds()]
    assert set(results) <= {"same", "empty-refused", "hang-refused"}
    assert results.count("same") >= 100


# ---- hypothesis ---------------------------------------------------------------------------------------------------

@settings(max_examples=320, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(schemas())
def test_generated_schemas_against_oracle(schema) -> None:  # noqa: ANN001
    count("hypothesis:" + compare_with_oracle(schema))


# ---- JSON mode ----------------------------------------------------------------------------------------------------

def test_json_mode_is_the_server_grammar() -> None:
    # llama-server: an empty schema means any object, for /completion and for response_format json_object
    assert server_json_schema({}) == {"type": "object"}
    o = oracle_convert(server_json_schema({}))
    assert o.ok and json_mode_gbnf() == o.text
    assert "root ::= object\n" in json_mode_gbnf()
    assert server_json_schema({"type": "string"}) == {"type": "string"}


# ---- documents drawn from our grammars, through llama.cpp's grammar sampler -------------------------------------

@pytest.fixture(scope="module")
def gpt2():
    from oracle.llama import vocab_model
    from oracle.sdist import vocab_gguf

    vm = vocab_model(vocab_gguf("gpt-2"))
    from oracle.llama import L

    return vm, L.llama_vocab_eos(vm.vocab)


@pytest.mark.parametrize("vocab", ["gpt-2", "qwen2", "llama-bpe"])
def test_documents_accepted_by_llama_and_valid(vocab: str) -> None:
    from oracle.llama import L, vocab_model
    from oracle.sdist import vocab_gguf

    vm = vocab_model(vocab_gguf(vocab))
    eos = L.llama_vocab_eos(vm.vocab)
    rng = random.Random(1234)
    checked = valid_checked = 0
    for schema in TABLE:
        a, v = check_documents(vm, eos, schema, rng)
        checked += a
        valid_checked += v
    COUNTS[f"table documents accepted by llama.cpp ({vocab})"] = checked
    COUNTS[f"table documents validated ({vocab})"] = valid_checked
    assert checked >= 400 and valid_checked >= 250


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(schemas(broken=False))
def test_generated_documents_accepted_by_llama_and_valid(gpt2, schema) -> None:  # noqa: ANN001
    vm, eos = gpt2
    a, v = check_documents(vm, eos, schema, random.Random(7), n=2)
    COUNTS["hypothesis documents accepted by llama.cpp"] = COUNTS.get("hypothesis documents accepted by llama.cpp",
                                                                      0) + a
    COUNTS["hypothesis documents validated"] = COUNTS.get("hypothesis documents validated", 0) + v


def test_grammar_loads_iff_llama_cpp_loads_it(gpt2) -> None:  # noqa: ANN001
    """Grammar.from_json_schema returns a Grammar exactly when llama.cpp's sampler accepts its own grammar."""
    from constrained.grammar import Grammar
    from oracle.llama import CGrammar

    vm, _eos = gpt2
    both = 0
    for schema in TABLE:
        text = schema_text(schema)
        status, result = ours(text)
        if status == 1:
            continue
        o = oracle_convert(text)
        try:
            CGrammar(vm, o.text.encode("utf-8", "surrogateescape")).free()
            llama_loads = True
        except ValueError:
            llama_loads = False
        try:
            Grammar.from_json_schema(text)
            we_load = True
        except SchemaError:
            we_load = False
        assert we_load == llama_loads, (text, o.text)
        both += 1
    COUNTS["grammars loaded iff llama.cpp loads them"] = both
    assert both >= 190




@settings(max_examples=200, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(chaos())
def test_arbitrary_keyword_soup_against_oracle(value) -> None:  # noqa: ANN001
    # never anything but a grammar or a SchemaError, and the same outcome as llama.cpp
    count("chaos:" + compare_with_oracle(value))


def test_integer_range_leaks_are_real_and_complete(gpt2) -> None:  # noqa: ANN001
    """The report's integer-range leak probe against (a) llama.cpp's sampler: the text it names is accepted by
    llama.cpp's grammar, and (b) an exhaustive check over small numbers: no leak is missed."""
    import re

    from constrained.json_schema._rules import int_range_body
    from constrained.json_schema.json_text import INT64_MAX, INT64_MIN
    from constrained.json_schema.report import integer_range_leaks
    from oracle.cases.json_schema import accepted_by_llama

    vm, eos = gpt2
    rng = random.Random(11)
    cands = [str(v) for v in range(-1500, 1501)] + [f"{s}0{v}" for s in ("", "-") for v in range(0, 150)]
    leaky = 0
    for _ in range(80):
        lo = rng.choice([INT64_MIN, rng.randint(-1200, 1200)])
        hi = rng.choice([INT64_MAX, rng.randint(-1200, 1200)])
        if lo > hi or (lo, hi) == (INT64_MIN, INT64_MAX):
            continue
        body = int_range_body(lo, hi, "#")
        rx = re.compile("".join(re.escape(t[1:-1]) if t.startswith('"') else t
                                for t in re.findall(r'"[^"]*"|\[[^\]]*\]|\{[^}]*\}|[()|]', body)))
        exhaustive = [c for c in cands if rx.fullmatch(c) and (
            (c.lstrip("-").startswith("0") and c not in ("0", "-0")) or not lo <= int(c) <= hi)]
        probe = integer_range_leaks(lo, hi)
        assert (probe is None) == (not exhaustive), (lo, hi, probe, exhaustive[:5])
        if probe is not None:
            leaky += 1
            schema = {"type": "integer"}
            schema.update({k: v for k, v in (("minimum", lo), ("maximum", hi)) if v not in (INT64_MIN, INT64_MAX)})
            o = oracle_convert(schema)
            assert accepted_by_llama(vm, eos, o.text, probe) is True, (schema, probe)
    COUNTS["integer range leaks confirmed by llama.cpp"] = leaky
    assert leaky >= 5


def test_double_dumps_against_oracle() -> None:
    """nlohmann's Grisu2 dump of doubles (in enum literals): random bit patterns, decimals and huge/tiny values."""
    import struct

    rng = random.Random(5)
    values: list[float] = []
    while len(values) < 3000:
        k = rng.random()
        if k < 0.5:
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        elif k < 0.8:
            x = rng.uniform(-1e6, 1e6)
        else:
            x = float(rng.randint(-10**17, 10**17)) * 10.0 ** rng.randint(-20, 20)
        if x == x and abs(x) != float("inf"):
            values.append(x)
    for i in range(0, len(values), 100):
        assert compare_with_oracle({"enum": values[i:i + 100]}) == "same"
    COUNTS["doubles dumped as llama.cpp does"] = len(values)


def test_zz_report_counts() -> None:
    print("\njson schema oracle counts:", dict(sorted(COUNTS.items())))
