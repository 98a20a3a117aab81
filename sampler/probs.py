"""The probabilities llama-server reports as ``logprobs`` (``get_token_probabilities`` in server-common.cpp).

The raw logits (no bias, no grammar) are partially sorted so the top ``n_top`` come first (libstdc++
``std::partial_sort``); p = expf(l - max) is summed in float *in the order the partial sort leaves the whole array*,
then divided. The result holds the same 32-bit floats as llama-server's.

Example:
    >>> import numpy as np
    >>> r = token_probs(np.array([0.0, 1.0, 2.0], np.float32), sampled=2, n_top=2)
    >>> r.ids.tolist(), round(float(r.prob), 4)
    ([2, 1], 0.6652)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .candidates import partial_sort_full
from .dist import expf_arr, fsum_seq


class TokenProbs(NamedTuple):
    """``prob``: the sampled token's probability (1.0 if absent, as llama-server's default); ``ids``/``probs``: the
    first ``n_top`` entries (descending logit); ``logprobs``: ``logf`` of ``probs`` (0 mapped to -FLT_MAX is done by
    the server when formatting, see :func:`logprob`)."""

    prob: np.float32
    ids: np.ndarray
    probs: np.ndarray


def token_probs(logits: np.ndarray, sampled: int, n_top: int) -> TokenProbs:
    """llama-server's pre-sampling probabilities for one position.

    Args:
        logits: the raw logits (1-D, vocabulary size).
        sampled: the token the sampler chose.
        n_top: ``n_probs`` of the request (the server calls this only when it is > 0).
    """
    a = np.asarray(logits)
    if a.ndim != 1 or a.dtype.kind not in "fiu":
        raise ValueError("logits must be a 1-D float array")
    a = a.astype(np.float32, copy=False)
    if np.isnan(a).any():
        raise ValueError("logits contain NaN")
    n = len(a)
    if not 0 <= int(sampled) < n:
        raise ValueError(f"token id {sampled} out of range for {n} logits")
    k = min(int(n_top), n) if n_top >= 0 else n  # a negative int becomes a huge size_t
    if k > 0:
        perm = partial_sort_full(a, k)
        ordered = a[perm]
        mx = ordered[0]
    else:
        perm = np.arange(n)
        ordered = a
        mx = max(np.float32(-np.inf), a.max())
    with np.errstate(invalid="ignore"):
        p = expf_arr(ordered - mx)
        s = fsum_seq(p)
        p = p / s
    where = np.flatnonzero(perm == int(sampled))
    prob = p[where[0]] if where.size else np.float32(1.0)
    return TokenProbs(np.float32(prob), perm[:k].astype(np.int32), p[:k].astype(np.float32))


def logprob(p: float) -> float:
    """The ``logprob`` llama-server prints for a probability: ``logf(p)``, with p = 0 as -FLT_MAX."""
    from . import mathf
    if p == 0.0:
        return -float(np.finfo(np.float32).max)
    return float(mathf.logf(float(p)))
