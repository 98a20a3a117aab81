"""Compile a small C++ shim of ours against the llama.cpp sdist headers and the wheel's libraries, once.

The shared object goes to ``oracle/_build/`` (gitignored), named by a hash of its source and of the installed
libraries, so a rebuild happens only when one of them changes (about 3 s with g++ -O1).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from oracle.sdist import llama_cpp_source

BUILD = Path(__file__).resolve().parent / "_build"


def wheel_lib_dir() -> Path:
    """``site-packages/lib`` of llama-cpp-python (``libllama.so``, ``libllama-common.so``...)."""
    d = Path(sysconfig.get_paths()["purelib"]) / "lib"
    if not (d / "libllama-common.so").exists():
        raise FileNotFoundError(f"{d}/libllama-common.so not found (llama-cpp-python 0.3.36 is not installed)")
    return d


def build_shim(src: Path, libs: tuple[str, ...] = ("libllama-common.so", "libllama.so")) -> ctypes.CDLL:
    """Build (if needed) and load ``src`` as a shared library linked to the wheel's ``libs``."""
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    import llama_cpp  # noqa: F401  (loads libllama / libggml first, so they are shared)

    lib_dir = wheel_lib_dir()
    stamp = src.read_bytes() + b"".join(str((lib_dir / x).stat().st_mtime_ns).encode() for x in libs)
    digest = hashlib.sha256(stamp).hexdigest()[:12]
    BUILD.mkdir(parents=True, exist_ok=True)
    so = BUILD / f"{src.stem}-{digest}.so"
    if not so.exists():
        root = llama_cpp_source()
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        includes = [f"-I{root / d}" for d in ("common", "src", "include", "ggml/include", "vendor")]
        subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", *includes, str(src), "-o", str(tmp),
                        f"-L{lib_dir}", *[f"-l:{x}" for x in libs], f"-Wl,-rpath,{lib_dir}"], check=True)
        os.replace(tmp, so)
    # Only libllama-common is loaded from site-packages/lib. That folder also holds a second *copy* of libllama and
    # libggml: loading those would put two libllamas in the process (heap corruption at exit). The copies that
    # llama_cpp already loaded satisfy the shim's DT_NEEDED entries by soname.
    if "libllama-common.so" in libs:
        ctypes.CDLL(str(lib_dir / "libllama-common.so"), mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(str(so))


def json_answer(lib: ctypes.CDLL, free: str, ptr: int) -> Any:
    """A shim's answer at ``ptr``: the UTF-8 JSON text it returned, parsed, and the buffer given back to the shim's
    ``free`` function (every shim returns its answers this way)."""
    try:
        return json.loads(ctypes.string_at(ptr).decode("utf-8"))
    finally:
        getattr(lib, free)(ptr)
