"""Resumable streams (``X-Conversation-Id``, ``GET /v1/stream``, ``POST /v1/streams/lookup``,
``DELETE /v1/stream``) against the real llama-server: the same requests, in the same order, to both servers started
with the same flags. Each server's replay is its own live stream byte for byte; across the servers the events are
identical up to ids and timestamps; the errors, lookups and deletes are the same; a stream whose client went away
after its first event runs to its end, and its replay is the same as the other server's.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import quote

import pytest

from oracle.cases.server import events, normalize, ours, raw
from oracle.llama_server import LlamaServer

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

CONV = "conv-1::org/model:Q8"          # an id with the model part a router adds (slashes travel in the query)
QS = "conv_id=" + quote(CONV, safe="")


def _norm_events(payload: bytes) -> list[Any]:
    out = []
    for e in events(payload):
        if isinstance(e, dict):
            e = normalize(e)
            e.pop("id", None)
            e.pop("system_fingerprint", None)
        out.append(e)
    return out


def _lookup(srv: LlamaServer, body: Any) -> tuple[int, Any]:
    s, _, p = raw(srv, "POST", "/v1/streams/lookup", body)
    d = json.loads(p)
    if s != 200:
        return s, d["error"]["type"]
    return s, [{k: v for k, v in x.items() if k not in ("started_at", "completed_at")} | {
        "times": (x["started_at"] > 0, x["completed_at"] >= x["started_at"] if x["is_done"] else x["completed_at"])}
        for x in d]


def _wait_done(srv: LlamaServer, conv: str) -> None:
    for _ in range(600):
        s, d = _lookup(srv, {"conversation_ids": [conv]})
        if d and d[0]["is_done"]:
            return
        time.sleep(0.1)
    raise AssertionError("the stream did not finish")


def _drop_after_first_event(srv: LlamaServer, path: str, body: dict[str, Any], conv: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "X-Conversation-Id": conv})
    r = conn.getresponse()
    first = r.read1(64)
    conn.sock.close()                    # the client goes away mid-stream
    conn.close()
    return first


CHAT = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 12, "temperature": 0,
        "stream": True}
LONG = {"prompt": "Count from one to one hundred: one, two,", "n_predict": 40, "temperature": 0, "stream": True}


def _run(srv: LlamaServer) -> list[Any]:
    out: list[Any] = []
    h = {"X-Conversation-Id": CONV}
    # a stream with an id: the live bytes, then the replay from 0 and from the middle
    s, hd, live = raw(srv, "POST", "/v1/chat/completions", CHAT, headers=h)
    out.append(("live", s, _norm_events(live)))
    s, hd, rep = raw(srv, "GET", f"/v1/stream?{QS}&from=0")
    out.append(("replay", s, hd.get("content-type"), rep == live))
    mid = len(live) // 2
    s, _, rep = raw(srv, "GET", f"/v1/stream?{QS}&from={mid}")
    out.append(("from-mid", s, rep == live[mid:]))
    s, _, rep = raw(srv, "GET", f"/v1/stream?{QS}&from=%20%2B{mid}junk")       # stoull: " +N..." is N
    out.append(("from-stoull", s, rep == live[mid:]))
    for q in (f"{QS}&from=99999999", f"{QS}&from=-1", f"{QS}&from=", f"{QS}&from=abc",
              f"{QS}&from=99999999999999999999999", "conv_id=", "conv_id=nope", "from=0"):
        s, hd, p = raw(srv, "GET", f"/v1/stream?{q}")
        out.append(("get", q, s, _norm_events(p) if s == 200 else json.loads(p)))
    # lookups: only the ids asked for; "<id>" also matches "<id>::<model>"
    lk = _lookup(srv, {"conversation_ids": [CONV, "nope", 5, "", "conv-1"]})
    assert lk[1] and lk[1][0]["total_bytes"] == len(live), lk
    out.append(("lookup", lk[0], [(x["conversation_id"], x["is_done"], x["total_bytes"] == len(live), x["times"])
                                  for x in lk[1]]))
    for b in ({}, {"conversation_ids": "x"}, [CONV], {"conversation_ids": []}, b"{bad"):
        out.append(("lookup", b, _lookup(srv, b)))
    # a request that does not stream, or fails, leaves no session; and it replaces (drops) the one before
    s, _, p = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": 2, "temperature": 0},
                  headers={"X-Conversation-Id": "plain"})
    out.append(("plain", s, _lookup(srv, {"conversation_ids": ["plain"]})))
    s, _, p = raw(srv, "POST", "/completion", {"prompt": "Hi", "n_predict": -5, "stream": True},
                  headers={"X-Conversation-Id": "bad"})
    out.append(("bad", s, json.loads(p)["error"]["type"], _lookup(srv, {"conversation_ids": ["bad"]})))
    # delete: 204, then gone; again 204; without an id 400
    for q in (QS, QS, "conv_id="):
        s, hd, p = raw(srv, "DELETE", f"/v1/stream?{q}")
        out.append(("delete", q, s, p if s == 204 else json.loads(p)))
    s, _, p = raw(srv, "GET", f"/v1/stream?{QS}&from=0")
    out.append(("after-delete", s, json.loads(p)))
    # the client goes away after the first bytes: the generation runs to its end, the replay has it all
    _drop_after_first_event(srv, "/completion", LONG, "gone")
    _wait_done(srv, "gone")
    s, _, rep = raw(srv, "GET", "/v1/stream?conv_id=gone&from=0")
    evs = _norm_events(rep)
    out.append(("gone", s, evs))
    assert evs[-1]["stop"] is True and evs[-1]["tokens_predicted"] == 40, evs[-1]
    return out


def test_resumable_streams_as_llama_server(default_model_path: str) -> None:
    args = ["-m", default_model_path, "-c", "1024", "-np", "2", "-t", "1"]
    with LlamaServer(args) as real:
        want = _run(real)
    with ours(args) as us:
        got = _run(us)
    assert want[1] == ("replay", 200, "text/event-stream", True), want[1]
    for w, g in zip(want, got, strict=True):           # (a bad lookup body: status and type, not nlohmann's text)
        assert g == w, w[:2]


def test_delete_stops_a_running_stream(default_model_path: str) -> None:
    # a stop while the generation runs without its client: the slot is freed, the stream gone
    args = ["-m", default_model_path, "-c", "1024", "-np", "1", "-t", "1", "--slots"]
    body = {"prompt": "Write a very long story:", "n_predict": 2000, "ignore_eos": True, "stream": True}

    def go(srv: LlamaServer) -> list[Any]:
        _drop_after_first_event(srv, "/completion", body, "stop-me")
        s, _, p = raw(srv, "GET", "/slots")
        busy = json.loads(p)[0]["is_processing"]
        s, _, _ = raw(srv, "DELETE", "/v1/stream?conv_id=stop-me")
        freed = False
        for _ in range(300):
            if not json.loads(raw(srv, "GET", "/slots")[2])[0]["is_processing"]:
                freed = True
                break
            time.sleep(0.1)
        return [busy, s, freed, raw(srv, "GET", "/v1/stream?conv_id=stop-me")[0]]

    with LlamaServer(args) as real:
        want = go(real)
    with ours(args) as us:
        got = go(us)
    assert want == [True, 204, True, 404], want
    assert got == want
