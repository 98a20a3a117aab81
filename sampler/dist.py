"""Softmax and the selecting sampler ``dist``, as llama.cpp computes them.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> c = Candidates.from_logits(np.array([0.0, 1.0], np.float32))
    >>> d = Dist(42); d.apply(c); c.selected in (0, 1)
    True
"""

from __future__ import annotations

import math
import os
import random

import numpy as np

from . import mathf
from .candidates import Candidates
from .kernels import K
from .rng import Mt19937, discrete_distribution, engine, uniform_real_double

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
_F32 = np.float32


# as get_rng_seed
def rng_seed(seed: int) -> int:
    """The seed a sampler actually uses: ``seed``, or a fresh random one for ``LLAMA_DEFAULT_SEED``."""
    seed &= 0xFFFFFFFF
    if seed == LLAMA_DEFAULT_SEED:
        return int.from_bytes(os.urandom(4), "little") if hasattr(os, "urandom") else random.getrandbits(32)
    return seed


def expf_arr(x: np.ndarray) -> np.ndarray:
    """glibc expf over a float32 array (:func:`sampler.mathf.expf_vec`)."""
    return mathf.expf_vec(x)


def fsum_seq(x: np.ndarray) -> np.float32:
    """A float32 sum in array order (``float s = 0; s += x[i]``)."""
    if len(x) == 0:
        return _F32(0.0)
    if x.dtype != _F32:
        x = x.astype(_F32)
    return np.add.accumulate(x)[-1]  # cumsum's own loop (sequential), without its dtype dispatch


def scan_max(start: np.float32, x: np.ndarray) -> np.float32:
    """``m = start; for v in x: m = std::max(m, v)``: a NaN ``start`` stays, NaN elements are skipped."""
    m = x.max() if len(x) else start
    if m != m:  # a NaN somewhere (adaptive-p can produce NaN logits): std::max never picks a NaN element
        if start != start:
            return start
        finite = x[~np.isnan(x)]
        m = finite.max() if len(finite) else start
    return m if m > start else start


def max_logit(c: Candidates) -> np.float32:
    """``data[0].logit`` when sorted, else the maximum (``std::max`` scan from ``data[0]``)."""
    lg = c.logits
    if c.sorted:
        return lg[0]
    m = lg.max()
    return m if m == m else scan_max(lg[0], lg[1:])


# as llama_sampler_softmax_impl
def softmax(c: Candidates, do_sort: bool) -> None:
    """p = expf(l - max) / float sum, optionally after a full sort."""
    if c.size == 0:
        raise RuntimeError("GGML_ASSERT(cur_p->size > 0) failed")
    if K is not None:
        r = K.softmax(c.records(), c._n, c.sorted, do_sort)
        c._n, c.sorted = r >> 1, bool(r & 1)
        return
    if do_sort and not c.sorted:
        c.partial_sort_inplace(c.size)
    m = max_logit(c)
    if not math.isfinite(m):  # all -inf (or a +inf): NaN probabilities, with the NaN bits the hardware gives C
        with np.errstate(invalid="ignore"):
            p = mathf.expf_vec(c.logits - m)
            c.p = p / fsum_seq(p)
        return
    p = mathf.expf_vec(c.logits - m)
    total = np.add.accumulate(p)[-1]  # fsum_seq
    if math.isfinite(total):
        c.p = p / total
    else:  # a +inf logit behind data[0] of a "sorted" array (huge logits sort into bucket 0): NaN/inf, as in C
        with np.errstate(invalid="ignore"):
            c.p = p / total


# as llama_sample_dist (libstdc++ discrete_distribution over p)
def sample_discrete(c: Candidates, rng: Mt19937) -> int:
    """``std::discrete_distribution<int>`` over ``p`` (no draw for fewer than two entries)."""
    if K is not None and not isinstance(rng, Mt19937):  # the compiled generator, drawn from in the kernel
        return K.discrete(c.records(), c.size, rng)  # (no draw below two entries)
    return int(discrete_distribution(c.p, rng))


class Dist:
    """``llama_sampler_init_dist(seed)``: softmax in float, a double running sum, one uniform double per draw.

    With the kernels, ``rng`` is a ``sampler._kernels.Mt19937`` and :meth:`apply` is a compiled stage
    (``K.Stage``) drawing from it in the same call; the method below is the reference (and runs without them).
    """

    name = "dist"

    def __init__(self, seed: int) -> None:
        self.seed = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed)
        self.rng = engine(self.seed_cur)
        self._bind()

    def _bind(self) -> None:
        if K is not None and isinstance(self.rng, K.Mt19937):
            self.apply = K.Stage(6, 0, 0.0, 0.0, 0.0, self.rng, None).apply  # type: ignore[method-assign]

    # as llama_sampler_dist_apply
    def apply(self, c: Candidates) -> None:
        n = c.size
        if n == 0:
            c.selected = -1
            return
        c.selected = 0
        if n == 1:
            uniform_real_double(self.rng)  # the draw is still consumed
            c.p = c.p.copy()
            c.p[0] = 1.0
            return
        m = max_logit(c)
        if not math.isfinite(m):  # all -inf (or a +inf): NaN sums, nothing found, the last index is taken
            uniform_real_double(self.rng)
            c.selected = n - 1
            with np.errstate(invalid="ignore"):
                p = mathf.expf_vec(c.logits - m)
                c.p = (p / np.cumsum(p, dtype=np.float64)[-1]).astype(_F32)
            return
        with np.errstate(invalid="ignore", over="ignore"):
            z = c.logits - m
        p = mathf.expf_vec(z)  # outside the errstate: see expf_vec
        run = np.add.accumulate(p, dtype=np.float64)  # float p added to a double running sum, in array order
        total = run[-1]
        tgt = total * uniform_real_double(self.rng)
        i = int(run.searchsorted(tgt, side="left"))  # the first i with run[i] >= tgt (run never decreases)
        c.selected = i if i < n else n - 1
        if math.isfinite(total):  # >= 1 (the maximum's own term): nothing to warn about
            c.p = (p / total).astype(_F32)
        else:
            with np.errstate(invalid="ignore"):
                c.p = (p / total).astype(_F32)

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed)
        self.rng.seed(self.seed_cur)

    def clone(self) -> Dist:
        d = Dist.__new__(Dist)
        d.seed, d.seed_cur, d.rng = self.seed, self.seed_cur, self.rng.clone()
        d._bind()
        return d
