"""llama.cpp's reasoning-budget sampler (``common_reasoning_budget_*`` in libllama-common), through
``oracle/shims/rbudget_shim.cpp``, for the oracle tests of :mod:`sampler.reasoning_budget`."""

from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from oracle.cxx import build_shim, json_answer


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = build_shim(Path(__file__).resolve().parent / "shims" / "rbudget_shim.cpp")
    lib.rbudget_run.argtypes = [ctypes.c_char_p]
    lib.rbudget_run.restype = ctypes.c_void_p
    lib.rbudget_free.argtypes = [ctypes.c_void_p]
    return lib


def rbudget_run(script: dict[str, Any]) -> list[dict[str, Any]]:
    """Run a script (see the shim: start / end / forced sequences, budget, initial state, steps: a token id, -1 for
    ``force()``, -2 for a reset) and return each step's ``{"kept", "state", "end_match", "forced"?}``."""
    lib = _lib()
    out = json_answer(lib, "rbudget_free", lib.rbudget_run(json.dumps(script).encode()))
    if isinstance(out, dict):
        raise RuntimeError(out["error"])
    return out
