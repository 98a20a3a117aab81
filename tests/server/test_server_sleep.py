"""Sleep on idle (``--sleep-idle-seconds``) against the real llama-server: both servers started with the same flags
go to sleep after a second without tasks (``/props`` says ``is_sleeping``), answer ``/health``, ``/props``,
``/v1/models`` and ``/metrics`` without waking (the metrics as they were), wake on any other route (``/tokenize``)
and then serve from a fresh context (the prompt computed again: ``cache_n`` 0), with the same bodies.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from oracle.cases.server import normalize, ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

REQ = {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0}


def _get(srv: LlamaServer, path: str) -> Any:
    s, _, p = raw(srv, "GET", path)
    return s, (json.loads(p) if path != "/metrics" else p.decode())


def _sleeping(srv: LlamaServer) -> bool:
    return _get(srv, "/props")[1]["is_sleeping"]


def _counters(text: str) -> dict[str, float]:
    keep = ("prompt_tokens_total", "tokens_predicted_total", "n_decode_total", "predicted_tokens_seconds")
    out = {}
    for ln in text.splitlines():
        if ln.startswith("llamacpp:") and ln.split(" ")[0][9:] in keep:
            out[ln.split(" ")[0][9:]] = float(ln.split(" ")[1]) if "seconds" not in ln.split(" ")[0] \
                else float(ln.split(" ")[1]) > 0
    return out


def _cmpl(srv: LlamaServer) -> Any:
    s, _, p = raw(srv, "POST", "/completion", REQ)
    d = json.loads(p)
    return s, d["content"], d["timings"]["cache_n"], d["timings"]["prompt_n"]


def _run(srv: LlamaServer) -> list[Any]:
    out: list[Any] = [("first", _cmpl(srv)), ("again", _cmpl(srv))]         # the second reuses the cache
    _get(srv, "/metrics")
    awake = _get(srv, "/metrics")[1]
    for _ in range(200):
        if _sleeping(srv):
            break
        time.sleep(0.1)
    s, props = _get(srv, "/props")
    out.append(("props", s, props["is_sleeping"], normalize({k: v for k, v in props.items()
                                                              if k not in ("model_path", "build_info")})))
    out.append(("health", _get(srv, "/health")))
    s, m = _get(srv, "/v1/models")
    out.append(("models", s, [x["id"] for x in m["data"]]))
    asleep = _get(srv, "/metrics")[1]
    out.append(("metrics", asleep == awake, _counters(asleep), _sleeping(srv)))
    s, _, p = raw(srv, "POST", "/tokenize", {"content": "Hello"})
    out.append(("tokenize", s, json.loads(p), _sleeping(srv)))
    out.append(("after", _cmpl(srv)))                                        # a fresh context: cache_n 0
    return out


def test_sleep_on_idle_as_llama_server(default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "1024", "-np", "1", "-t", "1", "--metrics",
            "--sleep-idle-seconds", "1"]
    with LlamaServer(args) as real:
        want = _run(real)
    with ours(args) as us:
        got = _run(us)
    assert want[1][1][2] > 0 and want[-1][1][2] == 0, want       # the cache was there, and gone after sleeping
    assert want[2][2] is True and want[5][1] is True and want[5][3] is True and want[6][3] is False, want
    for w, g in zip(want, got, strict=True):
        assert g == w, w[0]


def test_sleep_seconds_flag_checked() -> None:
    from constrained.errors import FlagError
    from constrained.llama.flags import parse_server_args

    assert parse_server_args(["--sleep-idle-seconds", "5"]).sleep_idle_seconds == 5
    assert parse_server_args([]).sleep_idle_seconds == -1
    for bad in ("0", "-2"):
        with pytest.raises(FlagError, match="cannot be 0 or less than -1"):
            parse_server_args(["--sleep-idle-seconds", bad])
