"""sampler.s2 against oracle/shims/s2_oracle.cpp: the reference steps with libstdc++'s real std::sort, std::mt19937,
std::discrete_distribution and glibc's expf.  Every draw, and the generator state after each sequence, must match.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np
import pytest

from oracle.cases.s2 import TEMPS, TOP_PS, s2_logits
from oracle.programs import compile_cpp, gxx, s2_oracle_run
from sampler.rng import Mt19937
from sampler.s2 import S2Params, S2Sampler, expf, s2_sample
from sampler.stdalgo import sort_perm

needs_gxx = pytest.mark.skipif(gxx() is None, reason="no C++ compiler (g++) to build the s2 oracle")

def _cases(rs: np.random.Generator, n: int, count: int, draws: tuple[int, int], sets: int = 3) -> list[dict]:
    cases = []
    for _ in range(count):
        cases.append(dict(
            seed=int(rs.integers(0, 2**32)),
            draws=int(rs.integers(*draws)),
            temperature=float(rs.choice(TEMPS)),
            top_p=float(rs.choice(TOP_PS)),
            top_k=int(rs.choice([0, -1, 1, 30, n])),
            logits=[s2_logits(rs, n) for _ in range(int(rs.integers(1, sets + 1)))],
        ))
    return cases


def _compare(cases: list[dict]) -> int:
    want = s2_oracle_run(cases, compile_cpp("s2_oracle.cpp"))
    total = 0
    for c, (ids, nxt, _) in zip(cases, want, strict=True):
        g = Mt19937(c["seed"])
        p = S2Params(c["temperature"], c["top_p"], c["top_k"])
        got = [s2_sample(c["logits"][i % len(c["logits"])], p, g) for i in range(c["draws"])]
        assert got == ids, (len(c["logits"][0]), p)
        assert g.next_u32() == nxt, "generator consumed differently"
        total += len(got)
    return total


@needs_gxx
def test_oracle_draws():
    rs = np.random.default_rng(2024)
    total = 0
    cases = []
    for n in (1, 2, 3, 5, 17, 100, 1000):
        cases += _cases(rs, n, 30, (5, 20))
    total += _compare(cases)
    # n = 4096: every parameter combination
    cases = []
    for t in TEMPS:
        for tp in TOP_PS:
            for tk in (0, -1, 1, 30, 4096):
                c = _cases(rs, 4096, 1, (90, 110))[0]
                c.update(temperature=t, top_p=tp, top_k=tk)
                cases.append(c)
    total += _compare(cases)
    # n = 155,776 (the semantic-token head): fewer draws, every branch
    cases = []
    for t, tp, tk in [(0.8, 0.8, 30), (1.0, 0.9, 30), (2.0, 0.8, 30), (0.0, 0.8, 30), (-1.0, 1.0, 0), (0.8, 0.0, 30),
                      (1.0, 1.0, 1), (0.8, 0.8, 0), (0.8, 1.0, 155_776), (1.0, 0.8, -1)]:
        c = _cases(rs, 155_776, 1, (8, 12), sets=2)[0]
        c.update(temperature=t, top_p=tp, top_k=tk)
        cases.append(c)
    heavy = np.where(rs.random(155_776) < 0.2, -np.inf, rs.integers(0, 4, 155_776)).astype(np.float32)
    cases.append(dict(seed=99, draws=30, temperature=0.8, top_p=0.8, top_k=30, logits=[heavy]))
    total += _compare(cases)
    print(f"s2 oracle draws compared: {total}")
    assert total >= 10_000, total


def test_expf_is_glibc():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.expf.argtypes = [ctypes.c_float]
    libm.expf.restype = ctypes.c_float
    rs = np.random.default_rng(7)
    bits = np.concatenate([
        rs.integers(0x80000000, 0xC2D00001, 150_000, dtype=np.uint64),  # every negative float down to -104
        rs.integers(0, 0x42B30000, 20_000, dtype=np.uint64),  # positives up to past overflow
    ]).astype(np.uint32)
    x = np.concatenate([
        bits.view(np.float32),
        (-rs.random(50_000) * 17).astype(np.float32),  # the softmax range that decides sums
        np.array([0.0, -0.0, -np.inf, np.inf, -87.33655, -87.33654, -103.972, -103.9721, -103.28, 88.72283,
                  88.7229, -1e-30, 1e-45, -16.635532, np.nan], dtype=np.float32),
    ])
    got = expf(x)
    want = np.array([libm.expf(v) for v in x.tolist()], dtype=np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:10]


def test_draws_follow_kept_probabilities():
    # chi-square: the draws follow softmax(kept / T) over the kept items (top-k then top-p on the full softmax)
    rs = np.random.default_rng(3)
    logits = np.round(rs.normal(size=300) * 1.5, 1).astype(np.float32)  # ties
    params = S2Params(temperature=1.0, top_p=0.9, top_k=12)
    order = sort_perm(logits)
    l64 = logits[order].astype(np.float64)
    p = np.exp(l64 - l64[0])
    p /= p.sum()
    cum = np.cumsum(p)
    keep = min(params.top_k, 1 + int(np.count_nonzero(cum[1:] <= params.top_p)))
    kept = order[:keep]
    w = np.exp((l64[:keep] - l64[0]) / params.temperature)
    w /= w.sum()
    s = S2Sampler(params, seed=11)
    draws = np.array([s.sample(logits) for _ in range(6000)])
    assert np.isin(draws, kept).all()
    counts = np.array([np.count_nonzero(draws == i) for i in kept])
    expected = w * draws.size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = keep - 1
    crit = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty, p = 0.001
    assert chi2 < crit, (chi2, crit)
    assert counts.min() > 0


def test_bad_input_and_edges():
    s = S2Sampler(seed=1)
    before = s.rng.clone()
    assert s.sample(np.zeros(0, dtype=np.float32)) == 0
    assert s.rng == before  # nothing consumed
    with pytest.raises(ValueError, match="NaN"):
        s.sample(np.array([0.0, np.nan], dtype=np.float32))
    with pytest.raises(TypeError):
        s.sample([0.0, 1.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D"):
        s.sample(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(TypeError):
        s.sample(np.array(["a", "b"]))
    for bad in (dict(temperature=float("nan")), dict(top_p=float("inf")), dict(top_k=1.5), dict(top_k=2**40)):
        with pytest.raises(ValueError):
            S2Params(**bad)
    assert S2Sampler(seed=2**32 + 5).seed == 5
    assert len({S2Sampler().seed for _ in range(4)}) > 1  # random seeds (os.urandom), as random_device
    # float64 logits are rounded to float like the C float* they stand for
    x = np.array([0.1, 0.3, 0.3], dtype=np.float64)
    assert S2Sampler(S2Params(temperature=0.0)).sample(x) == 1
