"""Helpers for the sampler oracle tests: random logits and Params, and stage-by-stage comparison with C."""

from __future__ import annotations

import numpy as np

from sampler.candidates import Candidates
from sampler.chain import Sampler
from sampler.params import DEFAULT_SAMPLERS, Params

SAMPLER_NAMES = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
                 "adaptive_p")


def random_logits(rng: np.random.Generator, n: int, mode: str | None = None) -> np.ndarray:
    """Logits with a chosen structure: plain normal, heavy ties (few distinct values), -inf entries, flat."""
    mode = mode or rng.choice(["normal", "ties", "ties", "inf", "flat", "wide", "ties_inf"])
    if mode == "normal":
        x = rng.standard_normal(n) * rng.uniform(0.5, 5)
    elif mode == "ties":
        x = np.round(rng.standard_normal(n) * rng.uniform(1, 4) * 2) / 2
    elif mode == "wide":
        x = rng.standard_normal(n) * 30
    elif mode == "allinf":
        return np.full(n, -np.inf, np.float32)
    elif mode == "flat":
        x = np.full(n, rng.choice([0.0, -3.5, 12.0]))
        x[rng.integers(0, n, size=max(1, n // 50))] += 1.0
    else:  # inf / ties_inf
        x = rng.standard_normal(n) * 3
        if mode == "ties_inf":
            x = np.round(x)
        x[rng.random(n) < rng.uniform(0.1, 0.9)] = -np.inf
        if np.isinf(x).all():
            x[rng.integers(0, n)] = 0.0
    return x.astype(np.float32)


def random_params(rng: np.random.Generator, n_vocab: int, *, dry: bool = False) -> Params:
    """A random mix of every parameter, edges included."""
    r = rng.random
    kw: dict = {"seed": int(rng.integers(0, 2**32 - 1))}
    kw["top_k"] = int(rng.choice([0, 1, 2, 40, 128, 129, 300, n_vocab, -1, int(rng.integers(1, 1000))]))
    kw["top_p"] = float(rng.choice([0.0, 1.0, 0.95, 0.5, 0.99, float(r())]))
    kw["min_p"] = float(rng.choice([0.0, 0.05, 0.2, 1.0, float(r())]))
    kw["typ_p"] = float(rng.choice([1.0, 1.0, 0.9, 0.5, 0.2]))
    kw["temp"] = float(rng.choice([0.8, 1.0, 0.0, -1.0, 0.3, 1.7, 5.0]))
    kw["dynatemp_range"] = float(rng.choice([0.0, 0.0, 0.5, 1.0, 2.0]))
    kw["dynatemp_exponent"] = float(rng.choice([1.0, 0.5, 2.0]))
    kw["xtc_probability"] = float(rng.choice([0.0, 0.5, 1.0]))
    kw["xtc_threshold"] = float(rng.choice([0.1, 0.05, 0.3, 0.6]))
    kw["penalty_last_n"] = int(rng.choice([0, 3, 16, 64, 200]))
    kw["penalty_repeat"] = float(rng.choice([1.0, 1.1, 1.5, 0.8]))
    kw["penalty_freq"] = float(rng.choice([0.0, 0.0, 0.2, -0.3]))
    kw["penalty_present"] = float(rng.choice([0.0, 0.0, 0.5]))
    if dry:
        kw["dry_multiplier"] = float(rng.choice([0.0, 0.8, 2.0]))
        kw["dry_base"] = float(rng.choice([1.75, 1.0, 3.0]))
        kw["dry_allowed_length"] = int(rng.choice([0, 1, 2, 4]))
        kw["dry_penalty_last_n"] = int(rng.choice([0, 8, 64]))
    kw["top_n_sigma"] = float(rng.choice([-1.0, -1.0, 0.5, 1.0, 2.5]))
    kw["min_keep"] = int(rng.choice([0, 0, 1, 3, 50]))
    kw["adaptive_target"] = float(rng.choice([-1.0, 0.3, 0.7, 1.0]))
    kw["adaptive_decay"] = float(rng.choice([0.9, 0.0, 0.5]))
    kw["mirostat"] = int(rng.choice([0, 0, 0, 0, 1, 2]))
    kw["mirostat_tau"] = float(rng.choice([5.0, 3.0, 8.0]))
    kw["mirostat_eta"] = float(rng.choice([0.1, 0.3]))
    if r() < 0.4:
        kw["samplers"] = DEFAULT_SAMPLERS
    else:
        names = [n for n in SAMPLER_NAMES if n != "dry" or dry]
        k = int(rng.integers(0, 8))
        kw["samplers"] = tuple(rng.choice(names, size=k, replace=True).tolist())
    if r() < 0.3:
        k = int(rng.integers(1, 6))
        kw["logit_bias"] = tuple((int(rng.integers(0, n_vocab)), float(rng.choice([-np.inf, -2.0, 1.5, 3.25])))
                                 for _ in range(k))
    return Params(**kw)


def bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def same_state(ours: Candidates, c, where: str) -> None:  # noqa: ANN001
    """Assert our candidate array equals llama.cpp's: ids in order, logit and p bits, sorted, selected."""
    assert ours.size == len(c.ids), f"{where}: size {ours.size} != C {len(c.ids)}"
    assert np.array_equal(ours.ids, c.ids), f"{where}: ids/order differ: {ours.ids[:12]} vs C {c.ids[:12]}"
    assert np.array_equal(bits(ours.logits), bits(c.logits)), f"{where}: logits differ"
    assert np.array_equal(bits(ours.p), bits(c.p)), f"{where}: p differ {ours.p[:6]} vs C {c.p[:6]}"
    assert bool(ours.sorted) == c.sorted, f"{where}: sorted {ours.sorted} vs C {c.sorted}"
    assert ours.selected == c.selected, f"{where}: selected {ours.selected} vs C {c.selected}"


def run_stages(ours: Sampler, logits: np.ndarray) -> list[Candidates]:
    """Apply our chain step by step (as CChain.stages does), snapshotting after each step."""
    ours._logits(logits)
    cand = Candidates.from_logits(np.asarray(logits, np.float32))
    out = []
    for st in ours.steps:
        st.apply(cand)
        out.append(cand.copy())
    ours.cur = cand
    return out
