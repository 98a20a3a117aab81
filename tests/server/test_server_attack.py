"""``constrained serve`` under hostile and heavy requests (issue 28), over real HTTP with ``-np 4``, the real
llama-server of the same commit beside it where it behaves.

Each test is a finding of the hostile-client round and variants of it: a task whose set-up fails (a trigger pattern
nested past the recursion limit) or whose sampling fails mid-generation (the empty-trigger lazy grammar) answers
that request alone while other streams complete; out-of-range ``id_slot``; body size, JSON parse errors and
nesting; DRY breaker lists (cached, bounded, capped); liveness of ``/health`` and small requests during heavy ones
(the bound: ``FAIR_S``); a memory soak of mixed hostile requests; graceful SIGTERM.

Wall-clock ceilings here are liveness bounds (generous: the machine is shared), never performance claims.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any

import pytest

from oracle.cases.server import events, ours, raw
from oracle.llama_server import LlamaServer, rss_kb

ARGS = ["-np", "4", "--jinja", "-t", "1", "-tb", "1", "-c", "4096"]
#: the documented fairness bound: /health and a small request answer within this many seconds while a heavy
#: request (a 20,000-message chat body, a 2,000-breaker DRY list refused, a 60k-token-ish prompt) is in flight
FAIR_S = 2.0


def _args(model: str) -> list[str]:
    return ["-m", model, *ARGS]


@pytest.fixture(scope="module")
def srv(default_model_path: str):
    with ours(_args(default_model_path)) as s:
        yield s


@pytest.fixture(scope="module")
def real(default_model_path: str):
    with LlamaServer(_args(default_model_path)) as s:
        yield s


def _server_pid(srv: LlamaServer) -> int:
    assert srv.proc is not None
    # our launcher execs python: the Popen pid is the server
    return srv.proc.pid


def _post(srv: LlamaServer, path: str, body: Any, timeout: float = 120.0) -> tuple[int, Any]:
    st, _, payload = raw(srv, "POST", path, body, timeout=timeout)
    try:
        return st, json.loads(payload)
    except ValueError:
        return st, payload


def _healthy(srv: LlamaServer) -> None:
    st, _, body = raw(srv, "GET", "/health", timeout=10)
    assert (st, json.loads(body)) == (200, {"status": "ok"})
    st, r = _post(srv, "/completion", {"prompt": "Hello", "n_predict": 3, "temperature": 0})
    assert st == 200 and r["tokens_predicted"] >= 1, r


def _deep(n: int) -> str:
    return "(" * n + "a" + ")" * n


def _lazy(trigger: dict[str, Any], grammar: str = 'root ::= "a"', **kw: Any) -> dict[str, Any]:
    return {"prompt": "hi", "n_predict": 4, "grammar": grammar, "grammar_lazy": True, "grammar_triggers": [trigger],
            **kw}


# ------------------------------------------------------------------ finding 1: set-up failures answer alone
@pytest.mark.parametrize("depth", [260, 1200, 5000])
def test_deep_trigger_pattern_fails_that_request_alone(srv: LlamaServer, depth: int) -> None:
    t0 = time.monotonic()
    st, r = _post(srv, "/completion", _lazy({"type": 2, "value": _deep(depth)}), timeout=60)
    assert time.monotonic() - t0 < 30
    assert st in (400, 500), r
    assert "recursion" not in json.dumps(r).lower() or "nested" in json.dumps(r).lower()
    _healthy(srv)


@pytest.mark.parametrize("trigger", [
    {"type": 3, "value": _deep(400)},                          # a full pattern, anchored
    {"type": 2, "value": "(" * 300},                            # unbalanced, deep
    {"type": 2, "value": "[" + "a" * 10 + "]" * 3 + "{99999999999}"},
    {"type": 0, "value": "x", "token": 2 ** 40},                # a token id far out of range
    {"type": 1, "value": "a" * 1_000_000},                      # a 1 MB trigger word
])
def test_setup_failure_variants_keep_serving(srv: LlamaServer, trigger: dict[str, Any]) -> None:
    st, r = _post(srv, "/completion", _lazy(trigger), timeout=120)
    assert st in (200, 400, 500), r
    _healthy(srv)


def test_deep_trigger_as_llama_server(srv: LlamaServer, real: LlamaServer) -> None:
    # llama-server compiles a 260-deep pattern; what it answers then depends on the text generated (seed 1: no "a",
    # the grammar never triggers, 200; seeds 0, 3, 4, 5: a 500 "Unexpected empty grammar stack"); ours refuses the
    # pattern up front (a documented deviation); neither hangs and both keep serving
    body = _lazy({"type": 2, "value": _deep(260)}, seed=1)
    st_real, _ = _post(real, "/completion", body, timeout=60)
    st_ours, _ = _post(srv, "/completion", body, timeout=60)
    assert st_real == 200 and st_ours >= 400
    _healthy(real)
    _healthy(srv)


# ------------------------------------------------------------------ finding 2: one failing slot fails alone
def _one_bad_among_three(s: LlamaServer, bad: dict[str, Any]) -> tuple[dict[int, tuple], tuple]:
    res: dict[int, tuple] = {}

    def go(i: int, body: dict[str, Any]) -> None:
        try:
            res[i] = raw(s, "POST", "/completion", body, timeout=180)
        except OSError as e:
            res[i] = ("EXC", {}, repr(e).encode())

    good = {"prompt": "Once upon a time", "n_predict": 48, "stream": True, "temperature": 0}
    ths = [threading.Thread(target=go, args=(i, good)) for i in range(3)]
    for t in ths:
        t.start()
    time.sleep(0.3)
    tb = threading.Thread(target=go, args=(9, bad))
    tb.start()
    for t in [*ths, tb]:
        t.join()
    return {i: res[i] for i in range(3)}, res[9]


def _stream_ok(r: tuple) -> bool:
    st, _, payload = r
    if st != 200:
        return False
    evs = [e for e in events(payload) if isinstance(e, dict)]
    return bool(evs) and not any("error" in e for e in evs) and evs[-1].get("stop") is True


def _failed(r: tuple) -> bool:
    st, _, payload = r
    if st >= 400:
        return True
    return any(isinstance(e, dict) and "error" in e for e in events(payload)) if payload.startswith(b"data:") \
        else b"error" in payload


EMPTY_TRIGGER = {"prompt": "Write a story:", "n_predict": 8, "grammar": 'root ::= "zzzq"', "grammar_lazy": True,
                 "grammar_triggers": [{"type": 2, "value": ""}], "temperature": 0}


@pytest.mark.parametrize("bad", [
    EMPTY_TRIGGER,
    {**EMPTY_TRIGGER, "stream": True},
    {**EMPTY_TRIGGER, "grammar_triggers": [{"type": 3, "value": ".*"}]},
])
def test_failing_slot_fails_alone(srv: LlamaServer, bad: dict[str, Any]) -> None:
    goods, b = _one_bad_among_three(srv, bad)
    for i, g in goods.items():
        assert _stream_ok(g), (i, g[0], g[2][-300:])
    # ours refuses the grammar-rejected trigger token (the redraw), so the bad request may even succeed; either way
    # it is answered and nobody else is touched
    assert b[0] in (200, 500), b
    _healthy(srv)


def test_failing_slot_fails_alone_in_llama_server(real: LlamaServer) -> None:
    # the README correction: llama-server fails only the offending slot (server-context.cpp iterate()'s catch)
    goods, b = _one_bad_among_three(real, EMPTY_TRIGGER)
    assert _failed(b), b
    for i, g in goods.items():
        assert _stream_ok(g), (i, g[0], g[2][-300:])


def test_model_thread_death_is_503() -> None:
    # white-box: a loop that dies (a bug the guards missed) answers everything waiting and turns /health to 503
    from constrained.server.engine import Engine
    from constrained.server.errors import HttpError

    eng = Engine.__new__(Engine)
    got: list[Any] = []

    class T:
        def emit(self, ev: Any) -> None:
            got.append(ev)

    import queue as q

    eng.slots = []
    eng._deferred = [T()]
    eng._queue = q.Queue()
    eng._queue.put(T())
    eng._stop = False
    eng.fatal = ""

    def boom() -> None:
        raise RuntimeError("boom")

    eng._loop = boom  # type: ignore[method-assign]
    eng._thread = threading.Thread(target=eng._run)
    eng._thread.start()
    eng._thread.join()
    assert not eng.alive() and "boom" in eng.fatal
    assert len(got) == 2 and all(isinstance(e, HttpError) and e.status == 500 for e in got)
    late: list[Any] = []

    class L:
        def emit(self, ev: Any) -> None:
            late.append(ev)

    eng.submit(L())  # type: ignore[arg-type]
    assert late and late[0].status == 503


# ------------------------------------------------------------------ finding 6: id_slot out of range
@pytest.mark.parametrize("id_slot", [99, -5, 2 ** 40, 7, -2 ** 63, True, 1.7, 4])
def test_id_slot_out_of_range_as_llama_server(srv: LlamaServer, real: LlamaServer, id_slot: Any) -> None:
    body = {"prompt": "hi", "n_predict": 2, "id_slot": id_slot, "temperature": 0}
    st_r, r = _post(real, "/completion", body, timeout=30)
    st_o, o = _post(srv, "/completion", body, timeout=30)
    assert st_r == st_o == 200, (r, o)
    assert o["id_slot"] == r["id_slot"]
    assert o["tokens"] == r["tokens"] if "tokens" in r else o["content"] == r["content"]


# ------------------------------------------------------------------ findings 3, 9: bodies
PARSE_CASES: list[tuple[str, str, str, bytes | None]] = [
    ("nan", "POST", "/completion", b'{"prompt":"hi","n_predict":1,"temperature":NaN}'),
    ("inf", "POST", "/completion", b'{"prompt":"hi","n_predict":1,"temperature":Infinity}'),
    ("ninf", "POST", "/completion", b'{"prompt":"hi","n_predict":1,"temperature":-Infinity}'),
    ("nan-array", "POST", "/completion", b'{"prompt":[1,NaN],"n_predict":1}'),
    ("nan-chat", "POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"hi"}],"seed":NaN}'),
    ("list", "POST", "/completion", b"[1,2]"),
    ("null", "POST", "/completion", b"null"),
    ("number", "POST", "/completion", b"5"),
    ("string", "POST", "/completion", b'"x"'),
    ("oai-null", "POST", "/v1/completions", b"null"),
    ("chat-list", "POST", "/v1/chat/completions", b"[1,2]"),
    ("chat-null", "POST", "/v1/chat/completions", b"null"),
    ("apply-null", "POST", "/apply-template", b"null"),
    ("schema-string", "POST", "/completion",
     json.dumps({"prompt": "hi", "n_predict": 1, "json_schema": '{"type":"integer"}'}).encode()),
    ("chat-schema-string", "POST", "/v1/chat/completions",
     json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                 "json_schema": '{"type":"integer"}'}).encode()),
    ("template-kwargs-messages", "POST", "/apply-template",
     json.dumps({"messages": [{"role": "user", "content": "hi"}],
                 "chat_template_kwargs": {"messages": [{"role": "user", "content": "other"}]}}).encode()),
    ("head-lora", "HEAD", "/lora-adapters", None),
    ("get-lora", "GET", "/lora-adapters", None),
    ("empty", "POST", "/completion", b""),
    ("big-number", "POST", "/completion", b'{"prompt":"hi","n_predict":1e999}'),
    ("big-negative", "POST", "/completion", b'{"prompt":"hi","n_predict":1,"x":[-1e999]}'),
    ("big-integer", "POST", "/completion", b'{"prompt":"hi","n_predict":1,"x":' + b"9" * 400 + b"}"),
]
EXACT = {"nan", "inf", "ninf", "nan-array", "nan-chat", "list", "null", "number", "string", "oai-null", "chat-list",
         "chat-null", "apply-null", "schema-string", "chat-schema-string", "template-kwargs-messages", "head-lora",
         "get-lora", "empty", "big-number", "big-negative", "big-integer"}


def _shape(st: int, payload: bytes) -> tuple[int, Any]:
    try:
        j = json.loads(payload)
    except ValueError:
        return st, payload
    if isinstance(j, dict) and "error" in j:
        return st, j["error"]
    if isinstance(j, dict) and "prompt" in j and len(j) == 1:
        return st, j
    return st, "ok"


@pytest.mark.parametrize("case", [c[0] for c in PARSE_CASES])
def test_body_parsing_as_llama_server(srv: LlamaServer, real: LlamaServer, case: str) -> None:
    _, method, path, body = next(c for c in PARSE_CASES if c[0] == case)
    a = _shape(*raw(real, method, path, body, timeout=60)[::2])
    b = _shape(*raw(srv, method, path, body, timeout=60)[::2])
    if case in EXACT:
        assert b == a
    else:
        assert b[0] == a[0] and (not isinstance(a[1], dict) or a[1].get("type") == b[1].get("type")), (a, b)


@pytest.mark.parametrize("depth", [600, 1000, 5000, 100_000])
@pytest.mark.parametrize("where", ["prompt", "unused", "schema"])
def test_deep_bodies_are_a_clear_400(srv: LlamaServer, depth: int, where: str) -> None:
    inner = b"[" * depth + b"]" * depth
    if where == "prompt":
        body = b'{"prompt":' + inner + b"}"
    elif where == "unused":
        body = b'{"prompt":"hi","n_predict":1,"x":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    else:
        body = b'{"prompt":"hi","n_predict":1,"json_schema":' + b'{"items":' * depth + b"{}" + b"}" * depth + b"}"
    st, _, payload = raw(srv, "POST", "/completion", body, timeout=60)
    err = json.loads(payload)["error"]
    assert st == 400 and err["type"] == "invalid_request_error", err
    assert "nested too deeply" in err["message"] and "recursion" not in err["message"]
    _healthy(srv)


def test_depth_under_the_limit_still_parses(srv: LlamaServer) -> None:
    body = b'{"prompt":"hi","n_predict":1,"x":' + b"[" * 400 + b"]" * 400 + b"}"
    st, _, payload = raw(srv, "POST", "/completion", body, timeout=60)
    assert st == 200, payload[:300]


def _send_big(port: int, n: int, *, chunked: bool = False, header_only: bool = False) -> tuple[bytes, float]:
    """Send an ``n``-byte /completion body (or only announce it); the response head and the time it took."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    t0 = time.monotonic()
    head = b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % n
    s.sendall(head)
    resp = b""
    if not header_only:
        chunk = b'{"prompt":"' + b"a" * (1 << 20)
        sent = 0
        try:
            while sent < n:
                part = chunk[: min(len(chunk), n - sent)]
                if chunked:
                    s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
                else:
                    s.sendall(part)
                sent += len(part)
        except OSError:
            pass                                  # the server answered and closed: fine
    try:
        resp = s.recv(65536)
    except OSError:
        pass
    dt = time.monotonic() - t0
    s.close()
    return resp, dt


def test_big_body_is_413_as_llama_server(srv: LlamaServer, real: LlamaServer) -> None:
    n = 101 * 1024 * 1024
    r_real, _ = _send_big(real.port, n)
    rss0 = rss_kb(_server_pid(srv))
    r_ours, dt = _send_big(srv.port, n)
    assert r_real.startswith(b"HTTP/1.1 413") and r_ours.startswith(b"HTTP/1.1 413"), (r_real[:200], r_ours[:200])
    assert b"content-length: 0" in r_ours.lower() and b"connection: close" in r_ours.lower()
    assert dt < 30
    assert rss_kb(_server_pid(srv)) - rss0 < 50_000        # refused from Content-Length: never read
    _healthy(srv)
    _healthy(real)


@pytest.mark.parametrize("size", [200 * 1024 * 1024, 2 ** 62])
def test_announced_big_body_refused_at_once(srv: LlamaServer, size: int) -> None:
    resp, dt = _send_big(srv.port, size, header_only=True)
    assert resp.startswith(b"HTTP/1.1 413") and dt < 10, resp[:200]
    _healthy(srv)


def test_chunked_big_body_refused_while_streaming(srv: LlamaServer) -> None:
    rss0 = rss_kb(_server_pid(srv))
    resp, _ = _send_big(srv.port, 120 * 1024 * 1024, chunked=True)
    assert resp.startswith(b"HTTP/1.1 413"), resp[:200]
    assert rss_kb(_server_pid(srv)) - rss0 < 250_000        # at most the limit held, then freed
    _healthy(srv)


def test_message_count_limit(srv: LlamaServer) -> None:
    body = {"messages": [{"role": "user", "content": "x"}] * 70_000, "max_tokens": 1}
    t0 = time.monotonic()
    st, r = _post(srv, "/v1/chat/completions", body, timeout=60)
    assert st == 400 and "too many messages" in r["error"]["message"], r
    assert time.monotonic() - t0 < 20
    _healthy(srv)


# ------------------------------------------------------------------ findings 5, 8: DRY breakers
def test_dry_breakers_capped(srv: LlamaServer) -> None:
    body = {"prompt": "hi", "n_predict": 2, "dry_multiplier": 0.8,
            "dry_sequence_breakers": [f"b{i}" for i in range(10_000)]}
    t0 = time.monotonic()
    st, r = _post(srv, "/completion", body, timeout=60)
    assert st == 400 and "dry_sequence_breakers" in r["error"]["message"], r
    assert time.monotonic() - t0 < 10
    body["dry_sequence_breakers"] = [f"b{i}" for i in range(128)]   # at the cap: served
    st, r = _post(srv, "/completion", body, timeout=300)
    assert st == 200, r


def test_dry_breaker_lists_bounded_memory(srv: LlamaServer) -> None:
    pid = _server_pid(srv)

    def one(i: int) -> None:
        st, r = _post(srv, "/completion", {"prompt": "Say", "n_predict": 2, "dry_multiplier": 0.8,
                                           "dry_sequence_breakers": [f"\n{i}", f"x{i}y", ":", f"k{i}"]})
        assert st == 200, r

    for i in range(40):                            # warm-up: the per-vocabulary index, the LRU filled
        one(i)
    rss0 = rss_kb(pid)
    t0 = time.monotonic()
    for i in range(40, 120):
        one(i)
    grew = rss_kb(pid) - rss0
    assert grew < 40_000, f"RSS grew {grew} kB over 80 distinct breaker lists"
    assert time.monotonic() - t0 < 120


# ------------------------------------------------------------------ finding 4: fairness
def _latency(srv: LlamaServer, path: str = "/health", body: Any = None) -> float:
    t0 = time.monotonic()
    if body is None:
        st, _, _ = raw(srv, "GET", path, timeout=60)
    else:
        st, _, _ = raw(srv, "POST", path, body, timeout=60)
    assert st == 200
    return time.monotonic() - t0


@pytest.mark.parametrize("heavy", ["messages", "prompt", "tools"])
def test_heavy_request_does_not_stall_others(srv: LlamaServer, heavy: str) -> None:
    if heavy == "messages":
        path, body = "/apply-template", {"messages": [{"role": "user", "content": "word " * 5}] * 20_000}
    elif heavy == "prompt":
        path, body = "/tokenize", {"content": "lorem ipsum dolor sit amet " * 400_000}
    else:
        tool = {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)}}}}
        path, body = "/apply-template", {"messages": [{"role": "user", "content": "hi"}] * 3000,
                                         "tools": [tool] * 20}
    done = threading.Event()
    out: list[Any] = []

    def go() -> None:
        out.append(raw(srv, "POST", path, body, timeout=300)[0])
        done.set()

    th = threading.Thread(target=go)
    th.start()
    time.sleep(0.3)
    worst = 0.0
    n = 0
    while not done.is_set() and n < 20:
        worst = max(worst, _latency(srv))
        worst = max(worst, _latency(srv, "/tokenize", {"content": "hello"}))
        n += 1
        time.sleep(0.05)
    th.join()
    assert out and out[0] in (200, 400)
    assert worst < FAIR_S, f"/health or a small request took {worst:.2f} s during a heavy {heavy} request"


# ------------------------------------------------------------------ soak
def test_memory_soak_mixed_hostile(srv: LlamaServer) -> None:
    pid = _server_pid(srv)
    rng = __import__("random").Random(7)
    deep = b'{"prompt":"hi","x":' + b"[" * 3000 + b"]" * 3000 + b"}"

    def hostile(i: int) -> tuple[str, str, Any]:
        k = i % 10
        if k == 0:
            return "POST", "/completion", _lazy({"type": 2, "value": _deep(300 + i % 7)})
        if k == 1:
            return "POST", "/completion", {**EMPTY_TRIGGER, "n_predict": 2}
        if k == 2:
            return "POST", "/completion", deep
        if k == 3:
            return "POST", "/completion", b'{"prompt":"hi","temperature":NaN}'
        if k == 4:
            return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "id_slot": rng.randint(-99, 99)}
        if k == 5:
            return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "dry_multiplier": 0.5,
                                           "dry_sequence_breakers": [f"s{i}", "\n"]}
        if k == 6:
            return "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2000}] * 50,
                                                    "max_tokens": 1}
        if k == 7:
            return "POST", "/completion", {"prompt": "hi", "n_predict": 1, "json_schema": "x"}
        if k == 8:
            return "POST", "/completion", {"prompt": "hi", "n_predict": 1,
                                           "json_schema": {"enum": list(range(50 + i % 13))}}
        return "POST", "/tokenize", {"content": "abc " * 5000}

    def run(lo: int, hi: int) -> None:
        errs: list[Any] = []

        def worker(js: range) -> None:
            for j in js:
                m, p, b = hostile(j)
                try:
                    st, _, _ = raw(srv, m, p, b, timeout=120)
                except OSError as e:
                    errs.append((j, e))
                    continue
                if st >= 500 and j % 10 not in (0, 1, 3):
                    errs.append((j, st))
        ths = [threading.Thread(target=worker, args=(range(lo + w, hi, 4),)) for w in range(4)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        assert not errs, errs[:5]

    t0 = time.monotonic()
    run(0, 100)                                    # warm-up
    rss0 = rss_kb(pid)
    run(100, 400)
    grew = rss_kb(pid) - rss0
    assert grew < 60_000, f"RSS grew {grew} kB over 300 hostile requests after warm-up"
    assert time.monotonic() - t0 < 240
    _healthy(srv)


# ------------------------------------------------------------------ SIGTERM
def test_sigterm_exits_within_seconds(default_model_path: str) -> None:
    s = ours(_args(default_model_path)).start()
    try:
        def long_stream() -> None:
            try:
                raw(s, "POST", "/completion", {"prompt": "Once", "n_predict": 4000, "stream": True,
                                               "ignore_eos": True}, timeout=60)
            except (OSError, ValueError):   # the server exits mid-stream: a reset, or http.client's cut chunk
                pass

        ths = [threading.Thread(target=long_stream, daemon=True) for _ in range(3)]
        for t in ths:
            t.start()
        time.sleep(1.5)
        assert s.proc is not None
        t0 = time.monotonic()
        os.kill(s.proc.pid, signal.SIGTERM)
        s.proc.wait(timeout=15)
        assert time.monotonic() - t0 < 10
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
    finally:
        s.stop()


# ------------------------------------------------------------------ finding 3: big prompts
@pytest.mark.parametrize("mb", [2, 40])
def test_big_prompt_exceeds_context_as_llama_server(srv: LlamaServer, real: LlamaServer, mb: int) -> None:
    body = {"prompt": "lorem ipsum dolor sit amet " * (mb * 1024 * 1024 // 27), "n_predict": 1}
    rss0 = rss_kb(_server_pid(srv))
    t0 = time.monotonic()
    st_o, o = _post(srv, "/completion", body, timeout=300)
    dt = time.monotonic() - t0
    grew = rss_kb(_server_pid(srv)) - rss0
    assert st_o == 400 and o["error"]["type"] == "exceed_context_size_error", o
    if mb == 2:
        st_r, r = _post(real, "/completion", body, timeout=300)
        assert (st_r, r) == (st_o, o)
    assert dt < 120
    # no Python token list per byte kept (was +1 GB for 50 MB): at most 64 MB plus 4 bytes per prompt byte
    # first-use allocations (tokenizer buffers, the worker pool) make the growth noisy for the 2 MB case: the bound
    # is what matters for the 40 MB one (a Python token list would be > 1 GB)
    assert grew < 96_000 + mb * 1024 * 4, f"RSS grew {grew} kB for a {mb} MB prompt"
    _healthy(srv)
