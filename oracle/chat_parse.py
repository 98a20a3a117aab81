"""llama.cpp's chat parser (``common_chat_parse`` with the PEG parser ``common_chat_templates_apply`` builds), through
a C++ shim (``chat_parse_shim.cpp``, built by :func:`oracle.cxx.build_shim`), for the oracle tests of
``constrained.chat.peg``."""

from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from oracle.cxx import build_shim, json_answer


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = build_shim(Path(__file__).resolve().parent / "shims" / "chat_parse_shim.cpp")
    lib.chat_parse_shim.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    lib.chat_parse_shim.restype = ctypes.c_void_p
    lib.chat_parse_free.argtypes = [ctypes.c_void_p]
    return lib


def chat_parse(template: str, tools: Any, tool_choice: str, parallel: bool,
               texts: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """For each ``(text, is_partial)``: ``{"ok": True, "msg": <message JSON>, "generation_prompt": ...}`` or
    ``{"ok": False, "error": ...}`` (a setup error is raised as RuntimeError)."""
    lib = _lib()
    p = lib.chat_parse_shim(template.encode(), json.dumps(tools).encode(), tool_choice.encode(), int(parallel),
                            json.dumps([[t, bool(b)] for t, b in texts]).encode())
    out = json_answer(lib, "chat_parse_free", p)
    if isinstance(out, dict):
        raise RuntimeError(out["error"])
    return out
