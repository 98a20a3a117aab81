"""The grammar's per-vocabulary token index built with the compiled decode (``_walk.decode_pieces``) and the
vectorised steps of :class:`constrained.grammar.tokenindex.VocabIndex`, against the Python reference build of every
array (``_vocab_table_python``, argsort-based orders, per-piece loops), bit for bit: on hostile pieces (invalid and
partial UTF-8, NUL bytes, overlong forms, empty pieces, EOG) and on the vocab-only GGUFs of llama.cpp's tests."""

from __future__ import annotations

import numpy as np
import pytest

from constrained import Vocabulary
from constrained.grammar import stacks as S
from constrained.grammar import tokenindex as TI

KEYS = ("ids", "start", "length", "flat", "rem", "val", "order0", "cp0", "longer")


def _reference(vocab: Vocabulary) -> dict:
    """Every array of VocabIndex the way the Python reference computes it."""
    n = len(vocab)
    eog = np.zeros(n, dtype=bool)
    eog[list(vocab.eog_ids)] = True
    dead = np.array([(not p) or p[0] == 0 for p in vocab.pieces], dtype=bool) & ~eog
    t = TI._vocab_table_python(vocab.pieces, eog | dead)
    t.inv = np.argsort(t.ids).astype(np.intp)
    off, v = t._row_codepoints()
    owner = np.repeat(np.arange(t.n, dtype=np.int64), t.length)
    low = v < 128
    c, owner = v[low], owner[low]
    o = np.argsort(c, kind="stable")
    ascii_rows = (np.searchsorted(c[o], np.arange(129)).astype(np.int64), owner[o])
    t.build_lex()
    cont = [i for i, p in enumerate(vocab.pieces) if p and (p[0] >> 6) == 2 and not eog[i]]
    return {"table": t, "dead": dead, "ascii": ascii_rows, "cont": cont, "summary": t.summary()}


def _compare(vocab: Vocabulary) -> None:
    ref = _reference(vocab)
    idx = TI.VocabIndex(vocab)
    t, r = idx.table, ref["table"]
    for k in KEYS:
        assert np.array_equal(getattr(t, k), getattr(r, k)), k
        assert getattr(t, k).dtype == getattr(r, k).dtype, k
    assert np.array_equal(t.inv, r.inv)
    assert np.array_equal(idx.dead, ref["dead"])
    assert idx.cont_ids == ref["cont"]
    for a, b in zip(t.summary(), ref["summary"], strict=True):
        assert np.array_equal(a, b)
    for a, b in zip(t.ascii_rows(), ref["ascii"], strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(t.lex[0], r.lex[0])
    for a, b in zip(t.lex[1], r.lex[1], strict=True):
        assert np.array_equal(a, b)
    assert "_rowcp" not in t.__dict__
    if S._walk_ext is not None:
        skip = idx.eog | idx.dead
        length, rem, val, flat = (np.frombuffer(b, dtype=np.int64)
                                  for b in S._walk_ext.decode_pieces(vocab.pieces, skip.astype(np.uint8)))
        for i in range(len(vocab)):     # the decode itself, token by token, against decode_utf8
            if skip[i]:
                assert rem[i] == -1 and length[i] == 0
                continue
            cps, value, rm = TI.decode_utf8(vocab.pieces[i])
            assert rem[i] == rm and val[i] == (value if rm > 0 else 0) and length[i] == len(TI.apply_view(cps))


HOSTILE = [b"a", b"\xc3", b"\xa9x", b"", b"\x00a", b"a\x00b", b"\xc0\x80z", b"\xe2\x82", b"\xf0\x9f\x98\x80",
           b"\xff", b"\x80\x80", "é".encode(), "日本".encode(), b"\xf8\x88\x80\x80\x80", b"ab\xe2", b" " * 40,
           b"\xed\xa0\x80", b"\xc3\xa9\xc3", b"<eos>", b"x" * 300, b"\xe0\x80\x80a"]


def test_hostile_pieces() -> None:
    _compare(Vocabulary(HOSTILE, eog_ids=[18]))


def test_random_pieces() -> None:
    rng = np.random.default_rng(7)
    pool = [bytes(rng.integers(0, 256, size=int(rng.integers(0, 9)), dtype=np.uint8)) for _ in range(3000)]
    pool += ["".join(chr(int(c)) for c in rng.integers(1, 0x11000, size=int(rng.integers(1, 5)))).encode(
        "utf-8", "surrogatepass") for _ in range(2000)]
    _compare(Vocabulary(pool, eog_ids=[0, 17, 4999]))


def test_compiled_decode_is_used() -> None:
    """Where the extension is built, _vocab_table takes the compiled decode (so the tests above compare two
    builds); test_matcher_kernel.py's test_walk_kernel_is_built fails when it is missing."""
    if S._walk_ext is None:
        pytest.skip("the extension is not built or CONSTRAINED_PURE_PYTHON=1")
    assert hasattr(S._walk_ext, "decode_pieces")


@pytest.mark.parametrize("name", ["gpt-2", "llama-spm", "phi-3", "bert-bge", "qwen2", "gemma-4"])
def test_vocab_ggufs(name: str) -> None:
    from oracle.sdist import vocab_gguf

    _compare(Vocabulary.from_gguf(vocab_gguf(name)))
