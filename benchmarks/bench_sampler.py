#!/usr/bin/env python
"""llama-server's default sampler chain: our Sampler vs llama.cpp's C chain, per token, in one run.

For vocabulary sizes 32,000 / 151,936 / 262,144 and logits without and with heavy ties (rounded to 0.5), it times
``Sampler.sample(logits)`` (whole call: validation, candidate array, chain) and the C chain's
``llama_sampler_apply`` alone (the candidate buffer is filled outside the timing), checks that both select the same
token every step, and prints the median milliseconds per token and the ratio. ``--all`` adds a chain with every sampler on.

    GGML_NO_BACKTRACE=1 .venv/bin/python benchmarks/bench_sampler.py [--steps 50] [--all]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sampler.chain import Sampler  # noqa: E402
from sampler.params import Params  # noqa: E402
from tests.oracle.chain import CChain  # noqa: E402
from tests.oracle.llama import L  # noqa: E402


def make_logits(rng: np.random.Generator, n: int, ties: bool, steps: int) -> list[np.ndarray]:
    out = []
    for _ in range(steps):
        x = rng.standard_normal(n).astype(np.float32) * 2.5
        if ties:
            x = (np.round(x * 2) / 2).astype(np.float32)
        out.append(x)
    return out


def bench(p: Params, n: int, ties: bool, steps: int, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    data = make_logits(rng, n, ties, steps)
    ours = Sampler(p)
    c = CChain(p, n)
    t_ours: list[float] = []
    t_c: list[float] = []
    for lg in data:
        c.cand.fill(lg)
        t0 = time.perf_counter()
        L.llama_sampler_apply(c.chain, ctypes.byref(c.cand.arr))
        t1 = time.perf_counter()
        want = c.cand.result().token
        t2 = time.perf_counter()
        got = ours.sample(lg)
        t3 = time.perf_counter()
        if got != want:
            raise SystemExit(f"MISMATCH at n={n} ties={ties}: ours {got} vs C {want}")
        c.accept(want)
        ours.accept(got)
        t_c.append(t1 - t0)
        t_ours.append(t3 - t2)
    c.free()
    return float(np.median(t_ours)) * 1e3, float(np.median(t_c)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--all", action="store_true", help="also time a chain with every sampler enabled")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"# machine load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {a.steps} tokens per row; "
          "C = llama_sampler_apply only; medians")
    configs = [("default", Params(seed=1234))]
    if a.all:
        configs.append(("all-on", Params(seed=1234, penalty_repeat=1.1, penalty_freq=0.1, penalty_present=0.1,
                                         top_n_sigma=2.0, typ_p=0.95, xtc_probability=0.3, dynatemp_range=0.3)))
    print(f"{'chain':8} {'n_vocab':>8} {'ties':>5} {'ours ms':>9} {'C ms':>8} {'ratio':>7}")
    for name, p in configs:
        for n in (32000, 151936, 262144):
            for ties in (False, True):
                ours, c = bench(p, n, ties, a.steps)
                print(f"{name:8} {n:8d} {str(ties):>5} {ours:9.3f} {c:8.3f} {ours / c:7.2f}")


if __name__ == "__main__":
    main()
