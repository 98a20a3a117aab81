"""top-n-sigma's statistics in bulk, bit for bit as ``llama_sampler_top_n_sigma_apply`` computes them.

llama.cpp (src/llama-sampler.cpp:3237) sums the logits in a float (``logits_sum += logit``, in array order) and
accumulates the variance in a *float* from *double* terms: ``acc += pow(logit - mean, 2)``, i.e. for each ``d`` (a
float) ``acc = (float)((double)acc + (double)d * d)``: one double rounding and one float rounding per element,
sequentially.  The logit sum is :func:`numpy.cumsum` (a sequential float32 loop).  :func:`sq_dev_sum` gets the
variance sum with one float32 ``cumsum`` over terms ``x`` chosen so that ``fl32(acc + x)`` is the C step exactly:

1. *No double-rounding effect.*  For ``acc = a`` a normal float in binade ``[2^e, 2^(e+1))`` and ``s = d*d < 2^(e-1)``
   (exact in double), ``fl32(fl64(a + s)) == fl32(a + s)``.  The double rounding could only differ if ``fl64(a+s)``
   were a float midpoint ``M`` with ``a + s != M``; then ``s_M = M - a`` is a float (a multiple of ``2^(e-24)`` below
   ``2^(e-1)``) within ``2^(e-52)`` of ``s``, hence ``s_M == s32 = fl32(s)`` and ``0 < |s - s32| <= lsb(s32) * 2^-29``
   (``lsb`` = value of the lowest set bit of the significand).  No square of a float has that property: all 2^24
   significands are checked in ``tests/sampler/test_sampler_nsigma.py``.
2. *The term.*  ``x = s32`` gives ``fl32(a + s32) == fl32(a + s)`` unless ``a + s32`` is exactly a rounding tie
   (then ``s32`` is a multiple of ``2^(e-24)``); those few candidates take ``x = round_to_odd_24(s)`` instead, which
   rounds like ``s`` on every grid at least 4 times coarser than its own (the round-to-odd property).
3. *The binade is bounded from below without the sequential sum*: block sums of ``s32`` give the running sum at
   every block start up to the accumulated rounding (relative error at most ``i * 2^-24``), so ``e`` is known to be
   at least ``e_lo`` per block; candidates are then "``s32`` a multiple of ``2^(e_lo-24)``" (a superset), and
   elements with ``s32 >= 2^(e_lo-1)`` (possibly not ``s < 2^(e-1)``), or where ``acc`` may still be below
   ``2^-100`` (the subnormal zone), are computed one by one with the C step between the cumsum segments.  The
   bounds are checked against the computed sums afterwards (a failure would fall back to the plain loop; it cannot
   happen).

Example:
    >>> import numpy as np
    >>> d = np.array([0.5, -1.25, 3.0], np.float32)
    >>> float(sq_dev_sum(d)) == float(sq_dev_sum_loop(d))
    True
"""

from __future__ import annotations

import math
from array import array

import numpy as np

_F32 = np.float32
_TINY = 2.0 ** -100
_BLOCK = 256
_HEAD = 256  # the first elements get per-element bounds (the running sum grows fastest there)


def sq_dev_sum_loop(d: np.ndarray) -> np.float32:
    """The C loop itself, one element at a time (reference and fallback)."""
    acc = array("f", [0.0])
    for v in d.astype(np.float64).tolist():
        acc[0] = acc[0] + v * v
    return _F32(acc[0])


def _ro24(d: np.ndarray, s32: np.ndarray) -> np.ndarray:
    """``d*d`` (exact in double) rounded to odd at float precision (``s32`` is its round-to-nearest)."""
    s = d.astype(np.float64) ** 2
    inexact = s != s32
    even = (s32.view(np.int32) & 1) == 0
    nudge = inexact & even
    out = s32.copy()
    if nudge.any():
        toward = np.where(s[nudge] > s32[nudge], _F32(np.inf), _F32(0.0)).astype(_F32)
        out[nudge] = np.nextafter(s32[nudge], toward)
    return out


def _flags(s32: np.ndarray, dbits: np.ndarray, lb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat indices (special, candidate) into ``s32`` (2-D: blocks x elements, or 1-D) under running-sum lower bounds
    ``lb`` (broadcast against ``s32``).  Special: ``s32 >= 2^(e_lo-1)`` (maybe not ``s < 2^(e-1)``) or
    ``lb < 2^-100``; candidate: ``s32`` a multiple of ``2^(e_lo - 24)`` (zeros and exact squares may be among them:
    the caller sorts them out); and the candidates dropped here (exact squares: possible ties of the running sum).
    One test finds both: ``t = s32 * 2^(24 - e_lo)`` is an integer."""
    tiny = lb < _TINY
    any_tiny = bool(tiny.any())
    e_lo = np.floor(np.log2(np.where(tiny, 1.0, lb) if any_tiny else lb))
    scale = np.exp2(24.0 - e_lo).astype(_F32)
    with np.errstate(over="ignore"):
        t = s32 * scale
    hit = np.rint(t) == t  # every t >= 2^23 is an integer (and inf == rint(inf))
    if any_tiny:
        hit |= tiny
    if np.count_nonzero(hit) > 64:  # many (exact squares of tied logits): drop those that need nothing
        keep = (dbits & 0xFFF) != 0
        keep |= t >= _F32(2.0 ** 23)
        if any_tiny:
            keep |= tiny
        dropped = np.flatnonzero(hit & ~keep)
        hit &= keep
    else:
        dropped = np.zeros(0, np.intp)
    idx = np.flatnonzero(hit)
    sp = t.reshape(-1)[idx] >= _F32(2.0 ** 23)
    if any_tiny:
        sp |= np.broadcast_to(tiny, t.shape).reshape(-1)[idx]
    return idx[sp], idx[~sp], dropped


class _Unproven(Exception):
    """A bulk block sum whose binade check failed (never seen: the binades are chosen with safe margins)."""


def _cumsum_from(x: np.ndarray, i: int, j: int, acc: np.float32) -> np.float32:
    """``for k in [i, j): acc = fl32(acc + x[k])``, the running sums written into ``x[i:j]``."""
    seg = x[i:j]
    seg[0] = acc + seg[0]
    with np.errstate(over="ignore"):
        np.cumsum(seg, out=seg)
    return seg[-1]


def _running_sum(x: np.ndarray, i: int, j: int, acc: np.float32, h: int, bsum: np.ndarray,
                 ties: np.ndarray) -> np.float32:
    """The float32 running sum of the terms ``x[i:j]`` (all >= 0, finite) from ``acc``, as a sequential loop.

    The value after every element is written into ``x`` where a plain cumsum runs; for the blocks of ``_BLOCK``
    elements aligned at ``h + k*_BLOCK`` (``bsum[k]`` approximates their sums) that are summed in bulk, only at each
    block's last element (the bounds check of :func:`sq_dev_sum` reads ``x`` there).  A block is summed in bulk when
    the running sum stays in one binade ``[2^e, 2^(e+1))``: every add then rounds to the grid ``q = 2^(e-23)`` and
    the sum before it is a multiple of ``q``, so ``fl32(a + x) == a + w`` with ``w = fl32(2^e + x) - 2^e`` unless
    ``x`` is an odd multiple of ``q/2`` (a tie: the tie-break needs the sum's parity; ``ties`` holds every index
    where that can happen, their blocks are left to the cumsum).  The block then adds ``sum(w)``, integers in units
    of ``q``, exact in float32 below ``2^23 q``.  The binade is guessed from ``bsum`` and *proven* on the sums
    computed: the start ``>= 2^e`` and the end ``< 2^(e+1)`` (the sum never decreases, an add whose rounded result
    is below ``2^(e+1)`` had its exact sum below it, and an ``x >= 2^e`` makes ``w >= 2^e``, failing the check).  A
    failure raises :class:`_Unproven` (the caller then runs the C loop); the unsure blocks run the cumsum from the
    value computed before them, so every block starts from the sequential loop's own value.
    """
    g0 = h + -(-(i - h) // _BLOCK) * _BLOCK if i > h else h
    m = (j - g0) // _BLOCK if j > g0 else 0
    if m < 16:
        return _cumsum_from(x, i, j, acc)
    if g0 > i:
        acc = _cumsum_from(x, i, g0, acc)
    g1 = g0 + m * _BLOCK
    k0 = (g0 - h) // _BLOCK
    margin = x.size * 2.0 ** -23 + 2.0 ** -12
    approx = float(acc) + np.concatenate(([0.0], np.cumsum(bsum[k0:k0 + m], dtype=np.float64)))  # a guess
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        e = np.floor(np.log2(approx[:-1]))
        # the float32 sequential sum is within (n 2^-24 + 2^-20) of approx, relatively (the running rounding, the
        # pairwise float32 block sums, the odd nudges of the terms): margins twice that
        sure = (approx[:-1] >= np.exp2(e) * (1 + margin)) & (approx[1:] < np.exp2(e + 1) * (1 - margin))
    sure &= (e >= -100) & (e <= 126)
    if ties.size:
        tb = (ties[(ties >= g0) & (ties < g1)] - g0) // _BLOCK
        sure[tb] = False
    if np.count_nonzero(sure) < 8:
        return _cumsum_from(x, g0, j, acc)
    e = np.where(sure, e, 0.0)
    big = np.exp2(e).astype(_F32)[:, None]
    w = np.add(x[g0:g1].reshape(m, _BLOCK), big)
    np.subtract(w, big, out=w)
    inc = w.sum(axis=1).astype(np.float64)
    ex = e[sure]
    if ex.max() - ex.min() > 28:  # the prefix sums of inc below would not all be exact in double
        return _cumsum_from(x, g0, j, acc)
    # prefix sums of the sure blocks' increments: exact (multiples of 2^(min e - 23) below 2^(max e + 1))
    pre = np.concatenate(([0.0], np.cumsum(np.where(sure, inc, 0.0))))
    pl = pre.tolist()
    edges = np.flatnonzero(sure[1:] != sure[:-1]) + 1
    bounds = [0, *edges.tolist(), m]
    base = np.zeros(m)  # per sure block: its run's start minus pre at the run's first block
    for b, c in zip(bounds[:-1], bounds[1:], strict=True):
        if sure[b]:  # the run's start plus the exact sum of its blocks (every value checked below)
            a = float(acc)
            base[b:c] = a - pl[b]
            acc = _F32(a + (pl[c] - pl[b]))
        else:
            acc = _cumsum_from(x, g0 + b * _BLOCK, g0 + c * _BLOCK, acc)
    starts = (base + pre[:-1])[sure]
    ends = starts + inc[sure]
    if not ((starts >= np.exp2(ex)).all() and (ends < np.exp2(ex + 1)).all()):
        raise _Unproven  # (the margins make the guess safe: not expected to happen; the caller runs the C loop)
    x[g0 + _BLOCK * (np.flatnonzero(sure) + 1) - 1] = ends
    if g1 < j:
        acc = _cumsum_from(x, g1, j, acc)
    return acc


def grid_sum(x: np.ndarray, top: float | None = None) -> np.float32 | None:
    """The sequential float32 sum of ``x`` (``float s = 0; for v in x: s += v``) when no add can round, else None.

    With ``B >= sum |x|`` (here ``n * max |x|``; ``top`` may give ``max |x|``), if every element is a multiple of
    ``g = 2^(ceil(log2 B) - 24)``, every partial sum, in any order, is a multiple of ``g`` below ``2^24 g`` in
    magnitude: a float32, so every add is exact and the loop's result is the exact sum, which numpy's pairwise float32
    sum then also gives.  Logits of quantised models (multiples of a coarse step) are such; a strided sample is tested
    first (12 low significand bits zero: penalised or DRY-touched logits leave the grid), so others cost little.

    Example:
        >>> float(grid_sum(np.array([0.5, -1.5, 3.0], np.float32))), grid_sum(np.array([0.1, 0.2], np.float32))
        (2.0, None)
    """
    n = x.size
    if n == 0:
        return _F32(0.0)
    for probe in (x[:64], x[::61]):  # quick noes on samples (never a yes: the full test below decides)
        if (probe.view(np.int32) & 0xFFF).any():
            return None
    if top is None:
        top = max(float(x.max()), -float(x.min()))
    bound = n * top
    if not 0.0 < bound < 1e300:  # all zeros (the loop gives +0), inf or NaN: left to the loop
        return None
    e = math.ceil(math.log2(bound)) - 24
    if 2.0 ** (e + 24) < bound:  # (a log2 rounded down to an integer)
        e += 1
    if not -100 <= e <= 100:
        return None
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        t = x * _F32(2.0 ** -e)  # |t| <= 2^24; exact when e <= 0 (a power of two up), else maybe an underflow
    if not np.array_equal(np.rint(t), t):
        return None
    if e > 0 and np.count_nonzero(t) != np.count_nonzero(x):  # a non-zero x below g that underflowed to 0
        return None
    return _F32(x.sum())


def sq_dev_sum(d: np.ndarray) -> np.float32:
    """``float acc = 0; for v in d: acc += pow(v, 2)`` (the pow in double), exactly, without a Python loop.

    ``d`` is float32 (llama.cpp's ``logit - mean``).  Non-finite terms propagate as in C (inf, NaN).
    """
    d = np.ascontiguousarray(d, dtype=_F32)
    n = d.size
    if n == 0:
        return _F32(0.0)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        s32 = d * d
    h = min(n, _HEAD)
    nb = (n - h) // _BLOCK
    body_end = h + nb * _BLOCK
    hs = s32[:h].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        bsum = s32[h:body_end].reshape(nb, _BLOCK).sum(axis=1) if nb else np.zeros(0, _F32)
        ok = np.isfinite(hs.sum()) and np.isfinite(bsum.sum(dtype=np.float64)) and np.isfinite(s32[body_end:]).all()
    if not ok:  # an inf or NaN term (or a float overflow of a block sum): look closer
        fin = np.isfinite(s32)
        if not fin.all():
            j = int(np.argmin(fin))
            # acc is then inf (inf + anything finite or inf) unless a NaN term is at or after j
            return _F32(np.nan) if np.isnan(s32[j:]).any() else _F32(np.inf)
        bsum = bsum.astype(np.float64) if nb else bsum
    if s32[0] != 0:
        first = 0
    else:
        nz = s32 != 0
        if not nz.any():  # every term rounds to 0 from acc = 0 (|d| <= 2^-75)
            return _F32(0.0)
        first = int(np.argmax(nz))  # acc = 0 before it, fl32(s) = s32 at it
    lbf = 1.0 - (n * 2.0 ** -23 + 2.0 ** -12)  # the sequential sum's relative error, plus the block sums'
    if lbf <= 0.25 or first >= h:
        return sq_dev_sum_loop(d)
    dbits = d.view(np.int32)
    x = s32  # the terms (s32 is ours: modified in place)
    # lower bounds of acc before each element: per element in the head, per block after it
    lb_head = np.concatenate(([0.0], np.cumsum(hs)[:-1])) * lbf
    sp_h, cd_h, _ = _flags(s32[:h], dbits[:h], lb_head)  # (the head is summed by the cumsum: no tie list)
    specials = [sp_h[sp_h > first]]
    cands = [cd_h[cd_h > first]]
    ties: list[np.ndarray] = []
    checks: list[tuple[np.ndarray, np.ndarray]] = [(np.arange(1, h), lb_head[1:])]
    if h < n:
        starts = np.arange(h, n, _BLOCK)
        pre = float(hs.sum())
        lb_blk = (pre + np.concatenate(([0.0], np.cumsum(bsum, dtype=np.float64)))) * lbf
        if nb:
            sp_b, cd_b, dr_b = _flags(s32[h:body_end].reshape(nb, _BLOCK), dbits[h:body_end].reshape(nb, _BLOCK),
                                lb_blk[:nb, None])
            specials.append(sp_b + h)
            cands.append(cd_b + h)
            ties.append(dr_b + h)
        if body_end < n:
            sp_t, cd_t, dr_t = _flags(s32[body_end:], dbits[body_end:], lb_blk[nb:nb + 1])
            specials.append(sp_t + body_end)
            cands.append(cd_t + body_end)
            ties.append(dr_t + body_end)
        checks.append((starts, lb_blk[: starts.size]))
    cand = np.concatenate(cands)
    # only inexact squares need the odd rounding: d*d is exact in float iff d's 12 low significand bits are 0 (and a
    # zero term, |d| <= 2^-75, adds nothing to acc >= 2^-100); specials are overwritten by their C step below
    odd = ((dbits[cand] & 0xFFF) != 0) & (s32[cand] != 0)
    ties.append(cand[~odd])  # the exact squares among the candidates: x = s32 may be a tie of the running sum
    cand = cand[odd]
    if cand.size:
        x[cand] = _ro24(d[cand], s32[cand])
    sp = np.concatenate(specials)
    tie_idx = np.concatenate(ties)
    if sp.size > 4096:  # a long subnormal zone (every |d| tiny): the plain loop is cheaper than segments
        return sq_dev_sum_loop(d)
    # the running sum: float32 sums of segments, the special elements stepped one by one as in C
    acc = array("f", [0.0])
    pos = 0
    sp_list = sp.tolist()
    dv = d[sp].astype(np.float64).tolist() if sp.size else []
    for j, v in zip(sp_list + [n], dv + [None], strict=True):
        if j > pos:
            try:
                acc[0] = float(_running_sum(x, pos, j, _F32(acc[0]), h, bsum, tie_idx))
            except _Unproven:  # pragma: no cover - the margins make it impossible
                return sq_dev_sum_loop(d)
        if v is None:
            break
        acc[0] = acc[0] + v * v
        x[j] = acc[0]
        pos = j + 1
    # the bounds the terms relied on must hold for the sums actually computed (acc is non-decreasing)
    for idx, lb in checks:
        if idx.size and not (x[idx - 1].astype(np.float64) >= lb).all():  # pragma: no cover - proven impossible
            return sq_dev_sum_loop(d)
    return x[n - 1]
