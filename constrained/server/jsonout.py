"""JSON and SSE bytes as llama-server writes them (``safe_json_to_str``: ``ordered_json::dump(-1)``).

Compact separators, keys in insertion order, UTF-8 written raw, and ``inf``/``-inf``/``nan`` written as ``null``
(nlohmann's serializer; ``test_ignore_eos.py`` relies on ``"bias": null``). Python's ``repr(float)`` and nlohmann's
grisu2 both print the shortest round-trip text, with the same switch to exponent notation.

Example:
    >>> dumps({"b": 1, "a": [float("-inf"), 0.5, "é"]})
    b'{"b":1,"a":[null,0.5,"\\xc3\\xa9"]}'
    >>> sse({"x": 1})
    b'data: {"x":1}\\n\\n'
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["DONE", "PING", "SSE_HEADERS", "dumps", "sse"]

DONE = b"data: [DONE]\n\n"
PING = b":\n\n"
#: the headers of an SSE answer: llama-server's content type (no charset), nginx told not to buffer
SSE_HEADERS = {"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}


def _finite(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def dumps(obj: Any) -> bytes:
    """The compact JSON text llama-server sends, as UTF-8 bytes."""
    try:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:       # lone surrogates (a "\\ud800" escape in model text): U+FFFD, as nlohmann's
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")


def sse(obj: Any) -> bytes:
    """One server-sent event: ``data: <json>\\n\\n`` (no ``event:``/``id:`` lines, as llama-server)."""
    return b"data: " + dumps(obj) + b"\n\n"
