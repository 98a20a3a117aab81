"""llama.cpp's chat-template rendering through a C++ shim (``render_shim.cpp``, built by
:func:`oracle.cxx.build_shim`): one template rendered by llama.cpp's jinja engine with exactly the given inputs
(:func:`render`), the prompt llama-server builds for a chat request with tools (:func:`chat_apply`), and its
reply parser's messages (:func:`chat_parse_body`)."""

from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from oracle.cxx import build_shim, json_answer


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = build_shim(Path(__file__).resolve().parent / "shims" / "render_shim.cpp")
    for name in ("render_shim", "chat_apply_shim"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_char_p] * 4
        fn.restype = ctypes.c_void_p
    lib.chat_apply_model_shim.argtypes = [ctypes.c_char_p] * 2
    lib.chat_apply_model_shim.restype = ctypes.c_void_p
    lib.chat_parse_body_shim.argtypes = [ctypes.c_char_p] * 3
    lib.chat_parse_body_shim.restype = ctypes.c_void_p
    lib.render_free.argtypes = [ctypes.c_void_p]
    return lib


def _call(name: str, *args: str) -> Any:
    """The shim function ``name`` on the UTF-8 texts ``args``: its JSON answer (the buffer freed)."""
    lib = _lib()
    return json_answer(lib, "render_free", getattr(lib, name)(*(a.encode() for a in args)))


def render(template: str, inputs: dict[str, Any], bos: str = "", eos: str = "") -> dict[str, Any]:
    """``common_chat_template_direct_apply`` with ``inputs`` (``messages``, ``tools``, ``add_generation_prompt``,
    ``enable_thinking``, ``extra_context``) as given: ``{"prompt"}`` or ``{"error"}``."""
    return _call("render_shim", template, bos, eos, json.dumps(inputs))


def chat_apply(template: str, body: dict[str, Any], bos: str = "", eos: str = "") -> dict[str, Any]:
    """The prompt llama-server's chat route builds for ``body`` (``messages``, ``tools``, ``tool_choice``,
    ``parallel_tool_calls``, ``json_schema``) with its defaults: ``{"prompt", "thinking_start_tag",
    "thinking_end_tags", "generation_prompt", "grammar", "grammar_lazy", "preserved_tokens", "grammar_triggers"}``
    (``[{"type", "value"}]``) or ``{"error"}``."""
    return _call("chat_apply_shim", template, bos, eos, json.dumps(body))


def chat_parse_body(template: str, body: dict[str, Any], texts: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    """``common_chat_parse`` of each ``(text, is_partial)`` with the parser llama-server builds for ``body`` (also
    ``chat_template_kwargs.enable_thinking``, ``reasoning_format``): ``{"ok": True, "msg"}`` or ``{"ok": False,
    "error"}`` each (a setup error is raised as RuntimeError)."""
    out = _call("chat_parse_body_shim", template, json.dumps(body), json.dumps([[t, bool(b)] for t, b in texts]))
    if isinstance(out, dict):
        raise RuntimeError(out["error"])
    return out


def chat_apply_model(gguf_path: str, body: dict[str, Any]) -> dict[str, Any]:
    """:func:`chat_apply` with the templates of a GGUF (its default and ``tool_use`` templates, BOS/EOS texts):
    ``{"prompt"}`` or ``{"error"}``."""
    return _call("chat_apply_model_shim", gguf_path, json.dumps(body))


def parsed_message(parse: Any, gen: str, text: str, partial: bool) -> dict[str, Any]:
    """Our PEG reply parse (``parse(gen, text, is_partial=...)``) in :func:`chat_parse_body`'s shape: ``{"ok": True,
    "msg"}`` (role, content, reasoning, calls with their ids) or ``{"ok": False}`` where the parser fails."""
    from constrained.chat.peg import PegFail

    try:
        m = parse(gen, text, is_partial=partial)
    except PegFail:
        return {"ok": False}
    out: dict[str, Any] = {"role": "assistant", "content": m.content}
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}, **({"id": i} if i else {})}
                             for n, a, i in m.tool_calls]
    return {"ok": True, "msg": out}
