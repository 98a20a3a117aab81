"""llama.cpp's tests/test-grammar-integration.cpp, replayed: every ``test_grammar`` (and, where the schema
converter is available, every ``test_schema``) case, read from the C++ source at test time.

Each string is fed as the C++ test feeds it (``llama_grammar_accept_token`` per code point, token id 0, or per
``token(n)`` marker) through our exact port of the stack machine, and again token by token through the public
:class:`GrammarMatcher` over a vocabulary made of those pieces; both verdicts must be the C++ test's.
"""

from __future__ import annotations

import json

import pytest

from constrained.grammar.matcher import compile_grammar
from constrained.grammar.stacks import GrammarRules
from constrained.grammar.tokenindex import decode_utf8
from constrained.vocab import Vocabulary
from oracle.cases.matcher import cpp_calls, integration_pieces, parse_gbnf, reference_parse
from oracle.sdist import llama_cpp_source


def _cases() -> list:
    src = (llama_cpp_source() / "tests" / "test-grammar-integration.cpp").read_text()
    out = []
    for desc, grammar, passing, failing in cpp_calls(src, "test_grammar"):
        out.append(pytest.param("gbnf", grammar.decode(), passing, failing, id=f"grammar-{desc.decode()}"))
    for desc, schema, passing, failing in cpp_calls(src, "test_schema"):
        out.append(pytest.param("schema", schema.decode(), passing, failing, id=f"schema-{desc.decode()}"))
    return out


CASES = _cases()


def test_case_counts() -> None:
    kinds = [c.values[0] for c in CASES]
    assert kinds.count("gbnf") == 14 and kinds.count("schema") == 33


def _grammar_text(kind: str, text: str) -> str:
    if kind == "gbnf":
        return text
    try:
        from constrained.json_schema import json_schema_to_gbnf
    except ImportError:  # pragma: no cover
        pytest.skip("schema converter not available")
    return json_schema_to_gbnf(json.loads(text))


def _match_stacks(rules: GrammarRules, data: bytes) -> bool:
    # as test-grammar-integration's match_string
    stacks, partial = rules.initial_stacks(), (0, 0)
    for tid, piece in integration_pieces(data):
        cps, val, rem = decode_utf8(piece, *partial)
        res = rules.accept_token(stacks, partial, tid, cps, (val, rem))
        if res is None:
            return False
        stacks, partial = res
    return any(not s for s in stacks)


@pytest.mark.parametrize(("kind", "text", "passing", "failing"), CASES)
def test_integration_case(kind: str, text: str, passing: list[bytes], failing: list[bytes]) -> None:
    gbnf = _grammar_text(kind, text)
    parsed = reference_parse(gbnf)
    try:
        ours = parse_gbnf(gbnf)
    except ValueError:   # the package parser refuses more than llama.cpp (e.g. "( [x]* )*"): its own tests' business
        ours = None
    if ours is not None:
        assert ours.rules == parsed.rules   # the package parser agrees with the plain port
    rules = GrammarRules(parsed)
    for s in passing:
        assert _match_stacks(rules, s), s
    for s in failing:
        assert not _match_stacks(rules, s), s

    # the same verdicts through the public matcher, one vocabulary token per piece
    strings = [*passing, *failing]
    pieces: dict[bytes, int] = {}
    seqs = []
    for s in strings:
        seq = []
        for tid, piece in integration_pieces(s):
            if tid:
                seq.append(tid)
            else:
                seq.append(pieces.setdefault(piece, 100 + len(pieces)))
        seqs.append(seq)
    table = [b"<[%d]>" % i for i in range(100)] + list(pieces)
    vocab = Vocabulary(table, eog_ids=[99])
    cg = compile_grammar(parsed, vocab)
    for s, seq in zip(strings, seqs, strict=True):
        m = cg.matcher()
        ok = all(m.accept_token(t) for t in seq) and m.can_end() and m.allows(99)
        assert ok == (s in passing), s
