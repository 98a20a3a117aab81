"""Benchmark: the s2 sampler (sampler.s2) against the C++ reference program (oracle/shims/s2_oracle.cpp, g++ -O2), and
sampler.stdalgo's sort/partial_sort against libstdc++'s (oracle/shims/stdalgo_oracle.cpp), in one run.

Run from the repo root: ``.venv/bin/python benchmarks/bench_s2.py [--quick]``.  Prints milliseconds per draw (or per
call) for both and the ratio ours / C++.  Every timed Python draw is also checked against the C++ draws.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle.programs import compile_cpp, s2_oracle_run  # noqa: E402
from sampler.rng import Mt19937  # noqa: E402
from sampler.s2 import S2Params, s2_sample  # noqa: E402
from sampler.stdalgo import partial_sort_perm, sort_perm  # noqa: E402


def logit_sets(n: int, rs: np.random.Generator) -> dict[str, np.ndarray]:
    peaked = rs.normal(size=n) * 2.0
    peaked[rs.integers(0, n, 40)] += rs.uniform(8, 14, 40)  # a few strong candidates, as a trained head gives
    return {
        "peaked": peaked.astype(np.float32),
        "normal(0,3)": (rs.normal(size=n) * 3).astype(np.float32),
        "ties(4 values)+inf": np.where(rs.random(n) < 0.2, -np.inf, rs.integers(0, 4, n)).astype(np.float32),
    }


def bench_s2(quick: bool) -> None:
    exe = compile_cpp("s2_oracle.cpp")
    rs = np.random.default_rng(0)
    reps = 3 if quick else 7
    print(f"s2 sampler: ms per draw, best of {reps} batches, wall clock (C++ = oracle/shims/s2_oracle.cpp, g++ -O2)")
    print(f"{'n':>8} {'logits':<20} {'params (T, top_p, top_k)':<26} {'ours':>8} {'C++':>8} {'ratio':>6}")
    for n in (155_776, 4_096):
        draws = (5 if quick else 10) if n > 10_000 else (50 if quick else 200)
        for name, lg in logit_sets(n, rs).items():
            for p in (S2Params(), S2Params(temperature=1.0, top_p=0.9, top_k=30)):
                case = dict(seed=1, draws=draws, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, logits=[lg])
                c = ours = float("inf")
                for _ in range(reps):
                    ids, _, ns = s2_oracle_run([case], exe)[0]
                    c = min(c, ns / draws / 1e6)
                    g = Mt19937(1)
                    t = time.perf_counter()
                    got = [s2_sample(lg, p, g) for _ in range(draws)]
                    ours = min(ours, (time.perf_counter() - t) / draws * 1e3)
                    assert got == ids, "mismatch with the C++ draws"
                ptxt = f"({p.temperature}, {p.top_p}, {p.top_k})"
                print(f"{n:>8} {name:<20} {ptxt:<26} {ours:8.3f} {c:8.3f} {ours / c:6.2f}", flush=True)


def bench_stdalgo(quick: bool) -> None:
    exe = compile_cpp("stdalgo_oracle.cpp")
    rs = np.random.default_rng(1)
    reps = 3 if quick else 7
    print(f"\nstdalgo: ms per call, best of {reps} (C++ = libstdc++ on (float, int) structs, best of {reps} means of 20)")
    print(f"{'n':>8} {'keys':<20} {'call':<22} {'ours':>8} {'C++':>8} {'ratio':>6}")
    for n in (262_144, 32_000):
        for name, keys in logit_sets(n, rs).items():
            for label, op, k, fn in (("sort", 16, 0, lambda x: sort_perm(x)),
                                     ("partial_sort k=40", 18, 40, lambda x: partial_sort_perm(x, 40)),
                                     ("partial_sort k=128", 18, 128, lambda x: partial_sort_perm(x, 128))):
                buf = np.array([op, n, k], dtype=np.int32).tobytes() + keys.tobytes()
                c = ours = float("inf")
                for _ in range(reps):
                    out = subprocess.run([str(exe)], input=buf, capture_output=True, check=True).stdout
                    c = min(c, int(np.frombuffer(out, dtype=np.uint64)[0]) / 1e6)
                    t = time.perf_counter()
                    fn(keys)
                    ours = min(ours, (time.perf_counter() - t) * 1e3)
                print(f"{n:>8} {name:<20} {label:<22} {ours:8.2f} {c:8.2f} {ours / c:6.2f}", flush=True)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    bench_s2(quick)
    bench_stdalgo(quick)
