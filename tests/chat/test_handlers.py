"""llama-server's specialised tool-call handlers (``constrained.chat.handlers``: Kimi K2, Ministral 3 / Devstral,
Functionary v3.2) against llama.cpp's own (common/parsers/*.cpp, through ``oracle/shims/render_shim.cpp``).

- Setup: for every sdist template dispatched to these handlers, our server's ``chat_params`` (with
  ``llama_server_compat``) gives the prompt (tools rendered by the template, past calls included), grammar text,
  laziness, triggers, preserved tokens and generation prompt of ``common_chat_templates_apply``, for 6 tool sets x
  tool_choice auto / required / none x parallel on / off / default x reasoning_format deepseek / none.
- Reply: every prefix of each handler's replies (content, reasoning, one and two calls, the model's ids, an unknown
  tool, text after the calls, a missing section marker, multi-byte text) parsed as partial and the whole as
  final: the message of ``common_chat_parse``, or a failure where it throws; ``parse_reply`` reads the finals alike.
- Ours (not llama-server's): a named ``tool_choice`` keeps only that tool in the grammar.
"""

from __future__ import annotations

from typing import Any

import pytest

from constrained.chat import ChatTemplates
from constrained.chat.handlers import handler_for
from constrained.chat.tools import detect_format, parse_reply, tool_call_setup_for_template
from constrained.server.chat_api import chat_params
from constrained.server.errors import HttpError
from oracle.render import chat_apply, chat_parse_body, parsed_message
from oracle.sdist import llama_cpp_source
from tests.chat.test_qwen3_coder import MIXED, PING, TOOLSETS, WEATHER

TEMPLATES = {
    "kimi_k2": ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"],
    "ministral_3": ["mistralai-Ministral-3-14B-Reasoning-2512.jinja", "unsloth-mistral-Devstral-Small-2507.jinja"],
    "functionary_v3_2": ["meetkai-functionary-medium-v3.2.jinja"],
    "gpt_oss": ["openai-gpt-oss-120b.jinja"],
}
ALL = [(h, n) for h, ns in TEMPLATES.items() for n in ns]


def _src(name: str) -> str:
    return (llama_cpp_source() / "models" / "templates" / name).read_text()


def test_dispatch() -> None:
    d = llama_cpp_source() / "models" / "templates"
    for h, names in TEMPLATES.items():
        found = sorted(p.name for p in d.glob("*.jinja") if handler_for(p.read_text()) == h)
        assert found == sorted(names), h
        assert all(detect_format(_src(n)) == h for n in names)


@pytest.mark.parametrize("handler, name", ALL)
def test_setup_matches_llama_cpp(handler: str, name: str) -> None:
    src = _src(name)
    t = ChatTemplates(src)
    n = 0
    convs = []
    for toolset, tools in TOOLSETS.items():
        convs.append((toolset, tools, [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "abcDEF123", "function": {
                "name": tools[0]["function"]["name"], "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny"}, {"role": "user", "content": "Now?"}]))
        convs.append((toolset, tools, [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Sunny.", "reasoning_content": "Easy."},
            {"role": "user", "content": "And tomorrow?"}]))
    for toolset, tools, msgs in convs:
        for choice in ("auto", "required", "none"):
            for par in (True, False, None):
                for rf in ("deepseek", "none"):
                    body: dict[str, Any] = {"messages": msgs, "tools": tools, "tool_choice": choice,
                                            "reasoning_format": rf}
                    if par is not None:
                        body["parallel_tool_calls"] = par
                    theirs = chat_apply(src, body)
                    if "error" in theirs:             # a template that refuses the conversation: both refuse
                        with pytest.raises(HttpError):
                            chat_params({**body, "llama_server_compat": True}, t, jinja=True)
                        continue
                    o = chat_params({**body, "llama_server_compat": True}, t, jinja=True)
                    mine = {"prompt": o["prompt"], "grammar": o.get("grammar", ""),
                            "grammar_lazy": o["grammar_lazy"], "preserved_tokens": o["preserved_tokens"],
                            "generation_prompt": o["generation_prompt"],
                            "grammar_triggers": [{"type": x["type"], "value": x["value"]}
                                                 for x in o["grammar_triggers"]]}
                    assert mine == {k: theirs[k] for k in mine}, (name, toolset, choice, par, rf)
                    n += 1
    assert n >= 100


def _kimi(name: str, i: int, args: str) -> str:
    return f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


W = '{"city": "Pa\\"ris é", "days": 3}'
SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
REPLIES = {
    "kimi_k2": ["Just text.", f"<think>Let me see</think>Sure.{SB}{_kimi('get_weather', 0, W)}{SE}",
                f"{SB}{_kimi('get_weather', 0, W)}{_kimi('ping', 1, '{}')}{SE}", f"no section {_kimi('ping', 3, '{}')}",
                f"<think>thinking, then a call {SB}{_kimi('ping', 0, '{}')}", f"{SB}{_kimi('nope', 0, '{}')}{SE}",
                f"{SB}{_kimi('ping', 0, '{}')}{SE} and after", "<think>only thinking", "émoji 🎉"],
    "ministral_3": ["Just text.", f"[THINK]Let me see[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{W}",
                    f"[TOOL_CALLS]get_weather[ARGS]{W}[TOOL_CALLS]ping[ARGS]{{}}", "[TOOL_CALLS]nope[ARGS]{}",
                    "[TOOL_CALLS]ping[ARGS]{} after", "[THINK]only thinking", "émoji 🎉 [TOOL"],
    "gpt_oss": ["<|channel|>analysis<|message|>Think é<|end|><|start|>assistant<|channel|>final<|message|>Hello 🎉",
                "<|channel|>analysis<|message|>Need it<|end|><|start|>assistant to=functions.get_weather<|channel|>"
                f"commentary <|constrain|>json<|message|>{W}", "<|channel|>commentary to=functions.ping<|message|>{}",
                "<|channel|>commentary<|message|>Let me check<|end|><|start|>assistant to=functions.ping<|channel|>"
                "commentary<|message|>{}", "<|channel|>final<|message|>Hi", "plain text",
                "<|channel|>commentary to=assistant<|channel|>final<|message|>x",
                " to=browser.search<|channel|>commentary<|message|>{}<|end|>",
                "<|channel|>commentary to=functions.nope<|message|>{}"],
    "functionary_v3_2": ["all\nJust text.", f"get_weather\n{W}", f"all\nLet me check.>>>get_weather\n{W}>>>ping\n{{}}",
                         "all\nx>>>nope\n{}", "ping\n{} after", "all\némoji 🎉 >>", "nope"],
}

PARSE_CASES = [(h, n, c, p, rf) for h, n in ALL for c in ("auto", "required") for p in (True, False)
               for rf in ("deepseek", "none")]


def _mine(setup: Any, gen: str, text: str, partial: bool) -> dict[str, Any]:
    return parsed_message(setup.handler.parse, gen, text, partial)


@pytest.mark.parametrize("handler, name, choice, parallel, rf", PARSE_CASES)
def test_partial_and_final_parses_match_llama_cpp(handler: str, name: str, choice: str, parallel: bool,
                                                  rf: str) -> None:
    src = _src(name)
    tools = [WEATHER, MIXED, PING]
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "tool_choice": choice,
            "parallel_tool_calls": parallel, "reasoning_format": rf}
    gen = chat_apply(src, body)["generation_prompt"]
    setup = tool_call_setup_for_template(src, tools, choice, parallel, llama_server_compat=True,
                                         extract_reasoning=rf != "none")
    texts: list[tuple[str, bool]] = []
    for r in REPLIES[handler]:
        texts += [(r[:i], True) for i in range(len(r) + 1)] + [(r, False)]
    theirs = chat_parse_body(src, body, texts)
    n_calls = 0
    for (text, partial), t in zip(texts, theirs, strict=True):
        mine = _mine(setup, gen, text, partial)
        expect = {"ok": True, "msg": t["msg"]} if t["ok"] else {"ok": False}
        assert mine == expect, (name, choice, parallel, rf, text, partial, t)
        n_calls += bool(t["ok"] and t["msg"].get("tool_calls"))
    assert n_calls > 20
    setup.generation_prompt = gen
    for text, partial in texts:
        if partial:
            continue
        m = _mine(setup, gen, text, False)
        r = parse_reply(text, setup)
        if not m["ok"]:
            assert r.parse_error and r.content == text
        elif m["msg"]["content"] or m["msg"].get("tool_calls") or m["msg"].get("reasoning_content"):
            assert (r.content, r.reasoning_content) == (m["msg"]["content"], m["msg"].get("reasoning_content", ""))
            assert [(c.name, c.arguments) for c in r.tool_calls] == [
                (c["function"]["name"], c["function"]["arguments"]) for c in m["msg"].get("tool_calls", [])]


@pytest.mark.parametrize("handler, name", [(h, ns[0]) for h, ns in TEMPLATES.items()])
def test_named_choice_keeps_one_tool(handler: str, name: str) -> None:
    src = _src(name)
    named = {"type": "function", "function": {"name": "ping"}}
    ours = tool_call_setup_for_template(src, [WEATHER, PING], named)
    theirs = tool_call_setup_for_template(src, [WEATHER, PING], named, llama_server_compat=True)
    assert ours.tool_choice == "required" and not ours.grammar_lazy and "tool-ping" in ours.grammar
    assert "tool-get-weather" not in ours.grammar
    assert theirs.tool_choice == "auto" and theirs.grammar_lazy and "tool-get-weather" in theirs.grammar
