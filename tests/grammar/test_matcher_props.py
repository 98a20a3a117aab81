"""Property tests of the matcher on adversarial vocabularies (hypothesis).

The fast mask (vectorised walk + per-suffix caches) must equal a token-by-token evaluation with the exact port of
``llama_grammar_reject_candidates`` on pieces full of partial, stray, overlong and NUL bytes; accept-then-rollback
restores the mask; forks are independent; random bytes never crash the matcher.
"""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.grammar import limits, packing, walk_python
from constrained.grammar import mask as mask_mod
from constrained.grammar.matcher import CompiledGrammar, compile_grammar
from constrained.grammar.tokenindex import apply_view, decode_utf8
from constrained.vocab import Vocabulary
from oracle.cases.matcher import reference_parse

BYTES = [b"a", b"b", b"x", b'"', b"{", b"}", b" ", b"0", b"1", b"\xc3", b"\xa9", b"\xe2", b"\x82", b"\xac",
         b"\xf0", b"\x9f", b"\x98", b"\x80", b"\xc0", b"\xe0", b"\xff", b"\x00", b"<", b"[", b"3", b"]", b">"]

GRAMMARS = [
    'root ::= "a"+ "b"?',
    'root ::= "{" ws "\\"" [^"]* "\\"" ws "}"\nws ::= [ ]*',
    'root ::= [^a]* "a"',
    'root ::= . . "a"?',
    'root ::= [é€😀]+ | "ab"',
    'root ::= <[3]> [a-b]* !<[4]> "x"?',
    'root ::= "a" <[5]> | "b"',
    'root ::= ( [x]* )* "b"',
    'root ::= [\\u00e0-\\u00ff]{1,3} [0-1]* | [^\\x00-\\x7f]',
    'root ::= item ("," item)*\nitem ::= "0" | "1" item | ( "{" root "}" )',
    # loops on a class with disjoint exits (the mask walk's loop shortcut): string bodies, non-ASCII classes
    'root ::= "\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ["b] )* "\\"" [ ]?',
    'root ::= ( [^\\x00-\\x7f] | [a] )* [<] | [é€]* ( [0-1] | [x] [^a]* )',
    # bounded repetitions of a class (the walk's chain shortcut): a bounded string, one into a loop, non-ASCII
    'root ::= "\\"" ( [^"\\\\] | "\\\\" ["b] ){0,5} "\\"" [a-b]{2,}',
    'root ::= [é€😀a]{1,4} ( [0-1]{0,3} [x] | "b" )',
]

pieces_st = st.lists(st.lists(st.sampled_from(BYTES), min_size=0, max_size=5).map(b"".join), min_size=4, max_size=40)


def _vocab(pieces: list[bytes]) -> Vocabulary:
    # the last id ends generation; make sure there are at least 6 ids for the token references
    pieces = list(pieces) + [b"<[%d]>" % i for i in range(len(pieces), 6)] + [b"</s>"]
    return Vocabulary(pieces, eog_ids=[len(pieces) - 1])


def _reference_mask(cg: CompiledGrammar, stacks, partial) -> np.ndarray:  # noqa: ANN001
    # llama_grammar_apply_impl token by token with the exact reject port
    idx = cg.index
    out = np.zeros(cg.n_vocab, dtype=bool)
    for t in range(cg.n_vocab):
        if idx.eog[t]:
            out[t] = any(not s for s in stacks)
        elif not idx.dead[t]:
            cps, val, rem = decode_utf8(idx.pieces[t], *partial)
            out[t] = cg.rules.stacks_accept(stacks, apply_view(cps), val, rem, t)
    return out


def _ordered_rejects(cg: CompiledGrammar, stacks, partial) -> set[int]:  # noqa: ANN001
    idx = cg.index
    cands = []
    for t in range(cg.n_vocab):
        if not idx.eog[t] and not idx.dead[t]:
            cps, val, rem = decode_utf8(idx.pieces[t], *partial)
            cands.append((t, apply_view(cps), 0, (val, rem), t))
    return {c[0] for c in cg.rules.reject_candidates(stacks, cands)}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=pieces_st, gi=st.integers(0, len(GRAMMARS) - 1), data=st.data())
def test_fast_mask_equals_exact_port(pieces: list[bytes], gi: int, data: st.DataObject) -> None:
    # most examples with the loop shortcut and the trie ranges on at any row count (they normally wait for
    # LOOP_MIN_ROWS / RANGE_MIN_ROWS rows)
    with _small_thresholds(data.draw(st.sampled_from([(0, 0), (0, 10**9), (10**9, 0), (256, 512)]))):
        _fast_mask_equals_exact_port(pieces, gi, data)


@contextlib.contextmanager
def _small_thresholds(loop_range: tuple[int, int]):  # noqa: ANN202
    old = walk_python.LOOP_MIN_ROWS, walk_python.RANGE_MIN_ROWS, mask_mod.KERNEL_RANGE_MIN_ROWS
    walk_python.LOOP_MIN_ROWS, walk_python.RANGE_MIN_ROWS = loop_range
    mask_mod.KERNEL_RANGE_MIN_ROWS = loop_range[1]      # the compiled walk (the default path) takes the same
    try:
        yield
    finally:
        walk_python.LOOP_MIN_ROWS, walk_python.RANGE_MIN_ROWS, mask_mod.KERNEL_RANGE_MIN_ROWS = old


def _fast_mask_equals_exact_port(pieces: list[bytes], gi: int, data: st.DataObject) -> None:
    vocab = _vocab(pieces)
    parsed = reference_parse(GRAMMARS[gi])
    cg = compile_grammar(parsed, vocab)
    bare, warm = CompiledGrammar(parsed, vocab), CompiledGrammar(parsed, vocab)   # no mask cache
    m = cg.matcher()
    for _ in range(6):
        ref = _reference_mask(cg, m.stacks, m.partial_utf8)
        # allows() by the exact port alone, and helped by the per-suffix caches (no mask built)
        assert [bare.allows_in(m.stacks, m.partial_utf8, t) for t in range(len(vocab))] == ref.tolist()
        for s in m.stacks:
            if s and s[-1] in warm.rules.classes:
                warm.local(warm.rules.split(s)[1])
        assert [warm.allows_in(m.stacks, m.partial_utf8, t) for t in range(len(vocab))] == ref.tolist()
        mask = m.mask()
        assert mask.tolist() == ref.tolist()
        assert [m.allows(t) for t in range(len(vocab))] == ref.tolist()
        rejected = _ordered_rejects(cg, m.stacks, m.partial_utf8)
        live = [t for t in range(len(vocab)) if not cg.index.eog[t] and not cg.index.dead[t]]
        assert {t for t in live if not ref[t]} == rejected
        allowed = np.flatnonzero(mask)
        if not len(allowed):
            break
        tok = int(data.draw(st.sampled_from(allowed.tolist())))
        before = (m.stacks, m.partial_utf8)
        if not m.accept_token(tok):          # llama.cpp would throw "Unexpected empty grammar stack"
            assert (m.stacks, m.partial_utf8) == before
            break


def test_loop_shortcut_on_a_large_vocabulary() -> None:
    """Every piece of up to three of the adversarial bytes (20,000 tokens): masks along walks through the loop and
    bounded-repetition grammars equal the exact port's token by token, and the loop and chain shortcuts decided
    many of the rows."""
    pieces = [b"".join(p) for k in (1, 2, 3) for p in itertools.product(BYTES, repeat=k)]
    vocab = _vocab(pieces)
    rng = np.random.default_rng(7)
    looped = 0
    for text in (GRAMMARS[1], GRAMMARS[2], GRAMMARS[-4], GRAMMARS[-3], GRAMMARS[-2], GRAMMARS[-1]):
        cg = CompiledGrammar(reference_parse(text), vocab)
        m = cg.matcher()
        for _ in range(5):
            stacks, partial = m.stacks, m.partial_utf8
            work = limits.WorkBudget(10**9)
            acc = mask_mod.walk(cg.rules, cg.index.table if partial[1] == 0 else cg.index.partial_table(*partial),
                                stacks, work=work)
            looped += work.looped
            ref = _reference_mask(cg, stacks, partial)
            assert m.mask().tolist() == ref.tolist()
            if partial[1] == 0:
                got = packing.by_id(cg.index.table, acc)
                got[cg.index.eog_ids] = any(not s for s in stacks)
                assert got.tolist() == ref.tolist()
            allowed = np.flatnonzero(ref)
            if not len(allowed) or not m.accept_token(int(rng.choice(allowed))):
                break
    assert looped > 10_000


@settings(max_examples=80, deadline=None)
@given(pieces=pieces_st, gi=st.integers(0, len(GRAMMARS) - 1), data=st.data())
def test_rollback_restores_and_fork_is_independent(pieces: list[bytes], gi: int, data: st.DataObject) -> None:
    vocab = _vocab(pieces)
    m = compile_grammar(reference_parse(GRAMMARS[gi]), vocab).matcher()
    masks = [m.mask().copy()]
    for _ in range(5):
        allowed = np.flatnonzero(m.mask())
        if not len(allowed):
            break
        tok = int(data.draw(st.sampled_from(allowed.tolist())))
        if not m.accept_token(tok):
            break
        masks.append(m.mask().copy())
    f = m.fork()
    n = m.num_accepted
    for k in range(n, 0, -1):
        m.rollback(1)
        assert np.array_equal(m.mask(), masks[k - 1])
    assert np.array_equal(f.mask(), masks[n])          # the fork did not move with the original
    assert f.num_accepted == n
    f.reset()
    assert np.array_equal(f.mask(), masks[0]) and f.num_accepted == 0


@settings(max_examples=150, deadline=None)
@given(pieces=pieces_st, gi=st.integers(0, len(GRAMMARS) - 1),
       chunks=st.lists(st.binary(max_size=6), max_size=6), toks=st.lists(st.integers(-5, 60), max_size=8))
def test_random_input_never_crashes(pieces: list[bytes], gi: int, chunks: list[bytes], toks: list[int]) -> None:
    vocab = _vocab(pieces)
    m = compile_grammar(reference_parse(GRAMMARS[gi]), vocab).matcher()
    for b in chunks:
        before = (m.stacks, m.partial_utf8)
        if not m.accept_bytes(b):
            assert (m.stacks, m.partial_utf8) == before
        assert m.mask().shape == (len(vocab),)
    for t in toks:
        if 0 <= t < len(vocab):
            assert isinstance(m.accept_token(t), bool)
        else:
            try:
                m.allows(t)
            except ValueError:
                pass
            else:  # pragma: no cover
                raise AssertionError("out-of-range token accepted")


@settings(max_examples=40, deadline=None)
@given(pieces=pieces_st, gi=st.integers(0, len(GRAMMARS) - 1), data=st.data())
def test_precomputed_caches_give_the_same_masks(pieces: list[bytes], gi: int, data: st.DataObject) -> None:
    vocab = _vocab(pieces)
    parsed = reference_parse(GRAMMARS[gi])
    pre = CompiledGrammar(parsed, vocab)
    assert pre.precompute() >= 0
    m = pre.matcher()
    for _ in range(5):
        ref = _reference_mask(pre, m.stacks, m.partial_utf8)
        assert m.mask().tolist() == ref.tolist()
        allowed = np.flatnonzero(ref)
        if not len(allowed) or not m.accept_token(int(data.draw(st.sampled_from(allowed.tolist())))):
            break


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(BYTES + [b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc1\xbf"]), max_size=8).map(b"".join))
def test_fast_decode_equals_the_port(piece: bytes) -> None:
    from constrained.grammar.tokenindex import _decode_fast

    fast, port = _decode_fast(piece), decode_utf8(piece)
    assert fast[0] == port[0] and fast[2] == port[2] and (fast[2] <= 0 or fast[1] == port[1])


@settings(max_examples=150, deadline=None)
@given(pieces=pieces_st)
def test_vectorised_vocabulary_table_equals_per_token_decoding(pieces: list[bytes]) -> None:
    from constrained.grammar.tokenindex import TokenTable, vocab_index

    vocab = _vocab(pieces)
    idx = vocab_index(vocab)
    skip = idx.eog | idx.dead
    dec = []
    for i, p in enumerate(vocab.pieces):
        c, v, r = decode_utf8(p)
        dec.append(([], 0, -1) if skip[i] else (apply_view(c), v, r))
    ref = TokenTable.build(list(range(len(vocab))), dec)

    def by_id(t: TokenTable) -> tuple:
        o = np.argsort(t.ids)
        return ([t.flat[t.start[r]:t.start[r] + t.length[r]].tolist() for r in o], t.rem[o].tolist(),
                t.val[o].tolist())

    assert by_id(idx.table) == by_id(ref)
