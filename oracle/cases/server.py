"""Starting ``constrained serve`` beside the real llama-server in tests, and reading their answers."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from oracle.llama_server import LlamaServer

ROOT = Path(__file__).resolve().parents[2]     # the repository (tests.server_suite.launcher lives there)


def launcher_binary() -> Path:
    """An executable that runs ``tests.server_suite.launcher`` with this interpreter (as ``llama-server``)."""
    tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]     # one per checkout: two trees never share it
    d = Path(tempfile.gettempdir()) / f"constrained-launcher-{os.getuid()}-{tag}"
    d.mkdir(exist_ok=True)
    p = d / "llama-server"
    # run in the caller's directory (llama-server's suite passes relative paths such as --chat-template-file
    # ../../../models/templates/x.jinja); -P: that directory is not put on sys.path
    text = (f"#!/bin/sh\nexport PYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            f"exec {sys.executable} -P -m tests.server_suite.launcher \"$@\"\n")
    if not p.exists() or p.read_text() != text:
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


def ours(args: list[str], timeout: float = 180.0) -> LlamaServer:
    """``constrained serve`` with ``args``, started like the real one (same class, our launcher as binary)."""
    return LlamaServer(args, timeout=timeout, binary=launcher_binary())


def raw(srv: LlamaServer, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
        timeout: float = 300.0) -> tuple[int, dict[str, str], bytes]:
    """One request; ``(status, headers, body bytes)`` (a ``bytes`` body is sent as is)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    h = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    payload = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, hd, payload


VOLATILE = {"created", "timings", "media_marker", "id_task", "time_ms"}


def normalize(v: Any) -> Any:
    """The body without what may differ between two runs: ids, timestamps, timings."""
    if isinstance(v, dict):
        return {k: normalize(x) for k, x in v.items()
                if k not in VOLATILE and not (k == "id" and isinstance(x, str) and x.startswith("chatcmpl-"))}
    if isinstance(v, list):
        return [normalize(x) for x in v]
    return v


def events(payload: bytes) -> list[Any]:
    """The SSE events of a stream (``[DONE]`` kept as the string ``"[DONE]"``, pings as ``":"``)."""
    out: list[Any] = []
    for block in payload.split(b"\n\n"):
        if not block:
            continue
        if block == b":":
            out.append(":")
            continue
        assert block.startswith(b"data: "), block[:80]
        d = block[len(b"data: "):]
        out.append("[DONE]" if d == b"[DONE]" else json.loads(d))
    return out


# the conversations of /apply-template comparisons (llama-server's own template tests, plus prefill and no
# generation prompt): recorded from the real binary by scripts/record_server_templates.py, replayed by
# tests/server/test_server_templates.py
TEMPLATE_TOOL = {"type": "function", "function": {"name": "test", "description": "",
                 "parameters": {"type": "object", "properties": {"success": {"type": "boolean", "const": True}},
                                "required": ["success"]}}}
TEMPLATE_CASES: dict[str, dict] = {
    "user": {"messages": [{"role": "user", "content": "What is today?"}]},
    "user-tools": {"messages": [{"role": "user", "content": "What is today?"}], "tools": [TEMPLATE_TOOL]},
    "multi-turn": {"messages": [{"role": "system", "content": "Book"},
                                {"role": "user", "content": "What is the best book"},
                                {"role": "assistant", "content": "Dune"},
                                {"role": "user", "content": "And the second?"}]},
    "prefill": {"messages": [{"role": "user", "content": "What is the best book"},
                             {"role": "assistant", "content": "Whill"}]},
    "no-generation-prompt": {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": False},
    # typed content parts (test_chat_completion's user_prompt with two text parts), normalised per template caps
    # an assistant prefill given as typed parts (test_chat_template_assistant_prefill's second case)
    "prefill-typed": {"messages": [{"role": "user", "content": "What is the best book"},
                                   {"role": "assistant", "content": [{"type": "text", "text": "Wh"},
                                                                     {"type": "text", "text": "ill"}]}]},
    "typed-content": {"messages": [{"role": "system", "content": "Book"},
                                   {"role": "user", "content": [{"type": "text", "text": "What is"},
                                                                {"type": "text", "text": "the best book"}]}]},
}
