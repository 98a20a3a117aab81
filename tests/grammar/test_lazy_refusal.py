"""The waiting mask of a lazy grammar with non-literal trigger patterns (issue 28, finding 7): bounded and exact.

While waiting, ``LazyMatcher.mask()`` leaves out the tokens that complete a trigger whose replay the grammar rejects
(where llama.cpp throws). For a non-literal pattern that meant one trigger search per vocabulary token on every
refused token (0.5-5 s on a 262k vocabulary). Now the tokens are grouped by their piece read through the patterns'
byte classes (the coarsest partition of the bytes that every literal, class, category and word boundary of the
patterns is a union of: no pattern can tell two bytes of a class apart, so two pieces of the same class sequence
search alike, start included) and one search runs per group; the replays stay per token (a plain mask where the
replay starts at the piece).

Proven here: the mask equals the definition (every token's own search and replay, as before) on a real vocabulary
for literal, non-literal, anchored, word-boundary, lookahead and hostile patterns over varied buffers; the searches
per mask are bounded by the group count, far below the vocabulary. ``test_lazy_oracle.py`` compares the masks with
llama.cpp's own lazy grammar (a token refused here is one llama.cpp throws on, one allowed is one it accepts).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrained.grammar import Grammar
from constrained.grammar.lazy import _class_table
from constrained.grammar.lazy_regex import TriggerPattern
from constrained.vocab import Vocabulary
from oracle.sdist import vocab_gguf

GBNF = r'''root ::= "<call>" ws obj | "call>" ws obj | obj | "x" [a-z]*
obj ::= "{" ws "\"name\"" ws ":" ws "\"" [a-z]+ "\"" ws "}"
ws ::= [ \t\n]{0,2}
'''

PATTERNS = [
    [""], [".*"], [r"[\s\S]*"], [r"(a+)+$"], [r"\w+"], [r"<(call>)"], [r"\{\s?\"name\""],
    [r"[\s\S]*?(<call>)[\s\S]*"], [r"^\s*\{"], [r"\bfoo\w*\("], [r"x{2,5}y|<call>"], [r"(?=<)<c"],
    [r"[^a-z]{3}"], [r"\d+\.\d*"], ["<nope>", r"x[yz]?", r"<(call>)"], [r"(\s*)(x)"],
]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_gguf(vocab_gguf("gpt-2"))


def _definition(m, vocab: Vocabulary) -> np.ndarray:  # noqa: ANN001
    """The refused tokens by definition: each token's own search (first pattern, replay start) and replay."""
    assert not m.trigger_tokens
    bad = []
    for t, piece in enumerate(vocab.pieces):
        k, start = m._search(piece)
        if k >= 0 and m._replay(t, piece, start) is None:
            bad.append(t)
    return np.array(bad, dtype=np.int64)


def _buffers(vocab: Vocabulary, rng: random.Random, m) -> list:  # noqa: ANN001
    """The matcher after a few waiting tokens (random ones, and some steered towards the patterns' texts)."""
    out = [m.fork()]
    ids = {p: i for i, p in enumerate(vocab.pieces)}
    texts = [ids[t] for t in (b"a", b" aa", b"aa", b"foo", b"x", b"<", b"{", b" ", b"12", b".", b"\n") if t in ids]
    for _ in range(3):
        w = m.fork()
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.6:
                t = rng.choice(texts) if rng.random() < 0.9 else rng.randrange(len(vocab))
            else:
                t = rng.randrange(len(vocab))
            probe = w.fork()
            if probe.accept_token(t) and not probe.triggered:
                w.accept_token(t)
        out.append(w)
    return out


@pytest.mark.parametrize("patterns", PATTERNS, ids=[" | ".join(p) or "empty" for p in PATTERNS])
def test_refused_equals_the_definition(vocab: Vocabulary, patterns: list[str]) -> None:
    g = Grammar.from_gbnf(GBNF)
    rng = random.Random(hash(tuple(patterns)) & 0xFFFF)
    m0 = g.matcher(vocab, trigger_patterns=patterns)
    checked = 0
    for m in _buffers(vocab, rng, m0):
        if m.triggered:
            continue
        before = m.searches
        got = m._refused()
        searches = m.searches - before
        want = _definition(m, vocab)
        assert np.array_equal(got, want), (patterns, m.buffer, np.setxor1d(got, want)[:10])
        if m._class_table() is not None:           # all-literal patterns use the literal index instead
            groups = len(m._facts.class_groups(m._class_table())[0])
            assert searches <= groups < len(vocab), (searches, groups)
        mask = m.mask()
        assert mask.sum() == len(vocab) - len(got)
        for t in got[:20].tolist():
            assert not m.allows(t)
        checked += 1
    assert checked


@pytest.mark.parametrize("pattern", ["", ".*", r"[\s\S]*", r"(a+)+$", r"\w+\s*\(", r"[^<]*<(call>)"])
def test_hostile_patterns_search_few_groups(vocab: Vocabulary, pattern: str) -> None:
    """The work bound: a mask's searches are the class groups (a few thousand at most), not the vocabulary."""
    g = Grammar.from_gbnf(GBNF)
    m = g.matcher(vocab, trigger_patterns=[pattern])
    before = m.searches
    m._refused()
    assert m.searches - before <= 5000 < len(vocab) // 10, m.searches - before


def test_class_table_is_the_coarsest_exact_partition() -> None:
    t = _class_table([TriggerPattern.compile(r"(a+)+$")])
    assert t is not None and len(set(t)) == 2        # "a" and the rest ($ is the end of the text only)
    t = _class_table([TriggerPattern.compile(r"\w")])
    assert len(set(t)) == 2
    t = _class_table([TriggerPattern.compile(r"<(call>)"), TriggerPattern.compile("<nope>")])
    assert len(set(t)) == len(set(b"<call>nope")) + 1
    assert _class_table([TriggerPattern.compile("")]) == bytes(256)
