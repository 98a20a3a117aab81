"""Our sampler chain against llama.cpp's C samplers, stage by stage (llama-cpp-python 0.3.36).

After every sampler of the chain the candidate array must be identical: ids in order, logit and p bits, the sorted
flag and the selected index; the selected token decides what both sides accept next. Prompt tokens are accepted
first, as llama-server does.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from oracle.cases.sampler import random_logits, random_params, same_state  # noqa: E402
from oracle.cases.sampler_chain import ACTIVE, COUNTS, run_sequence  # noqa: E402
from oracle.chain import CChain  # noqa: E402
from sampler.chain import Sampler  # noqa: E402
from sampler.params import DEFAULT_SAMPLERS, Params  # noqa: E402

ALONE = [
    ("top_k", {"top_k": 0}), ("top_k", {"top_k": 1}), ("top_k", {"top_k": 128}), ("top_k", {"top_k": 129}),
    ("top_k", {"top_k": 40}), ("top_k", {"top_k": 1000}),
    ("top_p", {"top_p": 0.0}), ("top_p", {"top_p": 1.0}), ("top_p", {"top_p": 0.9}),
    ("top_p", {"top_p": 0.999, "min_keep": 5}),
    ("min_p", {"min_p": 0.05}), ("min_p", {"min_p": 0.5, "min_keep": 3}), ("min_p", {"min_p": 1.0}),
    ("typ_p", {"typ_p": 0.5}), ("typ_p", {"typ_p": 0.9, "min_keep": 2}),
    ("top_n_sigma", {"top_n_sigma": 1.0}), ("top_n_sigma", {"top_n_sigma": 0.3}),
    ("xtc", {"xtc_probability": 1.0, "xtc_threshold": 0.05}), ("xtc", {"xtc_probability": 0.5}),
    ("temperature", {"temp": 0.0}), ("temperature", {"temp": -2.0}), ("temperature", {"temp": 1.7}),
    ("temperature", {"temp": 0.8, "dynatemp_range": 0.5}), ("temperature", {"temp": 0.3, "dynatemp_range": 1.0,
                                                                              "dynatemp_exponent": 2.0}),
    ("penalties", {"penalty_repeat": 1.3, "penalty_freq": 0.1, "penalty_present": 0.2, "penalty_last_n": 8}),
    ("penalties", {"penalty_repeat": 1.1, "penalty_last_n": 200}),
    ("adaptive_p", {"adaptive_target": 0.4}), ("adaptive_p", {"adaptive_target": -1.0}),
    ("adaptive_p", {"adaptive_target": 0.9, "adaptive_decay": 0.0}),
]


@pytest.mark.parametrize("name,kw", ALONE, ids=[f"{a}-{'-'.join(f'{k}={v}' for k, v in b.items())}" for a, b in ALONE])
def test_each_sampler_alone(name: str, kw: dict) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((name, sorted(kw.items()))).encode()))
    for n in (2, 3, 50, 129, 1025, 3000):
        p = Params(seed=int(rng.integers(0, 2**32 - 1)), samplers=(name,), **kw)
        run_sequence(p, n, rng, 6)


@pytest.mark.parametrize("mirostat", [1, 2])
def test_mirostat(mirostat: int) -> None:
    rng = np.random.default_rng(mirostat)
    for n in (2, 10, 300, 5000):
        for tau, eta, temp in ((5.0, 0.1, 0.8), (3.0, 0.3, 1.0), (8.0, 0.1, 0.0)):
            p = Params(seed=int(rng.integers(0, 2**32 - 1)), mirostat=mirostat, mirostat_tau=tau,
                       mirostat_eta=eta, temp=temp)
            run_sequence(p, n, rng, 8)


@pytest.mark.parametrize("n", [32000, 151936, 262144])
def test_default_chain_large_vocab(n: int) -> None:
    rng = np.random.default_rng(n)
    for ties in ("normal", "ties", "ties_inf"):
        run_sequence(Params(seed=int(rng.integers(0, 2**32 - 1))), n, rng, 3, modes=(ties,))


def test_large_vocab_unsorted_paths() -> None:
    """top-p's 256-wide bucket path and its re-sort, min-p's unsorted path, at 151,936 and 262,144."""
    rng = np.random.default_rng(7)
    for n in (151936, 262144):
        for kw in ({"samplers": ("top_p",), "top_p": 0.95}, {"samplers": ("top_p",), "top_p": 0.9999},
                   {"samplers": ("min_p", "top_k"), "min_p": 0.3, "top_k": 300},
                   {"samplers": ("top_n_sigma", "top_k"), "top_n_sigma": 1.5, "top_k": 200}):
            run_sequence(Params(seed=int(rng.integers(0, 2**32 - 1)), **kw), n, rng, 2,
                         modes=("normal", "ties", "flat"))


def test_random_combinations() -> None:
    """500 sequences of 32 steps with every parameter drawn at random (edges included), small to mid vocabularies,
    plus custom sampler orders, logit biases, mirostat and adaptive-p."""
    rng = np.random.default_rng(20261130)
    before = dict(COUNTS)
    for _ in range(500):
        n = int(rng.choice([2, 3, 5, 17, 64, 128, 129, 200, 700, 1024, 1025, 1500]))
        p = random_params(rng, n)
        run_sequence(p, n, rng, 32)
    assert COUNTS["sequences"] - before["sequences"] == 500
    assert COUNTS["steps"] - before["steps"] == 500 * 32
    for name in ("logit-bias", "penalties", "top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp-ext",
                 "temp", "mirostat", "mirostat-v2", "adaptive-p"):
        assert ACTIVE.get(name, 0) >= 10, (name, ACTIVE)  # every sampler really acted, many times


def test_default_samplers_constant() -> None:
    assert Params().samplers == DEFAULT_SAMPLERS


def test_bucket_sort_edges() -> None:
    """llama.cpp's 128-bucket pre-pass at its edges: values on and one ulp around every bucket boundary, huge values
    (int() out of range lands in bucket 0 on x86), +-inf, -1e30; top-k 129 / 300 / n against the C top-k."""
    from oracle.llama import Candidates as CCandidates
    from oracle.llama import L
    from sampler.candidates import Candidates
    rng = np.random.default_rng(99)
    edges = ((np.arange(129, dtype=np.float32) / np.float32(6.4)) - np.float32(10)).astype(np.float32)
    around = np.concatenate([edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))])
    special = np.array([3.4e38, 1e9, 3.36e8, 3.35e8, 1e30, np.inf, -np.inf, -1e30, -3.36e8, 0.0, -0.0], np.float32)
    checked = 0
    for trial in range(12):
        n = int(rng.choice([1500, 4000]))
        x = rng.choice(np.concatenate([around, special]), size=n).astype(np.float32)
        if trial % 3 == 0:
            x[: n // 2] = (rng.standard_normal(n // 2) * 8).astype(np.float32)
        for k in (129, 300, n):
            smpl = L.llama_sampler_init_top_k(k)
            cc = CCandidates(n)
            r = cc.apply(smpl, x)
            L.llama_sampler_free(smpl)
            c = Candidates.from_logits(x)
            c.partial_sort_inplace(k)
            assert np.array_equal(c.ids, r.ids), (trial, k)
            checked += 1
    assert checked == 36


def test_reset_and_clone_match_c() -> None:
    """common_sampler_reset (re-seed every generator, clear windows, mirostat mu, adaptive-p history) and
    llama_sampler_clone, against the C chain's own reset and clone."""
    from oracle.llama import L
    rng = np.random.default_rng(42)
    for i in range(24):
        n = int(rng.choice([50, 700, 1500]))
        p = random_params(rng, n)
        ours, c = Sampler(p), CChain(p, n)
        try:
            for rounds in range(3):
                for _ in range(5):
                    lg = random_logits(rng, n)
                    r = c.apply(lg)
                    assert ours.sample(lg) == r.token, (i, rounds, p)
                    ours.accept(r.token)
                    c.accept(r.token)
                if rounds == 0:
                    ours.reset()
                    c.reset()
                else:
                    twin, ctwin = ours.clone(), L.llama_sampler_clone(c.chain)
                    lg = random_logits(rng, n)
                    assert ours.sample(lg) == c.apply(lg).token  # the originals move on...
                    c.free()
                    c.chain = ctwin  # ...the clones start from the state at cloning (adaptive-p: re-seeded, as C)
                    r = c.apply(lg)
                    assert twin.sample(lg) == r.token
                    ours = twin
                    ours.accept(r.token)
                    c.accept(r.token)
        finally:
            c.free()


def test_nan_logits_after_adaptive_p() -> None:
    """An all -inf step gives adaptive-p a NaN history, so later steps carry NaN logits through the chain: max scans,
    temperature 0, min-p, top-n-sigma and the NaN bits must still match llama.cpp (found by the sweep)."""
    rng = np.random.default_rng(8)
    orders = [("adaptive_p", "top_p"), ("top_p", "adaptive_p", "top_p"), ("adaptive_p", "min_p", "temperature"),
              ("adaptive_p", "top_n_sigma", "temperature", "typ_p"), ("adaptive_p", "top_k", "min_p")]
    for i in range(20):
        n = int(rng.choice([3, 17, 300]))
        p = Params(seed=int(rng.integers(0, 2**32 - 1)), samplers=orders[i % len(orders)],
                   adaptive_target=float(rng.choice([0.3, 0.8])), temp=float(rng.choice([0.0, 0.7])),
                   top_p=float(rng.choice([1.0, 0.9])), min_p=0.1, top_n_sigma=1.0, typ_p=0.7, top_k=2,
                   min_keep=int(rng.choice([0, 50])))
        run_sequence(p, n, rng, 8, modes=("allinf", "normal", "ties", "inf"))


def test_whole_chain_top_k_first_large_vocab() -> None:
    """Sampler.sample / sample_constrained at vocabulary sizes where a chain that opens with top-k (k <= 128) runs
    it through sampler.heapselect with the NaN check fused: the selected token and the final candidate array equal
    the C chain's, on plain, tied, -inf-heavy and flat logits, with a grammar-like redraw now and then."""
    rng = np.random.default_rng(23)
    steps = 0
    for n, k, temp, top_p in ((262_144, 40, 0.8, 0.95), (151_936, 1, 1.0, 1.0), (32_000, 128, 1.2, 0.9),
                              (262_144, 7, 0.5, 0.5), (8_192, 40, 0.0, 0.95)):
        p = Params(seed=int(rng.integers(0, 2**32 - 1)), top_k=k, temp=temp, top_p=top_p)
        ours, c = Sampler(p), CChain(p, n)
        try:
            for i in range(6):
                lg = random_logits(rng, n, ("normal", "ties", "ties_inf", "inf", "flat", "ties")[i])
                if i % 3 == 2:  # as sample_constrained's redraw: the first pick refused, the mask applied
                    banned = rng.random(n) < 0.5
                    first = c.apply(lg).token
                    banned[first] = True  # the "grammar" refuses the first pick
                    tok, redrew = ours.sample_constrained(lg, lambda t, f=first: t != f, lambda b=banned: ~b)
                    assert redrew
                    masked = lg.copy()
                    masked[banned] = -np.inf
                    r = c.apply(masked)
                else:
                    tok, r = ours.sample(lg), c.apply(lg)
                want = r.token
                assert ours._topk_first == k
                assert tok == want, (n, k, i)
                assert ours.candidates is not None
                same_state(ours.candidates, r, f"n={n} k={k} step {i}")  # ids in order, logit and p bits
                ours.accept(want)
                c.accept(want)
                steps += 1
        finally:
            c.free()
    assert steps == 30
