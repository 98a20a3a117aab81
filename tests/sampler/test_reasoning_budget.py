"""``sampler.reasoning_budget`` against llama.cpp's own reasoning-budget sampler (``common_reasoning_budget_*`` in
libllama-common, through ``oracle/shims/rbudget_shim.cpp``).

Random scripts over a small alphabet that holds the start, end and forced sequences (multi-token tags, two end
tags, overlapping prefixes, re-arming after the end, budgets 0..6 and INT_MAX, initial states IDLE / COUNTING /
DONE, manual ``force()`` and resets mixed in) and, with the qwen2 vocabulary, tokens whose pieces end inside a
UTF-8 character (the WAITING_UTF8 state): after every step the token ``apply`` leaves (or none), the state and the
matched end sequence are llama.cpp's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrained.vocab import Vocabulary
from oracle.rbudget import rbudget_run
from oracle.sdist import vocab_gguf
from sampler.candidates import Candidates
from sampler.reasoning_budget import INT_MAX, ReasoningBudget, utf8_is_complete


def _ours(script: dict, piece=None) -> list[dict]:
    rb = ReasoningBudget(script["start"], script["end"], script["forced"], script["budget"],
                         script.get("initial", 0), piece=piece)
    out = []
    n = script["n_vocab"]
    for tok in script["steps"]:
        c = Candidates.from_logits(np.zeros(n, np.float32))
        rb.apply(c)
        fin = np.isfinite(c.logits)
        r: dict = {"kept": -1 if fin.all() else (int(np.flatnonzero(fin)[0]) if fin.sum() == 1 else -3)}
        if tok == -1:
            r["forced"] = rb.force()
        elif tok == -2:
            rb.reset()
        else:
            rb.accept(tok)
        r["state"] = rb.state
        r["end_match"] = rb.end_match
        out.append(r)
    return out


def _script(rng: random.Random, n_vocab: int, pool: list[int], extra: list[int]) -> dict:
    alphabet = pool[:6]
    start = [rng.choice(alphabet) for _ in range(rng.randint(1, 3))]
    ends = [[rng.choice(alphabet) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        ends.append([])                           # dropped by the matcher
    if rng.random() < 0.2:
        ends.append(list(ends[0]))                # a duplicate: dropped
    forced = [rng.choice(alphabet) for _ in range(rng.randint(0, 2))] + ends[0]
    steps = []
    for _ in range(rng.randint(10, 60)):
        x = rng.random()
        if x < 0.25:
            steps += start
        elif x < 0.4:
            steps += rng.choice([e for e in ends if e] or [[0]])
        elif x < 0.45:
            steps.append(-1)
        elif x < 0.47:
            steps.append(-2)
        elif x < 0.6 and extra:
            steps.append(rng.choice(extra))
        else:
            steps.append(rng.choice(alphabet))
    budget = rng.choice([0, 1, 2, 3, 6, INT_MAX])
    return {"vocab": "", "n_vocab": n_vocab, "start": [start], "end": ends, "forced": forced, "budget": budget,
            "initial": rng.choice([0, 0, 0, 1, 4]), "steps": steps}


def test_utf8_is_complete() -> None:
    for s in ["", "a", "é", "日本", "😀", "a\u00e9"]:
        b = s.encode()
        assert utf8_is_complete(b)
        for k in range(1, len(b)):
            assert utf8_is_complete(b[:k]) == (b[:k].decode("utf-8", "ignore").encode() == b[:k]), b[:k]
    assert not utf8_is_complete(b"\x80\x80\x80\x80\x80")


@pytest.mark.parametrize("seed", range(6))
def test_matches_llama_cpp_without_vocab(seed: int) -> None:
    rng = random.Random(seed)
    n_checked = 0
    states = set()
    for _ in range(40):
        s = _script(rng, 16, list(range(16)), [])
        theirs = rbudget_run(s)
        mine = _ours(s)
        assert mine == theirs, s
        n_checked += len(s["steps"])
        states |= {r["state"] for r in theirs}
    assert n_checked > 500 and {0, 1, 2, 4} <= states


def test_matches_llama_cpp_with_utf8_pieces() -> None:
    path = vocab_gguf("qwen2")
    vocab = Vocabulary.from_gguf(path)
    partial = [t for t in range(5000, 60000) if not utf8_is_complete(vocab.piece(t))][:20]
    assert len(partial) == 20
    rng = random.Random(7)
    states = set()
    for _ in range(25):
        s = _script(rng, len(vocab), [rng.randrange(1000, 5000) for _ in range(6)], partial)
        s["vocab"] = str(path)
        theirs = rbudget_run(s)
        assert _ours(s, vocab.piece) == theirs, s
        states |= {r["state"] for r in theirs}
    assert 3 in states                                 # WAITING_UTF8 reached
