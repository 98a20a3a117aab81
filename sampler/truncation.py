"""The truncating samplers: top-k, top-p, min-p, typical, top-n-sigma and XTC, as in ``src/llama-sampler.cpp``.

Each class has ``apply(candidates)``, ``accept(token)``, ``reset()`` and ``clone()``, like a ``llama_sampler``.
With the compiled kernels, top-p, min-p, typical, top-n-sigma and XTC instances get a compiled ``apply``
(``K.Stage``: the parameters parsed once, the candidate record array read and written in C, XTC's draw from its
``std::mt19937`` in the same call); the methods written here are the numpy reference they are tested against.

Example:
    >>> import numpy as np
    >>> from sampler.candidates import Candidates
    >>> c = Candidates.from_logits(np.array([0.1, 3.0, 2.0, -1.0], np.float32))
    >>> TopK(2).apply(c); c.ids.tolist()
    [1, 2]
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import mathf, stdalgo
from .candidates import Candidates, bucket_partial_sort
from .dist import fsum_seq, rng_seed, scan_max, softmax
from .kernels import REC, K
from .nsigma import grid_sum, sq_dev_sum
from .rng import Mt19937, engine, uniform_real_float
from .stage import Stage

_F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)


# as llama_sampler_top_k_impl
def top_k_impl(c: Candidates, k: int) -> None:
    if k <= 0:
        return
    if K is not None:
        if c._rec is not None:
            r = K.top_k_rec(c._rec, c._n, c.sorted, k)
            c._n, c.sorted = r >> 1, bool(r & 1)
            return
        if not c.sorted:
            lg = c._lg
            n = len(lg)
            k = min(k, n)
            out = np.empty(k if k <= 128 and n >= 256 else n, REC)
            K.top_k(lg, c._ids, c._p, k, out, False)
            c._rec, c._n, c.sorted = out, k, True
            c._ids = c._p = None
            return
    k = min(k, c.size)
    if not c.sorted:
        c.partial_sort_inplace(k)
    c.truncate(k)


class TopK(Stage):
    """``llama_sampler_init_top_k(k)`` (k <= 0: no-op; no min_keep)."""

    name = "top-k"

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def apply(self, c: Candidates) -> None:
        top_k_impl(c, self.k)


def _stage(code: int, min_keep: int, f1: float, f2: float = 0.0, f3: float = 0.0, rng: object = None,
           fallback: object = None) -> object:
    """The compiled ``apply`` of a stage (``K.Stage(...).apply``), or None without the kernels (or for a min_keep
    outside int64, which the Python apply handles)."""
    if K is None or not -2**63 <= min_keep < 2**63:
        return None
    return K.Stage(code, min_keep, f1, f2, f3, rng, fallback).apply


class TopP(Stage):
    """``llama_sampler_init_top_p(p, min_keep)``."""

    name = "top-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p = _F32(p)
        self.min_keep = int(min_keep)
        self._pf = float(self.p)
        if (a := _stage(2, self.min_keep, self._pf)) is not None:
            self.apply = a  # type: ignore[method-assign]

    # as llama_sampler_top_p_apply
    def apply(self, c: Candidates) -> None:
        if self._pf >= 1.0:
            return
        softmax(c, False)
        n = c.size
        k = n
        buf: np.ndarray | None = None  # indices into c (the buf_sort contents)
        if not c.sorted and n > 1024:
            k = min(256, n)
            buf = bucket_partial_sort(c.logits, k)
        elif not c.sorted:
            c.partial_sort_inplace(k)
        p = c.p if buf is None else c.p[buf]
        cum = np.add.accumulate(p)  # float running sum (cumsum's loop)
        if buf is None and self.min_keep <= 1 and math.isfinite(cum[-1]):
            # finite p >= 0 (a NaN would reach the last sum): cum never decreases, so the first cum >= p bisects
            i = int(cum.searchsorted(self.p, side="left"))
            c.truncate(i + 1 if i < n else n)
            return
        ok = cum >= self.p
        if self.min_keep > 1:
            ok[: self.min_keep - 1] = False
        last_idx = n
        if buf is not None and len(p) >= k:
            # the first k entries come from the 256-wide sort; past them, llama.cpp re-sorts everything
            hit = np.flatnonzero(ok[:k])
            if hit.size:
                last_idx = int(hit[0]) + 1
            else:
                buf = bucket_partial_sort(c.logits, n)
                p2 = c.p[buf]
                cum2 = np.empty(n, _F32)
                cum2[:k] = cum[:k]
                if n > k:
                    tail = np.concatenate(([cum[k - 1]], p2[k:])).astype(_F32)
                    cum2[k:] = np.cumsum(tail, dtype=_F32)[1:]
                ok2 = cum2 >= self.p
                if self.min_keep > 1:
                    ok2[: self.min_keep - 1] = False
                ok2[:k] = False
                hit = np.flatnonzero(ok2)
                if hit.size:
                    last_idx = int(hit[0]) + 1
        else:
            i = int(np.argmax(ok))  # the first True, if any
            if ok[i]:
                last_idx = i + 1
        if buf is not None:
            c.take(buf[:last_idx])
            c.sorted = True
        else:
            c.truncate(last_idx)


class MinP(Stage):
    """``llama_sampler_init_min_p(p, min_keep)``: the unsorted path keeps id order."""

    name = "min-p"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p = _F32(p)
        self.min_keep = int(min_keep)
        self._lp = _F32(mathf.logf(float(self.p))) if self.p > 0.0 else _F32(0.0)
        self._pf = float(self.p)
        if (a := _stage(3, self.min_keep, self._pf)) is not None:
            self.apply = a  # type: ignore[method-assign]

    # as llama_sampler_min_p_apply
    def apply(self, c: Candidates) -> None:
        if self._pf <= 0.0:
            return
        if c.size == 0:
            return
        lp = self._lp
        if not c.sorted:
            mx = scan_max(_F32(-_FLT_MAX), c.logits)
            min_logit = _F32(mx + lp)
            keep = np.flatnonzero(c.logits >= min_logit)
            if keep.size and keep.size >= self.min_keep:
                c.take(keep)
                return
            c.partial_sort_inplace(c.size)
        min_logit = _F32(c.logits[0] + lp)
        below = c.logits < min_logit
        below[: max(self.min_keep, 1)] = False
        i = int(np.argmax(below))
        c.truncate(i if below[i] else c.size)


class Typical(Stage):
    """``llama_sampler_init_typical(p, min_keep)`` (locally typical sampling)."""

    name = "typical"

    def __init__(self, p: float, min_keep: int) -> None:
        self.p = _F32(p)
        self.min_keep = int(min_keep)
        self._pf = float(self.p)
        if (a := _stage(4, self.min_keep, self._pf)) is not None:
            self.apply = a  # type: ignore[method-assign]

    # as llama_sampler_typical_apply
    def apply(self, c: Candidates) -> None:
        if self._pf >= 1.0:
            return
        softmax(c, True)
        p = c.p
        with np.errstate(invalid="ignore", divide="ignore"):
            lg = mathf.logf_vec(p)
            ent = fsum_seq((-p) * lg) if len(p) else _F32(0)
            # float entropy accumulated sequentially: entropy += -p*logf(p)
            scores = np.abs(-lg - ent).astype(_F32)
        nan = np.isnan(scores)
        if nan.any():
            # with NaN scores every comparison is false: libstdc++ then orders as if all keys were equal
            if not nan.all():
                raise NotImplementedError("typical sampling with partly-NaN scores")
            scores = np.zeros(len(scores), _F32)
        order = np.asarray(stdalgo.sort_perm(scores, descending=False))
        cum = np.cumsum(p[order], dtype=_F32)
        ok = cum > self.p
        if self.min_keep > 0:
            ok[: self.min_keep - 1] = False
        hit = np.flatnonzero(ok)
        last_idx = int(hit[0]) + 1 if hit.size else len(order)
        c.take(order[:last_idx])
        c.sorted = False


class TopNSigma(Stage):
    """``llama_sampler_init_top_n_sigma(n)``: masks logits below max - n*std (nothing is removed)."""

    name = "top-n-sigma"

    def __init__(self, n: float) -> None:
        self.n = _F32(n)
        self._nf = float(self.n)
        # the compiled apply: records in C, a float array through _top_n_sigma_floats
        if (a := _stage(9, 0, self._nf, fallback=functools.partial(_top_n_sigma_floats, nf=self._nf))) is not None:
            self.apply = a  # type: ignore[method-assign]

    # as llama_sampler_top_n_sigma_apply
    def apply(self, c: Candidates) -> None:
        if self._nf <= 0.0 or c.size <= 1:
            return
        lg = c.logits
        low = lg.min()
        if low > -np.inf:  # no -inf (and no NaN: the minimum would be NaN): every logit counts
            vals = lg
        else:
            vals = lg[lg != -np.inf]
        mx = scan_max(lg[0], vals)
        cnt = vals.size
        total = grid_sum(vals) if cnt > 4096 else None  # exact without the sequential loop when no add rounds
        mean = _F32((fsum_seq(vals) if total is None else total) / _F32(cnt)) if cnt else _F32(0)
        # acc is a float; each term is pow(l - mean, 2) in double, added in double and rounded back to float
        with np.errstate(invalid="ignore", over="ignore"):
            d = vals - mean
        accf = sq_dev_sum(d)  # outside the errstate (which slows every ufunc call inside it)
        std = _F32(np.sqrt(_F32(accf / _F32(cnt)))) if cnt else _F32(0)
        thr = _F32(mx - _F32(self.n * std))
        if thr > low or low != low:  # something may be masked (a NaN threshold masks nothing, NaN logits stay)
            keep = lg < thr
            np.logical_not(keep, out=keep)  # not (l < thr): NaN logits stay, as in C
            out = np.full(lg.size, -np.inf, _F32)
            np.copyto(out, lg, where=keep)  # (few are kept: cheaper than a where over two arrays)
            c.logits = out


def _top_n_sigma_floats(c: Candidates, nf: float) -> None:
    """The compiled top-n-sigma on a candidate array still in float form (n > 0): into a private logit array."""
    if c.size <= 1:
        return
    src = c._lg
    dst = src if c._owned else np.empty(len(src), _F32)
    K.top_n_sigma(src, nf, dst)  # type: ignore[union-attr]
    c._lg, c._owned = dst, True


class XTC:
    """``llama_sampler_init_xtc(p, t, min_keep, seed)``: its own mt19937, one float draw per apply."""

    name = "xtc"

    def __init__(self, p: float, t: float, min_keep: int, seed: int) -> None:
        self.probability = _F32(p)
        self.threshold = _F32(t)
        self._tf = float(self.threshold)
        self._pf = float(self.probability)
        self._off = bool(self.probability <= 0.0 or self.threshold > 0.5)
        self.min_keep = int(min_keep)
        self.seed = seed & 0xFFFFFFFF
        self.seed_cur = rng_seed(self.seed)
        self.rng = engine(self.seed_cur)
        self._bind()

    def _bind(self) -> None:
        if K is not None and not isinstance(self.rng, Mt19937):
            if (a := _stage(7, self.min_keep, self._pf, self._tf, 0.0, self.rng)) is not None:
                self.apply = a  # type: ignore[method-assign]

    # as llama_sample_xtc_apply
    def apply(self, c: Candidates) -> None:
        if self._off or c.size < 2:
            return
        chance = uniform_real_float(self.rng)
        if chance > self.probability:
            return
        softmax(c, True)
        ge = c.p >= self.threshold
        nz = np.flatnonzero(~ge)
        run = int(nz[0]) if nz.size else c.size  # length of the leading run with p >= t
        pos_last = max(run - 1, 0)
        if c.size - pos_last >= self.min_keep and pos_last > 0:
            c.advance(pos_last)

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        self.seed_cur = rng_seed(self.seed)
        self.rng.seed(self.seed_cur)

    def clone(self) -> XTC:
        x = XTC.__new__(XTC)
        x.__dict__.update(self.__dict__)
        x.__dict__.pop("apply", None)  # bound to this generator
        x.rng = self.rng.clone()
        x._bind()
        return x
