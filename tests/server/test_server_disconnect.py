"""A streamed request whose client goes away before the first token, against the real llama-server: its task is
cancelled (``rd.next(should_stop)`` in ``handle_completions_impl``), the slot freed with only a few tokens decoded
(a task left running would decode thousands), and the next request served. Same flags and requests on both
servers, over real HTTP (a socket closed right after the request was sent, while the prompt is being read).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

N_PREDICT = 3000                       # far more than a cancelled task decodes (a continuing one: all of them)
PROMPT = "Once upon a time, " + "the cat sat on the mat and looked at the sky. " * 25      # ~300 tokens


def _send_and_close(srv: LlamaServer, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "127.0.0.1", "Content-Type": "application/json",
                                                  "Content-Length": str(len(data)), **headers}.items())
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + data)
    # closed: no byte of the answer was read


def _slot(srv: LlamaServer) -> dict[str, Any]:
    return json.loads(raw(srv, "GET", "/slots")[2])[0]


def _gone_before_first_token(srv: LlamaServer, path: str, body: dict[str, Any],
                             headers: dict[str, str]) -> list[Any]:
    _send_and_close(srv, path, body, headers)
    time.sleep(0.5)                        # the request has reached the server
    for _ in range(1200):                  # a guard only: a task left running holds the slot for N_PREDICT tokens
        slot = _slot(srv)
        if not slot["is_processing"]:
            break
        time.sleep(0.1)
    decoded = slot["next_token"][0]["n_decoded"]
    after = raw(srv, "POST", "/completion", {"prompt": "Hello", "n_predict": 2, "temperature": 0})
    return [slot["is_processing"], decoded if decoded >= 50 else "few", after[0]]


def _run(srv: LlamaServer) -> list[Any]:
    base = {"n_predict": N_PREDICT, "ignore_eos": True, "stream": True, "temperature": 0}
    out = [_gone_before_first_token(srv, "/completion", {**base, "prompt": PROMPT}, {}),
           _gone_before_first_token(srv, "/v1/chat/completions",
                                    {**base, "messages": [{"role": "user", "content": PROMPT}]}, {})]
    return out


def test_stream_cancelled_when_client_leaves_before_first_token(default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "4096", "-np", "1", "-t", "1", "--slots", "--no-cache-prompt"]
    with LlamaServer(args) as real:
        want = _run(real)
    with ours(args) as us:
        got = _run(us)
    assert want == [[False, "few", 200], [False, "few", 200]], want
    assert got == want
