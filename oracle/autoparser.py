"""llama.cpp's differential template analysis (``autoparser::analyze_template``),
``common_chat_templates_support_enable_thinking`` and ``common_chat_templates_apply``'s prompt, through a C++ shim (``autoparser_shim.cpp``, built by
:func:`oracle.cxx.build_shim`), for the oracle tests of ``constrained.chat.autoparser``."""

from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from oracle.cxx import build_shim, json_answer


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = build_shim(Path(__file__).resolve().parent / "shims" / "autoparser_shim.cpp")
    lib.autoparser_shim.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.autoparser_shim.restype = ctypes.c_void_p
    lib.autoparser_apply_shim.argtypes = [ctypes.c_char_p] * 4
    lib.autoparser_apply_shim.restype = ctypes.c_void_p
    lib.autoparser_tools_shim.argtypes = [ctypes.c_char_p] * 3
    lib.autoparser_tools_shim.restype = ctypes.c_void_p
    lib.autoparser_free.argtypes = [ctypes.c_void_p]
    return lib


def analyze(template: str, bos: str = "", eos: str = "") -> dict[str, Any]:
    """``{"mode": "NONE" | "TAG_BASED" | "TOOLS_ONLY", "start", "end", "supports_thinking"}`` or ``{"error"}``."""
    lib = _lib()
    return json_answer(lib, "autoparser_free", lib.autoparser_shim(template.encode(), bos.encode(), eos.encode()))


def apply(template: str, messages: list[dict[str, Any]], bos: str = "", eos: str = "") -> dict[str, Any]:
    """The prompt llama-server's ``/apply-template`` gives for ``messages`` with its defaults (a final assistant
    message continued): ``{"prompt"}`` or ``{"error"}``."""
    lib = _lib()
    p = lib.autoparser_apply_shim(template.encode(), bos.encode(), eos.encode(), json.dumps(messages).encode())
    return json_answer(lib, "autoparser_free", p)


def analyze_all(template: str, bos: str = "", eos: str = "") -> dict[str, Any]:
    """The whole analysis of ``autoparser::analyze_template``: ``reasoning``, ``content``, ``format``, ``function``,
    ``arguments``, ``call_id`` (each a dict of the C++ fields), ``user_start``, ``assistant_start``,
    ``preserved_tokens``, ``additional_stops``, ``supports_tool_calls``; or ``{"error"}``."""
    lib = _lib()
    return json_answer(lib, "autoparser_free", lib.autoparser_tools_shim(template.encode(), bos.encode(), eos.encode()))
