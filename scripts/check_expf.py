#!/usr/bin/env python
"""Exhaustive proof that sampler.mathf.expf_vec (used by the chain and by s2) equals glibc's expf on every float32
in [-104, 0] (and -0, -inf).

Softmax only ever takes expf of ``logit - max`` <= 0, and below -103.97 the result is 0. A tiny C function compiled
with gcc fills a buffer with glibc's expf (the same libm the samplers' C code links); the numpy path must give the
same bits for all ~1.12 billion inputs. Takes about a minute or two.

    .venv/bin/python scripts/check_expf.py [--chunk 16777216]
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sampler.mathf import expf_vec  # noqa: E402

C_SRC = r"""
#include <math.h>
#include <stdint.h>
void fill(uint32_t first, uint32_t n, float * out) {
    for (uint32_t i = 0; i < n; i++) {
        union { uint32_t u; float f; } v; v.u = first + i;
        out[i] = expf(v.f);
    }
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=int, default=1 << 24)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    (tmp / "e.c").write_text(C_SRC)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(tmp / "e.c"), "-o", str(tmp / "e.so"), "-lm"], check=True)
    lib = ctypes.CDLL(str(tmp / "e.so"))
    lib.fill.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_float)]
    first = 0x80000000                                   # -0.0
    last = int(np.float32(-104.0).view(np.uint32))       # -104.0 (negative floats grow in bit pattern)
    total = bad = 0
    t0 = time.time()
    for lo in range(first, last + 1, a.chunk):
        n = min(a.chunk, last + 1 - lo)
        bits = np.arange(lo, lo + n, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        want = np.empty(n, np.float32)
        lib.fill(lo, n, want.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        got = expf_vec(x)
        diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        bad += diff.size
        total += n
        if diff.size:
            print("MISMATCH", x[diff[:5]], got[diff[:5]], want[diff[:5]])
    inf = np.array([-np.inf], np.float32)
    bad += int(expf_vec(inf)[0] != 0.0)
    print(f"checked {total + 1:,} floats in [-104, 0] and -inf: {bad} mismatches ({time.time() - t0:.0f} s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
