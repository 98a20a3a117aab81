"""Reading the Anthropic Messages and OpenAI Responses answers of both servers for comparison: SSE streams with
``event:`` lines, and bodies with their random ids replaced by placeholders (numbered in order of appearance, so
the same id used twice must be the same on both sides)."""

from __future__ import annotations

import json
from typing import Any

ID_KEYS = {"id", "item_id", "call_id"}
# ours adds these to the Responses stream events (the OpenAI SDK's stream helper needs them); llama-server has none
RESPONSES_EXTRA = {"sequence_number", "output_index", "content_index"}
DROP = {"created", "created_at", "completed_at", "timings", "time_ms", "id_task", "media_marker"}


def sse_events(payload: bytes) -> list[Any]:
    """``(event name or None, data)`` per SSE block (``[DONE]`` as the string, pings as ``":"``)."""
    out: list[Any] = []
    for block in payload.split(b"\n\n"):
        if not block:
            continue
        if block == b":":
            out.append(":")
            continue
        name = None
        data = None
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[len(b"event: "):].decode()
            elif line.startswith(b"data: "):
                d = line[len(b"data: "):]
                data = "[DONE]" if d == b"[DONE]" else json.loads(d)
            else:
                raise AssertionError(f"not an SSE line: {line[:80]!r}")
        out.append((name, data))
    return out


def body_of(payload: bytes, headers: dict[str, str]) -> Any:
    if headers.get("content-type", "").startswith("text/event-stream"):
        return sse_events(payload)
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode("utf-8", "replace")


def without_responses_extras(v: Any) -> Any:
    """A Responses event list without :data:`RESPONSES_EXTRA` (other values, and the entries' types, unchanged)."""
    if not isinstance(v, list):
        return v
    out = []
    for e in v:
        if (isinstance(e, (tuple, list)) and len(e) == 2 and isinstance(e[0], str)
                and e[0].startswith("response.") and isinstance(e[1], dict)):
            e = type(e)([e[0], {k: x for k, x in e[1].items() if k not in RESPONSES_EXTRA}])
        out.append(e)
    return out


def normalize_ids(v: Any) -> Any:
    """``v`` without timestamps and timings, every id replaced by ``<id N>`` (N: its rank of first appearance,
    after the ``resp_``/``msg_``/``fc_``/``call_``/``chatcmpl-`` prefix, which is kept)."""
    seen: dict[str, str] = {}

    def ident(x: str) -> str:
        prefix = ""
        for p in ("chatcmpl-", "resp_", "msg_", "rs_", "fc_", "call_"):
            if x.startswith(p):
                prefix, x = p, x[len(p):]
                break
        if x not in seen:
            seen[x] = f"<id {len(seen)}>"
        return prefix + seen[x]

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: (ident(w) if k in ID_KEYS and isinstance(w, str) else walk(w))
                    for k, w in x.items() if k not in DROP}
        if isinstance(x, (list, tuple)):
            return [walk(w) for w in x]
        return x

    return walk(v)
