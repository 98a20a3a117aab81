"""The packed bitmask against xgrammar's and llguidance's own code: the same words as
``xgrammar.testing.bool_mask_to_bitmask``, and the same logits through xgrammar's (cpu and torch_native) and
llguidance's (numpy and torch) apply kernels as through ours, for awkward and real logits widths."""

from __future__ import annotations

import llguidance.numpy as llg_np
import llguidance.torch as llg_torch
import numpy as np
import pytest
import torch
import xgrammar as xgr
from xgrammar.testing import bool_mask_to_bitmask

from constrained import Grammar
from constrained.grammar.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    fill_next_token_bitmask,
    fill_next_token_bitmasks,
    pack_mask,
    unpack_bitmask,
)
from constrained.vocab import Vocabulary
from oracle.sdist import vocab_gguf

WIDTHS = [1, 31, 32, 33, 49152, 151936, 262145]
# (vocabulary size, logits width): logits padded past the vocabulary, as models round their embedding up
PADDED = [(30, 33), (49150, 49152), (151665, 151936), (262144, 262145), (262140, 262176)]


def _masks(n: int, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.random((rows, n)) < rng.uniform(0.05, 0.95, size=(rows, 1))
    m[0] = True                       # all allowed
    if rows > 1:
        m[1] = False                  # nothing allowed
    return m


@pytest.mark.parametrize("n,width", [(v, v) for v in WIDTHS] + PADDED, ids=lambda x: str(x))
def test_pack_equals_xgrammar_and_kernels_agree(n: int, width: int) -> None:
    masks = _masks(n, 4, seed=n ^ width)
    full = np.zeros((4, width), dtype=bool)
    full[:, :n] = masks
    ours = np.stack([pack_mask(m, width) for m in masks])
    ref = bool_mask_to_bitmask(torch.from_numpy(full)).numpy()
    assert ours.dtype == np.int32 and ours.shape == ref.shape == (4, (width + 31) // 32)
    assert np.array_equal(ours, ref)
    for r in range(4):
        assert np.array_equal(unpack_bitmask(ours[r], width), full[r])

    base = np.random.default_rng(7).standard_normal((4, width)).astype(np.float32)
    got_np = base.copy()
    apply_token_bitmask_inplace(got_np, ours)
    got_t = torch.from_numpy(base.copy())
    apply_token_bitmask_inplace(got_t, torch.from_numpy(ours.copy()))
    expected = np.where(full, base, -np.inf).astype(np.float32)
    assert np.array_equal(got_np, expected) and np.array_equal(got_t.numpy(), expected)
    for backend in ("cpu", "torch_native"):
        x = torch.from_numpy(base.copy())
        xgr.apply_token_bitmask_inplace(x, torch.from_numpy(ours.copy()), backend=backend)
        assert np.array_equal(x.numpy(), got_np), backend
    y = base.copy()
    llg_np.apply_token_bitmask_inplace(y, ours.copy())
    assert np.array_equal(y, got_np)
    z = torch.from_numpy(base.copy())
    llg_torch.apply_token_bitmask_inplace(z, torch.from_numpy(ours.copy()))
    assert np.array_equal(z.numpy(), got_np)


def test_logits_wider_than_the_bitmask_are_masked_as_llguidance_does() -> None:
    masks = _masks(64, 3, seed=3)
    bm = np.stack([pack_mask(m) for m in masks])
    base = np.random.default_rng(1).standard_normal((3, 70)).astype(np.float32)
    ours, ref = base.copy(), base.copy()
    apply_token_bitmask_inplace(ours, bm)
    llg_np.apply_token_bitmask_inplace(ref, bm.copy())
    assert np.array_equal(ours, ref) and np.isneginf(ours[:, 64:]).all()


def test_indices_and_one_dimensional_rows_as_xgrammar() -> None:
    masks = _masks(100, 4, seed=5)
    bm = torch.from_numpy(np.stack([pack_mask(m) for m in masks]))
    base = torch.randn(4, 100, generator=torch.Generator().manual_seed(2))
    ours, ref = base.clone(), base.clone()
    apply_token_bitmask_inplace(ours, bm, indices=[0, 2])
    xgr.apply_token_bitmask_inplace(ref, bm, indices=[0, 2], backend="torch_native")
    assert torch.equal(ours, ref)
    one = base[3].clone()
    apply_token_bitmask_inplace(one, bm[3])
    assert torch.equal(one, torch.where(torch.from_numpy(masks[3]), base[3], torch.tensor(float("-inf"))))


@pytest.mark.parametrize("name,width", [("qwen2", 151936), ("llama-bpe", 128256), ("gpt-2", 50304)])
def test_matcher_rows_equal_xgrammar_packing_of_our_masks(name: str, width: int) -> None:
    """Rows filled from a live matcher over a real vocabulary (logits padded past it), teacher-forced through a
    JSON document: each equals bool_mask_to_bitmask of the matcher's mask, through numpy and torch bitmasks."""
    vocab = Vocabulary.from_gguf(vocab_gguf(name))
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["name", "n"]}
    m = Grammar.from_json_schema(schema).matcher(vocab)
    text = b'{"name": "Ann \\u00e9 x", "n": 12}'
    # teacher-force the document byte by byte through single-byte tokens where the vocabulary has them
    by_piece = {p: i for i, p in enumerate(vocab.pieces)}
    bm_np = allocate_token_bitmask(len(text) + 1, width)
    bm_t = allocate_token_bitmask(len(text) + 1, width, torch=True)
    states = []
    for k in range(len(text) + 1):
        fill_next_token_bitmask(m, bm_np, k, vocab_size=width)
        states.append(m.fork())
        if k < len(text):
            assert m.accept_token(by_piece[text[k:k + 1]])
    assert m.can_end()
    fill_next_token_bitmasks(states, bm_t, vocab_size=width)
    full = np.zeros((len(states), width), dtype=bool)
    full[:, :len(vocab)] = [s.mask() for s in states]
    ref = bool_mask_to_bitmask(torch.from_numpy(full)).numpy()
    assert np.array_equal(bm_np, ref) and np.array_equal(bm_t.numpy(), ref)
