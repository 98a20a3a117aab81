"""Vertex AI's custom-container predict route, as llama-server serves it with ``AIP_MODE=PREDICTION``
(tools/server/server-http.cpp:84-109, 775-938).

``POST $AIP_PREDICT_ROUTE`` (default ``/predict``) takes ``{"instances": [...]}`` (at most 128); each instance names
a route in ``@requestFormat``, as a path (``/v1/chat/completions``) or its camelCase alias (``chatCompletions``:
the path without ``/v1`` and the leading ``/``, each ``/``, ``-`` or ``_`` capitalising the next letter), and is sent
to that route without ``@requestFormat`` and with ``stream`` forced off; the answer is
``{"predictions": [...]}``, one body per instance in order (an error body where that route failed).
``AIP_HEALTH_ROUTE`` adds a GET alias of ``/health``; ``AIP_HTTP_PORT`` overrides ``--port``.

Example:
    >>> gcp_alias("/v1/chat/completions"), gcp_alias("/apply-template"), gcp_alias("/slots/{id_slot}")
    ('chatCompletions', 'applyTemplate', 'slots')
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .bodies import json_response

__all__ = ["gcp_alias", "gcp_enabled", "gcp_routes", "predict_handler"]

MAX_INSTANCES = 128


def gcp_enabled() -> bool:
    """``AIP_MODE=PREDICTION`` in the environment."""
    return os.environ.get("AIP_MODE", "") == "PREDICTION"


def _env_path(name: str, default: str) -> str:
    v = os.environ.get(name) or default
    return v if not v or v.startswith("/") else "/" + v


def gcp_routes() -> tuple[str, str]:
    """(predict path, health path or "")."""
    return _env_path("AIP_PREDICT_ROUTE", "/predict"), _env_path("AIP_HEALTH_ROUTE", "")


def gcp_port(default: int) -> int:
    """``AIP_HTTP_PORT`` when the predict mode is on, else ``default``."""
    return int(os.environ.get("AIP_HTTP_PORT") or 8080) if gcp_enabled() else default


def gcp_alias(path: str) -> str:
    """``path_to_gcp_format``: ``/v1/chat/completions`` -> ``chatCompletions`` (stops at a path parameter)."""
    s = path[3:] if len(path) > 3 and path.startswith("/v1") else path
    s = s[1:] if s.startswith("/") else s
    out, cap = [], False
    for c in s:
        if c in ":{":
            break
        if c in "/-_":
            cap = True
        else:
            out.append(c.upper() if cap else c)
            cap = False
    return "".join(out)


def _error(message: str, kind: str) -> dict[str, Any]:
    code = 400 if kind == "invalid_request_error" else 500
    return {"error": {"code": code, "message": message, "type": kind}}


def predict_handler(inner: Any, post_paths: list[str]) -> Any:
    """The ``/predict`` handler dispatching to ``inner`` (the routes' ASGI app) for the POST routes ``post_paths``
    (of two paths with the same alias the ``/v1`` one wins, as the real build answers ``completions`` with
    ``/v1/completions``: llama-server keeps the first its unordered map yields)."""
    aliases: dict[str, str] = {}
    for p in sorted(post_paths, key=lambda p: not p.startswith("/v1/")):
        aliases.setdefault(gcp_alias(p), p)

    async def call(request: Request, path: str, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload).encode()
        scope = dict(request.scope)
        scope.update({"path": path, "raw_path": path.encode(), "query_string": b"", "method": "POST"})
        sent = False
        status = 200
        chunks: list[bytes] = []
        stream = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(msg: dict[str, Any]) -> None:
            nonlocal status, stream
            if msg["type"] == "http.response.start":
                status = msg["status"]
                for k, v in msg.get("headers", []):
                    if k.lower() == b"content-type" and v.startswith(b"text/event-stream"):
                        stream = True
            elif msg["type"] == "http.response.body":
                chunks.append(msg.get("body", b""))

        await inner(scope, receive, send)
        if stream:
            return _error("predict route does not support streaming responses", "invalid_request_error")
        data = b"".join(chunks)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    async def one(request: Request, inst: Any) -> Any:
        if not isinstance(inst, dict):
            return _error("each instance must be a JSON object", "invalid_request_error")
        fmt = inst.get("@requestFormat")
        if not isinstance(fmt, str):
            return _error("each instance must include a string @requestFormat", "invalid_request_error")
        payload = {k: v for k, v in inst.items() if k != "@requestFormat"}
        if "stream" in payload:
            payload["stream"] = False
        path = aliases.get(fmt) or (fmt if fmt in post_paths else None)
        if path is None:
            return _error(f"no handler registered for @requestFormat: {fmt}", "invalid_request_error")
        return await call(request, path, payload)

    async def handler(request: Request) -> Response:
        raw = await request.body()
        try:
            data = json.loads(raw)
        except ValueError as e:
            return json_response(_error(str(e), "invalid_request_error"), 400)
        if not isinstance(data, dict):
            return json_response(_error("request body must be a JSON object", "invalid_request_error"), 400)
        inst = data.get("instances")
        if not isinstance(inst, list):
            return json_response(_error("request body must include an array field named instances",
                                        "invalid_request_error"), 400)
        if len(inst) > MAX_INSTANCES:
            return json_response(_error(f"instances array exceeds maximum size of {MAX_INSTANCES}",
                                        "invalid_request_error"), 400)
        preds = await asyncio.gather(*(one(request, i) for i in inst))
        return json_response({"predictions": list(preds)})

    return handler
