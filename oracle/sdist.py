"""Fetch and cache the llama.cpp source vendored in the llama-cpp-python 0.3.36 sdist.

Nothing from it is committed: the first call downloads the sdist with pip (76 MB) into a cache folder and extracts
it; later calls return at once. The folder is ``$CONSTRAINED_TEST_CACHE`` or ``~/.cache/constrained-tests``.

Example:
    >>> root = llama_cpp_source()            # doctest: +SKIP
    >>> sorted(p.name for p in vocab_ggufs())[:2]  # doctest: +SKIP
    ['ggml-vocab-aquila.gguf', 'ggml-vocab-baichuan.gguf']
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{VERSION}"


def cache_dir() -> Path:
    d = Path(os.environ.get("CONSTRAINED_TEST_CACHE", Path.home() / ".cache" / "constrained-tests"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def llama_cpp_source() -> Path:
    """The ``vendor/llama.cpp`` folder of the sdist, downloading and extracting it on first use."""
    base = cache_dir()
    root = base / SDIST_NAME / "vendor" / "llama.cpp"
    marker = base / f"{SDIST_NAME}.extracted"
    if marker.exists():
        return root
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return root
        tgz = base / f"{SDIST_NAME}.tar.gz"
        if not tgz.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={VERSION}", "-d", str(base)], check=True)
        with tarfile.open(tgz) as tf:
            members = [m for m in tf.getmembers() if m.name.startswith(f"{SDIST_NAME}/vendor/llama.cpp/")]
            tf.extractall(base, members=members, filter="data") if sys.version_info >= (3, 12) else \
                tf.extractall(base, members=members)
        marker.touch()
    return root


def vocab_ggufs() -> list[Path]:
    """The 19 vocab-only GGUFs (``models/ggml-vocab-*.gguf``), sorted by name."""
    return sorted((llama_cpp_source() / "models").glob("ggml-vocab-*.gguf"))


def vocab_gguf(name: str) -> Path:
    """One vocab-only GGUF by its short name, e.g. ``"qwen2"`` or ``"llama-spm"``."""
    p = llama_cpp_source() / "models" / f"ggml-vocab-{name}.gguf"
    if not p.exists():
        raise FileNotFoundError(p)
    return p
