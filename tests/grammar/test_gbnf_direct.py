"""The direct GBNF reader (``gbnf._direct_parse``, taken by default) against lark's (``gbnf.lark``, the reference):
wherever the direct reader answers, its rules, items and offsets are lark's; wherever lark refuses a text, the
direct reader leaves it to lark (so every error is lark's, in llama.cpp's words). The direct reader must also
answer, not fall back, on every grammar the JSON-schema converter builds without token references, else the
speed-up is lost silently. (The llama.cpp parity tests of test_gbnf_parser.py run through the direct reader too.)
"""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.errors import GrammarSyntaxError
from constrained.grammar import Grammar
from constrained.grammar import gbnf as G
from constrained.json_schema import json_schema_to_gbnf
from oracle.cases.gbnf import gbnf_grammars, valid_gbnf_grammars


def _lark(latin: str):
    G._local.ctx = G._Context(latin, G.DEFAULT_LIMITS, None)
    try:
        return G._parser().parse(latin)
    except Exception:  # noqa: BLE001 - lark refuses it (an error for parse_gbnf to report)
        return None
    finally:
        G._local.ctx = None


def _same(text: str | bytes) -> bool:
    """Both readers agree on ``text``; True when the direct one answered."""
    data = G.to_bytes(text)
    latin = data.split(b"\0", 1)[0].decode("latin-1")
    direct = G._direct_parse(latin, G.DEFAULT_LIMITS)
    if direct is None:
        return False
    assert direct == _lark(latin), text
    return True


def _schemas() -> list:
    """The schemas of llama.cpp's converter test (test-json-schema-to-grammar.cpp) that it converts."""
    import json

    from oracle.cases.json_schema import upstream_cases

    out = []
    for case in upstream_cases():
        if not case.success:
            continue
        try:
            out.append(json.loads(case.schema))
        except ValueError:
            continue
    return out


def test_converter_grammars_read_directly() -> None:
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_cold_path import ENGINE_SCHEMAS

    schemas = [s for s, _ in ENGINE_SCHEMAS]
    schemas += _schemas()
    n = 0
    for schema in schemas:
        for enforce in ("llama.cpp", "all"):
            try:
                text = json_schema_to_gbnf(schema) if enforce == "llama.cpp" else \
                    Grammar.from_json_schema(schema, enforce="all").source
            except Exception:  # noqa: BLE001,S112 - a schema the converter refuses
                continue
            if "<" in text.replace('"<"', ""):
                continue
            assert _same(text), f"the direct reader fell back on the converter's grammar:\n{text}"
            n += 1
    assert n >= 80


def test_bundled_and_llama_cpp_grammars() -> None:
    import constrained.grammars as bundled

    from oracle.sdist import llama_cpp_source

    files = sorted(pathlib.Path(bundled.__file__).parent.glob("*.gbnf"))
    files += sorted((pathlib.Path(llama_cpp_source()) / "grammars").glob("*.gbnf"))
    assert len(files) >= 10
    for f in files:
        assert _same(f.read_bytes()) or b"<" in f.read_bytes(), f


@pytest.mark.parametrize("text", [
    "", "\n\n", "# only a comment\n", "root ::=", "root ::= \n", 'root ::= "a"+', 'root ::= ("a"\n | "b"){2,5} x\n'
    'x ::= [^a-z]* . # c\n\n', 'a ::= b{3,}\nb ::= "x"{0,2001}', 'root ::= "a"{ 1 , 2 }', 'root ::= (((("x"))))',
    'root ::= "\\x41\\u00e9\\U0001F600" [\\]-\\\\]', "root ::= x\r\nx ::= \"y\"\r", 'root ::= "é" [é-ü]', 'root ::= ""*',
    'root ::= "a"{3,1}', 'root ::= *', 'root ::= {2}', 'root ::= "a"{99999999999999999999}', 'root ::= "a" ::= "b"',
    'root ::= "a\n', 'root ::= [a', 'root ::= ( "a"', 'root ::= "a" )', "root ::= <think>", 'root ::= !<[12]>',
    'root := "a"', "root ::= \"\\q\"", 'root ::= "a"{2001}', "root\n::= \"a\"", "root ::= a\n | b",
    "root ::= (\n\"a\"\n)\n", 'root ::= "a"{,2}', 'root ::= "a"\x0c', "ab-1 ::= 12 | 3-x\n12 ::= \"1\"\n3-x ::= \"3\"",
])
def test_cases(text: str) -> None:
    _same(text)


def test_refused_texts_keep_lark_errors() -> None:
    for text in ['root ::= "a"{3,1}', 'root ::= [a', 'root ::= ( "a"', "root ::= \"\\q\"", 'root ::= ""*']:
        with pytest.raises(GrammarSyntaxError) as direct:
            Grammar.from_gbnf(text)
        G._DIRECT = False
        try:
            with pytest.raises(GrammarSyntaxError) as lark:
                Grammar.from_gbnf(text)
        finally:
            G._DIRECT = True
        assert str(direct.value) == str(lark.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gbnf_grammars())
def test_generated_grammars(text: str) -> None:
    _same(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_gbnf_grammars())
def test_generated_valid_grammars(text: str) -> None:
    _same(text)


_ALPHABET = st.sampled_from(list('root ::= "a"|()[]^-\\x{},*+?.<>!#\n\r\t 0123456789abcé_') + ["\\x41", "\\u00e9"])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_gbnf_like_text(text: str) -> None:
    _same("root ::= " + text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=120))
def test_random_bytes(data: bytes) -> None:
    _same(b"root ::= " + data)
