"""top-n-sigma in bulk (sampler.nsigma) against llama.cpp's own sampler and the C loop, bit for bit.

The proof that the float32 cumsum formulation equals the C loop has one numeric lemma (no float square is within
``lsb * 2^-29`` of its float rounding without being equal to it), checked here over all 2^24 significands.
"""

from __future__ import annotations

import numpy as np
import pytest

from oracle.llama import Candidates as CCandidates
from oracle.llama import L
from sampler.candidates import Candidates
from sampler.nsigma import sq_dev_sum, sq_dev_sum_loop
from sampler.truncation import TopNSigma

N = 262144


def test_no_float_square_sits_next_to_a_float() -> None:
    """For every 24-bit significand m: m*m rounded to 24 significant bits (RNE) is H * 2^w with remainder L; the
    double-rounding hazard needs 0 < |L| <= 2^(tz(H) + w - 29). It never happens (and the check is not vacuous: the
    same scan with a 2^-20 factor finds cases)."""
    total = loose = 0
    one = np.uint64(1)
    for start in range(1 << 12, 1 << 24, 1 << 21):  # m < 2^12: m*m fits in 24 bits, exact
        m = np.arange(start, min(1 << 24, start + (1 << 21)), dtype=np.uint64)
        sq = m * m
        w = (np.floor(np.log2(sq.astype(np.float64))).astype(np.int64) + 1 - 24)
        # guard the float log2 at powers of two
        w = np.where((sq >> (w + 23).astype(np.uint64)) == 0, w - 1, w)
        w = np.where((sq >> (w + 24).astype(np.uint64)) != 0, w + 1, w)
        keep = w > 0
        sq, w = sq[keep], w[keep].astype(np.uint64)
        q = sq >> w
        rem = sq & ((one << w) - one)
        half = one << (w - one)
        h = q + ((rem > half) | ((rem == half) & ((q & one) == one))).astype(np.uint64)
        low = sq.astype(np.int64) - (h << w).astype(np.int64)
        carry = h == (one << np.uint64(24))
        hs = h.astype(np.int64)
        tz = np.where(carry, 23, np.log2((hs & -hs).astype(np.float64)).astype(np.int64))
        wi = w.astype(np.int64) + carry
        mag = np.abs(low).astype(np.float64)
        total += int(((low != 0) & (mag <= np.exp2((tz + wi - 29).astype(np.float64)))).sum())
        loose += int(((low != 0) & (mag <= np.exp2((tz + wi - 20).astype(np.float64)))).sum())
    assert total == 0
    assert loose > 0


def _cases(rng: np.random.Generator):
    x = (rng.standard_normal(N) * 2.5).astype(np.float32)
    yield "plain", x
    yield "ties", (np.round(x * 2) / 2).astype(np.float32)
    yield "ties-coarse", np.round(x).astype(np.float32)
    yield "all-equal", np.full(N, 1.5, np.float32)
    y = x.copy()
    y[rng.random(N) < 0.9] = -np.inf
    yield "-inf-90%", y
    y = np.full(N, -np.inf, np.float32)
    y[rng.integers(0, N, 7)] = rng.standard_normal(7).astype(np.float32)
    yield "-inf-all-but-7", y
    y = (np.round(x * 2) / 2).astype(np.float32)
    y[::3] = -np.inf
    yield "ties+-inf", y
    yield "huge", (x * np.float32(1e18)).astype(np.float32)
    yield "overflowing", (x * np.float32(3e19)).astype(np.float32)
    yield "tiny", (x * np.float32(1e-20)).astype(np.float32)
    yield "subnormal", (x * np.float32(1e-41)).astype(np.float32)
    y = (x * np.exp2(rng.integers(-40, 40, N))).astype(np.float32)
    yield "wide-exponents", y
    y = x.copy()
    y[12345] = np.float32(3e38)
    yield "one-huge", y
    y = x.copy()
    y[100:110] = np.float32(1e-44)
    y[200] = np.inf
    yield "+inf", y
    yield "sorted", np.sort(x)[::-1].copy()


def _c_apply(n_sigma: float, logits: np.ndarray) -> np.ndarray:
    s = L.llama_sampler_init_top_n_sigma(n_sigma)
    try:
        return CCandidates(logits.size).apply(s, logits).logits
    finally:
        L.llama_sampler_free(s)


def _ours(n_sigma: float, logits: np.ndarray) -> np.ndarray:
    c = Candidates.from_logits(logits)
    TopNSigma(n_sigma).apply(c)
    return c.logits


def _std(logits: np.ndarray) -> tuple[np.float32, np.float32]:
    vals = logits[logits != -np.inf]
    mean = np.float32(np.cumsum(vals, dtype=np.float32)[-1] / np.float32(vals.size))
    with np.errstate(all="ignore"):
        acc = sq_dev_sum(vals - mean)
        return np.float32(np.sqrt(np.float32(acc / np.float32(vals.size)))), vals.max()


@pytest.mark.parametrize("seed", [0, 1])
def test_top_n_sigma_262144_identical_to_c(seed: int) -> None:
    """Tie-heavy, -inf-heavy and extreme logits at 262,144 tokens: the same logit bits after llama.cpp's sampler,
    for fixed n and for an n chosen so that the threshold lands on a logit (sensitive to the last bit of acc)."""
    rng = np.random.default_rng(seed)
    compared = 0
    for name, lg in _cases(rng):
        ns = [1.0, 0.3, 2.5]
        std, mx = _std(lg)
        finite = lg[np.isfinite(lg)]
        if np.isfinite(std) and std > 0 and finite.size:
            p = np.float32(np.sort(finite)[finite.size // 3])
            with np.errstate(all="ignore"):
                n_at = float(np.float32((mx - p) / std))
            if np.isfinite(n_at) and n_at > 0:
                ns += [n_at, float(np.nextafter(np.float32(n_at), np.float32(0))),
                       float(np.nextafter(np.float32(n_at), np.float32(np.inf)))]
        for n_sigma in ns:
            want = _c_apply(n_sigma, lg)
            got = _ours(n_sigma, lg)
            assert np.array_equal(want.view(np.uint32), got.view(np.uint32)), (name, n_sigma)
            compared += 1
    assert compared >= 60


def test_sq_dev_sum_matches_the_c_loop_on_edges() -> None:
    """The bulk sum against the element-by-element C loop on sizes around the head/block boundaries and on
    term mixes that exercise every path (zeros first, subnormal zone, outliers, odd rounding, overflow, NaN)."""
    rng = np.random.default_rng(7)
    n_cases = 0
    for n in (1, 2, 3, 255, 2047, 2048, 2049, 2304, 2305, 5000):
        for kind in range(9):
            sc = float(10.0 ** rng.uniform(-40, 19))
            if kind == 0:
                x = rng.standard_normal(n) * sc
            elif kind == 1:
                x = np.round(rng.standard_normal(n) * 4) / 4 * sc
            elif kind == 2:
                x = rng.standard_normal(n) * sc * np.exp2(rng.integers(-30, 30, n))
            elif kind == 3:
                x = (1 + rng.integers(0, 2 ** 12, n) * 2.0 ** -23) * np.exp2(rng.integers(-5, 5, n))
            elif kind == 4:
                x = np.full(n, sc)
                x[rng.integers(0, n, 3)] *= 1e3
            elif kind == 5:
                x = rng.standard_normal(n)
                x[: n // 2] = 0
            elif kind == 6:
                x = rng.standard_normal(n) * 1e-22
            elif kind == 7:
                x = rng.standard_normal(n) * 1e19
            else:
                x = rng.standard_normal(n)
                x[n // 2] = np.nan
            x = x.astype(np.float32)
            with np.errstate(all="ignore"):
                a, b = sq_dev_sum(x.copy()), sq_dev_sum_loop(x)
            assert a.view(np.uint32) == b.view(np.uint32) or (np.isnan(a) and np.isnan(b)), (n, kind, sc)
            n_cases += 1
    assert n_cases == 90


def _bulk_cases(rng: np.random.Generator):
    """Terms (float32 deviations) aimed at the bulk block sums of ``sampler.nsigma._running_sum``."""
    x = (rng.standard_normal(N) * 2.5).astype(np.float32)
    yield "plain", x
    yield "exact-squares", (np.round(x * 64) / 64).astype(np.float32)  # d*d exact: ties of the running sum
    yield "few-bits", (np.round(x * 8) / 8).astype(np.float32)
    yield "all-equal", np.full(N, 0.75, np.float32)
    yield "ascending-wide", np.sort(np.abs(x) * np.exp2(rng.integers(-30, 30, N))).astype(np.float32)
    yield "ascending", np.sort(np.abs(x)).astype(np.float32)
    yield "descending", np.sort(np.abs(x))[::-1].astype(np.float32)
    y = x.copy()
    y[rng.integers(0, N, 300)] *= np.float32(300.0)  # outliers: specials that split the segments
    yield "outliers", y
    y = x.copy()
    y[::1000] = np.float32(0.0)
    y[5:70000] *= np.float32(1e-3)  # a long stretch that barely moves the sum, then a jump
    yield "plateau", y
    yield "sign-changes", (np.where(np.arange(N) % 2, 1, -1) * (1 + rng.random(N) * 2.0 ** -10)).astype(np.float32)
    # sums that sit just below a power of two for long: terms of 2^-22 after a start at 1 - 2^-10
    y = np.full(N, 2.0 ** -11, np.float32)
    y[0] = np.float32(np.sqrt(1 - 2.0 ** -10))
    yield "just-below-2^k", y
    yield "tiny", (x * np.float32(1e-18)).astype(np.float32)
    yield "huge", (x * np.float32(1e17)).astype(np.float32)


@pytest.mark.parametrize("seed", [3])
def test_bulk_block_sums_match_the_c_loop(seed: int) -> None:
    """The blocked running sum (one binade per block, fixed-grid rounding, tie blocks left to the cumsum) against
    the element-by-element C loop at 262,144 terms, and the same arrays as logits through llama.cpp's top-n-σ; and
    it really takes the bulk path on ordinary terms (the running sums are then written only at block ends)."""
    from sampler import nsigma

    rng = np.random.default_rng(seed)
    for name, d in _bulk_cases(rng):
        with np.errstate(all="ignore"):
            got, want = sq_dev_sum(d.copy()), sq_dev_sum_loop(d)
        assert got.view(np.uint32) == want.view(np.uint32), name
        for lg in (d, d + np.float32(0.25)):  # as logits through llama.cpp's own sampler (raw and on the 0.25 grid)
            assert np.array_equal(_c_apply(1.0, lg).view(np.uint32), _ours(1.0, lg).view(np.uint32)), name
    x = rng.random(N).astype(np.float32)
    ref = np.cumsum(x, dtype=np.float32)
    xb = x.copy()
    acc = nsigma._running_sum(xb, 0, N, np.float32(0.0), 256, xb[256:].reshape(-1, 256).sum(axis=1),
                              np.zeros(0, np.intp))
    assert acc.view(np.uint32) == ref[-1].view(np.uint32)
    ends = np.arange(256 + 255, N, 256)
    assert np.array_equal(xb[ends].view(np.uint32), ref[ends].view(np.uint32))
    assert np.count_nonzero(xb != ref) > N // 2  # interiors untouched: the bulk path ran


def test_bulk_block_sums_need_the_tie_list() -> None:
    """Exact half-grid terms make the fixed-grid shortcut wrong without the parity of the running sum: with the tie
    list dropped the bulk sum differs from the loop (so the tie list is what keeps it exact)."""
    from sampler import nsigma

    rng = np.random.default_rng(11)
    x = (np.round(rng.random(N) * 2 ** 10) * 2.0 ** -12).astype(np.float32)  # many odd multiples of q/2
    ref = np.cumsum(x, dtype=np.float32)[-1]
    bs = x[256:].reshape(-1, 256).sum(axis=1)
    ok = nsigma._running_sum(x.copy(), 0, N, np.float32(0.0), 256, bs, np.arange(N))
    bad = nsigma._running_sum(x.copy(), 0, N, np.float32(0.0), 256, bs, np.zeros(0, np.intp))
    assert ok.view(np.uint32) == ref.view(np.uint32)
    assert bad.view(np.uint32) != ref.view(np.uint32)


def test_grid_sum_is_the_sequential_float_sum() -> None:
    """The no-rounding shortcut of top-n-σ's logit sum against the sequential float32 loop (numpy's accumulate):
    identical whenever it answers, and it answers on quantised (tied) logits at 262,144 tokens."""
    from sampler.dist import fsum_seq
    from sampler.nsigma import grid_sum

    rng = np.random.default_rng(5)
    x = (rng.standard_normal(N) * 2.5).astype(np.float32)
    answered = 0
    cases = [np.round(x * 2) / 2, np.round(x), np.round(x * 1024) / 1024, np.round(x * 4096) / 4096, x,
             np.full(N, 0.5), np.where(np.arange(N) % 2, 3.0, -3.0), np.zeros(N), np.round(x * 2) / 2 * 2.0 ** -90,
             np.round(x * 2) / 2 * 2.0 ** 100, np.round(x * 2) / 2 * 2.0 ** 110]
    for k in (2 ** 24 // N, 2 ** 24 // N + 1):  # sum |x| just below / above 2^24 grid steps (all-positive: rounds)
        cases.append(np.full(N, float(k)))
    y = np.round(x * 2) / 2
    y[1000] = 0.25 + 2.0 ** -20  # one off-grid value after the sample of the first elements
    cases.append(y)
    y = np.round(x * 2) / 2
    y[100] = np.nan
    cases.append(y)
    for v in cases:
        v = np.asarray(v, np.float32)
        with np.errstate(all="ignore"):
            got, want = grid_sum(v), fsum_seq(v)
        if got is not None:
            assert got.view(np.uint32) == want.view(np.uint32)
            answered += 1
    assert answered >= 6


def test_grid_sum_underflow_and_binade_edges() -> None:
    """grid_sum's grid test where x * 2^-e underflows (coarse grid, a tiny off-grid value) and at power-of-two
    bounds, against the sequential loop."""
    from sampler.dist import fsum_seq
    from sampler.nsigma import grid_sum

    base = np.zeros(8192, np.float32)
    base[::2] = 2.0 ** 20
    for tiny in (2.0 ** -140, 2.0 ** -149, 2.0 ** -20, 0.0):
        v = base.copy()
        v[4001] = tiny
        got, want = grid_sum(v), fsum_seq(v)
        assert got is None or got.view(np.uint32) == want.view(np.uint32), tiny
        assert (got is None) == (tiny != 0.0)
    for top in (1.0, 2.0 ** 5, 2.0 ** 11, 3.0 * 2 ** 10):
        v = np.full(4096, top, np.float32)
        v[1::2] *= -1
        v[-1] = top
        got = grid_sum(v)
        assert got is not None and got.view(np.uint32) == fsum_seq(v).view(np.uint32)
