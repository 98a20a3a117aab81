"""The matcher's API and llama.cpp's edge cases, each checked against llama.cpp's grammar sampler (CGrammar)."""

from __future__ import annotations

import numpy as np
import pytest

from constrained.grammar.ir import ElementType as T
from constrained.grammar.ir import ParsedGrammar
from constrained.grammar.matcher import compile_grammar
from constrained.vocab import Vocabulary
from oracle.cases.matcher import oracle_vocab, parse_gbnf
from oracle.llama import CGrammar


def _pair(vocab_name: str, gbnf: str):  # noqa: ANN202
    vm, vocab = oracle_vocab(vocab_name)
    return vm, vocab, compile_grammar(parse_gbnf(gbnf, vocab=vocab), vocab).matcher(), CGrammar(vm, gbnf)


def _same(m, c) -> None:  # noqa: ANN001
    assert np.array_equal(m.mask(), c.mask())


def test_eog_only_when_the_grammar_can_end() -> None:
    vm, vocab, m, c = _pair("gpt-2", 'root ::= "a" "b"')
    eos = 50256
    assert not m.allows(eos) and not c.allows(eos) and not m.can_end()
    assert not m.accept_token(eos) and m.num_accepted == 0
    for t in vocab.tokenize(b"ab"):
        assert m.accept_token(t)
        c.accept(t)
    _same(m, c)
    assert m.can_end() and m.allows(eos) and c.allows(eos) and not m.is_terminated()
    assert m.accept_token(eos) and m.is_terminated()
    c.accept(eos)
    _same(m, c)          # EOG leaves llama.cpp's state unchanged
    m.rollback(1)
    assert not m.is_terminated()


def test_unexpected_empty_grammar_stack_is_a_clean_false() -> None:
    # "ab" is allowed (the class takes "a", the token element then checks the id only), but accepting it leaves
    # no stack: llama.cpp throws "Unexpected empty grammar stack after accepting piece" (the process aborts)
    vm, vocab = oracle_vocab("gpt-2")
    (ab,) = vocab.tokenize(b"ab")
    gbnf = f'root ::= "a" <[{ab}]> | "b"'
    m = compile_grammar(parse_gbnf(gbnf, vocab=vocab), vocab).matcher()
    with CGrammar(vm, gbnf) as c:
        assert c.allows(ab) and m.allows(ab)
        _same(m, c)
    before = m.stacks
    assert not m.accept_token(ab)
    assert m.stacks == before and m.num_accepted == 0


def test_partial_utf8_across_tokens_and_stray_continuations() -> None:
    vm, vocab, m, c = _pair("gpt-2", 'root ::= "€"+ "!"')
    ids = {p: i for i, p in enumerate(vocab.pieces) if len(p) == 1}
    e2, x82, xac = ids[b"\xe2"], ids[b"\x82"], ids[b"\xac"]
    assert not m.allows(x82) and not c.allows(x82)           # a stray continuation byte
    _same(m, c)
    for t in (e2, x82, xac, e2):
        assert m.allows(t) == c.allows(t) is True
        assert m.accept_token(t)
        c.accept(t)
        _same(m, c)
        assert m.partial_utf8[1] >= 0
    assert m.partial_utf8 == (0xE2 & 0x0F, 2)
    assert not m.allows(ids[b"!"]) and not c.allows(ids[b"!"])


def test_accept_bytes_equals_accepting_the_tokens() -> None:
    vm, vocab, m, c = _pair("qwen2", 'root ::= "{" [a-z"]* ":" " "? [0-9]+ "}"')
    text = b'{"abc": 12}'
    f = m.fork()
    assert f.accept_bytes(text[:5]) and f.accept_bytes(text[5:])
    for t in vocab.tokenize(text):
        assert m.accept_token(t)
        c.accept(t)
    assert np.array_equal(f.mask(), c.mask()) and f.can_end()
    assert not f.accept_bytes(b"x") and not f.accept_bytes(b"\x82")
    assert f.num_accepted == 2
    c.free()


def test_compile_cache_and_shared_vocabulary_index() -> None:
    v = Vocabulary([b"a", b"b", b"ab"], eog_ids=[])
    g1 = ParsedGrammar((((T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0)
    g2 = ParsedGrammar((((T.CHAR, 98), (T.END, 0)),), {"root": 0}, 0)
    a, b = compile_grammar(g1, v), compile_grammar(g2, v)
    assert compile_grammar(g1, v) is a and a is not b and a.index is b.index
    assert a.matcher().mask().tolist() == [True, False, False]
    assert b.matcher().mask().tolist() == [False, True, False]


def test_misuse_raises() -> None:
    v = Vocabulary([b"a"], eog_ids=[])
    m = compile_grammar(ParsedGrammar((((T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0), v).matcher()
    with pytest.raises(ValueError):
        m.allows(1)
    with pytest.raises(ValueError):
        m.accept_token(-1)
    with pytest.raises(ValueError):
        m.rollback(1)
    with pytest.raises(TypeError):
        compile_grammar("root ::= x", v)
    assert not m.mask().flags.writeable


def test_left_recursive_rules_are_refused_not_expanded_forever() -> None:
    from constrained.errors import GrammarStateError

    v = Vocabulary([b"a"])
    left = ParsedGrammar((((T.RULE_REF, 0), (T.CHAR, 97), (T.ALT, 0), (T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0)
    hidden = ParsedGrammar((((T.RULE_REF, 1), (T.RULE_REF, 0), (T.CHAR, 120), (T.ALT, 0), (T.CHAR, 98), (T.END, 0)),
                            ((T.RULE_REF, 2), (T.END, 0)), ((T.END, 0),)), {"root": 0, "e": 1, "e_2": 2}, 0)
    bad_ref = ParsedGrammar((((T.RULE_REF, 5), (T.END, 0)),), {"root": 0}, 0)
    for g in (left, hidden, bad_ref):
        with pytest.raises(GrammarStateError):
            compile_grammar(g, v)
