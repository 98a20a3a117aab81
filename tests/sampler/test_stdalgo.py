"""sampler.stdalgo against libstdc++'s real std::sort / std::partial_sort on (float key, int id) pairs.

The oracle (oracle/shims/stdalgo_oracle.cpp) sorts structs with the same comparators; every arrangement, ties
included, must be identical.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from oracle.programs import compile_cpp, gxx
from sampler import stdalgo as S

pytestmark = pytest.mark.skipif(gxx() is None, reason="no C++ compiler (g++) to build the libstdc++ oracle")

SORT_D, SORT_A, PSORT_D, PSORT_A, ADVERSARY = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def oracle():
    exe = compile_cpp("stdalgo_oracle.cpp")

    def run(cases: list[tuple[int, np.ndarray, int]]) -> list[np.ndarray]:
        buf = b"".join(
            np.array([op, len(k), kk], dtype=np.int32).tobytes() + np.asarray(k, np.float32).tobytes()
            for op, k, kk in cases
        )
        out = subprocess.run([str(exe)], input=buf, capture_output=True, check=True).stdout
        res, o = [], 0
        for op, k, _ in cases:
            dt = np.float32 if op == ADVERSARY else np.int32
            res.append(np.frombuffer(out[o: o + 4 * len(k)], dtype=dt).copy())
            o += 4 * len(k)
        return res

    return run


def _keys(rs: np.random.Generator, n: int) -> np.ndarray:
    kind = rs.integers(0, 5)
    if kind == 0:
        k = rs.normal(size=n)
    elif kind == 1:
        k = rs.integers(0, int(rs.integers(1, 9)), n)  # 1..8 distinct values
    elif kind == 2:
        k = np.round(rs.normal(size=n) * 4) / 4
    elif kind == 3:
        k = np.sort(rs.integers(0, 6, n))[:: int(rs.choice([1, -1]))]  # presorted runs with ties
    else:
        k = rs.normal(size=n).astype(np.float32).astype(np.float64)
        k[rs.random(n) < 0.5] = 0.0
    k = k.astype(np.float32)
    if rs.random() < 0.35:
        k[rs.random(n) < 0.3] = -np.inf
    return k


def _check(oracle, cases):
    want = oracle(cases)
    for (op, keys, k), w in zip(cases, want, strict=True):
        desc = op in (SORT_D, PSORT_D)
        if op in (SORT_D, SORT_A):
            got = S.sort_perm(keys, descending=desc)
            assert np.array_equal(got, w), ("sort", op, len(keys))
            for m in {1, min(30, len(keys)), max(1, len(keys) // 3), len(keys)}:
                assert np.array_equal(S.sort_prefix_perm(keys, m, descending=desc), w[:m]), ("prefix", m)
        else:
            got = S.partial_sort_perm(keys, k, descending=desc)
            assert np.array_equal(got, w), ("partial_sort", op, len(keys), k)
    return len(cases)


def test_random_small_and_medium(oracle):
    rs = np.random.default_rng(11)
    cases = []
    for _ in range(700):
        n = int(rs.choice([1, 2, 3, 4, 7, 15, 16, 17, 18, 31, 33, 64, 100, 129, 257, 1000, 4096]))
        keys = _keys(rs, n)
        op = int(rs.integers(0, 4))
        k = int(rs.choice([0, 1, 2, min(n, 40), min(n, 128), n, int(rs.integers(0, n + 1))]))
        cases.append((op, keys, min(k, n)))
    assert _check(oracle, cases) == 700


@pytest.mark.parametrize("n", [155_776, 262_144])
def test_large_heavy_ties(oracle, n):
    rs = np.random.default_rng(n)
    two = rs.integers(0, 2, n).astype(np.float32)
    eight = np.where(rs.random(n) < 0.25, -np.inf, rs.integers(0, 8, n)).astype(np.float32)
    logits = np.round(rs.normal(size=n) * 3, 1).astype(np.float32)
    cases = [(SORT_D, two, 0), (SORT_D, eight, 0), (SORT_A, logits, 0)]
    cases += [(PSORT_D, k, kk) for k in (two, eight, logits) for kk in (1, 40, 128)]
    cases += [(PSORT_D, np.sort(logits), 128), (PSORT_A, logits, 129)]  # ascending input: every element triggers
    assert _check(oracle, cases) == len(cases)


def test_depth_limit_heapsort_fallback(oracle):
    # McIlroy's adversary drives introsort to its depth limit; flooring the values adds ties inside the heapsorts
    calls = []
    orig = S._heapsort_codes

    def spy(codes, s, e):
        calls.append(e - s)
        orig(codes, s, e)

    S._heapsort_codes = spy
    try:
        cases = []
        for n in (500, 3000, 20_000):
            adv = oracle([(ADVERSARY, np.zeros(n, np.float32), 0)])[0]
            for div in (1, 2, 3, 8):
                k = np.floor(adv / div).astype(np.float32)
                cases += [(SORT_A, k, 0), (SORT_D, -k, 0)]
        _check(oracle, cases)
    finally:
        S._heapsort_codes = orig
    assert len(calls) >= 10  # the fallback really ran


def test_segments(oracle):
    rs = np.random.default_rng(3)
    keys = _keys(rs, 5000)
    bounds = np.unique(np.concatenate([[0, 5000], rs.integers(0, 5000, 40)]))
    want = oracle([(SORT_D, keys[a:b], 0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    expect = np.concatenate([w + a for w, a in zip(want, bounds[:-1], strict=True)])
    assert np.array_equal(S.sort_segments_perm(keys, bounds), expect)


def test_signed_zero_and_inf_tie(oracle):
    k = np.array([0.0, -0.0, np.inf, -np.inf, -0.0, 0.0, np.inf] * 7, dtype=np.float32)
    assert _check(oracle, [(SORT_D, k, 0), (SORT_A, k, 0), (PSORT_D, k, 5), (PSORT_A, k, 3)]) == 4


def test_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        S.sort_perm(np.array([1.0, np.nan], dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        S.partial_sort_perm(np.array([np.nan, 1.0]), 1)
    with pytest.raises(ValueError, match="1-D"):
        S.sort_perm(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="k must be"):
        S.partial_sort_perm(np.zeros(3, dtype=np.float32), 4)
    with pytest.raises(ValueError, match="bounds"):
        S.sort_segments_perm(np.zeros(3, dtype=np.float32), np.array([0, 2]))
    assert S.sort_perm(np.zeros(0, dtype=np.float32)).tolist() == []
    assert S.partial_sort_perm(np.zeros(0, dtype=np.float32), 0).tolist() == []
    assert S.sort_prefix_perm(np.ones(4, dtype=np.float32), 0).tolist() == []


def test_all_equal_and_two_valued(oracle):
    # all-equal segments are finished by a cached closed form (_equal_perm): check it on many lengths and depths
    rs = np.random.default_rng(8)
    cases = [(SORT_D, np.zeros(n, np.float32), 0) for n in [*range(15, 80), 127, 128, 129, 1000, 4097, 65_537]]
    for n in (50, 300, 5000, 40_000):
        k = np.zeros(n, np.float32)
        k[rs.random(n) < rs.random()] = 1.0
        cases += [(SORT_D, k, 0), (SORT_A, k, 0)]
    assert _check(oracle, cases) == len(cases)


def test_equal_perm_at_depth_zero(oracle):
    # an all-equal segment that reaches the depth limit is heapsorted: __partial_sort(f, l, l) is what
    # std::partial_sort(first, last, last) runs, so the oracle's partial_sort with k = n is the reference
    lengths = [17, 18, 31, 64, 100, 257, 1000]
    want = oracle([(PSORT_D, np.zeros(n, np.float32), n) for n in lengths])
    for n, w in zip(lengths, want, strict=True):
        assert np.array_equal(S._equal_perm(n, 0), w)


def test_partial_sort_heapq_engine(oracle):
    # the heap runs in C heapq (entries compared by key alone): distinct and tied keys, both directions, and a heap
    # above CPython's 2500-entry heapify limit (built by the Python __make_heap port instead)
    rs = np.random.default_rng(21)
    distinct = rs.normal(size=50_000).astype(np.float32)
    tied = np.round(rs.normal(size=50_000) * 2).astype(np.float32)
    cases = [(PSORT_D, distinct, 64), (PSORT_D, tied, 64), (PSORT_A, distinct, 100), (PSORT_A, tied, 40)]
    cases += [(PSORT_D, tied[:9000], 3000), (PSORT_A, tied[:9000], 2501), (PSORT_D, tied[:5000], 5000)]
    assert _check(oracle, cases) == len(cases)
    for op, keys, k in cases:
        want = S.partial_sort_perm(keys, k, descending=op == PSORT_D)[:k]
        assert np.array_equal(S.partial_sort_top(keys, k, descending=op == PSORT_D), want)


def test_partial_sort_top_random_ties(oracle):
    # partial_sort_top (first k only) against libstdc++ on heavily tied keys of many shapes
    rs = np.random.default_rng(5)
    cases = []
    for _ in range(150):
        n = int(rs.choice([2, 17, 41, 300, 2000, 9000]))
        keys = _keys(rs, n)
        k = int(rs.choice([1, 2, min(n, 40), min(n, 128), n, int(rs.integers(1, n + 1))]))
        cases.append((int(rs.choice([PSORT_D, PSORT_A])), keys, min(k, n)))
    want = oracle(cases)
    for (op, keys, k), w in zip(cases, want, strict=True):
        assert np.array_equal(S.partial_sort_top(keys, k, descending=op == PSORT_D), w[:k]), (op, len(keys), k)


def test_partial_sort_top_nan_after_head(oracle):
    # NaN keys after the first k never enter libstdc++'s heap (comp with NaN is false): partial_sort_top follows it
    rs = np.random.default_rng(9)
    cases = []
    for n, k in ((500, 40), (3000, 7), (20_000, 40), (20_000, 128)):
        keys = np.round(rs.normal(size=n) * 2).astype(np.float32)
        keys[k:][rs.random(n - k) < 0.2] = np.nan
        cases += [(PSORT_D, keys, k), (PSORT_A, keys, k)]
    want = oracle(cases)
    for (op, keys, k), w in zip(cases, want, strict=True):
        assert np.array_equal(S.partial_sort_top(keys, k, descending=op == PSORT_D), w[:k]), (op, len(keys), k)
    with pytest.raises(ValueError, match="NaN"):
        S.partial_sort_top(np.array([1.0, np.nan, 2.0], dtype=np.float32), 2)


def _big_tie_keys(rs: np.random.Generator, n: int, kind: int) -> np.ndarray:
    x = rs.standard_normal(n) * rs.uniform(1, 4)
    if kind == 0:
        k = np.round(x * 2) / 2                      # quantised logits: heavy ties among the leaders
    elif kind == 1:
        k = np.round(x)
        k[rs.random(n) < 0.6] = -np.inf             # -inf heavy
    elif kind == 2:
        k = np.sort(np.round(x))                     # ascending: every element beats the heap top
    elif kind == 3:
        k = np.sort(np.round(x))[::-1]               # descending: none does
    elif kind == 4:
        k = np.round(x) * 1e30                       # huge, tied
        k[rs.random(n) < 0.01] = np.inf
    elif kind == 5:
        k = np.full(n, 3.5)
        k[rs.integers(0, n, 30)] = 4.0               # all equal but a few (fewer than k above the rest)
    elif kind == 6:
        k = np.round(x * 2) / 2 * 1e-40              # subnormal, tied; -0.0 and 0.0 mixed
        k[rs.random(n) < 0.2] = -0.0
    else:
        k = x                                        # distinct (the fast path)
    return k.astype(np.float32)


def test_heapselect_top_k_large(oracle):
    # sampler.heapselect.top_k (one pass, then the heap on the elements that can enter it) against libstdc++'s
    # partial_sort at vocabulary sizes, on tie-heavy, -inf-heavy, presorted, huge and subnormal keys
    from sampler.heapselect import top_k
    rs = np.random.default_rng(17)
    cases = []
    for i in range(40):
        n = int(rs.choice([8192, 32_000, 151_936, 262_144]))
        k = int(rs.choice([1, 2, 40, 40, 100, 128, 256]))
        cases.append((PSORT_D, _big_tie_keys(rs, n, i % 8), k))
    sparse = np.full(262_144, -np.inf, np.float32)  # only the sampled runs hold values: the sample misleads
    for i in range(16):
        sparse[i * 16_384: i * 16_384 + 128] = np.round(rs.standard_normal(128))
    cases += [(PSORT_D, sparse, 40), (PSORT_D, sparse, 256)]
    want = oracle(cases)
    for (_, keys, k), w in zip(cases, want, strict=True):
        assert np.array_equal(top_k(keys, k), w[:k]), (len(keys), k)
    assert len(cases) == 42


def test_tie_order_depends_on_the_other_keys(oracle):
    # why mirostat's full sort cannot be an argsort plus a re-emulation of the equal-key runs from their positions:
    # with the tied keys at the same five positions, libstdc++'s std::sort leaves them in different orders depending
    # on the values of the other keys (introsort's partitions move them); ours follows it in every case
    rs = np.random.default_rng(1)
    pos = [3, 17, 25, 90, 150]
    cases = []
    for _ in range(40):
        k = rs.normal(size=200).astype(np.float32)
        k[pos] = 0.0
        cases.append((SORT_D, k, 0))
    want = oracle(cases)
    orders = {tuple(int(i) for i in w if i in pos) for w in want}
    assert len(orders) > 10
    assert _check(oracle, cases) == len(cases)


def test_heapselect_top_k_mostly_minus_inf(oracle):
    # top-k after top-n-sigma: nearly every key -inf (a -inf never enters partial_sort's heap); fewer finite keys
    # than k, a few more, ties among them and with the -inf heap entries, finite keys inside the first k, a NaN
    from sampler.heapselect import top_k
    rs = np.random.default_rng(23)
    cases = []
    for n_fin in (0, 1, 7, 27, 39, 40, 41, 60, 300):
        for k in (1, 40, 256):
            keys = np.full(262_144, -np.inf, np.float32)
            at = rs.choice(262_144, n_fin, replace=False)
            if n_fin > 3:
                at[:3] = [0, 5, 39]  # inside the initial heap
            keys[at] = np.round(rs.standard_normal(n_fin) * 2) / 2
            cases.append((PSORT_D, keys, k))
    want = oracle(cases)
    for (_, keys, k), w in zip(cases, want, strict=True):
        assert np.array_equal(top_k(keys, k), w[:k]), (np.isfinite(keys).sum(), k)
        assert np.array_equal(top_k(keys, k, nan_check=True), w[:k])
    keys = cases[10][1].copy()
    keys[200_000] = np.nan
    assert top_k(keys, 40, nan_check=True) is None
    assert len(cases) == 27
