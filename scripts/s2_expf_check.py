"""Exhaustive check: sampler.s2.expf equals glibc's expf for every float32 x in [-104, 0] (and optionally more).

Run from the repo root: ``.venv/bin/python scripts/s2_expf_check.py [--all-positive]``.  Takes a few minutes; prints
the number of inputs compared, how many took the libm fallback, and any mismatch (there must be none).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sampler.s2 import _MARGIN  # noqa: E402

CHUNK = 1 << 24


def main() -> int:
    src = Path(__file__).resolve().parents[1] / "tests" / "cpp" / "expf_dump.c"
    exe = Path(tempfile.mkdtemp()) / "expf_dump"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src), "-lm"], check=True)
    ranges = [(0x80000000, 0xC2D00001)]  # -0.0 down to -104.0
    if "--all-positive" in sys.argv:
        ranges.append((0x00000000, 0x42B30001))  # 0.0 up to 89.5 (past overflow)
    total = hard_total = bad = 0
    for lo, hi in ranges:
        for a in range(lo, hi, CHUNK):
            b = min(hi, a + CHUNK)
            want = np.frombuffer(subprocess.run([str(exe), hex(a), hex(b)], capture_output=True, check=True).stdout,
                                 dtype=np.uint32)
            x = np.arange(a, b, dtype=np.uint64).astype(np.uint32).view(np.float32)
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                y = np.exp(x.astype(np.float64))
                fast = y.astype(np.float32).view(np.uint32)
                hard = (y * (1.0 - _MARGIN)).astype(np.float32) != (y * (1.0 + _MARGIN)).astype(np.float32)
            easy = ~hard
            mism = np.flatnonzero(easy & (fast != want))
            bad += mism.size
            for i in mism[:5].tolist():
                print(f"MISMATCH x={float(x[i])!r} fast={fast[i]:#x} libm={want[i]:#x}")
            total += b - a
            hard_total += int(hard.sum())
        print(f"range {lo:#x}..{hi:#x}: {total} inputs so far, {hard_total} to the libm fallback, {bad} mismatches",
              flush=True)
    print(f"compared {total} float32 inputs; fast path used for {total - hard_total}; mismatches on it: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
