"""Lazy-grammar trigger patterns over real HTTP (issue 28, finding 7): where the trigger fires is llama-server's,
and a hostile pattern neither stalls the other clients nor costs more than linear work.

- The oracle: the real llama-server of the same commit and ours, greedy, the same prompt, a lazy grammar that
  forbids the letter ``e`` once triggered (``root ::= [^e]*``) and one trigger pattern per request. Once the
  trigger fires the text changes (no more ``e``), so the reply shows the token where it fired; where the replay
  holds an ``e`` llama-server throws (500 "Unexpected empty grammar stack") and ours refuses that token and redraws
  (the documented deviation), so those requests are compared as that.
- Hostile patterns (catastrophic for a backtracking engine) answer, while ``/health`` and a small request answer
  within ``FAIR_S``; a pattern only a backtracking engine can search exactly, beyond the budget, is a clear 400.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer

ARGS = ["-np", "4", "--jinja", "-t", "1", "-tb", "1", "-c", "4096"]
FAIR_S = 2.0        # the documented fairness bound (tests/server/test_server_attack.py)
BASE = {"prompt": "The capital of France is", "n_predict": 24, "temperature": 0}
PATTERNS = [r"\bthe\b", r"(\w+) (is)", r"[A-Z]\w*", r"(o)(u)?", r"\d", r"(is)\s", r"(,)", r"\.\s(\w+)",
            r"(\s\w)+ (\w)", r"(a|aa)+$", r">>>(?!all)|(\.)", r"(a+)+\s", r"(\w+\s?)+$", r"^ (P)"]


@pytest.fixture(scope="module")
def pair(default_model_path: str):
    args = ["-m", default_model_path, *ARGS]
    with ours(args) as o, LlamaServer(args) as r:
        yield o, r


def _post(srv: LlamaServer, body: Any, timeout: float = 120.0) -> tuple[int, Any]:
    st, _, payload = raw(srv, "POST", "/completion", body, timeout=timeout)
    return st, json.loads(payload)


def _lazy(pattern: str, grammar: str = "root ::= [^e]*", **kw: Any) -> dict[str, Any]:
    return {**BASE, "grammar": grammar, "grammar_lazy": True, "grammar_triggers": [{"type": 2, "value": pattern}],
            **kw}


def test_trigger_positions_as_llama_server(pair: tuple[LlamaServer, LlamaServer]) -> None:
    o, r = pair
    st_o, plain_o = _post(o, BASE)
    st_r, plain_r = _post(r, BASE)
    assert st_o == st_r == 200 and plain_o["content"] == plain_r["content"]
    plain = plain_o["content"]
    fired = same = threw = 0
    for p in PATTERNS:
        st_r, got_r = _post(r, _lazy(p))
        st_o, got_o = _post(o, _lazy(p))
        assert st_o == 200, (p, got_o)
        if st_r == 200:
            assert got_o["content"] == got_r["content"], (p, got_o["content"], got_r["content"])
            same += 1
            fired += got_r["content"] != plain
        else:   # llama-server threw on the replay; ours refused that token (the deviation)
            assert st_r == 500 and "empty grammar stack" in got_r["error"]["message"], (p, got_r)
            assert got_o["content"] != plain, p
            threw += 1
    assert same >= 6 and fired >= 3, (same, fired, threw)


HOSTILE = [r"(a+)+$", r"(\w+\s?)+$", r"(.*a){8}x", r"((ab|a)+)+c"]


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_trigger_answers_and_stalls_nobody(pair: tuple[LlamaServer, LlamaServer], pattern: str) -> None:
    o, _ = pair
    body = {**_lazy(pattern, 'root ::= "zzzq"'), "prompt": "Say aaaa aaaa aaaa aaaa aaaa:", "n_predict": 48}
    done = threading.Event()
    out: list[Any] = []

    def go() -> None:
        out.append(_post(o, body, timeout=300))
        done.set()

    th = threading.Thread(target=go)
    th.start()
    worst, n = 0.0, 0
    while not done.is_set() and n < 20:
        for path, b in (("/health", None), ("/tokenize", {"content": "hello"})):
            t0 = time.monotonic()
            st, _, _ = raw(o, "GET" if b is None else "POST", path, b, timeout=60)
            assert st == 200
            worst = max(worst, time.monotonic() - t0)
        n += 1
        time.sleep(0.05)
    th.join()
    assert out and out[0][0] == 200, out
    assert worst < FAIR_S, f"/health or a small request took {worst:.2f} s during a {pattern!r} trigger"


@pytest.mark.parametrize("pattern", [r"(a*)*$", r"(?=.*x).*y", r"x(a|)+y"])
def test_backtracking_only_pattern_beyond_the_budget_is_a_clear_400(pair: tuple[LlamaServer, LlamaServer],
                                                                   pattern: str) -> None:
    o, _ = pair
    st, got = _post(o, _lazy(pattern))
    assert st == 400 and got["error"]["type"] == "invalid_request_error", got
    msg = got["error"]["message"]
    assert msg.startswith("Failed to initialize samplers: trigger pattern") and "backtracking search" in msg, msg
    st, _, _ = raw(o, "GET", "/health", timeout=10)
    assert st == 200
