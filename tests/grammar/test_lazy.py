"""LazyMatcher: llama.cpp's lazy-grammar rules on small vocabularies (the oracle walks are in test_lazy_oracle.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from constrained.errors import ConstrainedError, TriggerPatternError
from constrained.grammar import Grammar
from constrained.grammar.lazy import LazyMatcher
from constrained.grammar.lazy_grammar import LazyGrammar, lazy_grammar
from constrained.vocab import Vocabulary
from sampler import Params, Sampler

PIECES = [b"hi", b" <", b"call", b">", b"{", b"}", b"</s>", b"x", b"<call>", b">x", b"ok<call>{", b"<", b"y",
          b"<call>{}", b"C"]
V = Vocabulary(PIECES, eog_ids=[6])
T = {p: i for i, p in enumerate(PIECES)}
G = Grammar.from_gbnf('root ::= "<call>{" [xy]* "}"')


def m_(patterns=("<call>",), tokens=()) -> LazyMatcher:
    m = G.matcher(V, trigger_patterns=list(patterns), trigger_tokens=list(tokens))
    assert isinstance(m, LazyMatcher)
    return m


def feed(m: LazyMatcher, *pieces: bytes) -> None:
    for p in pieces:
        assert m.accept_token(T[p]), p


def test_plain_matcher_without_triggers() -> None:
    assert not isinstance(G.matcher(V), LazyMatcher)


def test_waits_then_replays_split_trigger() -> None:
    m = m_()
    feed(m, b"hi", b" <", b"call")
    assert not m.triggered and m.buffer == b"hi <call" and m.mask().sum() == len(V) - 1   # all but ">x"
    # ">" completes the trigger: the replay is "<" (trimmed from " <"), "call", ">"
    feed(m, b">")
    assert m.triggered
    assert m.mask()[T[b"{"]] and not m.mask()[T[b"x"]]


def test_token_carrying_text_past_the_trigger_is_replayed_and_refused_when_rejected() -> None:
    m = m_()
    feed(m, b"hi", b" <", b"call")
    assert not m.allows(T[b">x"])            # "<call>x": the grammar wants "{" after "<call>": llama.cpp throws
    mask = m.mask()
    assert not mask[T[b">x"]] and mask.sum() == len(V) - 1
    assert not m.accept_token(T[b">x"]) and not m.triggered and m.buffer == b"hi <call"
    m2 = m_()
    assert m2.accept_token(T[b"ok<call>{"]) and m2.triggered   # leading "ok" cut, "{" replayed
    assert m2.mask()[T[b"x"]]


def test_token_trigger_discards_earlier_text() -> None:
    m = m_(patterns=(), tokens=[T[b"<call>"]])
    feed(m, b"hi", b"<", b"call")
    assert not m.triggered
    feed(m, b"<call>")
    assert m.triggered and m.mask()[T[b"{"]]
    # a trigger token the grammar rejects is refused, whatever the state
    m3 = G.matcher(V, trigger_tokens=[T[b"x"]])
    assert not m3.allows(T[b"x"]) and not m3.mask()[T[b"x"]]


def test_pattern_order_not_position_picks_the_winner() -> None:
    # both patterns match "<call>{"; the first in list order starts the replay at its group ("{" -> rejected)
    m = m_(patterns=(r"<call>(\{)", r"<call>"))
    feed(m, b"hi")
    assert not m.allows(T[b"<call>{}"])
    m = m_(patterns=(r"<call>", r"<call>(\{)"))
    assert m.allows(T[b"<call>{}"])


def test_first_non_empty_group_starts_the_replay() -> None:
    m = m_(patterns=(r"(x?)<(call)>",))         # group 1 empty, group 2 "call": replay "call>..." -> rejected
    assert not m.allows(T[b"<call>"])
    m = m_(patterns=(r"(x?)(<call>)",))
    assert m.allows(T[b"<call>"])


def test_rollback_fork_reset() -> None:
    m = m_()
    feed(m, b"hi", b" <", b"call", b">", b"{", b"x")
    assert m.triggered and m.num_accepted == 6
    f = m.fork()
    m.rollback(3)
    assert not m.triggered and m.buffer == b"hi <call"
    assert f.triggered and f.mask()[T[b"}"]]
    feed(m, b">", b"{")
    assert m.triggered
    m.reset()
    assert not m.triggered and m.buffer == b"" and m.num_accepted == 0
    with pytest.raises(ValueError):
        m.rollback(1)


def test_end_of_generation() -> None:
    m = m_()
    assert m.allows(6) and m.can_end() and m.stacks and any(m.stacks)
    feed(m, b"<call>", b"{", b"}")
    assert m.allows(6) and m.accept_token(6) and m.is_terminated()


def test_bad_input() -> None:
    with pytest.raises(TriggerPatternError) as e:
        G.matcher(V, trigger_patterns=["a{,3}"])
    assert isinstance(e.value, ConstrainedError)
    with pytest.raises(ValueError):
        G.matcher(V, trigger_tokens=[99])
    with pytest.raises(TypeError):
        G.matcher(V, trigger_patterns="<call>")
    with pytest.raises(ValueError):
        m_().allows(-1)


def test_lazy_grammar_carries_its_triggers() -> None:
    g = lazy_grammar(G, [r"<call>"])
    assert isinstance(g, LazyGrammar) and isinstance(g.matcher(V), LazyMatcher)
    g2 = pickle.loads(pickle.dumps(g))
    assert g2 == g and g2.trigger_patterns == ("<call>",)


def test_sample_constrained_redraws_a_refused_token() -> None:
    """The refused token is the chain's pick; sample_constrained redraws among the mask, as llama-server would if
    it did not throw."""
    m = m_()
    feed(m, b"hi", b" <", b"call")
    s = Sampler(Params(seed=1, temp=0.0), V)
    logits = np.zeros(len(V), dtype=np.float32)
    logits[T[b">x"]] = 10.0
    logits[T[b">"]] = 5.0
    tok, redrawn = s.sample_constrained(logits, m.allows, m.mask)
    assert redrawn and tok == T[b">"]
    logits[T[b">x"]] = 0.0
    tok, redrawn = s.sample_constrained(logits, m.allows, m.mask)
    assert not redrawn and tok == T[b">"]


def test_long_wait_keeps_working() -> None:
    m = m_()
    for _ in range(3000):
        assert m.accept_token(T[b"hi"])
    assert not m.triggered and len(m.buffer) == 6000
    feed(m, b"<call>", b"{", b"}")
    assert m.triggered and m.can_end()
