"""llama.cpp's tests/test-llama-grammar.cpp, replayed from the C++ source: the hand-written element rules, the
exact order of the initial stacks, and the ordered reject lists of ``llama_grammar_reject_candidates_for_stack``."""

from __future__ import annotations

import re

import numpy as np

from constrained.grammar.ir import ElementType, ParsedGrammar
from constrained.grammar.matcher import compile_grammar
from constrained.grammar.stacks import GrammarRules
from constrained.vocab import Vocabulary
from oracle.sdist import llama_cpp_source

_EL = re.compile(r"\{LLAMA_GRETYPE_(\w+),\s*(\d+)\}")
_PAIR = re.compile(r"\{(\d+),\s*(\d+)\}")


def _block(src: str, name: str) -> str:
    """The text of the initializer ``name = { ... };``."""
    i = src.index("{", src.index(name + " = "))
    depth = 0
    for j in range(i, len(src)):
        depth += src[j] == "{"
        depth -= src[j] == "}"
        if depth == 0:
            return src[i + 1:j]
    raise AssertionError(name)


def _groups(body: str) -> list[str]:
    """Top-level ``{...}`` groups of a block."""
    out, depth, start = [], 0, 0
    for j, c in enumerate(body):
        if c == "{":
            if depth == 0:
                start = j
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                out.append(body[start + 1:j])
    return out


def _load() -> tuple[dict[str, int], list, list, list]:
    src = (llama_cpp_source() / "tests" / "test-llama-grammar.cpp").read_text()
    symbols = {k: int(v) for k, v in re.findall(r'\{"([\w-]+)",\s*(\d+)\}', _block(src, "expected"))}
    rules = [[(int(ElementType[t]), int(v)) for t, v in _EL.findall(g)] for g in _groups(_block(src, "expected_rules"))]
    stacks = [[(int(ElementType[t]), int(v)) for t, v in _EL.findall(g)] for g in _groups(_block(src, "expected_stacks"))]
    rejects = [[(int(a), int(b)) for a, b in _PAIR.findall(g)] for g in _groups(_block(src, "expected_reject"))]
    return symbols, rules, stacks, rejects


SYMBOLS, RULES, STACKS, REJECTS = _load()
PARSED = ParsedGrammar(tuple(tuple(r) for r in RULES), SYMBOLS, SYMBOLS["root"])


def test_shapes() -> None:
    assert len(SYMBOLS) == 13 and len(RULES) == 13 and len(STACKS) == 8 and len(REJECTS) == 8


def test_initial_stacks_in_order() -> None:
    g = GrammarRules(PARSED)
    got = [g.describe(s) for s in g.initial_stacks()]
    assert got == STACKS


def test_reject_lists_in_order() -> None:
    g = GrammarRules(PARSED)
    cands = [(i, [37 + i], 0, (0, 0), 0) for i in range(23)]
    stacks = g.initial_stacks()
    for stack, expected in zip(stacks, REJECTS, strict=True):
        got = [(c[0], c[1][c[2]]) for c in g.reject_candidates_for_stack(stack, cands)]
        # the C++ test walks our list and indexes the expected one (which may list one more candidate, id 23)
        assert got == expected[:len(got)]
        assert all(i >= 23 for i, _ in expected[len(got):])   # only candidates that do not exist are left


def test_mask_matches_reject_lists() -> None:
    # the fast mask over a vocabulary of the 23 single characters agrees with the exact reject lists
    g = GrammarRules(PARSED)
    vocab = Vocabulary([bytes([37 + i]) for i in range(23)])
    m = compile_grammar(PARSED, vocab).matcher()
    cands = [(i, [37 + i], 0, (0, 0), 0) for i in range(23)]
    rejected = {c[0] for c in g.reject_candidates(g.initial_stacks(), cands)}
    assert m.mask().tolist() == [i not in rejected for i in range(23)]
    assert np.array_equal(m.mask(), [m.allows(i) for i in range(23)])
