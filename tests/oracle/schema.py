"""llama.cpp's own JSON schema converter, called through a small C++ shim of ours (``schema_shim.cpp``).

The shim is compiled with g++ against the sdist's headers on first use (about a second) into ``tests/_build/``
(gitignored) and linked to the wheel's ``site-packages/lib/libllama-common.so``, which exports
``json_schema_to_grammar(common_json const&, bool)`` and ``common_json::parse``. ``llama_cpp`` is imported first so
that the already loaded ``libllama`` is reused.

Example:
    >>> r = oracle_convert('{"type": "integer", "minimum": 0}')   # doctest: +SKIP
    >>> r.ok, r.text.splitlines()[0]                                # doctest: +SKIP
    (True, 'root ::= ([0] | [1-9] [0-9]{0,15})')
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.oracle.sdist import llama_cpp_source

HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / "_build"
SHIM_SRC = HERE / "schema_shim.cpp"

OK, INVALID_ARGUMENT, OTHER_EXCEPTION, UNKNOWN = 0, 1, 2, 3


@dataclass(frozen=True)
class OracleResult:
    """What llama.cpp's converter did: ``status`` 0 = grammar in ``text``; 1 = ``std::invalid_argument`` (its
    refusals, message in ``text``); 2 = another ``std::exception`` (e.g. a JSON parse error). ``warnings`` is what it
    printed to stderr."""

    status: int
    text: str
    warnings: str

    @property
    def ok(self) -> bool:
        return self.status == OK


def _common_lib() -> Path:
    lib = Path(sysconfig.get_paths()["purelib"]) / "lib" / "libllama-common.so"
    if not lib.exists():
        raise FileNotFoundError(f"{lib} not found (llama-cpp-python 0.3.36 is not installed)")
    return lib


@functools.lru_cache(maxsize=1)
def _shim() -> ctypes.CDLL:
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    import llama_cpp  # noqa: F401  (loads libllama / libggml under their sonames)

    common = _common_lib()
    src = llama_cpp_source()
    digest = hashlib.sha256(SHIM_SRC.read_bytes() + str(common.stat().st_mtime_ns).encode()).hexdigest()[:12]
    BUILD.mkdir(parents=True, exist_ok=True)
    so = BUILD / f"schema_shim-{digest}.so"
    if not so.exists():
        tmp = so.with_suffix(f".{os.getpid()}.tmp")
        includes = [f"-I{src / d}" for d in ("common", "include", "ggml/include", "vendor")]
        subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", *includes, str(SHIM_SRC), "-o", str(tmp),
                        f"-L{common.parent}", "-l:libllama-common.so"], check=True)
        os.replace(tmp, so)
    ctypes.CDLL(str(common), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(so))
    lib.schema_shim_convert.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_void_p)]
    lib.schema_shim_convert.restype = ctypes.c_int
    lib.schema_shim_free.argtypes = [ctypes.c_void_p]
    lib.schema_shim_free.restype = None
    return lib


def oracle_convert(schema: str | bytes | dict | list | bool | float | None, force_gbnf: bool = True) -> OracleResult:
    """Run ``json_schema_to_grammar(common_json::parse(text), force_gbnf)``; a non-string is dumped as JSON first."""
    if isinstance(schema, str):
        data = schema.encode("utf-8", "surrogatepass")
    elif isinstance(schema, bytes):
        data = schema
    else:
        data = json.dumps(schema, ensure_ascii=False).encode("utf-8", "surrogatepass")
    lib = _shim()
    out = ctypes.c_void_p()
    warn = ctypes.c_void_p()
    status = lib.schema_shim_convert(data, int(force_gbnf), ctypes.byref(out), ctypes.byref(warn))
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "surrogateescape")
        warnings = ctypes.string_at(warn.value).decode("utf-8", "surrogateescape")
    finally:
        lib.schema_shim_free(out.value)
        lib.schema_shim_free(warn.value)
    return OracleResult(status, text, warnings)
