"""Compile the C++ oracle programs under ``tests/cpp`` with g++ into ``tests/_build`` (cached by source hash).

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
BUILD = HERE.parent / "_build"


def gxx() -> str | None:
    """Path of g++ (or $CXX), or None when no C++ compiler exists."""
    return shutil.which(os.environ.get("CXX", "g++"))


def compile_cpp(name: str, opt: str = "-O2") -> Path:
    """Compile ``tests/cpp/<name>`` once per source content; returns the executable's path."""
    cxx = gxx()
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++) found")
    src = HERE / name
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
