"""Chat requests with tools, for comparing ``constrained serve`` with the real llama-server (tests and sweep).

The template is the sdist's Qwen 2.5 one (``--chat-template-file``: the ``<tool_call>`` format; neither test model's
own template renders tools). A few-shot turn (an assistant reply that is a ``<tool_call>`` block, as plain content
so both servers render it the same) makes the small models call tools under ``auto`` too.
"""

from __future__ import annotations

import json
from typing import Any

from oracle.cases.server import events, normalize, raw
from oracle.sdist import llama_cpp_source

TEMPLATE = "Qwen-Qwen2.5-7B-Instruct.jinja"


def template_path() -> str:
    return str(llama_cpp_source() / "models" / "templates" / TEMPLATE)


def _fn(name: str, desc: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


WEATHER = _fn("get_weather", "Current weather for a city",
              {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city"]})
ADD = _fn("add", "Add two integers", {"type": "object", "properties": {"a": {"type": "integer"},
                                                                        "b": {"type": "integer"}},
                                      "required": ["a", "b"]})
SEARCH = _fn("search", "Search the web", {"type": "object", "properties": {"query": {"type": "string",
                                                                                     "maxLength": 40}},
                                          "required": ["query"]})
TOOLSETS = [[WEATHER], [ADD, SEARCH, WEATHER]]

SHOTS = [
    ("What is the weather in Rome?", '{"name": "get_weather", "arguments": {"city": "Rome"}}'),
    ("What is 2 plus 3?", '{"name": "add", "arguments": {"a": 2, "b": 3}}'),
]
QUESTIONS = ["What is the weather in Paris?", "How warm is it in Oslo, in fahrenheit?", "What is 19 plus 23?",
             "Search the web for llama recipes.", "Tell me a joke about cats."]


def messages(q: str, shot: int | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if shot is not None:
        u, call = SHOTS[shot]
        out += [{"role": "user", "content": u}, {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
                {"role": "user", "content": "Thanks. Next one."}]
    out.append({"role": "user", "content": q})
    return out


MODES = ["auto", "auto", "compat-required", "auto", "required"]


def cases(n: int, salt: int = 0) -> list[dict[str, Any]]:
    """``n`` request bodies: tool sets, questions, few-shot or not, seeds, temperatures, ``parallel_tool_calls``,
    streamed or not, and three modes (:data:`MODES`): ``auto``; ``required`` as llama-server has it (our
    ``"llama_server_compat": true``, which llama-server ignores); ``required`` as ours. ``cache_prompt: false``:
    each request is evaluated whole on both servers (the prompt cache's reuse is not what is compared here)."""
    out = []
    temps = [0.0, 0.5, 0.8, 1.0]
    for i in range(n):
        k = i + salt
        mode = MODES[i % len(MODES)]
        body: dict[str, Any] = {
            "messages": messages(QUESTIONS[k % len(QUESTIONS)], None if k % 7 == 6 else k % 2),
            "tools": TOOLSETS[k % 2], "tool_choice": "auto" if mode == "auto" else "required",
            "seed": 1000 + 7 * k, "temperature": temps[k % len(temps)], "max_tokens": 32,
            # our required is compared through __verbose's tokens, which a stream's last chunk does not carry
            "stream": k % 2 == 1 and mode != "required", "verbose": True, "return_tokens": True,
            "cache_prompt": False,
        }
        if mode == "compat-required":
            body["llama_server_compat"] = True
        if k % 3 == 2:
            body["parallel_tool_calls"] = False
        out.append(body)
    return out


def post(srv: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One chat request: ``{"status", "body"}`` (non-stream) or ``{"status", "events"}`` (stream)."""
    status, _, payload = raw(srv, "POST", "/v1/chat/completions", body, timeout=600)
    if body.get("stream") and status == 200:
        return {"status": status, "events": events(payload)}
    return {"status": status, "body": json.loads(payload)}


def _strip_ids(v: Any) -> Any:
    """Tool call ids are random on both sides: present and 32 characters, then dropped."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k == "tool_calls" and isinstance(x, list):
                # ours also flags arguments cut off or invalid ("issues"; checked by the tests on their own)
                x = [{kk: vv for kk, vv in c.items()
                      if kk != "issues" and (kk != "id" or not (isinstance(vv, str) and len(vv) == 32))} for c in x]
            out[k] = _strip_ids(x)
        return out
    if isinstance(v, list):
        return [_strip_ids(x) for x in v]
    return v


def comparable(r: dict[str, Any]) -> Any:
    """What must be identical: the body (or every event) without ids, timestamps and timings, and without the
    model path (the two servers name it the same)."""
    r = dict(r)
    if "events" in r:                  # ":" pings come with the wall clock (sse_ping_interval), not the reply
        r["events"] = [e for e in r["events"] if e != ":"]
    return _strip_ids(normalize(r))


def summary(r: dict[str, Any]) -> tuple[str, list[tuple[str, str]], str]:
    """(content, [(name, arguments)], finish_reason) of a reply, streamed or not."""
    if "body" in r:
        ch = r["body"]["choices"][0]
        m = ch["message"]
        return (m.get("content") or "", [(c["function"]["name"], c["function"]["arguments"])
                                          for c in m.get("tool_calls", [])], ch["finish_reason"])
    content, calls, finish = "", [], ""
    for e in r["events"]:
        if not isinstance(e, dict) or not e.get("choices"):
            continue
        ch = e["choices"][0]
        d = ch.get("delta", {})
        content += d.get("content") or ""
        for tc in d.get("tool_calls", []):
            while len(calls) <= tc["index"]:
                calls.append(["", ""])
            fn = tc.get("function", {})
            calls[tc["index"]][0] += fn.get("name", "")
            calls[tc["index"]][1] += fn.get("arguments", "")
        finish = ch.get("finish_reason") or finish
    return content, [(a, b) for a, b in calls], finish


def verbose_of(r: dict[str, Any]) -> dict[str, Any]:
    if "body" in r:
        return r["body"]["__verbose"]
    for e in r["events"]:
        if isinstance(e, dict) and "__verbose" in e:
            return e["__verbose"]
    raise AssertionError("no __verbose in the stream")
