"""Compile the C++ oracle programs under ``oracle/shims`` with g++ into ``oracle/_build`` (cached by source hash).

Example:
    >>> exe = compile_cpp("rng_oracle.cpp")   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "_build"


def gxx() -> str | None:
    """Path of g++ (or $CXX), or None when no C++ compiler exists."""
    return shutil.which(os.environ.get("CXX", "g++"))


def compile_cpp(name: str, opt: str = "-O2") -> Path:
    """Compile ``oracle/shims/<name>`` once per source content; returns the executable's path."""
    cxx = gxx()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found")
    src = HERE / "shims" / name
    digest = hashlib.sha256(src.read_bytes() + opt.encode()).hexdigest()[:16]
    BUILD.mkdir(exist_ok=True)
    exe = BUILD / f"{src.stem}-{digest}"
    if not exe.exists():
        tmp = exe.with_suffix(f".tmp{os.getpid()}")
        subprocess.run([cxx, "-std=c++17", opt, "-o", str(tmp), str(src)], check=True)
        tmp.replace(exe)
    return exe


def run(exe: Path, stdin: str | bytes, args: list[str] | None = None) -> str:
    """Run an oracle program with ``stdin``; returns its stdout (raises on a non-zero exit)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = subprocess.run([str(exe), *(args or [])], input=data, capture_output=True, check=True)
    return out.stdout.decode()


def s2_oracle_run(cases: list[dict], exe: Path | None = None) -> list[tuple[list[int], int, int]]:
    """Run ``s2_oracle.cpp`` on cases ``{n, seed, draws, temperature, top_p, top_k, logits: [arrays]}``.

    Returns, per case, (ids drawn, the generator's next output, nanoseconds spent drawing).
    """
    import numpy as np

    exe = exe or compile_cpp("s2_oracle.cpp")
    parts = []
    for c in cases:
        sets = c["logits"]
        n = len(sets[0])
        hdr = np.array([n, c["seed"] & 0xFFFFFFFF, c["draws"], 0, 0, 0, len(sets)], dtype=np.uint32)
        hdr[3] = np.float32(c["temperature"]).view(np.uint32)
        hdr[4] = np.float32(c["top_p"]).view(np.uint32)
        hdr[5] = np.int32(c["top_k"]).view(np.uint32)
        parts.append(hdr.tobytes())
        parts.extend(np.asarray(s, dtype=np.float32).tobytes() for s in sets)
    out = subprocess.run([str(exe)], input=b"".join(parts), capture_output=True, check=True).stdout
    res, o = [], 0
    for c in cases:
        d = c["draws"]
        ids = np.frombuffer(out[o: o + 4 * d], dtype=np.int32).tolist()
        nxt = int(np.frombuffer(out[o + 4 * d: o + 4 * d + 4], dtype=np.uint32)[0])
        ns = int(np.frombuffer(out[o + 4 * d + 4: o + 4 * d + 12], dtype=np.uint64)[0])
        res.append((ids, nxt, ns))
        o += 4 * d + 12
    return res
