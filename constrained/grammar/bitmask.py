"""Batched packed token bitmasks: the int32 format vLLM, SGLang, xgrammar and llguidance share.

A bitmask has one row per sequence and ``ceil(V / 32)`` int32 words per row, ``V`` being the logits width (which may
exceed the vocabulary: ids past the vocabulary are disallowed). Token ``t`` is bit ``t & 31`` (least significant
first) of word ``t >> 5``; 1 = allowed, and the padding bits past ``V`` in the last word are 1, as
``xgrammar.testing.bool_mask_to_bitmask`` writes them (xgrammar 0.2.8's CPU kernel reads past a row otherwise). An
all-allowed row is ``-1`` in every word.

The row of a grammar state is packed from :meth:`GrammarMatcher.mask` once (``np.packbits(..., bitorder="little")``
viewed as little-endian int32) and kept beside the mask, so a step whose state was met before costs one row copy.

Example:
    >>> from constrained.vocab import Vocabulary
    >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
    >>> from constrained.grammar.matcher import compile_grammar
    >>> g = ParsedGrammar((((T.CHAR, 104), (T.CHAR, 105), (T.END, 0)),), {"root": 0}, 0)  # root ::= "hi"
    >>> m = compile_grammar(g, Vocabulary([b"h", b"i", b"hi", b"x", b"</s>"], eog_ids=[4])).matcher()
    >>> bm = allocate_token_bitmask(2, 40)                 # logits width 40 > 5 tokens: 2 words per row
    >>> fill_next_token_bitmask(m, bm, 1, vocab_size=40)   # True: some token is masked
    True
    >>> unpack_bitmask(bm[1], 40)[:6].tolist(), bm[0].tolist()
    ([True, False, True, False, False, False], [-1, -1])
    >>> logits = np.zeros((2, 40), dtype=np.float32)
    >>> apply_token_bitmask_inplace(logits, bm)
    >>> np.isfinite(logits[1]).nonzero()[0].tolist(), bool(np.isfinite(logits[0]).all())
    ([0, 2], True)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["allocate_token_bitmask", "apply_token_bitmask_inplace", "bitmask_shape", "fill_next_token_bitmask",
           "fill_next_token_bitmasks", "pack_mask", "reset_token_bitmask", "unpack_bitmask"]

#: The element type of a bitmask (signed: PyTorch had no uint32 when the format was set).
BITMASK_DTYPE = np.int32

_PACKED_BYTES = 96 << 20        # the packed-row cache (rows plus the masks it keeps alive), over every grammar


def bitmask_shape(batch: int, vocab_size: int) -> tuple[int, int]:
    """``(batch, ceil(vocab_size / 32))``: the shape of a bitmask for ``batch`` rows of logits width ``vocab_size``.

    Example:
        >>> bitmask_shape(4, 49152), bitmask_shape(1, 33)
        ((4, 1536), (1, 2))
    """
    if batch < 0 or vocab_size < 1:
        raise ValueError(f"bad bitmask shape: batch {batch}, vocab_size {vocab_size}")
    return int(batch), (int(vocab_size) + 31) // 32


def allocate_token_bitmask(batch: int, vocab_size: int, *, torch: bool = False) -> Any:
    """A bitmask of ``batch`` rows for logits width ``vocab_size``, every token allowed (all words ``-1``).

    Args:
        batch: the number of rows.
        vocab_size: the logits width ``V``.
        torch: return a CPU ``torch.Tensor`` (int32) instead of a numpy array.

    Example:
        >>> allocate_token_bitmask(2, 33).tolist()
        [[-1, -1], [-1, -1]]
    """
    shape = bitmask_shape(batch, vocab_size)
    if torch:
        import torch as _torch

        return _torch.full(shape, -1, dtype=_torch.int32)
    return np.full(shape, -1, dtype=BITMASK_DTYPE)


def reset_token_bitmask(bitmask: Any) -> None:
    """Set every word of ``bitmask`` (numpy or torch) to ``-1`` (all allowed)."""
    if isinstance(bitmask, np.ndarray):
        bitmask.fill(-1)
    else:
        bitmask.fill_(-1)


def _pad_bytes(buf: np.ndarray, vocab_size: int) -> None:
    """Set the bits of ids ``>= vocab_size`` in a row's bytes to 1 (the tail padding)."""
    if vocab_size < buf.size * 8:
        q, r = divmod(vocab_size, 8)
        buf[q] |= (0xFF << r) & 0xFF
        buf[q + 1:] = 0xFF


def pack_mask(mask: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """One bitmask row (int32, ``ceil(V / 32)`` words) from a bool mask over the vocabulary.

    Ids from ``len(mask)`` up to ``vocab_size`` (the logits width, default ``len(mask)``) are disallowed; the
    padding bits past ``vocab_size`` are 1. Equal to ``xgrammar.testing.bool_mask_to_bitmask`` on the mask
    extended with False to ``vocab_size``. A mask longer than ``vocab_size`` is cut (those ids have no logit).

    Example:
        >>> pack_mask(np.array([True, False, True])).tolist()   # bits 0 and 2, padding 3..31 set
        [-3]
        >>> pack_mask(np.ones(33, dtype=bool), 64).tolist()
        [-1, 1]
    """
    mask = np.asarray(mask, dtype=bool)
    n = mask.shape[-1]
    v = n if vocab_size is None else int(vocab_size)
    if v < 1:
        raise ValueError(f"vocab_size must be positive, got {v}")
    if n > v:
        mask = mask[:v]
    words = (v + 31) // 32
    buf = np.zeros(words * 4, dtype=np.uint8)
    packed = np.packbits(mask, bitorder="little")
    buf[:packed.size] = packed
    _pad_bytes(buf, v)
    return buf.view("<i4").astype(BITMASK_DTYPE, copy=False)


def unpack_bitmask(row: Any, vocab_size: int) -> np.ndarray:
    """The bool mask (length ``vocab_size``) a bitmask row encodes; the inverse of :func:`pack_mask`.

    Example:
        >>> unpack_bitmask(np.array([-3], dtype=np.int32), 3).tolist()
        [True, False, True]
    """
    arr = _numpy_view(row)
    words = np.ascontiguousarray(arr, dtype="<i4")
    bits = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool)
    if vocab_size > bits.size:
        raise ValueError(f"a row of {arr.shape[-1]} words covers {bits.size} ids, not {vocab_size}")
    return bits[:vocab_size]


class _PackedCache:
    """Packed rows keyed by the identity of the (cached, read-only) mask they were packed from."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.rows: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, mask: np.ndarray, vocab_size: int) -> tuple[np.ndarray, bool]:
        key = (id(mask), vocab_size)
        with self.lock:
            hit = self.rows.get(key)
            if hit is not None and hit[0] is mask:      # the entry holds the mask, so its id is not reused
                self.rows.move_to_end(key)
                return hit[1], hit[2]
        row = pack_mask(mask, vocab_size)
        row.setflags(write=False)
        needs_apply = not bool((row == -1).all())
        if not mask.flags.writeable:                     # only the matcher's cached masks are stable objects
            with self.lock:
                old = self.rows.pop(key, None)
                if old is not None:
                    self.bytes -= old[0].nbytes + old[1].nbytes
                self.rows[key] = (mask, row, needs_apply)
                self.bytes += mask.nbytes + row.nbytes
                while self.bytes > self.max_bytes and self.rows:
                    _, (mk, r, _) = self.rows.popitem(last=False)
                    self.bytes -= mk.nbytes + r.nbytes
        return row, needs_apply


_CACHE = _PackedCache(_PACKED_BYTES)


def _numpy_view(bitmask: Any) -> np.ndarray:
    if isinstance(bitmask, np.ndarray):
        return bitmask
    if getattr(bitmask, "device", None) is not None and getattr(bitmask.device, "type", "cpu") == "cpu":
        return bitmask.numpy()        # a CPU tensor: shares memory
    return np.asarray(bitmask)


def _resolve_width(n_vocab: int, words: int, vocab_size: int | None) -> int:
    if vocab_size is not None:
        v = int(vocab_size)
        if (v + 31) // 32 != words:
            raise ValueError(f"bitmask rows have {words} words; logits width {v} needs {(v + 31) // 32}")
        return v
    # Without a width: a row sized for the vocabulary pads after it; a wider row is all logits (extra ids masked).
    return n_vocab if (n_vocab + 31) // 32 == words else words * 32


def _write_row(bitmask: Any, arr: np.ndarray | None, index: int, row: np.ndarray) -> None:
    if arr is not None:
        arr[index] = row
    else:                              # a tensor off the CPU
        import torch

        bitmask[index].copy_(torch.from_numpy(np.array(row)))


def fill_next_token_bitmask(matcher: Any, bitmask: Any, index: int = 0, *, vocab_size: int | None = None) -> bool:
    """Write the matcher's next-token mask into row ``index`` of ``bitmask`` (numpy array or torch tensor).

    ``vocab_size`` is the logits width (default: the vocabulary when the row is exactly that wide, else every
    bit of the row). Returns whether any token is disallowed (xgrammar's "needs apply").
    """
    arr = _numpy_view(bitmask) if _is_cpu(bitmask) else None
    words = bitmask.shape[-1]
    mask = matcher.mask()
    v = _resolve_width(mask.shape[0], words, vocab_size)
    row, needs_apply = _CACHE.get(mask, v)
    _write_row(bitmask, arr, index, row)
    return needs_apply


def _is_cpu(bitmask: Any) -> bool:
    return isinstance(bitmask, np.ndarray) or getattr(getattr(bitmask, "device", None), "type", "cpu") == "cpu"


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="constrained-bitmask")
        return _POOL


def fill_next_token_bitmasks(matchers: Sequence[Any], bitmask: Any, indices: Sequence[int] | None = None, *,
                             vocab_size: int | None = None, max_workers: int = 1) -> list[bool]:
    """Fill one row per matcher (row ``indices[i]``, default ``i``) of ``bitmask``; returns the "needs apply" flags.

    ``None`` in ``matchers`` leaves its row all-allowed (an unconstrained sequence in the batch). With
    ``max_workers > 1`` the rows are filled on a thread pool in that many chunks. Rows whose state was met before
    cost one row copy each (0.006-0.009 ms per row at batch 256, ``benchmarks/bench_bitmask.py``), for which one
    thread is fastest; a pool can only help rows whose mask must first be walked (numpy work), and on this 2-core
    machine that was not measured.

    Example:
        >>> from constrained.vocab import Vocabulary
        >>> from constrained.grammar.ir import ParsedGrammar, ElementType as T
        >>> from constrained.grammar.matcher import compile_grammar
        >>> g = ParsedGrammar((((T.CHAR, 97), (T.END, 0)),), {"root": 0}, 0)     # root ::= "a"
        >>> cg = compile_grammar(g, Vocabulary([b"a", b"b", b"</s>"], eog_ids=[2]))
        >>> done = cg.matcher(); done.accept_token(0)
        True
        >>> bm = allocate_token_bitmask(3, 3)
        >>> fill_next_token_bitmasks([cg.matcher(), done, None], bm)
        [True, True, False]
        >>> [unpack_bitmask(r, 3).tolist() for r in bm]
        [[True, False, False], [False, False, True], [True, True, True]]
    """
    n = len(matchers)
    idx = list(range(n)) if indices is None else [int(i) for i in indices]
    if len(idx) != n:
        raise ValueError(f"{n} matchers but {len(idx)} row indices")
    rows = bitmask.shape[0]
    bad = [i for i in idx if not 0 <= i < rows]
    if bad:
        raise ValueError(f"row indices {bad[:5]} outside a bitmask of {rows} rows")
    out = [False] * n
    arr = _numpy_view(bitmask) if _is_cpu(bitmask) else None
    words = bitmask.shape[-1]

    def run(lo: int, hi: int) -> None:
        for k in range(lo, hi):
            m = matchers[k]
            if m is None:
                _write_row(bitmask, arr, idx[k], np.full(words, -1, dtype=BITMASK_DTYPE))
                continue
            mask = m.mask()
            row, out[k] = _CACHE.get(mask, _resolve_width(mask.shape[0], words, vocab_size))
            _write_row(bitmask, arr, idx[k], row)

    workers = max(1, min(int(max_workers), n))
    if workers == 1:
        run(0, n)
    else:
        step = (n + workers - 1) // workers
        futures = [_pool(workers).submit(run, lo, min(lo + step, n)) for lo in range(0, n, step)]
        for f in futures:
            f.result()
    return out


def _apply_numpy(logits: np.ndarray, bits: np.ndarray, rows: Sequence[int] | None) -> None:
    width = logits.shape[-1]
    covered = min(width, bits.shape[-1])
    sel = slice(None) if rows is None else list(rows)
    block = logits[sel]
    masked = ~bits[..., :covered]
    block[..., :covered][masked] = -np.inf
    if covered < width:
        block[..., covered:] = -np.inf       # logits past the bitmask's reach have no allowed bit
    if rows is not None:
        logits[sel] = block


def apply_token_bitmask_inplace(logits: Any, bitmask: Any, *, indices: Sequence[int] | None = None) -> None:
    """Set to ``-inf`` the logits whose bit is 0 (numpy arrays or torch tensors, 1-D or 2-D).

    Row ``i`` of ``bitmask`` masks row ``i`` of ``logits`` (or only the rows in ``indices``). Logits past
    ``32 * words`` are disallowed, as llguidance's kernels do; a bitmask row whose width covers the logits
    gives exactly what xgrammar's ``apply_token_bitmask_inplace`` gives.
    """
    one = len(logits.shape) == 1
    if isinstance(logits, np.ndarray):
        lg = logits[None] if one else logits
        bm = np.asarray(_numpy_view(bitmask))
        bm = bm[None] if bm.ndim == 1 else bm
        if bm.shape[0] != lg.shape[0]:
            raise ValueError(f"bitmask of {bm.shape[0]} rows for logits of {lg.shape[0]} rows")
        sel = indices
        src = bm if sel is None else bm[list(sel)]
        bits = np.unpackbits(np.ascontiguousarray(src, dtype="<i4").view(np.uint8), axis=-1,
                             bitorder="little").view(bool)
        _apply_numpy(lg, bits, sel)
        return
    import torch

    lg = logits.unsqueeze(0) if one else logits
    bm = bitmask if isinstance(bitmask, torch.Tensor) else torch.from_numpy(np.asarray(bitmask))
    bm = bm.unsqueeze(0) if bm.dim() == 1 else bm
    if bm.shape[0] != lg.shape[0]:
        raise ValueError(f"bitmask of {bm.shape[0]} rows for logits of {lg.shape[0]} rows")
    bm = bm.to(lg.device)
    rows = torch.arange(lg.shape[0], device=lg.device) if indices is None else \
        torch.as_tensor(list(indices), dtype=torch.long, device=lg.device)
    shifts = torch.arange(32, dtype=torch.int32, device=lg.device)
    allowed = ((bm[rows].unsqueeze(-1) >> shifts) & 1).bool().reshape(len(rows), -1)
    width = lg.shape[-1]
    covered = min(width, allowed.shape[-1])
    sub = lg[rows]
    sub[:, :covered].masked_fill_(~allowed[:, :covered], float("-inf"))
    if covered < width:
        sub[:, covered:] = float("-inf")
    lg[rows] = sub

