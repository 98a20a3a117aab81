"""``POST /v1/chat/completions/control`` (``reasoning_end``): ours against the real llama-server.

The answers to bad and refused controls are llama-server's (status and body: no id, an unknown action, an id with
no live completion, a completion without ``reasoning_control``); a live one is ended: a stream with
``reasoning_control: true`` under a template whose generation prompt opens the thinking block, controlled after its
first chunk, answers ``{"success": true}`` on both servers and its reasoning then ends with the forced end tag, long
before ``max_tokens`` (which token the end lands on depends on timing: the tokens are not compared).
"""

from __future__ import annotations

import http.client
import json

from oracle.cases.server import ours, raw
from oracle.llama_server import LlamaServer
from oracle.sdist import llama_cpp_source

TEMPLATE = "Qwen-QwQ-32B.jinja"


def _controls(srv: LlamaServer) -> list:
    out = []
    for body in ({"action": "reasoning_end"}, {"id": "chatcmpl-x", "action": "pause"},
                 {"id": "chatcmpl-nothere", "action": "reasoning_end"}):
        status, _, payload = raw(srv, "POST", "/v1/chat/completions/control", body)
        out.append((status, json.loads(payload)))
    return out


def _live_control(srv: LlamaServer, control: bool) -> tuple[dict, list[dict]]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
    body = {"messages": [{"role": "user", "content": "Think about the weather for a long time."}], "stream": True,
            "max_tokens": 160, "temperature": 0.0, "reasoning_control": control, "cache_prompt": False,
            "logit_bias": [[1, -100], [106, -100]]}          # no <eos> / <end_of_turn>: the generation goes on
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    evs, result, buf = [], None, b""
    while True:
        line = r.readline()
        if not line:
            break
        buf += line
        if not line.strip() and buf.strip():
            text = buf.strip().decode()
            buf = b""
            if not text.startswith("data: ") or text == "data: [DONE]":
                continue
            ev = json.loads(text[6:])
            evs.append(ev)
            if result is None and ev.get("id"):
                status, _, payload = raw(srv, "POST", "/v1/chat/completions/control",
                                         {"id": ev["id"], "action": "reasoning_end"})
                result = {"status": status, **json.loads(payload)}
    conn.close()
    return result, evs


def _reasoning_and_content(evs: list[dict]) -> tuple[str, str, str]:
    r = c = finish = ""
    for ev in evs:
        for ch in ev.get("choices", []):
            d = ch.get("delta", {})
            r += d.get("reasoning_content") or ""
            c += d.get("content") or ""
            finish = ch.get("finish_reason") or finish
    return r, c, finish


def test_control_as_llama_server(default_model_path: str) -> None:
    path = str(llama_cpp_source() / "models" / "templates" / TEMPLATE)
    args = ["-m", default_model_path, "-c", "2048", "--jinja", "--chat-template-file", path]
    results = {}
    for name, start in (("llama-server", LlamaServer), ("ours", ours)):
        with start(args) as srv:
            bad = _controls(srv)
            refused, _ = _live_control(srv, control=False)
            ended, evs = _live_control(srv, control=True)
            results[name] = (bad, refused, ended, _reasoning_and_content(evs), len(evs))
    theirs, mine = results["llama-server"], results["ours"]
    assert mine[0] == theirs[0]
    assert [x[0] for x in theirs[0]] == [400, 400, 200]
    assert mine[1] == theirs[1] == {"status": 200, "success": False,
                                    "message": "reasoning control not enabled for this completion"}
    assert mine[2] == theirs[2] == {"status": 200, "success": True}
    for reasoning, content, _finish in (theirs[3], mine[3]):
        assert reasoning and content, (reasoning[:80], content[:80])       # the reasoning was ended
