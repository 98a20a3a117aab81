"""Request bodies read and responses written as llama-server does: JSON parsed with nlohmann's error texts (a
malformed body is a 500 ``server_error``), bodies written by :mod:`.jsonout` with llama-server's content type,
errors as ``{"error": {"code", "message", "type"}}`` with their status.

Example:
    >>> json_response({"a": 1}).body, error_response(HttpError("no", "invalid_request_error")).status_code
    (b'{"a":1}', 400)
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .errors import HttpError
from .jsonout import dumps

__all__ = ["JSON_CT", "error_response", "json_response", "read_body"]

JSON_CT = "application/json; charset=utf-8"


def json_response(obj: Any, status: int = 200) -> Response:
    """``obj`` written by :func:`.jsonout.dumps` as llama-server writes JSON."""
    return Response(dumps(obj), status_code=status, media_type=JSON_CT)


def error_response(e: HttpError) -> Response:
    """llama-server's error body and status for ``e``."""
    return json_response(e.body(), e.status)


def _parse_error_text(raw: bytes, err: json.JSONDecodeError) -> str:
    # nlohmann's parse_error.101 text, as close as Python's parser lets us: position is 1-based
    line = raw[: err.pos].count(b"\n") + 1
    col = err.pos - (raw.rfind(b"\n", 0, err.pos) + 1) + 1
    last = raw[: err.pos + 1].decode("utf-8", "replace")
    if not raw.strip():
        return ("[json.exception.parse_error.101] parse error at line 1, column 1: attempting to parse an empty "
                "input; check that your input string or stream contains the expected JSON")
    return (f"[json.exception.parse_error.101] parse error at line {line}, column {col}: syntax error while "
            f"parsing value - invalid literal; last read: '{last}'")


async def read_body(request: Request) -> Any:
    """The request's JSON body; malformed JSON is llama-server's 500 with nlohmann's parse-error text."""
    raw = await request.body()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HttpError(_parse_error_text(raw, e), "server_error") from None
    except UnicodeDecodeError:
        raise HttpError("[json.exception.parse_error.101] parse error: invalid UTF-8", "server_error") from None
    return data
