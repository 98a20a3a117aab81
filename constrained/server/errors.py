"""llama-server's error responses: ``format_error_response`` (server-common.cpp) and the HTTP middleware's bodies.

Example:
    >>> e = HttpError("bad", "invalid_request_error")
    >>> e.status, e.body()
    (400, {'error': {'code': 400, 'message': 'bad', 'type': 'invalid_request_error'}})
"""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR_STATUS", "HttpError", "middleware_error"]

# error_type -> (type string, HTTP status), as format_error_response
ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "server_error": 500,
    "not_supported_error": 501,
    "unavailable_error": 503,
    "exceed_context_size_error": 400,
    "payload_too_large": 413,              # httplib's own answer (no body): see bodies.too_large_response
}


class HttpError(Exception):
    """An error answered as llama-server answers it: ``{"error": {"code", "message", "type"[, extra]}}``."""

    def __init__(self, message: str, type: str = "invalid_request_error", **extra: Any) -> None:  # noqa: A002
        super().__init__(message)
        self.message = message
        self.type = type
        self.status = ERROR_STATUS[type]
        self.extra = extra

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.status, "message": self.message, "type": self.type}
        err.update(self.extra)     # exceed_context_size_error: n_prompt_tokens, n_ctx
        return {"error": err}


def middleware_error(message: str, type: str, status: int) -> dict[str, Any]:  # noqa: A002
    """The bodies of server-http.cpp's middlewares (404, 401, 503), which put ``message`` first."""
    return {"error": {"message": message, "type": type, "code": status}}
