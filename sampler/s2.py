"""The s2 sampler profile: sorted softmax, joint top-k/top-p, temperature, ``std::discrete_distribution``; exact.

It reproduces ``sample_token(logits, n, params)`` of the s2 text-to-speech engine (see the project's reference
notes): the same token for the same logits and the same ``std::mt19937`` state, ties included.

The original ``std::sort``s all n ``(logit, id)`` pairs.  This port does not, and is still exact:

* the softmax sum (float, in sorted order) only needs the *values* in sorted order (tied items have equal
  probabilities), and only the values ``x = l - max >= -17``: every later term is ``expf(x) < 2**-24`` while the
  running sum is already ``>= 1`` (its first term is ``expf(0) = 1``), so adding it rounds back to the same float;
* the walk (top-k, then top-p on the float running sum of normalised probabilities) also needs values only, and it
  stops inside those candidates unless top-k and top-p keep more (then the exact full path is taken);
* only the ids of the kept prefix need the tie order: when the kept logits and the next one are all distinct the
  order is by value alone; otherwise :func:`sampler.stdalgo.sort_prefix_perm` traces just the introsort segments
  that reach that prefix.

``expf`` is glibc's ``expf`` exactly (see :func:`expf`); float arithmetic is numpy float32 (IEEE, as the original's
``float``); the draw is :func:`sampler.rng.discrete_distribution`.

Example:
    >>> import numpy as np
    >>> s = S2Sampler(S2Params(), seed=42)
    >>> logits = np.array([1.0, 3.0, 3.0, -np.inf, 2.5], dtype=np.float32)
    >>> s.sample(logits) in (1, 2, 4)
    True
    >>> S2Sampler(S2Params(temperature=0.0)).sample(logits)   # greedy: the first of the tied maxima std::sort leaves
    1
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from .mathf import expf_vec
from .rng import Mt19937, discrete_distribution
from .stdalgo import sort_perm, sort_prefix_perm

__all__ = ["S2Params", "S2Sampler", "expf", "s2_sample"]

# glibc's expf over an array, bit for bit: the one implementation in sampler.mathf
expf = expf_vec


# ----------------------------------------------------------------------------------------------------------- params


@dataclass(frozen=True)
class S2Params:
    """The s2 engine's ``GenerateParams`` sampling fields (``temperature``/``top_p`` are C ``float``, ``top_k`` int).

    Example:
        >>> S2Params(temperature=1.0, top_p=0.9)
        S2Params(temperature=1.0, top_p=0.9, top_k=30)
    """

    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
                raise ValueError(f"S2Params.{name} must be a finite number, got {v!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)):
            raise ValueError(f"S2Params.top_k must be an int, got {self.top_k!r}")
        if not -(2**31) <= int(self.top_k) < 2**31:
            raise ValueError(f"S2Params.top_k must fit a C int, got {self.top_k!r}")


# ----------------------------------------------------------------------------------------------------------- sampler

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_CUTOFF = np.float32(-17.0)  # expf(-17) < 2**-24: such terms cannot change a float sum that is >= 1


def _fsum(v: np.ndarray) -> np.float32:
    """Left-to-right float sum (``for (...) s += v[i]``), as np.add.accumulate does it (np.sum is pairwise)."""
    return np.add.accumulate(v, dtype=np.float32)[-1] if v.size else _F0


def _check_logits(logits: object) -> np.ndarray:
    if not isinstance(logits, np.ndarray):
        raise TypeError(f"logits must be a 1-D numpy array of floats, got {type(logits).__name__}")
    if logits.ndim != 1:
        raise ValueError(f"logits must be 1-D, got shape {logits.shape}")
    if not (np.issubdtype(logits.dtype, np.floating) or np.issubdtype(logits.dtype, np.integer)):
        raise TypeError(f"logits must be a float array, got dtype {logits.dtype}")
    lg = logits.astype(np.float32, copy=False)
    if np.isnan(lg).any():
        raise ValueError("logits contain NaN (the original's std::sort is undefined on them)")
    return lg


def s2_sample(logits: np.ndarray, params: S2Params, rng: Mt19937) -> int:
    """One draw of the s2 ``sample_token`` with generator ``rng`` (consumed exactly as the C++ does).

    Example:
        >>> s2_sample(np.array([0.0, 5.0], dtype=np.float32), S2Params(), Mt19937(1))
        1
    """
    lg = _check_logits(logits)
    n = lg.size
    if n <= 0:  # step 1
        return 0
    temp = np.float32(params.temperature)
    top_k = int(params.top_k)
    k = min(top_k, n) if top_k > 0 else n  # step 4
    top_p = min(max(np.float32(params.top_p), _F0), _F1)
    if temp <= _F0:  # step 8 needs only the first sorted item (steps 5-7 do not touch the generator)
        return int(sort_prefix_perm(lg, 1)[0])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mx = lg.max()  # step 5: the first sorted logit
        x = lg - mx
        full = not np.isfinite(mx)
        if not full:
            # the candidates' logits in sorted (descending) order; x = l - max is monotone in l
            sl = np.sort(lg[x >= _CUTOFF])[::-1]
            p = expf(sl - mx)
            total = _fsum(p)
            keep = _walk(p, total, k, top_p)
            if keep < 0:  # top-k/top-p reach past the candidates: the exact full path
                full = True
        if full:
            sl = np.sort(lg)[::-1]  # sorted logits first: with an infinite max, x holds NaNs
            p = expf(sl - mx)
            total = _fsum(p)
            keep = _walk(p, total, k, top_p)
            if keep < 0:
                keep = n
        keep = max(keep, 1)  # step 7 (cannot trigger: item 0 is never dropped and k >= 1)
        ids = _kept_ids(lg, sl, keep)
        kept = lg[ids]
        # step 9: tempered softmax over the kept logits, in float
        kmax = kept[0]
        w = expf((kept - kmax) / temp)
        s = _fsum(w)
        if s > _F0:
            w = w / s
        s2 = _fsum(w)  # step 10
        if not s2 > _F0:
            return int(ids[0])
        w = w / s2
    return int(ids[discrete_distribution(w, rng)])  # step 11


def _kept_ids(lg: np.ndarray, sl: np.ndarray, keep: int) -> np.ndarray:
    """The ids std::sort leaves in the first ``keep`` places.  ``sl`` holds the leading logits in sorted order
    (everything after it is strictly smaller).  When those ``keep`` values and the next one are all distinct, ties
    cannot show and the order is by value alone; otherwise the introsort trace decides."""
    n = lg.size
    if keep >= n:
        return sort_perm(lg)
    head = sl[: keep + 1]
    if np.all(head[:-1] > head[1:]):  # strictly decreasing (-0.0 vs 0.0 counts as a tie)
        idx = np.flatnonzero(lg >= sl[keep - 1])  # exactly the first `keep`, all distinct
        return idx[np.argsort(lg[idx])[::-1]]
    return sort_prefix_perm(lg, keep)


def _walk(p: np.ndarray, total: np.float32, k: int, top_p: np.float32) -> int:
    """Step 6 on the leading (candidate) probabilities: how many leading items are kept, or -1 when the walk would
    need items past ``p`` (only possible when ``k > p.size``).  Items ``i >= k`` are dropped, so the running sum is
    only needed for the first ``min(k, p.size)``."""
    m = min(k, p.size)
    q = p[:m] / total if total > _F0 else p[:m]
    cum = np.add.accumulate(q, dtype=np.float32)
    over = np.flatnonzero(cum[1:] > top_p)  # item i > 0 is dropped once the running sum exceeds top_p
    if over.size:
        return int(over[0]) + 1
    return k if k <= p.size else -1


class S2Sampler:
    """The s2 sampler with its own ``std::mt19937`` (seeded from ``os.urandom`` when ``seed`` is None, as the
    original seeds from ``std::random_device``).  One generator per sampler: use one sampler per thread.

    Example:
        >>> s = S2Sampler(S2Params(top_k=1), seed=7)
        >>> s.sample(np.array([0.1, 0.9, 0.3], dtype=np.float32))
        1
    """

    def __init__(self, params: S2Params | None = None, seed: int | None = None) -> None:
        self.params = params if params is not None else S2Params()
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.seed = int(seed) & 0xFFFFFFFF
        self.rng = Mt19937(self.seed)

    def sample(self, logits: np.ndarray) -> int:
        """Draw one token id from ``logits`` (a 1-D float array); empty logits give 0, NaN raises ValueError."""
        return s2_sample(logits, self.params, self.rng)
