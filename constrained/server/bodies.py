"""Request bodies read and responses written as llama-server does: JSON parsed with nlohmann's error texts (a
malformed body is a 500 ``server_error``), bodies written by :mod:`.jsonout` with llama-server's content type,
errors as ``{"error": {"code", "message", "type"}}`` with their status.

Example:
    >>> json_response({"a": 1}).body, error_response(HttpError("no", "invalid_request_error")).status_code
    (b'{"a":1}', 400)
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .errors import HttpError
from .jsonout import dumps

__all__ = ["JSON_CT", "MAX_BODY_BYTES", "MAX_JSON_DEPTH", "error_response", "json_depth_exceeds",
           "json_response", "parse_json_body", "read_body", "read_raw", "too_large", "too_large_response"]

JSON_CT = "application/json; charset=utf-8"


def json_response(obj: Any, status: int = 200) -> Response:
    """``obj`` written by :func:`.jsonout.dumps` as llama-server writes JSON."""
    return Response(dumps(obj), status_code=status, media_type=JSON_CT)


def error_response(e: HttpError) -> Response:
    """llama-server's error body and status for ``e``."""
    return json_response(e.body(), e.status)


#: httplib's ``CPPHTTPLIB_PAYLOAD_MAX_LENGTH`` (llama-server sets no other): a larger body is 413
MAX_BODY_BYTES = 100 * 1024 * 1024
#: JSON bodies nested deeper than this are refused with a 400 (nlohmann parses any depth; Python's parser and
#: everything after it recurse)
MAX_JSON_DEPTH = 512
#: bodies at least this big are parsed in a worker thread (the event loop keeps serving)
_THREAD_PARSE = 256 * 1024


def too_large(limit: int) -> HttpError:
    """The error of a body above ``limit`` bytes (answered as :func:`too_large_response`)."""
    return HttpError(f"request body larger than {limit} bytes", "payload_too_large")


def too_large_response() -> Response:
    """httplib's answer to an oversized payload: status 413, empty body, ``Connection: close``."""
    return Response(b"", status_code=413, headers={"Connection": "close"})


def _line_col(raw: bytes, pos: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, pos) + 1
    col = pos - (raw.rfind(b"\n", 0, pos) + 1) + 1
    return line, col


def _parse_error_text(raw: bytes, err: json.JSONDecodeError) -> str:
    # nlohmann's parse_error.101 text, as close as Python's parser lets us: position is 1-based
    line, col = _line_col(raw, err.pos)
    last = raw[: err.pos + 1].decode("utf-8", "replace")
    if not raw.strip():
        return ("[json.exception.parse_error.101] parse error at line 1, column 1: attempting to parse an empty "
                "input; check that your input string or stream contains the expected JSON")
    return (f"[json.exception.parse_error.101] parse error at line {line}, column {col}: syntax error while "
            f"parsing value - invalid literal; last read: '{last}'")


# a JSON string or number token, or a NaN / Infinity / -Infinity literal (JSON has none of the three)
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|(NaN|-?Infinity)',
                    re.DOTALL)


class _NonFinite(Exception):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class _Overflow(Exception):
    pass


def _parse_float(text: str) -> float:
    # nlohmann: a number that does not fit a double is out_of_range.406
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise _Overflow(text)
    return v


def _parse_int(text: str) -> int | float:
    # nlohmann keeps integers in int64 / uint64; beyond, the text is read as a double
    v = int(text)
    if -(1 << 63) <= v < (1 << 64):
        return v
    return _parse_float(text)


def _non_finite_text(raw: bytes) -> str:
    """nlohmann's error for the first ``NaN`` / ``Infinity`` literal: column of its first character read, and
    ``last read`` from the start of the last string or number token (the lexer resets only there)."""
    tok_start = 0
    for m in _TOKEN.finditer(raw):
        if m.group(1) is None:
            tok_start = m.start()
            continue
        if m.group(1).startswith(b"-"):       # '-' starts a number: "expected digit after '-'"
            p = m.start() + 1
            line, col = _line_col(raw, p)
            return (f"[json.exception.parse_error.101] parse error at line {line}, column {col}: syntax error while "
                    "parsing value - invalid number; expected digit after '-'; last read: '-I'")
        p = m.start()
        line, col = _line_col(raw, p)
        last = raw[tok_start: p + 1].decode("utf-8", "replace")
        return (f"[json.exception.parse_error.101] parse error at line {line}, column {col}: syntax error while "
                f"parsing value - invalid literal; last read: '{last}'")
    return "[json.exception.parse_error.101] parse error: syntax error while parsing value - invalid literal"


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the (valid) JSON text ``raw`` nests arrays and objects deeper than ``limit``; linear, C speed.

    Example:
        >>> json_depth_exceeds(b'[[["]]]]]]"]]]', 3), json_depth_exceeds(b"[[[[1]]]]", 3)
        (False, True)
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    import numpy as np

    text = _STRING.sub(b'""', raw)
    a = np.frombuffer(text, dtype=np.uint8)
    depth = 0
    step = 1 << 22
    for i in range(0, len(a), step):
        c = a[i:i + step]
        d = ((c == 0x5B) | (c == 0x7B)).astype(np.int32) - ((c == 0x5D) | (c == 0x7D)).astype(np.int32)
        run = np.cumsum(d) + depth
        if run.size and int(run.max()) > limit:
            return True
        depth = int(run[-1]) if run.size else depth
    return False


def parse_json_body(raw: bytes, limit_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json::parse`` of a request body as llama-server answers it: malformed JSON (``NaN`` and ``Infinity``
    included) is a 500 ``server_error`` with nlohmann's text; nesting deeper than ``limit_depth`` is a 400.

    Example:
        >>> parse_json_body(b'{"a": [1, 2]}')
        {'a': [1, 2]}
    """
    try:
        data = json.loads(raw, parse_constant=_refuse_constant, parse_float=_parse_float, parse_int=_parse_int)
    except _NonFinite:
        raise HttpError(_non_finite_text(raw), "server_error") from None
    except _Overflow as e:
        raise HttpError(f"[json.exception.out_of_range.406] number overflow parsing '{e}'", "server_error") from None
    except json.JSONDecodeError as e:
        raise HttpError(_parse_error_text(raw, e), "server_error") from None
    except UnicodeDecodeError:
        raise HttpError("[json.exception.parse_error.101] parse error: invalid UTF-8", "server_error") from None
    except RecursionError:
        raise HttpError(f"request body nested too deeply: more than {limit_depth} levels of arrays and objects",
                        "invalid_request_error") from None
    if json_depth_exceeds(raw, limit_depth):
        raise HttpError(f"request body nested too deeply: more than {limit_depth} levels of arrays and objects",
                        "invalid_request_error")
    return data


async def read_raw(request: Request, limit: int | None = None) -> bytes:
    """The body's bytes, refused (:func:`too_large`) as soon as it passes ``limit`` bytes: at once from
    ``Content-Length``, else while it streams in (chunked bodies)."""
    limit = MAX_BODY_BYTES if limit is None else limit
    cached = getattr(request, "_body", None)
    if cached is not None:
        return cached
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and limit > 0 and int(cl) > limit:
        raise too_large(limit)
    chunks: list[bytes] = []
    n = 0
    async for chunk in request.stream():
        n += len(chunk)
        if limit > 0 and n > limit:
            raise too_large(limit)
        chunks.append(chunk)
    raw = b"".join(chunks)
    request._body = raw  # type: ignore[attr-defined]
    return raw


async def read_body(request: Request, limit: int | None = None) -> Any:
    """The request's JSON body (:func:`parse_json_body`; ``limit``: :func:`read_raw`'s), big bodies parsed off
    the event loop."""
    raw = await read_raw(request, limit)
    if len(raw) >= _THREAD_PARSE:
        import asyncio

        return await asyncio.to_thread(parse_json_body, raw)
    return parse_json_body(raw)
