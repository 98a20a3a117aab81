"""A large oracle sweep for sampler.s2 and sampler.stdalgo (outside CI): many seeds, sizes, ties and parameters.

Run from the repo root: ``.venv/bin/python scripts/s2_sweep.py [rounds] [seed]``.  Prints the number of draws / arrangements
compared and every mismatch (there must be none).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle.cases.s2 import TEMPS, TOP_PS, s2_logits  # noqa: E402
from oracle.programs import compile_cpp, s2_oracle_run  # noqa: E402
from sampler import stdalgo as S  # noqa: E402
from sampler.rng import Mt19937  # noqa: E402
from sampler.s2 import S2Params, s2_sample  # noqa: E402


def sweep_s2(rs: np.random.Generator, exe: Path) -> tuple[int, int]:
    cases = []
    for _ in range(60):
        n = int(rs.choice([1, 2, 7, 16, 17, 64, 300, 2048, 4096, 4096, 30_000]))
        cases.append(dict(seed=int(rs.integers(0, 2**32)), draws=int(rs.integers(5, 40)),
                          temperature=float(rs.choice(TEMPS + [0.3, 5.0])),
                          top_p=float(rs.choice(TOP_PS + [0.5, 0.95, -1.0, 2.0])),
                          top_k=int(rs.choice([0, -3, 1, 2, 30, 100, n, n + 1])),
                          logits=[s2_logits(rs, n) for _ in range(int(rs.integers(1, 4)))]))
    total = bad = 0
    for c, (ids, nxt, _) in zip(cases, s2_oracle_run(cases, exe), strict=True):
        g = Mt19937(c["seed"])
        p = S2Params(c["temperature"], c["top_p"], c["top_k"])
        got = [s2_sample(c["logits"][i % len(c["logits"])], p, g) for i in range(c["draws"])]
        total += len(got)
        if got != ids or g.next_u32() != nxt:
            bad += 1
            print("S2 MISMATCH", len(c["logits"][0]), p, c["seed"])
    return total, bad


def sweep_stdalgo(rs: np.random.Generator, exe: Path) -> tuple[int, int]:
    cases = []
    for _ in range(40):
        n = int(rs.choice([2, 17, 100, 1000, 4096, 32_000, 155_776, 262_144]))
        d = int(rs.integers(1, 9))
        keys = (rs.integers(0, d, n) * rs.choice([0.5, 1.0])).astype(np.float32)
        if rs.random() < 0.3:
            keys = np.round(rs.normal(size=n) * 4, 1).astype(np.float32)
        if rs.random() < 0.3:
            keys[rs.random(n) < rs.random()] = -np.inf
        op = int(rs.integers(0, 4))
        k = int(min(n, rs.choice([0, 1, 40, 128, 129, n])))
        cases.append((op, keys, k))
    buf = b"".join(np.array([op, len(k), kk], dtype=np.int32).tobytes() + k.tobytes() for op, k, kk in cases)
    out = np.frombuffer(subprocess.run([str(exe)], input=buf, capture_output=True, check=True).stdout, np.int32)
    bad = o = 0
    for op, keys, k in cases:
        want = out[o: o + len(keys)]
        o += len(keys)
        desc = op in (0, 2)
        got = S.sort_perm(keys, desc) if op < 2 else S.partial_sort_perm(keys, k, desc)
        if not np.array_equal(got, want) or (op < 2 and not np.array_equal(S.sort_prefix_perm(keys, 30, desc),
                                                                          want[:30])):
            bad += 1
            print("STDALGO MISMATCH", op, len(keys), k)
    return len(cases), bad


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    exe = compile_cpp("s2_oracle.cpp")
    exe_sort = compile_cpp("stdalgo_oracle.cpp")
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else int.from_bytes(b"s2sw", "little")
    rs = np.random.default_rng(seed)
    total = bad = arr = bad_arr = 0
    for r in range(rounds):
        t, b = sweep_s2(rs, exe)
        total += t
        bad += b
        t, b = sweep_stdalgo(rs, exe_sort)
        arr += t
        bad_arr += b
        print(f"round {r + 1}/{rounds}: {total} s2 draws compared, {bad} mismatching sequences; "
              f"{arr} sort/partial_sort arrangements compared, {bad_arr} mismatches", flush=True)
    return 1 if bad or bad_arr else 0


if __name__ == "__main__":
    sys.exit(main())
