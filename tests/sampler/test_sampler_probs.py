"""token_probs against llama-server's get_token_probabilities (compiled from our C++ shim with libstdc++'s
std::partial_sort and glibc's expf): the same ids and the same 32-bit floats, including the sum taken in the order
the partial sort leaves the whole array."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.cases.sampler import bits, random_logits
from sampler.probs import logprob, token_probs

cxx = pytest.importorskip("oracle.sampler_cxx")


@pytest.mark.parametrize("n", [1, 2, 5, 100, 1000, 32000, 151936])
def test_token_probs_match_server(n: int) -> None:
    rng = np.random.default_rng(n)
    cases = 0
    for mode in ("normal", "ties", "ties_inf", "flat", "wide"):
        lg = random_logits(rng, n, mode)
        for n_top in sorted({0, 1, 5, 20, min(n, 100), n, n + 3}):
            if n >= 32000 and n_top not in (0, 1, 20):
                continue
            ids, ps = cxx.server_token_probs(lg, n_top)
            sampled = int(rng.integers(0, n))
            r = token_probs(lg, sampled, n_top)
            k = min(n_top, n)
            assert np.array_equal(r.ids, ids[:k]), (mode, n_top)
            assert np.array_equal(bits(r.probs), bits(ps[:k])), (mode, n_top)
            where = np.flatnonzero(ids == sampled)[0]
            assert bits(np.float32(r.prob)) == bits(ps[where])
            cases += 1
    assert cases >= 15


def test_logprob_zero() -> None:
    assert logprob(0.0) == -float(np.finfo(np.float32).max)


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        token_probs(np.array([0.0, np.nan], np.float32), 0, 1)
    with pytest.raises(ValueError):
        token_probs(np.zeros(3, np.float32), 3, 1)
    with pytest.raises(ValueError):
        token_probs(np.zeros((2, 2), np.float32), 0, 1)
