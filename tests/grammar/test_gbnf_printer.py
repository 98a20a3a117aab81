"""``str(grammar)``: GBNF that parses back to the same rules, and that llama.cpp loads to the same language.

- structural round trip: ``Grammar.from_gbnf(str(g))`` has, rule for rule, the same element vectors up to the
  renumbering of rule ids (helper names are printed ``root-1`` since GBNF names cannot hold ``_``);
- llama.cpp accepts every printed grammar, and on random walks its own masks for the original text and for the
  printed text are identical at every step (llama.cpp against itself: no dependence on our matcher).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from constrained.errors import GrammarSyntaxError
from constrained.grammar import Grammar
from constrained.grammar.grammar import _printable_names
from constrained.grammar.ir import TEXT_TOKEN, TEXT_TOKEN_NOT, ElementType
from oracle.cases.gbnf import valid_gbnf_grammars
from oracle.sdist import llama_cpp_source, vocab_gguf

_REF = int(ElementType.RULE_REF)
_TEXT = (TEXT_TOKEN, TEXT_TOKEN_NOT)


def assert_same_rules(g: Grammar) -> Grammar:
    """Re-parse ``str(g)`` and check every rule maps to an identical one under the printed names."""
    text = str(g)
    g2 = Grammar.from_gbnf(text, g.root)
    printed = _printable_names(g.rule_names)
    mapping = [g2.symbol_ids[name] for name in printed]
    assert len(g2.rules) == len(g.rules)
    assert sorted(mapping) == list(range(len(g.rules)))
    texts = {i: t for i, t in enumerate(g.token_texts)}
    index2 = {t: i for i, t in enumerate(g2.token_texts)}
    for i, rule in enumerate(g.rules):
        expected = tuple((k, mapping[v]) if k == _REF else (k, index2[texts[v]]) if k in _TEXT else (k, v)
                         for k, v in rule)
        assert g2.rules[mapping[i]] == expected, (printed[i], text)
    assert sorted(g2.token_texts) == sorted(g.token_texts)
    return g2


def _llama_grammar_texts() -> dict[str, str]:
    folder = llama_cpp_source() / "grammars"
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.gbnf"))}


def _bundled_texts() -> dict[str, str]:
    from constrained.grammars import load, names

    return {f"ours-{n}": load(n) for n in names()}


_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 8},
                                      "age": {"type": "integer", "minimum": 0},
                                      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
     "required": ["name"]},
    {"type": "array", "items": {"type": "number"}, "minItems": 1},
    {"enum": ["red", "green", "blü\u00e9", 3, None]},
    {"type": "string", "pattern": "^[a-z]{2,4}-\\d+$"},
]


def _schema_texts() -> dict[str, str]:
    try:
        from constrained.json_schema import json_schema_to_gbnf
    except ImportError:  # pragma: no cover - the schema converter is another module
        return {}
    return {f"schema{i}": json_schema_to_gbnf(s) for i, s in enumerate(_SCHEMAS)}


def _all_texts() -> dict[str, str]:
    return {**_llama_grammar_texts(), **_bundled_texts(), **_schema_texts()}


def test_round_trip_known_grammars():
    texts = _all_texts()
    assert len(texts) >= 8 + 7
    for name, text in texts.items():
        assert_same_rules(Grammar.from_gbnf(text)), name


def test_round_trip_test_grammar_parser_cases():
    from oracle.cases.gbnf_parity import grammar_parser_cases

    _, PARSINGS = grammar_parser_cases()  # noqa: N806

    for text, _, _ in PARSINGS:
        assert_same_rules(Grammar.from_gbnf(text))


@pytest.mark.parametrize("text", [
    'root ::= "\\x00\\x01\\x7F\\"\\\\\\n\\r\\t" [\\x00-\\x1F] [\\x5Ea] [a^] [\\]\\-\\[] [^"]',
    'root ::= "\\uD800\\uDFFF\\U0010FFFF\\U00110000\\UFFFFFFFF" [\\uD800-\\uDBFF]',
    'root ::= "é\u3042\U0001F600" [à-ÿ] "\u200b\u00a0"',
    'root ::= <s> !</s>* <[7]> !<[8]> | ""',
    'root ::= x\nx ::= | "a" x ""',
    'root ::= root-1 (root-1)*\nroot-1 ::= "r"',   # a user rule named like a printed helper
    'root ::= "a"{0,3} ("b" | "c"){2,} [x]? .*',
    'root ::= [a]',
])
def test_round_trip_edge_cases(text):
    assert_same_rules(Grammar.from_gbnf(text))


def test_printed_helper_names_do_not_clash():
    g = Grammar.from_gbnf('root ::= root-1 "x"*\nroot-1 ::= "r"')
    text = str(g)
    assert "root-1 ::= " in text and "root-2-h" not in text
    g2 = Grammar.from_gbnf('root ::= "x"* root-1\nroot-1 ::= "r"')
    assert "root-1-h ::= " in str(g2)
    assert_same_rules(g2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_gbnf_grammars())
def test_round_trip_generated(text):
    try:
        g = Grammar.from_gbnf(text)
    except GrammarSyntaxError:
        return
    assert_same_rules(g)


# ---------------------------------------------------------------------------------------------- llama.cpp

llama_oracle = pytest.importorskip("oracle.llama", reason="llama-cpp-python is not installed")


def _walk_masks_agree(vm, text_a: str, text_b: str, rng: random.Random, steps: int) -> int:
    """Random walk (tokens drawn from llama.cpp's allowed set, preferring to end) through two grammars, asserting
    equal full masks at every step; returns the number of compared masks."""
    compared = 0
    with llama_oracle.CGrammar(vm, text_a) as a, llama_oracle.CGrammar(vm, text_b) as b:
        for _ in range(steps):
            ma, mb = a.mask(), b.mask()
            assert np.array_equal(ma, mb)
            compared += 1
            allowed = np.flatnonzero(ma)
            allowed = [t for t in allowed.tolist() if not vm.is_eog(t)]
            if not allowed:
                break
            tok = rng.choice(allowed)
            a.accept(tok)
            b.accept(tok)
    return compared


def test_llama_accepts_printed_grammars_and_masks_agree():
    vm = llama_oracle.vocab_model(vocab_gguf("llama-spm"))
    rng = random.Random(1234)
    compared = grammars = 0
    for text in _all_texts().values():
        printed = str(Grammar.from_gbnf(text))
        llama_oracle.CGrammar(vm, printed).free()  # raises if llama.cpp refuses it
        compared += _walk_masks_agree(vm, text, printed, rng, steps=6)
        grammars += 1
    assert grammars >= 15 and compared >= 60
