"""ctypes front for ``sampler_shim.cpp``: llama-server's get_token_probabilities, nlohmann::json conversions and
``std::to_string``, compiled with g++ on first use (``oracle/cxx.py``)."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from oracle.cxx import build_shim

SRC = Path(__file__).resolve().parent / "shims" / "sampler_shim.cpp"


@functools.lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    so = build_shim(SRC, libs=())
    so.probs_run.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_longlong,
                             ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)]
    so.json_get.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    so.json_get.restype = ctypes.c_int
    so.to_string_f.argtypes = [ctypes.c_float, ctypes.c_char_p, ctypes.c_int]
    so.to_string_i.argtypes = [ctypes.c_int32, ctypes.c_char_p, ctypes.c_int]
    so.sort_tokens.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_int32)]
    so.c_strtof.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    so.c_strtof.restype = ctypes.c_float
    return so


def server_token_probs(logits: np.ndarray, n_top: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, p) of every entry in llama-server's order after get_token_probabilities."""
    a = np.ascontiguousarray(logits, dtype=np.float32)
    n = len(a)
    ids = np.zeros(n, np.int32)
    ps = np.zeros(n, np.float32)
    lib().probs_run(a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n, n_top,
                    ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                    ps.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    return ids, ps


def sort_tokens(keys: np.ndarray, k: int = -1) -> np.ndarray:
    """libstdc++ ``std::sort`` (k < 0) or ``std::partial_sort`` (first k) of ``{i, keys[i]}`` by logit, descending."""
    a = np.ascontiguousarray(keys, dtype=np.float32)
    out = np.zeros(len(a), np.int32)
    lib().sort_tokens(a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(a), k,
                      out.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    return out


KINDS = {"int32": 0, "uint32": 1, "float": 2, "bool": 3, "int64": 4, "strings": 5}


def json_get(text: str, kind: str) -> tuple[bool, str]:
    """(ok, value-or-exception-text) of ``nlohmann::json::parse(text).get<kind>()``."""
    buf = ctypes.create_string_buffer(512)
    rc = lib().json_get(text.encode(), KINDS[kind], buf, len(buf))
    return rc == 0, buf.value.decode()


def to_string(v: float | int, kind: str) -> str:
    buf = ctypes.create_string_buffer(128)
    (lib().to_string_f if kind == "float" else lib().to_string_i)(v, buf, len(buf))
    return buf.value.decode()


def c_strtof(s: str) -> tuple[float, bool]:
    ok = ctypes.c_int(0)
    v = lib().c_strtof(s.encode(), ctypes.byref(ok))
    return float(np.float32(v)), bool(ok.value)
