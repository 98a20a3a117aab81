"""The Qwen3-Coder XML tool-call format (``constrained.chat.qwen3_coder``) against llama.cpp's own handler
(common/parsers/qwen3-coder.cpp, through ``oracle/shims/render_shim.cpp``).

For every sdist template llama-server hands to that handler (Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano, StepFun 3.5
Flash):

- the setup our server builds (``chat_params`` with ``llama_server_compat``): prompt with the tools rendered by the
  template, grammar text, laziness, triggers, preserved tokens and generation prompt, identical to
  ``common_chat_templates_apply`` for 6 tool sets (no parameters, string / integer / enum, mixed types and nested
  objects, a name outside ``[a-zA-Z0-9-]``, ``$ref``, three tools) x tool_choice auto / required / none x parallel
  on / off / the template's default x reasoning_format deepseek / none;
- the reply parser: every prefix of a dozen replies (calls with string, JSON and mixed values, optional
  parameters in any order, two calls, reasoning, a call that omits ``<tool_call>``, an unknown tool, trailing
  text, multi-byte text) parsed as partial and the whole as final: the same message as ``common_chat_parse``, or a
  failure where it throws.
"""

from __future__ import annotations

from typing import Any

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.peg import PegFail
from constrained.chat.qwen3_coder import is_qwen3_coder_template
from constrained.chat.tools import detect_format, parse_reply, tool_call_setup_for_template
from constrained.server.chat_api import chat_params
from oracle.render import chat_apply, chat_parse_body
from oracle.sdist import llama_cpp_source

TEMPLATES = ["Qwen3-Coder.jinja", "Qwen3.5-4B.jinja", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
             "StepFun3.5-Flash.jinja"]


def _fn(name: str, params: Any = None, desc: str = "") -> dict[str, Any]:
    f: dict[str, Any] = {"name": name, "description": desc}
    if params is not None:
        f["parameters"] = params
    return {"type": "function", "function": f}


WEATHER = _fn("get_weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"enum": ["c", "f"]}}, "required": ["city"]})
PING = _fn("ping")
MIXED = _fn("q", {"type": "object", "properties": {
    "a": {"type": "string"}, "b": {"type": ["string", "integer"]},
    "c": {"type": "object", "properties": {"x": {"type": "number"}}},
    "d": {"type": ["null", "boolean", "array"]}}, "required": ["a", "b", "c"]})
ODD = _fn("n.é", {"type": "object", "properties": {
    "deep": {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}, "required": ["l"]},
    "e": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "f": {"type": "integer", "minimum": 3}},
    "required": ["f", "e", "deep"]})
REF = _fn("r", {"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                "properties": {"p": {"$ref": "#/$defs/pt"}, "flag": {"type": "boolean"}}, "required": ["p"]})
TOOLSETS = {"weather": [WEATHER], "weather+ping": [WEATHER, PING], "mixed": [MIXED], "ping": [PING],
            "odd+mixed+weather": [ODD, MIXED, WEATHER], "ref": [REF]}


def _src(name: str) -> str:
    return (llama_cpp_source() / "models" / "templates" / name).read_text()


def test_dispatch() -> None:
    d = llama_cpp_source() / "models" / "templates"
    found = sorted(p.name for p in d.glob("*.jinja") if is_qwen3_coder_template(p.read_text()))
    assert found == sorted(TEMPLATES)
    assert all(detect_format(_src(n)) == "qwen3_coder" for n in TEMPLATES)


SETUP_CASES = [(n, ts) for n in TEMPLATES for ts in TOOLSETS]


@pytest.mark.parametrize("name, toolset", SETUP_CASES)
def test_setup_matches_llama_cpp(name: str, toolset: str) -> None:
    src = _src(name)
    t = ChatTemplates(src)
    tools = TOOLSETS[toolset]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1", "function": {
                "name": tools[0]["function"]["name"], "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, {"role": "user", "content": "And now?"}]
    n = 0
    for choice in ("auto", "required", "none"):
        for par in (True, False, None):
            for rf in ("deepseek", "none"):
                body: dict[str, Any] = {"messages": msgs, "tools": tools, "tool_choice": choice,
                                        "reasoning_format": rf}
                if par is not None:
                    body["parallel_tool_calls"] = par
                theirs = chat_apply(src, body)
                assert "error" not in theirs, theirs
                o = chat_params({**body, "llama_server_compat": True}, t, jinja=True)
                mine = {"prompt": o["prompt"], "grammar": o.get("grammar", ""), "grammar_lazy": o["grammar_lazy"],
                        "preserved_tokens": o["preserved_tokens"], "generation_prompt": o["generation_prompt"],
                        "grammar_triggers": [{"type": x["type"], "value": x["value"]} for x in o["grammar_triggers"]]}
                assert mine == {k: theirs[k] for k in mine}, (name, toolset, choice, par, rf)
                n += 1
                if choice != "none":
                    assert mine["grammar"]
    assert n == 18


def _call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _replies(thinks: bool) -> list[str]:
    w = _call("get_weather", ("city", 'Pa"ris\nFrance é'), ("days", "3"))
    w2 = _call("get_weather", ("units", "c"), ("city", "Rome"))
    q = _call("q", ("b", "12"), ("c", '{"x": 1.5}'), ("a", "text"), ("d", "[1, true]"))
    q2 = _call("q", ("a", ""), ("b", "not a number"), ("c", "{}"), ("d", "null"))
    out = ["Just text, no call.", f"Let me check.\n\n{w}", f"{w}\n{w2}", f"{q}", f"{q2}\nafter",
           _call("nope", ("x", "1")), f"{w} trailing words", "A <tool_call> tag", "<function=get_weather>\n"
           "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>", "émoji 🎉 then " + w,
           _call("ping")]
    if thinks:
        out = [f"I should look it up.\n</think>\n\n{r}" for r in out[:6]] + out + [
            "only thinking so far", f"Think.</think>{w}", "Plan<tool_call>\n<function=ping>\n</function>\n</tool_call>"]
    return out


def _mine(setup: Any, gen: str, text: str, partial: bool) -> dict[str, Any]:
    try:
        m = setup.handler.parse(gen, text, is_partial=partial)
    except PegFail:
        return {"ok": False}
    out: dict[str, Any] = {"role": "assistant", "content": m.content}
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a, _ in m.tool_calls]
    return {"ok": True, "msg": out}


PARSE_CASES = [(n, c, p, rf) for n in TEMPLATES for c in ("auto", "required") for p in (True, False)
               for rf in ("deepseek", "none")]


@pytest.mark.parametrize("name, choice, parallel, rf", PARSE_CASES)
def test_partial_and_final_parses_match_llama_cpp(name: str, choice: str, parallel: bool, rf: str) -> None:
    src = _src(name)
    tools = [WEATHER, MIXED, PING]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "reasoning_format": rf}
    gen = chat_apply(src, body)["generation_prompt"]
    setup = tool_call_setup_for_template(src, tools, choice, parallel, llama_server_compat=True,
                                         extract_reasoning=rf != "none")
    texts: list[tuple[str, bool]] = []
    for r in _replies("<think>" in src):
        texts += [(r[:i], True) for i in range(len(r) + 1)] + [(r, False)]
    theirs = chat_parse_body(src, body, texts)
    n_calls = n_fail = 0
    for (text, partial), t in zip(texts, theirs, strict=True):
        mine = _mine(setup, gen, text, partial)
        expect = {"ok": True, "msg": {k: v for k, v in t["msg"].items() if k != "tool_calls"} | (
            {"tool_calls": [{"type": "function", "function": c["function"]} for c in t["msg"]["tool_calls"]]}
            if t["msg"].get("tool_calls") else {})} if t["ok"] else {"ok": False}
        if expect["ok"]:
            expect["msg"].pop("tool_call_id", None)
        assert mine == expect, (name, choice, parallel, rf, text, partial, t)
        n_calls += bool(t["ok"] and t["msg"].get("tool_calls"))
        n_fail += not t["ok"]
    assert n_calls > 100
    # the library's parse_reply reads the same final messages (ids aside)
    setup.generation_prompt = gen
    for text, partial in texts:
        if not partial:
            r = parse_reply(text, setup)
            m = _mine(setup, gen, text, False)
            if m["ok"] and (m["msg"]["content"] or m["msg"].get("tool_calls") or m["msg"].get("reasoning_content")):
                assert r.content == m["msg"]["content"] and r.parse_error is None
                assert [(c.name, c.arguments) for c in r.tool_calls] == [
                    (c["function"]["name"], c["function"]["arguments"]) for c in m["msg"].get("tool_calls", [])]
