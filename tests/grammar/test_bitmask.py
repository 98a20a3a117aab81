"""The packed bitmask format (numpy side): bit layout, tail padding, ids past the vocabulary, batch fill, apply.

The comparison with xgrammar's and llguidance's own packing and apply kernels needs torch: it runs in the scale
venv (tests/scale/test_bitmask_kernels.py), called from here."""

from __future__ import annotations

import numpy as np
import pytest

from constrained import Grammar
from constrained.grammar.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_shape,
    fill_next_token_bitmask,
    fill_next_token_bitmasks,
    pack_mask,
    unpack_bitmask,
)
from constrained.vocab import Vocabulary
from tests.scale import run_in_scale_venv


def _by_definition(mask: np.ndarray, width: int) -> np.ndarray:
    """Token t = bit t & 31 of word t >> 5, 1 = allowed; ids in [len(mask), width) are 0, bits past width are 1."""
    words = (width + 31) // 32
    out = np.zeros(words, dtype=np.uint32)
    for t in range(words * 32):
        allowed = bool(mask[t]) if t < min(len(mask), width) else t >= width
        if allowed:
            out[t >> 5] |= np.uint32(1 << (t & 31))
    return out.view(np.int32)


@pytest.mark.parametrize("n,width", [(1, 1), (31, 31), (32, 32), (33, 33), (5, 40), (40, 33), (100, 129)])
def test_pack_follows_the_bit_layout(n: int, width: int) -> None:
    rng = np.random.default_rng(n * 1000 + width)
    for _ in range(5):
        m = rng.random(n) < 0.5
        row = pack_mask(m, width)
        assert row.dtype == np.int32 and row.shape == (bitmask_shape(1, width)[1],)
        assert np.array_equal(row, _by_definition(m, width))
        k = min(n, width)
        assert np.array_equal(unpack_bitmask(row, width)[:k], m[:k])
        assert not unpack_bitmask(row, width)[k:].any()


def test_all_allowed_is_minus_one_and_bad_shapes_are_refused() -> None:
    assert pack_mask(np.ones(64, dtype=bool)).tolist() == [-1, -1]
    assert allocate_token_bitmask(3, 65).shape == (3, 3)
    with pytest.raises(ValueError):
        bitmask_shape(1, 0)
    with pytest.raises(ValueError):
        unpack_bitmask(np.zeros(1, dtype=np.int32), 33)


def _vocab() -> Vocabulary:
    return Vocabulary([b"a", b"b", b"ab", b"{", b"}", b"\xc3", b"\xa9", b"</s>"], eog_ids=[7])


def test_fill_rows_from_matchers_and_widths() -> None:
    v = _vocab()
    g = Grammar.from_gbnf('root ::= "a" "b"+ | "{" [^a-z]* "}"')
    m = g.matcher(v)
    states = [m.fork()]
    for t in (0, 1, 1):
        assert m.accept_token(t)
        states.append(m.fork())
    for width in (8, 40, 64):
        bm = allocate_token_bitmask(len(states) + 1, width)
        flags = fill_next_token_bitmasks([*states, None], bm, vocab_size=width)
        assert flags == [True] * len(states) + [False]
        for r, s in enumerate(states):
            assert np.array_equal(bm[r], _by_definition(s.mask(), width))
        assert bm[-1].tolist() == [-1] * bm.shape[1]
        threaded = allocate_token_bitmask(len(states) + 1, width)
        assert fill_next_token_bitmasks([*states, None], threaded, vocab_size=width, max_workers=3) == flags
        assert np.array_equal(threaded, bm)
    one = allocate_token_bitmask(2, 8)
    assert fill_next_token_bitmask(states[-1], one, 1) is True       # default width = the vocabulary
    assert np.array_equal(one[1], _by_definition(states[-1].mask(), 8))
    assert states[-1].can_end() and unpack_bitmask(one[1], 8)[7]     # EOG allowed only where the grammar can end
    assert not unpack_bitmask(one[1], 8)[0]


def test_fill_refuses_rows_and_widths_that_do_not_fit() -> None:
    m = Grammar.from_gbnf('root ::= "a"').matcher(_vocab())
    bm = allocate_token_bitmask(2, 8)
    with pytest.raises(ValueError):
        fill_next_token_bitmask(m, bm, 0, vocab_size=40)
    with pytest.raises(ValueError):
        fill_next_token_bitmasks([m], bm, [2])
    with pytest.raises(ValueError):
        fill_next_token_bitmasks([m, m], bm, [0])


def test_apply_numpy_rows_indices_and_wide_logits() -> None:
    rng = np.random.default_rng(0)
    masks = rng.random((3, 40)) < 0.4
    bm = np.stack([pack_mask(x) for x in masks])
    logits = rng.standard_normal((3, 70)).astype(np.float32)
    got = logits.copy()
    apply_token_bitmask_inplace(got, bm)
    want = logits.copy()
    want[:, :40][~masks] = -np.inf
    want[:, 64:] = -np.inf                      # past the bitmask's 64 bits: no allowed bit
    want[:, 40:64] = logits[:, 40:64]           # padding bits are 1
    assert np.array_equal(got, want)
    part = logits.copy()
    apply_token_bitmask_inplace(part, bm, indices=[1])
    assert np.array_equal(part[1], want[1]) and np.array_equal(part[[0, 2]], logits[[0, 2]])
    row = logits[2, :40].copy()
    apply_token_bitmask_inplace(row, bm[2])
    assert np.array_equal(row, want[2, :40])
    with pytest.raises(ValueError):
        apply_token_bitmask_inplace(logits.copy(), bm[:2])


def test_against_xgrammar_and_llguidance_kernels_in_the_scale_venv() -> None:
    run_in_scale_venv("tests/scale/test_bitmask_kernels.py")
