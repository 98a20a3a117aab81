"""Mask parity with llama.cpp's grammar sampler (``llama_sampler_init_grammar``) on random walks.

For llama.cpp's ``grammars/*.gbnf``, two JSON-schema grammars and a grammar with token references, on five
vocabularies of different kinds: at every step our full-vocabulary mask equals llama.cpp's and ``allows`` agrees
with its one-candidate check (see :func:`oracle.cases.matcher.parity_walk`). ``scripts/sweep_masks.py`` runs the
same walks at a much larger scale outside the suite.
"""

from __future__ import annotations

import numpy as np
import pytest

from oracle.cases.matcher import oracle_vocab, parity_grammars, parity_walk, parse_gbnf

VOCABS = {"llama-spm": 24, "phi-3": 24, "gpt-2": 24, "qwen2": 14, "gemma-4": 10}
COMPARED: dict[str, int] = {}


@pytest.mark.parametrize("vocab_name", list(VOCABS))
def test_mask_parity(vocab_name: str) -> None:
    vm, vocab = oracle_vocab(vocab_name)
    steps = VOCABS[vocab_name]
    total = 0
    for k, (gname, text) in enumerate(sorted(parity_grammars(vocab).items())):
        parsed = parse_gbnf(text, vocab=vocab)
        rng = np.random.default_rng(1000 * k + len(vocab_name))
        total += parity_walk(vm, vocab, text, parsed, rng, steps)
        COMPARED[f"{vocab_name}/{gname}"] = total
    assert total >= steps * 5


@pytest.mark.parametrize("vocab_name", ["llama-spm", "gemma-4"])
def test_bounded_repetitions_longer_than_any_token(vocab_name: str) -> None:
    """A bounded repetition with more links than the vocabulary's longest token has code points: its chain is
    followed only that far (``GrammarRules.chain_max``) and the masks stay llama.cpp's, inside and near its end."""
    from constrained.grammar.matcher import compile_grammar
    from constrained.grammar.stacks import CHAIN_MAX

    vm, vocab = oracle_vocab(vocab_name)
    text = 'root ::= [a-z ]{0,100} "!" | "<" [^>]{2,70} ">" | [0-9]{1,40}\n'
    parsed = parse_gbnf(text, vocab=vocab)
    cg = compile_grammar(parsed, vocab)
    assert cg.rules.chain_max == len(cg.index.table.longer) < CHAIN_MAX
    assert parity_walk(vm, vocab, text, parsed, np.random.default_rng(5), 14) >= 5
