"""llama.cpp's chat-template rendering through a C++ shim (``render_shim.cpp``, built by
:func:`tests.oracle.cxx.build_shim`): one template rendered by llama.cpp's jinja engine with exactly the given inputs
(:func:`render`), and the prompt llama-server builds for a chat request with tools (:func:`chat_apply`)."""

from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from tests.oracle.cxx import build_shim


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = build_shim(Path(__file__).with_name("render_shim.cpp"))
    for name in ("render_shim", "chat_apply_shim"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_char_p] * 4
        fn.restype = ctypes.c_void_p
    lib.render_free.argtypes = [ctypes.c_void_p]
    return lib


def _call(name: str, template: str, bos: str, eos: str, payload: dict[str, Any]) -> dict[str, Any]:
    lib = _lib()
    p = getattr(lib, name)(template.encode(), bos.encode(), eos.encode(), json.dumps(payload).encode())
    try:
        return json.loads(ctypes.string_at(p).decode("utf-8"))
    finally:
        lib.render_free(p)


def render(template: str, inputs: dict[str, Any], bos: str = "", eos: str = "") -> dict[str, Any]:
    """``common_chat_template_direct_apply`` with ``inputs`` (``messages``, ``tools``, ``add_generation_prompt``,
    ``enable_thinking``, ``extra_context``) as given: ``{"prompt"}`` or ``{"error"}``."""
    return _call("render_shim", template, bos, eos, inputs)


def chat_apply(template: str, body: dict[str, Any], bos: str = "", eos: str = "") -> dict[str, Any]:
    """The prompt llama-server's chat route builds for ``body`` (``messages``, ``tools``, ``tool_choice``,
    ``parallel_tool_calls``) with its defaults: ``{"prompt"}`` or ``{"error"}``."""
    return _call("chat_apply_shim", template, bos, eos, body)
