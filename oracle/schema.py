"""llama.cpp's own JSON schema converter, called through a small C++ shim of ours (``schema_shim.cpp``).

The shim is compiled with g++ against the sdist's headers on first use (about a second) into ``oracle/_build/``
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
import json
from dataclasses import dataclass
from pathlib import Path

from oracle.cxx import build_shim

HERE = Path(__file__).resolve().parent
SHIM_SRC = HERE / "shims" / "schema_shim.cpp"

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


@functools.lru_cache(maxsize=1)
def _shim() -> ctypes.CDLL:
    lib = build_shim(SHIM_SRC)
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
