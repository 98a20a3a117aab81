"""glibc expf through numpy (bit-identical), bad input, reset/clone/random seeds, against llama.cpp where it has an
answer."""

from __future__ import annotations

import numpy as np
import pytest

from sampler import mathf
from sampler.chain import Sampler
from sampler.params import Params


def test_expf_vec_matches_glibc() -> None:
    """The numpy path against glibc's expf itself on 600,000 floats of the range softmax uses (x <= 0), edges
    included. scripts/check_expf.py runs every float in [-104, 0]."""
    rng = np.random.default_rng(0)
    x = np.concatenate([
        -rng.random(300_000).astype(np.float32) * 110,
        -rng.random(100_000).astype(np.float32) * 2,
        (rng.integers(-400, 1, 100_000) / np.float32(8)).astype(np.float32),
        -rng.random(100_000).astype(np.float32) * 1e-3,
        np.array([0.0, -0.0, -np.inf, -87.33654, -88.72283, -103.97208, -103.97209, -104.0, -150.0, -1e30,
                  -1e-45, 1.0, 10.0, 88.0, 88.8, 89.0], np.float32),
    ])
    with np.errstate(all="ignore"):
        want = np.frompyfunc(mathf.expf, 1, 1)(x).astype(np.float32)
    got = mathf.expf_vec(x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_logf_vec_matches_glibc() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.random(5000).astype(np.float32), np.round(rng.random(5000), 2).astype(np.float32),
                        np.array([0.0, 1.0, 1e-45], np.float32)])
    want = np.array([mathf.logf(float(v)) for v in x], np.float32)
    assert np.array_equal(mathf.logf_vec(x).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("bad", [np.zeros((2, 3), np.float32), np.array(["a", "b"]), np.array([0.0, np.nan]),
                                 np.zeros(0, np.float32), np.arange(4), [[0.0]], "abc"])
def test_bad_logits(bad: np.ndarray) -> None:
    s = Sampler(Params(seed=1))
    with pytest.raises(ValueError):
        s.sample(bad)


@pytest.mark.parametrize("where", ["head", "sampled", "elsewhere", "last", "all", "none"])
@pytest.mark.parametrize("ties", [False, True])
def test_nan_found_by_the_top_k_pass(where: str, ties: bool) -> None:
    """A chain that opens with top-k checks for NaN in top-k's own pass (sampler.heapselect.top_k(nan_check=True)):
    a NaN anywhere is still refused, wherever it sits (in top-k's heap head, in its sample, anywhere else)."""
    n = 262_144
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32) * np.float32(2.5)
    if ties:
        x = np.round(x * 2) / 2
    pos = {"head": [5], "sampled": [16_384 * 3 + 7], "elsewhere": [200_001], "last": [n - 1],
           "all": list(range(n)), "none": []}[where]
    x[pos] = np.nan
    for sampler in (Sampler(Params(seed=1)), Sampler(Params(seed=1, top_k=128)), Sampler(Params(seed=1, top_k=7))):
        sampler.sample(np.zeros(n, np.float32))  # built on first use
        assert sampler._topk_first
        if pos:
            with pytest.raises(ValueError, match="logits contain NaN"):
                sampler.sample(x)
            with pytest.raises(ValueError, match="logits contain NaN"):
                sampler.sample_constrained(x, lambda t: True, lambda: np.ones(n, bool))
        else:
            assert 0 <= sampler.sample(x) < n
    wide = Sampler(Params(seed=1, top_k=129))  # the bucket path: _logits checks, as before
    wide.sample(np.zeros(n, np.float32))
    assert not wide._topk_first
    x[7] = np.nan
    with pytest.raises(ValueError, match="logits contain NaN"):
        wide.sample(x)


def test_wrong_size_and_bad_tokens() -> None:
    s = Sampler(Params(seed=1))
    s.sample(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="expected 10 logits"):
        s.sample(np.zeros(11, np.float32))
    with pytest.raises(ValueError, match="out of range"):
        s.accept(10)
    with pytest.raises(ValueError, match="out of range"):
        s.accept(-1)
    with pytest.raises(ValueError, match="mask must have shape"):
        s.sample_constrained(np.zeros(10, np.float32), lambda t: False, lambda: np.ones(3, bool))


def test_reset_reseeds_and_clears_windows() -> None:
    p = Params(seed=5, penalty_repeat=1.5, penalty_last_n=8, xtc_probability=0.5)
    s = Sampler(p)
    lg = np.random.default_rng(2).standard_normal(500).astype(np.float32)
    first = []
    for _ in range(10):
        t = s.sample(lg)
        s.accept(t)
        first.append(t)
    s.reset()
    again = []
    for _ in range(10):
        t = s.sample(lg)
        s.accept(t)
        again.append(t)
    assert first == again


def test_clone_is_independent() -> None:
    s = Sampler(Params(seed=9, mirostat=2))
    lg = np.random.default_rng(3).standard_normal(300).astype(np.float32)
    s.accept(s.sample(lg))
    c = s.clone()
    a = [s.sample(lg) for _ in range(5)]
    b = [c.sample(lg) for _ in range(5)]
    assert a == b


def test_random_seed_differs() -> None:
    lg = np.zeros(1000, np.float32)
    draws = {tuple(Sampler(Params(top_k=0, top_p=1.0, min_p=0.0)).sample(lg) for _ in range(3)) for _ in range(5)}
    assert len(draws) > 1


def test_accept_before_first_logits() -> None:
    """Without a vocabulary the size comes from the first logits; prompt tokens given earlier are kept."""
    p = Params(seed=4, penalty_repeat=10.0, penalty_last_n=4, top_k=0, top_p=1.0, min_p=0.0, temp=0.0)
    s = Sampler(p)
    s.accept(2)
    assert s.sample(np.array([0.0, 0.5, 1.0], np.float32)) == 1


def _tie_arrays(rng: np.random.Generator):  # noqa: ANN202
    n = 20000
    yield np.round(rng.standard_normal(n) * 4) / 2
    yield np.sort(np.round(rng.standard_normal(n) * 3))          # ascending: every element enters the heap
    yield np.sort(np.round(rng.standard_normal(n) * 3))[::-1]    # descending: none does
    x = np.round(rng.standard_normal(n))
    x[rng.random(n) < 0.7] = -np.inf
    yield x
    yield np.zeros(n)
    yield rng.standard_normal(n)


def test_partial_sort_prefilter_matches_stdalgo() -> None:
    """The heap-participant pre-filter in front of sampler.stdalgo (itself checked against libstdc++) changes
    nothing: same first k, same whole permutation (leftovers included)."""
    from sampler import stdalgo
    from sampler.candidates import partial_sort_full, top_partial_sort
    rng = np.random.default_rng(5)
    checked = 0
    for x in _tie_arrays(rng):
        x = np.ascontiguousarray(x, dtype=np.float32)
        for k in (1, 7, 40, 128, 500):
            want = np.asarray(stdalgo.partial_sort_perm(x, k, descending=True))
            assert np.array_equal(top_partial_sort(x, k), want[:k])
            assert np.array_equal(partial_sort_full(x, k), want)
            checked += 1
    assert checked == 30
