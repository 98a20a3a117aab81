"""Lazy grammars against llama.cpp's own lazy grammar sampler (``llama_sampler_init_grammar_lazy_patterns``).

Random walks on four vocabularies cross the trigger at different token boundaries: split over several tokens,
completed inside a token that carries more text, a trigger token, a pattern with a capture group, several patterns,
a whole-text (``^...$``) pattern. At every step:

- before the trigger llama.cpp masks nothing; ours masks only the refused tokens, and each refusal is confirmed by
  llama.cpp throwing on it ("Unexpected empty grammar stack"), while a sample of the tokens we allow (every token
  that can complete a trigger there among them) is accepted by llama.cpp without throwing;
- after the trigger the full-vocabulary masks are identical;
- llama.cpp's ``awaiting_trigger`` flag equals ``not triggered``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrained.grammar import Grammar
from constrained.grammar.lazy_regex import regex_escape
from constrained.vocab import Vocabulary
from oracle.lazy import CLazyGrammar
from oracle.llama import vocab_model
from oracle.sdist import vocab_gguf

GBNF = r'''root ::= "<call>" body | "call>" body | "{" ws inner
body ::= ws "{" ws inner
inner ::= "\"name\"" ws ":" ws ("\"get\"" | "\"set\"") ws "}" ws
ws ::= [ \t\n]{0,3}
'''
BODY = '{"name": "get"}'

# (name, patterns, token-trigger text or None, target texts to steer the walk across the trigger)
SCENARIOS = [
    ("word", [regex_escape("<call>")], None,
     ["I will call it now.<call>" + BODY, "x <call> " + BODY, "<call>\n" + BODY]),
    ("group", [r"[\s\S]*?(<call>)[\s\S]*"], None, ["Sure: <call>" + BODY, "<<call>" + BODY]),
    ("full", [r"^[\s\S]*?(<call>)[\s\S]*$"], None, ["ok <call>" + BODY]),
    ("group-cut", [r"<(call>)"], None, ["hello <call>" + BODY, "a<call> " + BODY]),
    ("several", [regex_escape("<nope>"), r"\{\s?\"name\"", regex_escape("<call>")], None,
     ["text {\"name\": \"set\"}", "x<call>" + BODY]),
    ("token", [], "{", ["Here {\"name\": \"get\"}", "{\"name\":\"set\"}"]),
    ("token+word", [regex_escape("<call>")], "{", ["a <call>" + BODY, "b {\"name\": \"get\"}"]),
]
VOCABS = ["gpt-2", "phi-3", "qwen2", "llama-bpe"]
# non-literal patterns make the waiting mask try every token (the slow path): on the two smaller vocabularies
SMALL = ("gpt-2", "phi-3")
UNBOUNDED = ("several", "group-cut")   # non-literal patterns: the waiting mask tries every token


def _steer(vocab: Vocabulary, rng: random.Random, rest: bytes, allowed: np.ndarray | None,
           trigger_tokens: list[int]) -> int | None:
    """A random token whose piece is a prefix of ``rest`` (or extends past its end), or None."""
    for t in trigger_tokens:
        if rest.startswith(vocab.pieces[t]):
            return t
    marks = [vocab.pieces[t] for t in trigger_tokens]
    choices = []
    for t, p in _prefix_tokens(vocab, rest[:12]):
        if allowed is not None and not allowed[t]:
            continue
        if any(m in p for m in marks):
            continue   # reach a trigger token's text with the token itself
        choices.append(t)
    return rng.choice(choices) if choices else None


_PREFIX_CACHE: dict = {}


def _prefix_tokens(vocab: Vocabulary, head: bytes) -> list[tuple[int, bytes]]:
    key = (id(vocab), head)
    got = _PREFIX_CACHE.get(key)
    if got is None:
        by_first = _PREFIX_CACHE.setdefault((id(vocab), "first"), {})
        if not by_first:
            for t, p in enumerate(vocab.pieces):
                if p and not vocab.is_eog(t):
                    by_first.setdefault(p[:1], []).append((t, p))
        got = [(t, p) for t, p in by_first.get(head[:1], []) if head.startswith(p) or p.startswith(head)]
        _PREFIX_CACHE[key] = got
    return got


WORDS = [b"<call>", b"call>", b'{"name', b'{ "name', b"{"]


def _completing(vocab: Vocabulary, buf: bytes) -> list[int]:
    """Tokens that can complete one of the triggers after ``buf`` (for the allow-side sample)."""
    key = (id(vocab), "marks")
    marks = _PREFIX_CACHE.get(key)
    if marks is None:
        marks = _PREFIX_CACHE[key] = [(t, p) for t, p in enumerate(vocab.pieces)
                                      if any(c in p for c in (b"<", b">", b"{", b'"', b"l"))]
    words = WORDS
    out = []
    for t, p in marks:
        s = buf[-8:] + p
        if any(w in s and w not in buf[-8:] for w in words):
            out.append(t)
    return out


_PAIRS: dict[str, tuple[Vocabulary, object]] = {}

# unbounded (non-literal) patterns run on the smaller vocabularies only: the waiting mask tries every token
CASES = [(v, s) for v in VOCABS for s in SCENARIOS if s[0] not in UNBOUNDED or v in SMALL]


def _vocab_pair(name: str) -> tuple[Vocabulary, object]:
    if name not in _PAIRS:
        path = vocab_gguf(name)
        _PAIRS.clear()                       # one vocabulary at a time: CASES are ordered by vocabulary
        _PAIRS[name] = (Vocabulary.from_gguf(path), vocab_model(path))
    return _PAIRS[name]


@pytest.mark.parametrize("vocab_name, scenario", CASES, ids=[f"{v}-{s[0]}" for v, s in CASES])
def test_lazy_walks_match_llama(vocab_name: str, scenario: tuple) -> None:
    vocab, vm = _vocab_pair(vocab_name)
    name, patterns, token_text, targets = scenario
    rng = random.Random(hash((name, vocab.name)) & 0xFFFF)
    tokens = []
    if token_text is not None:
        tokens = [vocab.pieces.index(token_text.encode())]
    g = Grammar.from_gbnf(GBNF)
    stats = {"refused": 0, "allowed_checked": 0, "masks": 0}
    for target in targets:
        ours = g.matcher(vocab, trigger_patterns=patterns, trigger_tokens=tokens)
        with CLazyGrammar(vm, GBNF, patterns, tokens) as ref:
            rest = target.encode()
            for step in range(40):
                assert ref.awaiting == (not ours.triggered), (name, step)
                mine = ours.mask()
                theirs = ref.mask()
                stats["masks"] += 1
                if ours.triggered:
                    assert np.array_equal(mine, theirs), (name, step, np.flatnonzero(mine != theirs)[:10])
                else:
                    assert theirs.all()
                    refused = np.flatnonzero(~mine)
                    for t in refused.tolist():
                        assert ref.throws_on(t), (name, step, t, vocab.pieces[t])
                        assert not ours.allows(t)
                        stats["refused"] += 1
                    buf = ours.buffer
                    sample = _completing(vocab, buf)[:60] + rng.sample(range(len(vocab)), 20)
                    for t in sample:
                        if mine[t]:
                            assert not ref.throws_on(t), (name, step, t, vocab.pieces[t])
                            assert ours.allows(t)
                            stats["allowed_checked"] += 1
                # next token: steer along the target, else a random allowed token
                tok = _steer(vocab, rng, rest, mine, tokens) if rest else None
                if tok is not None and not mine[tok]:
                    assert ref.throws_on(tok)
                    tok = None
                if tok is None:
                    allowed = np.flatnonzero(mine & ~np.isin(np.arange(len(vocab)), vocab.eog_ids))
                    if ours.triggered and ours.can_end() and rng.random() < 0.3:
                        break
                    if not len(allowed):
                        break
                    tok = int(rng.choice(allowed))
                else:
                    p = vocab.pieces[tok]
                    rest = rest[len(p):] if rest.startswith(p) else b""
                assert ours.accept_token(tok)
                ref.accept(tok)
            assert ours.triggered, (name, target)
    assert stats["allowed_checked"] > 0
