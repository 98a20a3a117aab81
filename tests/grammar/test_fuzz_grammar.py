"""Fuzzing (a small deterministic slice; ``scripts/fuzz_grammar.py`` runs the long one under a memory cap and a
per-case time limit): GBNF text, matcher call sequences and documents. Only ``ConstrainedError`` subclasses may come
out, and every mask equals the one llama.cpp's own algorithm gives (``GrammarRules.reject_candidates``, a port of
``llama_grammar_reject_candidates`` checked against llama.cpp in ``test_llama_grammar.py``), and the breadth-first
walk's.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained import Grammar, validate
from constrained.errors import ConstrainedError
from constrained.grammar.packing import by_id
from constrained.grammar.walk_python import walk_bfs
from oracle.cases.fuzz_vocab import VOCAB, N, reference_mask
from oracle.cases.gbnf import gbnf_grammars, valid_gbnf_grammars
from oracle.cases.json_schema_strategies import json_values, schemas

OPS = st.lists(st.one_of(
    st.tuples(st.just("accept"), st.integers(0, N - 1)),
    st.tuples(st.just("accept_bad"), st.sampled_from([N, -1, 2.5, "3", None, True])),
    st.tuples(st.just("bytes"), st.binary(max_size=4)),
    st.tuples(st.just("rollback"), st.integers(0, 3)),
    st.tuples(st.just("mask"), st.just(0)),
    st.tuples(st.just("fork"), st.just(0)),
    st.tuples(st.just("reset"), st.just(0)),
), max_size=12)


def _check_mask(m) -> None:  # noqa: ANN001
    mask = m.mask()
    assert np.array_equal(mask, reference_mask(m))
    if m.partial_utf8[1] == 0:
        t = m.compiled.index.table
        bfs = by_id(t, walk_bfs(m.compiled.rules, t, m.stacks))
        eog = m.compiled.index.eog
        assert np.array_equal(mask[~eog], bfs[~eog])
    for tok in range(N):
        assert m.allows(tok) == mask[tok]


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(text=st.one_of(valid_gbnf_grammars(), gbnf_grammars()), ops=OPS)
def test_fuzz_gbnf_and_call_sequences(text: str, ops: list) -> None:
    try:
        g = Grammar.from_gbnf(text)
        m = g.matcher(VOCAB)
    except ConstrainedError:
        return
    try:
        _check_mask(m)
        for op, arg in ops:
            if op == "accept":
                before = m.num_accepted
                ok = m.accept_token(arg)
                assert m.num_accepted == before + ok
            elif op == "accept_bad":
                try:
                    m.accept_token(arg)
                    raise AssertionError(f"accepted a bad token id {arg!r}")
                except ConstrainedError:
                    pass
            elif op == "bytes":
                m.accept_bytes(arg)
            elif op == "rollback":
                m.rollback(min(arg, m.num_accepted))
            elif op == "mask":
                _check_mask(m)
            elif op == "fork":
                f = m.fork()
                assert f.stacks == m.stacks and f.num_accepted == m.num_accepted
                m = f
            elif op == "reset":
                m.reset()
                assert m.num_accepted == 0
        _check_mask(m)
    except ConstrainedError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(schema=schemas(), doc=json_values)
def test_fuzz_validate_documents(schema: dict, doc: object) -> None:
    try:
        issues = validate(doc, schema)
    except ConstrainedError:
        return
    assert isinstance(issues, list)
    for i in issues:
        assert i.path.startswith("$")
